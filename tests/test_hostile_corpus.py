"""Issue 15's hostile-input corpus (fixtures/hostile/build.py), one test per input, the real command.

Every case runs `envdoctor` in a child process and asserts: a `check` ends within
the limits the code enforces on what it waits for, with slack derived from them
(tests/bounds.py; `render` and `compare` enforce none, so their time is never
asserted, a hang guard only ends a hung run), and under an address-space limit
(an unbounded read dies with MemoryError there, which is exit 2 and fails the
case); the exit code is 0/1, or 2 with one line and no report for a refused
argument; the bad input is
named; the other findings are still present; no secret value, no raw control
character and nothing the case forbids reaches any format (text, json,
markdown, sarif, github); no file of the target changed (a tree hash before
and after); nothing envdoctor started is still running (this process is made
the child subreaper, so orphans come back to it) and nothing new is left in
/dev/shm. Then the loader-stage signals: SIGTERM or SIGHUP while DataLoader
workers run leaves no worker and no plan file.
"""
from __future__ import annotations

import contextlib
import ctypes
import glob
import hashlib
import json
import os
import re
import resource
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from bounds import hang_guard_s, static_check_s
from hostile.build import CORPUS, SLOW, Case, build
from loadersupport import stage_bound
from support import can_mount_private_shm, envdoctor_argv, in_private_shm, validate_report

pytestmark = [pytest.mark.standalone]

FORMATS = ("json", "text", "markdown", "sarif", "github")
#: Control characters a report may itself use (line ends, tabs); every other one is the input's.
ALLOWED_CONTROL = {"\n", "\t", "\r"}
#: C0 and DEL..C1 controls less ALLOWED_CONTROL, as one class: the 1M-row outputs are hundreds of MB.
_RAW_CONTROL = re.compile("[" + "".join(re.escape(chr(c)) for c in [*range(32), *range(0x7F, 0xA0)]
                                        if chr(c) not in ALLOWED_CONTROL) + "]")
FIXTURES_DIR = Path(__file__).resolve().parent.parent / "fixtures"

#: Cases that fail because of a bug in a part still being changed by its owner (loader/, spawn, facts/scripts.py).
XFAIL: dict[str, str] = {}

PR_SET_CHILD_SUBREAPER = 36


@pytest.fixture(scope="session")
def base_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One small real venv per session; each case works on its own copy."""
    venv = tmp_path_factory.mktemp("hostile-base") / "venv"
    python = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([python, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    return venv


@contextlib.contextmanager
def orphans_come_back() -> Iterator[None]:
    """Make this process the child subreaper while a case runs, so anything envdoctor left is our child."""
    libc = ctypes.CDLL(None, use_errno=True)
    on = libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    try:
        yield
    finally:
        if on:
            libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


def descendants() -> set[int]:
    return {child.pid for child in psutil.Process().children(recursive=True)}


def left_running(before: set[int]) -> list[str]:
    """Descendants of this test process still alive (zombies are reaped) that were not there `before` the
    run: the pytest-xdist worker may have children of its own from earlier tests (multiprocessing's
    resource tracker, once a test in it made a semaphore)."""
    alive = []
    for child in psutil.Process().children(recursive=True):
        if child.pid in before:
            continue
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(child.pid, os.WNOHANG)
                continue
            alive.append(f"{child.pid} {' '.join(child.cmdline())[:200]}")
            child.kill()
        except psutil.NoSuchProcess:
            continue
    return alive


@pytest.fixture(scope="session")
def private_shm() -> bool:
    """Whether each run can have a /dev/shm of its own (root, unshare): then a leftover there is surely ours."""
    return can_mount_private_shm()


def shm_entries() -> dict[str, float]:
    out = {}
    for path in glob.glob("/dev/shm/*"):
        with contextlib.suppress(OSError):
            out[path] = os.lstat(path).st_mtime
    return out


def tree_hash(root: Path) -> dict[str, str]:
    """Every entry under `root`: content hash of small regular files, else type, mode and size (never read)."""
    out: dict[str, str] = {}
    for folder, dirs, files in os.walk(os.fsencode(root)):
        for name in dirs + files:
            path = os.path.join(folder, name)
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                out[os.fsdecode(path)] = "link:" + os.fsdecode(os.readlink(path))
            elif stat.S_ISREG(st.st_mode) and st.st_size < (16 << 20):
                with open(path, "rb") as handle:
                    out[os.fsdecode(path)] = hashlib.sha256(handle.read()).hexdigest() + f" {st.st_mode:o}"
            else:
                out[os.fsdecode(path)] = f"mode:{st.st_mode:o} size:{st.st_size} mtime:{st.st_mtime_ns}"
    return out


def _limit(memory_bytes: int) -> Any:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    return apply


def bound_s(case: Case) -> float | None:
    """The most the case's run may take, from the limits its command enforces; None where it enforces none
    (render, compare: computation on the input, whose time on this machine is not envdoctor's to promise)."""
    if case.command != "check":
        return None
    return static_check_s(deep="--deep" in case.args)


def run(case: Case, fmt: str, tmp: Path, private: bool) -> tuple[subprocess.CompletedProcess[bytes], float, list[str]]:
    """One real run; returns it, its seconds, and what it left in its own /dev/shm (when it had one)."""
    args = [case.command, *_format_args(case, fmt)]
    shm_list = tmp / f"shm-left-{fmt}.txt"
    own_tmp = tmp / f"tmp-{fmt}"  # its own TMPDIR: whatever is left there is this run's
    own_tmp.mkdir()
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "100", "PYTHONUSERBASE": str(tmp / "no-user-base"),
           "SHM_LIST": str(shm_list), "TMPDIR": str(own_tmp), **case.env}
    env.pop("PYTHONPATH", None)
    argv = envdoctor_argv(*args)
    start = time.monotonic()
    limit = bound_s(case) or hang_guard_s()
    try:
        proc = subprocess.run(in_private_shm(argv) if private else argv, capture_output=True, env=env,
                              cwd=str(case.cwd or tmp), timeout=limit, preexec_fn=_limit(case.memory_bytes))
    except subprocess.TimeoutExpired:
        pytest.fail(f"{case.id} --format {fmt} still ran after {limit:.0f} s (its bound, from the limits the code "
                    f"enforces: {bound_s(case)}; None: a hang guard)")
    elapsed = time.monotonic() - start
    assert proc.returncode != 97, "could not mount a private /dev/shm"
    left = shm_list.read_text().split() if private else []
    return proc, elapsed, left + [f"TMPDIR: {name}" for name in os.listdir(own_tmp)]


def _format_args(case: Case, fmt: str) -> list[str]:
    # `--` may end the options (scripts follow it): the format goes before it.
    if "--" in case.args:
        cut = case.args.index("--")
        return [*case.args[:cut], "--format", fmt, *case.args[cut:]]
    return [*case.args, "--format", fmt]


def rendered_elsewhere(report_json: str, fmt: str, tmp: Path) -> str:
    """The same report in another format, as `envdoctor render` makes it (same loader, same formatter)."""
    from envdoctor.report import RenderOptions, load_report, render

    path = tmp / "saved-report.json"
    path.write_text(report_json, encoding="utf-8")
    return render(load_report(str(path)), fmt, RenderOptions())


def raw_control(text: str) -> list[str]:
    return sorted({repr(c) for c in _RAW_CONTROL.findall(text)})


def check_output(case: Case, fmt: str, text: str) -> None:
    assert raw_control(text) == [], f"{fmt}: control characters from the input reach the output"
    for secret in case.forbidden:
        assert secret not in text, f"{fmt}: {secret!r} reaches the output"
    if fmt == "markdown":
        prose = outside_code(text)
        for raw in case.forbidden_markdown:
            # `\\<` is CommonMark's escaped `<`: shown as text, never a tag.
            assert not re.search(r"(?<!\\)" + re.escape(raw), prose), f"markdown: {raw!r} passes through unescaped"
        # A newline in a file name must not start a line of its own (it would end a table row or a list item).
        assert not any(line.startswith("line.py") for line in text.splitlines())


def outside_code(markdown: str) -> str:
    """Markdown minus fenced blocks and code spans, where HTML and `|` are shown as text anyway."""
    markdown = re.sub(r"^(`{3,})[^\n]*\n.*?^\1", "", markdown, flags=re.DOTALL | re.MULTILINE)
    return re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", markdown, flags=re.DOTALL)


@pytest.mark.parametrize("case_id", [
    pytest.param(case_id, marks=[*([pytest.mark.slow] if case_id in SLOW else []),
                                 *([pytest.mark.xfail(strict=True, reason=XFAIL[case_id])]
                                   if case_id in XFAIL else [])])
    for case_id in CORPUS])
def test_hostile_input(case_id: str, base_venv: Path, tmp_path: Path, private_shm: bool) -> None:
    case = build(case_id, tmp_path / "case", base_venv)
    target = case.target or tmp_path / "case"
    before, shm_before = tree_hash(target), shm_entries()
    formats = case.formats or (FORMATS if case.every_format or case.command == "render" else ("json", "text"))
    outputs: dict[str, str] = {}
    with orphans_come_back():
        for fmt in formats:
            ours = descendants()
            proc, elapsed, shm_left = run(case, fmt, tmp_path, private_shm)
            stdout = proc.stdout.decode("utf-8", "replace")
            stderr = proc.stderr.decode("utf-8", "replace")
            where = f"{case_id} --format {fmt} (exit {proc.returncode}, {elapsed:.1f} s)\nstderr: {stderr[-2000:]}"
            if bound_s(case) is not None:
                assert elapsed < bound_s(case), where
            assert "Traceback" not in stderr and "internal error" not in stderr, where
            assert proc.returncode in case.exit_codes, where
            if proc.returncode == 2:  # a refused input: one line naming it, no report
                assert stdout == "" and len(stderr.strip().splitlines()) == 1, where
                for named in case.named:
                    assert named in stderr, f"{where}\n{named!r} not named"
            check_output(case, fmt, stdout + stderr)
            outputs[fmt] = stdout
            assert left_running(ours) == [], f"{where}: processes left running"
            assert shm_left == [], f"{where}: left in /dev/shm or its temporary folder"
    if len(outputs.get("json", "")) > (32 << 20):  # the 1M-row report: named in the raw text, not parsed again
        for named in case.named:
            assert named in outputs["json"], f"{named!r} is not named in the JSON report"
    elif outputs.get("json"):
        report = json.loads(outputs["json"])
        if case.command != "compare":
            validate_report(report)
        dumped = json.dumps(report, ensure_ascii=False)
        for named in case.named:
            assert named in dumped, f"{named!r} is not named in the JSON report"
        for rule, text in case.findings:
            hits = [f for f in report["findings"] if f["rule"] == rule]
            assert any(text in json.dumps(f, ensure_ascii=False) for f in hits), \
                f"no {rule} about {text!r}: {[f['rule'] for f in report['findings']]}"
        if case.check:
            case.check(report)
        for fmt in FORMATS:
            if fmt not in outputs and case.command == "check":
                check_output(case, fmt, rendered_elsewhere(outputs["json"], fmt, tmp_path))
    elif case.check:
        case.check({})
    assert tree_hash(target) == before, "a file of the target changed"
    if not private_shm:  # the machine's own /dev/shm: only what appeared and stayed (others may share it)
        new_shm = {p for p in shm_entries() if p not in shm_before}
        time.sleep(1.0 if new_shm else 0)
        assert {p for p in new_shm if os.path.exists(p)} == set(), "segments left in /dev/shm"


def _cmdline(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline())
    except psutil.Error:
        return ""


def _children(proc: psutil.Process) -> list[psutil.Process]:
    try:
        return proc.children(recursive=True)
    except psutil.Error:
        return []


def _still_running(procs: list[psutil.Process]) -> bool:
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                return True
        except psutil.Error:
            continue
    return False


def _plan_files(folder: Path) -> set[str]:
    return set(glob.glob(os.path.join(folder, "envdoctor-plan-*.json")))


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["sigterm-during-loader", "sighup-during-loader"])
def test_signal_during_the_loader_stage(signum: int, tmp_path: Path, private_shm: bool) -> None:
    """CI cancelling a job: every DataLoader worker gone within a few seconds, no plan file, no segment."""
    shm_before = shm_entries()
    shm_list = tmp_path / "shm-left.txt"
    own_tmp = tmp_path / "tmp"  # its own TMPDIR: a plan file left there is surely this run's
    own_tmp.mkdir()
    budget = 60
    argv = envdoctor_argv("loader", "--dataset", "loaderfixtures.suite:remote_read", "--budget", str(budget),
                          "--format", "json")
    ours = descendants()
    with orphans_come_back():
        proc = subprocess.Popen(in_private_shm(argv) if private_shm else argv, cwd=str(FIXTURES_DIR),
                                env={**os.environ, "SHM_LIST": str(shm_list), "TMPDIR": str(own_tmp)},
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            top = psutil.Process(proc.pid)
            deadline = time.monotonic() + stage_bound(budget)  # the workers start within the stage, or never
            family: list[psutil.Process] = []
            envdoctor = top
            while time.monotonic() < deadline:
                family = top.children(recursive=True)
                pythons = [p for p in family if "envdoctor" in _cmdline(p)]
                if private_shm and pythons:
                    envdoctor = pythons[0]
                if len(_children(envdoctor)) >= 2:  # the runner and at least one worker
                    break
                time.sleep(0.1)
            family = _children(envdoctor)
            assert len(family) >= 2, "the loader stage never started its workers"
            time.sleep(0.3)
            family = _children(envdoctor)
            os.kill(envdoctor.pid, signum)
            code = proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert code == (128 + signum if private_shm else -signum)  # the signal still ends envdoctor
        end = time.monotonic() + 5
        while time.monotonic() < end and _still_running(family):
            time.sleep(0.05)
        assert left_running(ours) == [], "workers outlived the signal by 5 s"
    assert _plan_files(own_tmp) == set()
    if private_shm:
        assert shm_list.read_text().split() == [], "segments left in /dev/shm"
    else:
        assert {p for p in shm_entries() if p not in shm_before and os.path.exists(p)} == set()
