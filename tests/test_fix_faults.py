"""A fix and an undo interrupted for real — SIGKILL at every boundary, a full disk, a file-size limit — then
one more `fix --undo` leaves the tree identical to the before-state (sha256 and mode of every file).

The environment is a real uv venv (offline, tiny wheels each with a 400 kB file) whose fix upgrades two
distributions with uv; the interruptions are real: the process SIGKILLs itself at the N-th boundary between
two changes (a hook on envdoctor.fix.journal.boundary, counted in the child), `resource.setrlimit
(RLIMIT_FSIZE)` in the child, and a real tmpfs filled up (skipped where it cannot be mounted).
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from envdoctor.config import Config
from envdoctor.engine import run_check
from envdoctor.fix.execute import Executor
from envdoctor.fix.journal import Journal
from envdoctor.fix.plan import make_plan
from envdoctor.model import Finding, FixStep, Report, Severity
from fixenvs import HEAVY_BYTES, fill_up, kit_upgrade_uv_venv, run_ok, small_tmpfs, tree_digest, uv_executable
from support import run_cli

pytestmark = [pytest.mark.slow, pytest.mark.standalone]

# `envdoctor ARGS` that stops at its N-th boundary between two changes: "kill" SIGKILLs itself there,
# "fsize" sets a 64 kB file-size limit on itself there, "fill" fills the file system of FILL_DIR there.
_DRIVER = r"""
import os, signal, sys
from envdoctor.fix import journal
seen = [0]
def hook(what):
    if not what.startswith(os.environ.get("STOP_ON", "")):
        return
    seen[0] += 1
    if seen[0] != int(os.environ["STOP_AT"]):
        return
    how = os.environ["STOP_HOW"]
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif how == "fsize":
        import resource
        resource.setrlimit(resource.RLIMIT_FSIZE, (65536, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    elif how == "fill":
        sys.path.insert(0, os.environ["FIXTURES"])
        from fixenvs import fill_up
        fill_up(__import__("pathlib").Path(os.environ["FILL_DIR"]))
journal.BOUNDARY_HOOKS.append(hook)
if os.environ.get("STEPS"):  # a fix whose finding carries these uv steps (run_steps)
    import json
    sys.path[:0] = [os.environ["FIXTURES"], os.environ["TESTS"]]
    from test_fix_faults import run_steps
    sys.exit(run_steps(sys.argv[1], json.loads(os.environ["STEPS"])))
from envdoctor.cli import main
sys.exit(main(sys.argv[1:]))
"""
FIXTURES = str(Path(__file__).resolve().parent.parent / "fixtures")
TESTS = str(Path(__file__).resolve().parent)


def driven(env: dict[str, str], at: int, how: str, *args: str, on: str = "", **extra: str
           ) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-c", _DRIVER, *args], capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL,
                          env={**env, "STOP_AT": str(at), "STOP_HOW": how, "STOP_ON": on, "FIXTURES": FIXTURES,
                               "TESTS": TESTS, **extra})
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def envdoctor(env: dict[str, str], *args: str, limit: int | None = None) -> subprocess.CompletedProcess[str]:
    """The real command, in a child (with a real RLIMIT_FSIZE of `limit` bytes when given)."""
    def set_limit() -> None:
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    proc = subprocess.run([sys.executable, "-m", "envdoctor", *args], capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL, env=env, preexec_fn=set_limit)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def upgrade_fix(venv: Path, *argv: str) -> Journal:
    """A uv step (by default `uv pip install trainkit==2.0`, which upgrades urllib3 too), run and journalled here."""
    target = run_check(Config(prefix=str(venv), no_loader=True, select=("PKG003",))).target
    step = FixStep.command("uv", *(argv or ("uv", "pip", "install", "--python", str(venv), "trainkit==2.0")))
    finding = Finding(rule="PKG003", name="broken-requirement", severity=Severity.ERROR, message="upgrade trainkit",
                      fix_steps=(step,))
    plan = make_plan(Report(tool={}, generated_at="", host={}, target=target, facts={}, findings=[finding]))
    journal = Journal.create(dict(target))
    assert [r.status for r in Executor(plan, journal).run()] == ["done"]
    return journal


def undo_argv(venv: Path) -> tuple[str, ...]:
    return ("fix", "--undo", "--prefix", str(venv))


def test_an_undo_killed_at_every_boundary_is_finished_by_one_more_undo(tmp_path: Path,
                                                                       offline: dict[str, str]) -> None:
    venv = kit_upgrade_uv_venv(tmp_path / "venv", offline)
    pristine = tree_digest(venv)
    journal = upgrade_fix(venv)
    fixed = tree_digest(venv)
    assert fixed != pristine
    saved = tmp_path / "saved"
    shutil.copytree(venv, saved / "venv", symlinks=True)
    shutil.copytree(journal.path, saved / "journal", symlinks=True)
    killed = []
    for at in range(1, 200):
        if at > 1:  # back to the state the fix left, with its journal as it was
            shutil.rmtree(venv)
            shutil.copytree(saved / "venv", venv, symlinks=True)
            shutil.rmtree(journal.path)
            shutil.copytree(saved / "journal", journal.path, symlinks=True)
        assert tree_digest(venv) == fixed
        stopped = driven(offline, at, "kill", *undo_argv(venv))
        if stopped.returncode != -signal.SIGKILL:
            assert stopped.returncode == 0, stopped.stdout + stopped.stderr  # past the last boundary: one undo did it
            break
        killed.append(at)
        assert json.loads((journal.path / "manifest.json").read_text())["undo"]["status"] == "running"
        finished = run_cli(*undo_argv(venv))  # in this process: a child per boundary is enough
        assert finished.returncode == 0, f"killed at boundary {at}: {finished.stdout}{finished.stderr}"
        assert "resuming the undo begun" in finished.stdout and "restored:" in finished.stdout, finished.stdout
        assert tree_digest(venv) == pristine, f"killed at boundary {at}"
    # Moves into the journal, files and folders put back, folder modes: every one was a boundary.
    assert len(killed) >= 10, killed
    assert tree_digest(venv) == pristine


def test_an_undo_stopped_by_a_file_size_limit_is_finished_by_the_next(tmp_path: Path,
                                                                      offline: dict[str, str]) -> None:
    venv = kit_upgrade_uv_venv(tmp_path / "venv", offline)
    pristine = tree_digest(venv)
    upgrade_fix(venv)
    fixed = tree_digest(venv)
    # Under a limit from the start, the undo says what it needs and changes nothing.
    refused = envdoctor(offline, *undo_argv(venv), limit=65536)
    assert refused.returncode == 2 and "file-size limit is 65536 bytes" in refused.stdout, refused.stdout
    assert "data.bin" in refused.stdout and "nothing was changed" in refused.stdout
    assert tree_digest(venv) == fixed
    # A limit that comes into force part-way (set by the undo process on itself, after its first change).
    stopped = driven(offline, 1, "fsize", *undo_argv(venv))
    assert stopped.returncode == 1, stopped.stdout + stopped.stderr
    assert "File too large" in stopped.stdout and "raise the file-size limit" in stopped.stdout, stopped.stdout
    assert "run `envdoctor fix --undo` again" in stopped.stdout
    assert not [p for p in venv.rglob("*") if ".envdoctor-" in p.name]  # no fragment of the file it was writing
    assert tree_digest(venv) not in (fixed, pristine)  # half-restored
    finished = envdoctor(offline, *undo_argv(venv))
    assert finished.returncode == 0 and "resuming the undo begun" in finished.stdout, finished.stdout
    assert "File too large" in finished.stdout  # it says why the last one stopped
    assert tree_digest(venv) == pristine


def test_a_fix_stopped_by_a_file_size_limit_is_undone_exactly(tmp_path: Path, offline: dict[str, str]) -> None:
    """uv, started by the fix under the same limit, dies of it (SIGXFSZ) half-way through writing the upgrade."""
    venv = kit_upgrade_uv_venv(tmp_path / "venv", offline)
    # uv's cache already holds the upgrade, and uv copies from it: the limit strikes while the venv is written.
    kit_upgrade_uv_venv(tmp_path / "warm", offline)
    run_ok([uv_executable(), "pip", "install", "--python", str(tmp_path / "warm"), "trainkit==2.0"], offline)
    pristine = tree_digest(venv)
    steps = json.dumps([["uv", "pip", "install", "--python", str(venv), "trainkit==2.0"]])
    code = (f"import json, sys; from test_fix_faults import run_steps; "
            f"sys.exit(run_steps({str(venv)!r}, json.loads({steps!r})))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                          env={**offline, "UV_LINK_MODE": "copy",
                               "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), FIXTURES])},
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (HEAVY_BYTES // 2,) * 2))
    assert done.returncode == 2 and "no step succeeded: a failed step may have changed something" in done.stdout, \
        done.stdout + done.stderr
    undone = envdoctor(offline, *undo_argv(venv))
    assert undone.returncode == 0 and "restored:" in undone.stdout, undone.stdout
    assert tree_digest(venv) == pristine


def run_steps(prefix: str, argvs: list[list[str]]) -> int:
    """`envdoctor fix --prefix PREFIX --yes` whose PKG003 finding carries these uv steps (for a child)."""
    import argparse
    import dataclasses

    from envdoctor.fix import command

    def checker(config: Any) -> Report:
        report = run_check(config)
        report.findings = [dataclasses.replace(f, fix_steps=tuple(FixStep.command("uv", *a) for a in argvs))
                           for f in report.findings] or [
            Finding(rule="PKG003", name="broken-requirement", severity=Severity.ERROR, message="upgrade",
                    evidence={"dependency": "trainkit"}, fix_steps=tuple(FixStep.command("uv", *a) for a in argvs))]
        return report

    args = argparse.Namespace(prefix=prefix, env_name=None, select=["PKG003"], ignore=None, dry_run=False, yes=True,
                              undo=False, format="text", list_journals=False)
    return command.run(args, checker)


def test_full_disk_the_undo_says_what_it_needs_and_changes_nothing(tmp_path: Path, offline: dict[str, str]) -> None:
    """The venv on a real 8 MiB tmpfs, the journal on another file system (every kept file is a copy)."""
    with small_tmpfs(tmp_path / "small", 8 << 20) as small:
        venv = kit_upgrade_uv_venv(small / "venv", offline)
        secret = venv / "pip.conf"
        secret.write_text("[global]\nindex-url = https://user:password@example.invalid/simple\n")
        secret.chmod(0o600)
        os.chown(secret, 4321, 4321)
        pristine = tree_digest(venv)
        journal = upgrade_fix(venv, "uv", "pip", "uninstall", "--python", str(venv), "urllib3")
        # A kept copy keeps its mode and owner: the password stays its owner's to read.
        sha = json.loads((journal.path / "before.json").read_text())[str(secret)]["sha256"]
        kept = journal.path / "objects" / sha[:2] / sha
        assert stat.S_IMODE(kept.stat().st_mode) == 0o600 and kept.stat().st_uid == 4321
        assert stat.S_IMODE(journal.path.stat().st_mode) == 0o700
        fixed = tree_digest(venv)

        filler = fill_up(small)  # urllib3's files no longer fit: the undo says how much it needs, changes nothing
        refused = envdoctor(offline, *undo_argv(venv))
        assert refused.returncode == 2 and "free at least" in refused.stdout, refused.stdout
        assert f"on the file system of {venv}" in refused.stdout and "nothing was changed" in refused.stdout
        assert tree_digest(venv) == fixed
        filler.unlink()
        undone = envdoctor(offline, *undo_argv(venv))
        assert undone.returncode == 0 and "restored:" in undone.stdout, undone.stdout
        assert tree_digest(venv) == pristine


def test_an_undo_that_fills_the_disk_part_way_stops_cleanly_and_the_next_finishes(
        tmp_path: Path, offline: dict[str, str]) -> None:
    with small_tmpfs(tmp_path / "small", 8 << 20) as small:
        venv = kit_upgrade_uv_venv(small / "venv", offline)
        pristine = tree_digest(venv)
        upgrade_fix(venv)
        # Another process fills the file system once the undo's first path is back.
        stopped = driven(offline, 1, "fill", *undo_argv(venv), on="put back", FILL_DIR=str(small))
        assert stopped.returncode == 1, stopped.stdout + stopped.stderr
        assert "No space left on device" in stopped.stdout and "free some space there" in stopped.stdout
        assert not [p for p in venv.rglob("*") if ".envdoctor-" in p.name]
        (small / ".filler").unlink()
        finished = envdoctor(offline, *undo_argv(venv))
        assert finished.returncode == 0 and "resuming the undo begun" in finished.stdout, finished.stdout
        assert tree_digest(venv) == pristine


def test_a_fix_on_a_full_disk_is_undone_exactly(tmp_path: Path, offline: dict[str, str]) -> None:
    with small_tmpfs(tmp_path / "small", 8 << 20) as small:
        venv = kit_upgrade_uv_venv(small / "venv", offline)
        pristine = tree_digest(venv)
        fill_up(small, leave=HEAVY_BYTES // 2)  # room for part of the upgrade only
        steps = json.dumps([["uv", "pip", "install", "--python", str(venv), "trainkit==2.0"]])
        code = (f"import json, sys; from test_fix_faults import run_steps; "
                f"sys.exit(run_steps({str(venv)!r}, json.loads({steps!r})))")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                              env={**offline, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), FIXTURES])})
        assert done.returncode == 2 and "no step succeeded" in done.stdout, done.stdout + done.stderr
        # Still full: the undo moves what the step wrote off this file system first, then puts the rest back.
        undone = envdoctor(offline, *undo_argv(venv))
        assert undone.returncode == 0 and "restored:" in undone.stdout, undone.stdout
        assert tree_digest(venv) == pristine


def test_a_rollback_killed_part_way_is_finished_by_the_next_undo(tmp_path: Path, offline: dict[str, str]) -> None:
    """The step installs a trainkit whose import fails: verification fails and the rollback begins; it is
    SIGKILLed after its first change. One more `fix --undo` resumes it and gives back the before-state."""
    from condafixtures import write_wheel

    venv = kit_upgrade_uv_venv(tmp_path / "venv", offline)
    write_wheel(Path(offline["UV_FIND_LINKS"]), "trainkit", "3.0",
                {"trainkit/__init__.py": b"raise ImportError('this build is broken')\n"})
    pristine = tree_digest(venv)
    steps = json.dumps([["uv", "pip", "install", "--python", str(venv), "--no-deps", "trainkit==3.0"]])
    killed = driven(offline, 1, "kill", str(venv), on="moved", STEPS=steps)
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    finished = envdoctor(offline, *undo_argv(venv))
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert "resuming the undo begun" in finished.stdout and "stopped after 1 of" in finished.stdout, finished.stdout
    assert tree_digest(venv) == pristine
