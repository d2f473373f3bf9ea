"""Ground truth from Python itself: the fixtures flagged really die under spawn, the others really run.

Each fixture whose header says `# ground-truth: fails` or `runs` is run as a
real script (`python -B script.py`) with the shared environment's torch,
with the start method forced to spawn (or forkserver) by a sitecustomize
module on PYTHONPATH — the script itself is not changed. "fails" means a
worker died bootstrapping ("An attempt has been made to start a new process
before the current process has finished its bootstrapping phase") or the
run failed; "runs" means a clean exit with no such message. The outcome must
match both the header and the analysis: SPW001 fires exactly on the scripts
that fail.

Every run has a time limit and runs in its own process group, which is
killed at the end, so no worker outlives the test. A multiprocessing Pool
started at import time never ends under spawn (it keeps replacing workers
that die), so a run stops as soon as the bootstrapping message appears.
"""
from __future__ import annotations

import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from envdoctor.process import group_alive, mapped_shm, remove_shm_left
from support import group_members
from test_spawn_fixtures import FIXTURES, SHEBANG_SCRIPTS, check_scripts, ground_truth, header

pytestmark = [pytest.mark.slow, pytest.mark.standalone]

BOOTSTRAP = "bootstrapping phase"
RUN_LIMIT_S = 90.0
GROUND_TRUTH = [p for p in FIXTURES if ground_truth(p)]


def stop_group(proc: subprocess.Popen) -> None:
    """End the run's whole process group, letting multiprocessing clean up first.

    SIGTERM ends the script and its workers; multiprocessing's resource tracker
    ignores SIGTERM, sees its clients gone and unlinks their semaphores in
    /dev/shm. Whatever is still there after a grace period gets SIGKILL: the
    tracker too, when a client outlived it (a busy machine), so the semaphores
    the group mapped are noted first and those still there removed after it.
    """
    mapped = mapped_shm([member.pid for member in group_members(proc.pid)])
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    proc.poll()
    grace = time.monotonic() + 5.0
    while time.monotonic() < grace and group_alive(proc.pid):
        proc.poll()
        time.sleep(0.05)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)
    remove_shm_left(mapped, None)


def run_with_start_method(script: Path | None, method: str, workdir: Path, extra_path: tuple[Path, ...] = (),
                          stdin: bytes | None = None, argv: tuple[str, ...] = ()) -> tuple[str, str]:
    """Run `script` (or, with `stdin`, code read from standard input in a `__main__` without a file)
    with `method` forced; ('fails'|'runs', the output's tail)."""
    site = workdir / f"site-{method}"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(
        "import multiprocessing\n"
        f"multiprocessing.set_start_method({method!r}, force=True)\n", encoding="utf-8")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), *map(str, extra_path), env.get("PYTHONPATH", "")])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    # The group is killed once the error shows: a forkserver's pymp-* folder, which only a normal exit removes,
    # is left in a folder of the run's own, removed below (a short path: a socket's may hold 107 bytes).
    temp = tempfile.mkdtemp(prefix="envdoctor-gt-")
    env["TMPDIR"] = temp
    # Code from standard input runs through -c, whose __main__ has no __file__ (as a kernel's), where
    # `python -` would name it "<stdin>" and spawn would try to re-run that path; its lines are "<cells>".
    argv = ([sys.executable, "-B", "-c", "import sys; exec(compile(sys.stdin.read(), '<cells>', 'exec'))"]
            if stdin is not None else [sys.executable, "-B", str(script), *argv])
    proc = subprocess.Popen(argv, cwd=workdir, env=env, stdin=subprocess.PIPE if stdin is not None else None,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    if stdin is not None:
        assert proc.stdin is not None
        proc.stdin.write(stdin)
        proc.stdin.close()
    output = b""
    deadline = time.monotonic() + RUN_LIMIT_S
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    timed_out = False
    try:
        while BOOTSTRAP.encode() not in output:
            if time.monotonic() > deadline:
                timed_out = True
                break
            if not selector.select(timeout=0.5):
                continue
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:  # the output is closed: wait for the exit itself
                try:
                    proc.wait(timeout=max(1.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    timed_out = True
                break
            output += chunk
        # The rest of the traceback that carried the message (a framework may print the chain
        # with the message first, the script's lines after it): read what comes within a moment.
        drain = time.monotonic() + 3.0
        while BOOTSTRAP.encode() in output and time.monotonic() < drain and selector.select(timeout=0.5):
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                break
            output += chunk
    finally:
        stop_group(proc)
        selector.close()
        proc.stdout.close()
        shutil.rmtree(temp, ignore_errors=True)
    text = output.decode("utf-8", "replace")
    failed = BOOTSTRAP in text or timed_out or proc.returncode != 0
    return ("fails" if failed else "runs"), text


def script_lines_in_tracebacks(text: str, script: Path) -> set[int]:
    """The lines of `script` that the tracebacks in `text` pass through."""
    pattern = rf'File "{re.escape(str(script))}", line (\d+)'
    return {int(n) for n in re.findall(pattern, text)}


def test_the_ground_truth_set_holds_both_outcomes_and_torch_and_plain_multiprocessing():
    outcomes = {ground_truth(p) for p in GROUND_TRUTH}
    assert outcomes == {"fails", "runs"}
    assert any("torch" in p.read_text(encoding="utf-8") for p in GROUND_TRUTH if ground_truth(p) == "fails")
    assert any("multiprocessing" in p.read_text(encoding="utf-8") for p in GROUND_TRUTH)


def ground_truth_with(path: Path) -> tuple[tuple[str, ...], str] | None:
    """`# ground-truth-with: --workers 1 fails`: the arguments of a second run, and its outcome."""
    match = re.search(r"^#\s*ground-truth-with:\s*(.+?)\s+(fails|runs)\s*$", header(path), re.MULTILINE)
    return (tuple(match.group(1).split()), match.group(2)) if match else None


def assert_dies_where_the_first_finding_points(path: Path, output: str, found: list) -> None:
    """Where the worker died is where we point: the traceback of the failed bootstrap runs
    through the flagged line and its module-level call. A worker dies at the first start its
    re-import reaches, so with several findings that is the one whose statement comes first."""
    assert BOOTSTRAP in output
    lines = script_lines_in_tracebacks(output, path)
    first = min(found, key=lambda f: f.evidence["module_level_statement"]["line"])
    assert first.location.line in lines, (first.location.line, lines)
    assert first.evidence["module_level_statement"]["line"] in lines


@pytest.mark.parametrize("path", GROUND_TRUTH, ids=[p.name for p in GROUND_TRUTH])
def test_spawn_really_fails_exactly_where_spw001_fires(path: Path, tmp_path: Path):
    outcome, output = run_with_start_method(path, "spawn", tmp_path)
    assert outcome == ground_truth(path), f"{path.name} {outcome} under spawn; output:\n{output[-3000:]}"
    report = check_scripts(path, select=("SPW001",))
    found = report.by_rule("SPW001")
    # A start that needs an option the default run does not pass (`--workers > 0`) is no start of this
    # run, and no finding: the facts keep it, with the option that makes it one.
    assert not any(f.evidence.get("only_with") for f in found)
    # A start inside a branch on an option that is off by default (`if args.test_only:`) is a finding (it is
    # real, and the fix must move it), worded "with --test-only": the default run dies at another.
    by_default = [f for f in found if not f.evidence.get("needs")]
    assert bool(by_default) == (outcome == "fails"), f"{path.name}: SPW001 {'fired' if by_default else 'quiet'}, " \
                                                     f"but the script {outcome} under spawn"
    if outcome == "fails":
        assert_dies_where_the_first_finding_points(path, output, by_default)
    second = ground_truth_with(path)
    if second is not None:
        argv, wanted = second
        outcome, output = run_with_start_method(path, "spawn", tmp_path, argv=argv)
        assert outcome == wanted, f"{path.name} {' '.join(argv)}: {outcome} under spawn; output:\n{output[-3000:]}"
        conditional = [s for f in report.facts["scripts"]["files"] for s in f.get("worker_starts", [])
                       if (s.get("only_with") or s.get("needs")) and not s["guarded"]]
        assert conditional
        if outcome == "fails":
            assert BOOTSTRAP in output
            assert min(s["line"] for s in conditional) in script_lines_in_tracebacks(output, path)



@pytest.mark.parametrize("path", SHEBANG_SCRIPTS, ids=[p.name for p in SHEBANG_SCRIPTS])
def test_a_script_without_a_suffix_fails_under_spawn_exactly_where_the_folder_check_points(path: Path, tmp_path):
    outcome, output = run_with_start_method(path, "spawn", tmp_path)
    assert outcome == ground_truth(path), f"{path.name} {outcome} under spawn; output:\n{output[-3000:]}"
    found = [f for f in check_scripts(path.parent, select=("SPW001",)).by_rule("SPW001")
             if Path(f.location.path) == path]
    assert bool(found) == (outcome == "fails")
    if outcome == "fails":
        assert_dies_where_the_first_finding_points(path, output, found)


def test_forkserver_the_linux_default_from_python_3_14_fails_the_same_way(tmp_path: Path):
    script = Path(__file__).resolve().parent.parent / "fixtures" / "spawn" / "mp_process_unguarded.py"
    outcome, output = run_with_start_method(script, "forkserver", tmp_path)
    assert outcome == "fails" and BOOTSTRAP in output, output[-3000:]
    assert 12 in script_lines_in_tracebacks(output, script)
    guarded = Path(__file__).resolve().parent.parent / "fixtures" / "spawn" / "mp_guarded.py"
    assert run_with_start_method(guarded, "forkserver", tmp_path)[0] == "runs"
