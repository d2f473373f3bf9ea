"""`envdoctor fix` on real environments: fix, re-check, undo byte for byte.

A pip venv where `pip install --ignore-installed` left two `numpy` dist-infos
(a tiny made-up numpy built here, not the real one; made once, each test fixes
its own copy) and a uv venv with a missing requirement. The checks are the real engine on fresh facts and the
steps are the ones the PKG rules emit (`fix_steps`); the `envdoctor fix`
command runs as a user runs it (a child process, stdin not a terminal). Tests
of the journal's corner cases give their own steps (`replacing_steps`).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from envdoctor.config import Config
from envdoctor.engine import run_check
from envdoctor.fix import command
from envdoctor.fix.execute import Executor
from envdoctor.fix.journal import Journal
from envdoctor.fix.plan import make_plan
from envdoctor.fix.undo import latest, undo_last
from envdoctor.model import Finding, FixStep, Report, Severity
from fixenvs import copy_venv, doubled_pip_venv, make_pip_venv, make_uv_venv, run_ok, tiny_wheel, tree_digest, uv_executable

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def doubled_numpy(tmp_path_factory: pytest.TempPathFactory, pip_venv_template: Path) -> Path:
    """numpy 1.26.4, then `pip install --ignore-installed` numpy 2.1.3 over it: two dist-infos. Made once."""
    root = tmp_path_factory.mktemp("doubled-numpy")
    return doubled_pip_venv(pip_venv_template, root, *numpy_wheels(root / "wheels"))


def numpy_wheels(wheels: Path) -> tuple[Path, Path]:
    return tiny_wheel(wheels, "numpy", "1.26.4"), tiny_wheel(wheels, "numpy", "2.1.3")


def doubled_numpy_venv(doubled: Path, tmp_path: Path, env: dict[str, str]) -> Path:
    """This test's own copy of the doubled venv, with both numpy wheels in its wheel folder (steps install from it)."""
    numpy_wheels(Path(env["PIP_FIND_LINKS"]))
    return copy_venv(doubled, tmp_path)


def check(prefix: Path, *rules: str) -> Report:
    return run_check(Config(prefix=str(prefix), no_loader=True, select=rules))


def replacing_steps(rule: str, steps: Callable[[Finding], tuple[FixStep, ...]]) -> Callable[[Any], Report]:
    """The real check, with `rule`'s findings carrying `steps` instead of the rule's own."""
    def checker(config: Any) -> Report:
        report = run_check(config)
        report.findings = [dataclasses.replace(f, fix_steps=steps(f)) if f.rule == rule else f
                           for f in report.findings]
        return report
    return checker


def fix_args(prefix: Path, *rules: str, **flags: Any) -> argparse.Namespace:
    base = {"prefix": str(prefix), "env_name": None, "select": list(rules), "ignore": None, "dry_run": False,
            "yes": False, "undo": False, "format": "json"}
    return argparse.Namespace(**{**base, **flags})


def envdoctor(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The real command, stdin not a terminal, as CI or a script runs it."""
    proc = subprocess.run([sys.executable, "-m", "envdoctor", *args], stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, env=env, timeout=600)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def test_pkg002_fix_then_undo_on_a_real_pip_venv(doubled_numpy: Path, tmp_path: Path, offline: dict[str, str]) -> None:
    venv = doubled_numpy_venv(doubled_numpy, tmp_path, offline)
    python = str(venv / "bin" / "python")
    [finding] = check(venv, "PKG002").by_rule("PKG002")
    assert sorted(finding.evidence["versions"]) == ["1.26.4", "2.1.3"]
    [old] = [p for p, v in zip(finding.evidence["paths"], finding.evidence["versions"]) if v == "1.26.4"]
    assert [s.to_dict() for s in finding.fix_steps] == [
        {"tool": "file", "move": old, "to": old + ".envdoctor-aside"},
        {"tool": "pip", "argv": [python + "3", "-m", "pip", "install", "--force-reinstall", "--no-deps", "numpy==2.1.3"]}]
    pristine = tree_digest(venv)

    dry = envdoctor(offline, "fix", "--prefix", str(venv), "--select", "PKG002", "--dry-run")
    assert dry.returncode == 0 and "dry run: nothing was changed" in dry.stdout
    assert "numpy-1.26.4.dist-info.envdoctor-aside" in dry.stdout
    assert tree_digest(venv) == pristine
    refused = envdoctor(offline, "fix", "--prefix", str(venv), "--select", "PKG002")
    assert refused.returncode == 2 and "pass --yes" in refused.stderr + refused.stdout
    assert tree_digest(venv) == pristine
    assert not list((tmp_path / "cache" / "envdoctor" / "journal").glob("*/manifest.json"))  # no fix journal

    done = envdoctor(offline, "fix", "--prefix", str(venv), "--select", "PKG002", "--yes", "--format", "json")
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert [r["status"] for r in result["results"]] == ["done", "done"]
    assert [f["rule"] for f in result["outcome"]["fixed"]] == ["PKG002"]
    assert result["outcome"]["remaining"] == [] and result["outcome"]["new"] == []
    assert check(venv, "PKG002").by_rule("PKG002") == []
    assert run_ok([python, "-c", "import numpy; print(numpy.__version__)"], offline).strip() == "2.1.3"
    run_ok([python, "-m", "pip", "check"], offline)
    journal = Path(result["journal"])
    assert journal.parent == tmp_path / "cache" / "envdoctor" / "journal"
    manifest = json.loads((journal / "manifest.json").read_text())
    assert manifest["status"] == "finished"
    moved = manifest["steps"][0]["moved"]
    assert moved["from"] == old and "METADATA" in moved["tree"]
    step = manifest["steps"][1]
    new_info = next(venv.glob("lib/python*/site-packages/numpy-2.1.3.dist-info"))
    assert "--no-compile" in step["ran"] and not list((new_info.parent / "numpy").rglob("*.pyc"))  # no bytecode
    assert step["distributions"]["added"] == [] and step["distributions"]["removed"] == []  # same folder rewritten
    before = manifest["before"]
    assert before["roots"] == [str(venv)] and (journal / before["listing"]).is_file()
    assert str(new_info / "RECORD") in json.loads((journal / before["listing"]).read_text())
    assert result["verification"]["ok"] and result["verification"]["imported"]["numpy"].startswith(str(venv))
    assert tree_digest(venv) != pristine

    undone = envdoctor(offline, "fix", "--undo", "--prefix", str(venv), "--format", "json")
    said = json.loads(undone.stdout)
    assert undone.returncode == 0 and said["problems"] == [], undone.stdout
    assert said["after_hash"] == said["before_hash"] == before["hash"]
    assert tree_digest(venv) == pristine
    assert len(check(venv, "PKG002").by_rule("PKG002")) == 1  # the doubled state is back, as it was
    again = envdoctor(offline, "fix", "--undo", "--prefix", str(venv))
    assert again.returncode == 2 and f"no fix of {venv} to undo" in again.stdout  # an undone journal is not undone twice


def test_undo_refuses_a_path_changed_since_and_changes_nothing(doubled_numpy: Path, tmp_path: Path,
                                                               offline: dict[str, str]) -> None:
    venv = doubled_numpy_venv(doubled_numpy, tmp_path, offline)
    assert envdoctor(offline, "fix", "--prefix", str(venv), "--select", "PKG002", "--yes").returncode == 0
    [init] = venv.glob("lib/python*/site-packages/numpy/__init__.py")
    init.write_text("__version__ = 'edited by the user'\n")
    after_edit = tree_digest(venv)
    undone = undo_last(venv)
    assert undone.exit_code == 2 and any(str(init) in r and "changed since" in r for r in undone.refused)
    assert tree_digest(venv) == after_edit


def uv_venv_with_missing_requirement(root: Path, env: dict[str, str]) -> Path:
    wheels = Path(env["UV_FIND_LINKS"])
    tiny_wheel(wheels, "urllib3", "2.2.3")
    trainkit = tiny_wheel(wheels, "trainkit", "1.0", requires=("urllib3<3,>=1.21.1",))
    venv = make_uv_venv(root / "uvenv", env)
    run_ok([uv_executable(), "pip", "install", "--python", str(venv), "--no-deps", str(trainkit)], env)
    assert not (venv / "bin" / "pip").exists()
    return venv


def test_pkg003_in_a_uv_venv_is_cleared_with_uv(tmp_path: Path, offline: dict[str, str],
                                                capsys: pytest.CaptureFixture[str]) -> None:
    venv = uv_venv_with_missing_requirement(tmp_path, offline)
    [finding] = check(venv, "PKG003").by_rule("PKG003")
    assert finding.evidence["dependency"] == "urllib3" and finding.evidence["problem"] == "missing"
    assert [s.to_dict() for s in finding.fix_steps] == [
        {"tool": "uv", "argv": ["uv", "pip", "install", "--python", str(venv), "urllib3<3,>=1.21.1"]}]
    pristine = tree_digest(venv)

    # A pip step in a venv uv made (it has no pip) is refused, never improvised into something else.
    pip_step = (FixStep.command("pip", str(venv / "bin" / "python"), "-m", "pip", "install", "urllib3"),)
    assert command.run(fix_args(venv, "PKG003", yes=True), replacing_steps("PKG003", lambda f: pip_step)) == 2
    refused = json.loads(capsys.readouterr().out)
    assert "pip is not installed" in refused["plan"]["steps"][0]["reason"] and refused["results"] == []
    assert tree_digest(venv) == pristine

    done = envdoctor(offline, "fix", "--prefix", str(venv), "--select", "PKG003", "--yes", "--format", "json")
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["plan"]["steps"][0]["run_argv"] == [uv_executable(), "pip", "install", "--python", str(venv),
                                                      "urllib3<3,>=1.21.1"]
    assert [f["rule"] for f in result["outcome"]["fixed"]] == ["PKG003"], result
    assert check(venv, "PKG003").by_rule("PKG003") == []
    urllib3 = next(venv.glob("lib/python*/site-packages/urllib3-2.2.3.dist-info"))
    assert (urllib3 / "INSTALLER").read_text().strip() == "uv"

    assert envdoctor(offline, "fix", "--undo", "--prefix", str(venv)).returncode == 0
    assert tree_digest(venv) == pristine


def test_undo_after_a_step_recreated_the_path_a_move_vacated(doubled_numpy: Path, tmp_path: Path,
                                                             offline: dict[str, str]) -> None:
    """Keep the older copy: the reinstall writes numpy-1.26.4.dist-info where the move took the old one from.

    That path exists again at undo time with other bytes, but the fix itself made it, so undo may replace it.
    """
    venv = doubled_numpy_venv(doubled_numpy, tmp_path, offline)
    python = str(venv / "bin" / "python")
    pristine = tree_digest(venv)
    [finding] = check(venv, "PKG002").by_rule("PKG002")
    [old] = [p for p, v in zip(finding.evidence["paths"], finding.evidence["versions"]) if v == "1.26.4"]
    steps = (FixStep.file_move(old, old + ".envdoctor-aside"),
             FixStep.command("pip", python, "-m", "pip", "install", "--force-reinstall", "--no-deps", "numpy==1.26.4"))
    assert command.run(fix_args(venv, "PKG002", yes=True, format="text"), replacing_steps("PKG002", lambda f: steps)) == 0
    assert Path(old).is_dir() and Path(old + ".envdoctor-aside").is_dir()
    assert run_ok([python, "-c", "import numpy; print(numpy.__version__)"], offline).strip() == "1.26.4"
    undone = undo_last(venv)
    assert undone.exit_code == 0 and undone.refused == [], undone
    assert tree_digest(venv) == pristine


def test_an_interrupted_fix_is_undone_from_what_the_journal_saved(doubled_numpy: Path, tmp_path: Path,
                                                                  offline: dict[str, str],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The manifest as saved just before the pip step ran is what a kill during that step leaves on disk."""
    import envdoctor.process

    venv = doubled_numpy_venv(doubled_numpy, tmp_path, offline)
    pristine = tree_digest(venv)
    saved: list[bytes] = []
    real_run = envdoctor.process.run_bounded

    def run_and_remember(argv: Any, timeout: float, **kw: Any) -> Any:
        if list(argv[1:4]) == ["-m", "pip", "install"] and "--dry-run" not in argv:
            journal = latest(venv)
            assert journal is not None
            saved.append((journal.path / "manifest.json").read_bytes())
        return real_run(argv, timeout, **kw)

    monkeypatch.setattr(envdoctor.process, "run_bounded", run_and_remember)
    assert command.run(fix_args(venv, "PKG002", yes=True, format="text")) == 0
    journal = latest(venv)
    assert journal is not None and len(saved) == 1
    (journal.path / "manifest.json").write_bytes(saved[0])  # killed while pip ran
    interrupted = latest(venv)
    assert interrupted is not None and interrupted.manifest["status"] == "started"
    assert [s["status"] for s in interrupted.manifest["steps"]] == ["done", "running"]
    undone = undo_last(venv)
    assert undone.exit_code == 0, undone
    assert tree_digest(venv) == pristine


@pytest.mark.parametrize("tool", ["pip", "uv"])
def test_a_dependency_the_step_upgrades_unnamed_comes_back_too(tmp_path: Path, offline: dict[str, str],
                                                               pip_venv_template: Path, tool: str) -> None:
    """`install trainkit==2.0` also upgrades urllib3 (trainkit 2.0 needs urllib3>=2), which the argv never names.

    The before-state holds the whole prefix, so what the step changed unnamed comes back byte for byte,
    with no reinstall from an index (for pip and uv alike).
    """
    wheels = Path(offline["PIP_FIND_LINKS"])
    old_urllib3 = tiny_wheel(wheels, "urllib3", "1.26.0")
    kit = tiny_wheel(wheels, "trainkit", "1.0", requires=("urllib3>=1.21",))
    tiny_wheel(wheels, "urllib3", "2.2.3")
    tiny_wheel(wheels, "trainkit", "2.0", requires=("urllib3>=2",))
    if tool == "pip":
        venv = make_pip_venv(pip_venv_template, tmp_path / "venv")
        python = str(venv / "bin" / "python")
        run_ok([python, "-m", "pip", "install", str(old_urllib3), str(kit)], offline)
        step = FixStep.command("pip", python, "-m", "pip", "install", "trainkit==2.0")
    else:
        venv = make_uv_venv(tmp_path / "venv", offline)
        python = str(venv / "bin" / "python")
        run_ok([uv_executable(), "pip", "install", "--python", str(venv), str(old_urllib3), str(kit)], offline)
        step = FixStep.command("uv", "uv", "pip", "install", "--python", str(venv), "trainkit==2.0")
    pristine = tree_digest(venv)
    target = check(venv, "PKG003").target
    finding = Finding(rule="PKG003", name="broken-requirement", severity=Severity.ERROR, message="upgrade trainkit",
                      fix_steps=(step,))
    plan = make_plan(Report(tool={}, generated_at="", host={}, target=target, facts={}, findings=[finding]))
    journal = Journal.create(dict(target))
    assert [r.status for r in Executor(plan, journal).run()] == ["done"]
    assert run_ok([python, "-c", "import urllib3; print(urllib3.__version__)"], offline).strip() == "2.2.3"
    record = json.loads((journal.path / "manifest.json").read_text())["steps"][0]
    site = next(venv.glob("lib/python*/site-packages"))
    assert record["distributions"] == {
        "removed": [str(site / "trainkit-1.0.dist-info"), str(site / "urllib3-1.26.0.dist-info")],
        "added": [str(site / "trainkit-2.0.dist-info"), str(site / "urllib3-2.2.3.dist-info")]}

    undone = undo_last(venv)
    assert undone.exit_code == 0, undone
    assert run_ok([python, "-c", "import urllib3, trainkit; print(urllib3.__version__, trainkit.__version__)"],
                  offline).strip() == "1.26.0 1.0"
    assert tree_digest(venv) == pristine


def test_a_fix_that_leaves_the_finding_and_adds_one_exits_1(tmp_path: Path, offline: dict[str, str],
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """The re-check, not the steps' exit status, decides: here the step runs fine and helps nothing."""
    venv = uv_venv_with_missing_requirement(tmp_path, offline)
    other = tiny_wheel(Path(offline["UV_FIND_LINKS"]), "otherkit", "1.0", requires=("missingdep>=1",))
    step = (FixStep.command("uv", "uv", "pip", "install", "--python", str(venv), "--no-deps", str(other)),)
    assert command.run(fix_args(venv, "PKG003", yes=True), replacing_steps("PKG003", lambda f: step)) == 1
    result = json.loads(capsys.readouterr().out)
    assert [r["status"] for r in result["results"]] == ["done"]
    assert [f["evidence"]["dependency"] for f in result["outcome"]["remaining"]] == ["urllib3"]
    assert [f["evidence"]["dependency"] for f in result["outcome"]["new"]] == ["missingdep"]
    assert result["outcome"]["fixed"] == [] and result["message"] == "0 fixed, 1 still there, 1 new"


def _answer_in_a_terminal(env: dict[str, str], answer: bytes, *args: str) -> tuple[int, str]:
    """Run the real command with a pseudo-terminal as stdin and type `answer` at its question."""
    import pty

    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "envdoctor", *args], stdin=follower, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, env=env)
        os.write(leader, answer)
        out, _ = proc.communicate(timeout=600)
    finally:
        os.close(leader)
        os.close(follower)
    return proc.returncode, out.decode()


def test_a_terminal_user_is_asked_and_no_changes_nothing(tmp_path: Path, offline: dict[str, str]) -> None:
    venv = uv_venv_with_missing_requirement(tmp_path, offline)
    pristine = tree_digest(venv)
    code, out = _answer_in_a_terminal(offline, b"n\n", "fix", "--prefix", str(venv), "--select", "PKG003")
    assert code == 2 and "Run these 1 step(s) on" in out and "nothing was changed" in out, out
    assert tree_digest(venv) == pristine
    code, out = _answer_in_a_terminal(offline, b"y\n", "fix", "--prefix", str(venv), "--select", "PKG003")
    assert code == 0 and "fixed: PKG003" in out, out
    assert check(venv, "PKG003").by_rule("PKG003") == []


def test_a_failing_step_stops_its_fix_and_says_so(tmp_path: Path, offline: dict[str, str],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    venv = uv_venv_with_missing_requirement(tmp_path, offline)
    pristine = tree_digest(venv)
    steps = (FixStep.command("uv", "uv", "pip", "install", "--python", str(venv), "nosuchpackage==1"),
             FixStep.command("uv", "uv", "pip", "install", "--python", str(venv), "urllib3"))
    assert command.run(fix_args(venv, "PKG003", yes=True), replacing_steps("PKG003", lambda f: steps)) == 2
    result = json.loads(capsys.readouterr().out)
    assert [r["status"] for r in result["results"]] == ["failed", "not-run"]
    assert "exited with status" in result["results"][0]["detail"]
    assert result["message"].startswith("no step succeeded: a failed step may have changed something")
    assert tree_digest(venv) == pristine
    assert undo_last(venv).exit_code == 0 and tree_digest(venv) == pristine
