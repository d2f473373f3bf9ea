"""Helpers every test module shares: run the real command, validate every report."""
from __future__ import annotations

import contextlib
import io
import json
import locale
import os
import re
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import jsonschema


@lru_cache(maxsize=1)
def _validator() -> jsonschema.protocols.Validator:
    from envdoctor.report.json import load_schema

    schema = load_schema()
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def validate_report(report: Mapping[str, Any]) -> Mapping[str, Any]:
    """Fail the test unless `report` obeys the shipped JSON Schema."""
    errors = sorted(_validator().iter_errors(report), key=lambda e: list(e.path))
    if errors:
        lines = [f"{'/'.join(map(str, e.path)) or '<root>'}: {e.message}" for e in errors[:10]]
        raise AssertionError("report does not match the schema:\n" + "\n".join(lines))
    return report


def envdoctor_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "envdoctor", *args]


def run_envdoctor(*args: str, env: Mapping[str, str] | None = None, prefix_cmd: Sequence[str] = (),
                  cwd: str | None = None, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """Run the real `envdoctor` command in a child process (optionally under prlimit, taskset …)."""
    full_env = dict(os.environ if env is None else env)
    full_env.setdefault("NO_COLOR", "1")
    return subprocess.run([*prefix_cmd, *envdoctor_argv(*args)], capture_output=True, text=True,
                          env=full_env, cwd=cwd, timeout=timeout)


def run_cli(*args: str, env: Mapping[str, str] | None = None, cwd: str | None = None
            ) -> subprocess.CompletedProcess[str]:
    """`envdoctor ARGS` as `cli.main(ARGS)` in this process, answered as `run_envdoctor` answers.

    For tests about what the command prints and returns, not about the process: it
    saves starting Python and importing envdoctor again (a few hundred ms a run).
    The environment (`env` replaces it, as for a child) and the working directory
    are this run's and put back after it; standard output is encoded as a child's
    is (UTF-8, strict) and read back as `subprocess.run(text=True)` reads a pipe,
    so a string a child could not print fails here too. Not for the running
    interpreter's own package facts (sys.path and the user site are pytest's
    here): those tests, and any run under prlimit/taskset, use `run_envdoctor`.
    """
    from envdoctor import cli

    full_env = dict(os.environ if env is None else env)
    full_env.setdefault("NO_COLOR", "1")
    stdout, stderr = io.BytesIO(), io.BytesIO()
    out = io.TextIOWrapper(stdout, encoding="utf-8", errors="strict", write_through=True)
    err = io.TextIOWrapper(stderr, encoding="utf-8", errors="backslashreplace", write_through=True)
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    try:
        os.environ.clear()
        os.environ.update(full_env)
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli.main(list(args))
            except SystemExit as exc:  # argparse's usage errors
                code = exc.code if isinstance(exc.code, int) else 2
            out.flush()
            err.flush()
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    argv = envdoctor_argv(*args)
    return subprocess.CompletedProcess(argv, code, _as_pipe_text(stdout.getvalue()), _as_pipe_text(stderr.getvalue()))


def _as_pipe_text(data: bytes) -> str:
    """Bytes decoded as `subprocess.run(text=True)` decodes a pipe: the locale's encoding, universal newlines."""
    return io.TextIOWrapper(io.BytesIO(data), encoding=locale.getpreferredencoding(False)).read()


def json_report(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The validated JSON report a `report --json` run printed."""
    assert proc.stdout.strip(), f"no report on stdout; stderr:\n{proc.stderr}"
    report = json.loads(proc.stdout)
    validate_report(report)
    return report


def findings(report: Mapping[str, Any], rule: str) -> list[dict[str, Any]]:
    return [f for f in report["findings"] if f["rule"] == rule]


def leftover_children() -> list[tuple[int, list[str]]]:
    """This test process's descendants, less multiprocessing's resource tracker.

    The tracker is the test process's own: the first test that makes a
    semaphore or shared memory in-process (torch, a framework under test) starts
    it, and it lives as long as pytest does. Anything else is a leftover.
    """
    import psutil

    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            cmdline = child.cmdline()
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
        if any("multiprocessing.resource_tracker" in part for part in cmdline):
            continue
        found.append((child.pid, cmdline))
    return found


SHM_DIR = "/dev/shm"
#: torch names a shared-memory segment after the process that made it: torch_<pid>_<random>_<n>.
_TORCH_SEGMENT = re.compile(r"torch_(\d+)_")


def group_members(pgid: int) -> list[Any]:
    """The live processes (psutil, with their name) of process group `pgid`; zombies are not counted."""
    import psutil

    members = []
    for proc in psutil.process_iter(["pid", "name", "status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                members.append(proc)
        except (ProcessLookupError, PermissionError):
            continue
    return members


def shm_names(prefix: str) -> set[str]:
    """The entries of /dev/shm whose names start with `prefix` (none when there is no /dev/shm)."""
    try:
        return {name for name in os.listdir(SHM_DIR) if name.startswith(prefix)}
    except OSError:
        return set()


def shm_left(before: set[str], prefix: str, settle_s: float = 3.0) -> set[str]:
    """What this test's processes left in /dev/shm: entries named `prefix…` that were not there
    `before`, that no running process outside this test is using, and that are still there
    `settle_s` later.

    /dev/shm is the machine's: another pytest-xdist worker, or anyone else on a shared
    machine, has segments there while its runs go on. A torch segment names the pid that
    made it; a named semaphore is mapped by every process that uses it. A segment whose
    maker is gone and that nobody else maps is a leftover, whoever made it — unless it is
    gone a moment later: a process that has just ended has its semaphores unlinked by its
    resource tracker, which runs a little after it.
    """
    unexplained = _shm_unexplained(before, prefix)
    deadline = time.monotonic() + settle_s
    while unexplained and time.monotonic() < deadline:
        time.sleep(0.1)
        unexplained &= _shm_unexplained(before, prefix)
    return unexplained


def _shm_unexplained(before: set[str], prefix: str) -> set[str]:
    new = shm_names(prefix) - before
    if not new:
        return set()
    import psutil

    ours = {os.getpid(), *(child.pid for child in psutil.Process().children(recursive=True))}
    in_use = set()
    for name in new:
        match = _TORCH_SEGMENT.match(name)
        if match and int(match.group(1)) not in ours and psutil.pid_exists(int(match.group(1))):
            in_use.add(name)
    unexplained = new - in_use
    if unexplained:
        for pid in psutil.pids():
            if pid in ours:
                continue
            try:
                with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as fh:
                    maps = fh.read()
            except OSError:
                continue
            in_use |= {name for name in unexplained if f"{SHM_DIR}/{name}" in maps}
    return new - in_use


#: Runs "$@" on a /dev/shm of its own (a tmpfs in a private mount namespace), then lists what is left there
#: into $SHM_LIST: whatever that holds was left by this run, whatever else the machine runs.
PRIVATE_SHM = 'mount -t tmpfs -o size=1g tmpfs /dev/shm || exit 97; "$@"; rc=$?; ls -A /dev/shm > "$SHM_LIST"; exit $rc'


@lru_cache(maxsize=1)
def can_mount_private_shm() -> bool:
    """Whether a run can have a /dev/shm of its own (root, `unshare -m`)."""
    try:
        proc = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                               "mount -t tmpfs tmpfs /dev/shm && ls -A /dev/shm"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0 and proc.stdout == b""


def in_private_shm(argv: Sequence[str]) -> list[str]:
    """`argv` run on a /dev/shm of its own (see PRIVATE_SHM; the environment must name SHM_LIST)."""
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", PRIVATE_SHM, "sh", *argv]
