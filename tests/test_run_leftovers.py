"""`envdoctor run` leaves nothing of the command behind, re-parented daemons included (issue 33).

The attack, for real: the command double-forks a daemon (fork, setsid, fork; the middle process exits, so
the daemon is re-parented to init in a session of its own, outside the command's process tree and process
group), closes its standard streams and sleeps. Before, `envdoctor run --stop` ended the command's tree and
the daemon went on running; so it did when envdoctor itself was stopped by SIGTERM. Now both end it: it
carries the run's mark in its environment, and the session it started is the command's too.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from support import envdoctor_argv, leftover_children
from test_run_loop import LOOP_FIXTURES, _run

pytestmark = [pytest.mark.slow, pytest.mark.skipif(sys.platform == "win32", reason="fork and setsid are POSIX")]

#: Starts a double-forked daemon that writes its pid to argv[1], then runs the rest of the command.
SPAWNER = r'''
import os, runpy, sys, time
pidfile = sys.argv.pop(1)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        with open(pidfile + ".tmp", "w") as handle:
            handle.write(str(os.getpid()))
        os.replace(pidfile + ".tmp", pidfile)
        if os.environ.get("CLEAR_ENV"):  # a daemon that keeps nothing of its environment, no mark either
            os.execve(sys.executable, [sys.executable, "-c", "import time; time.sleep(300)", "spawner.py"], {})
        time.sleep(300)
        os._exit(0)
    os._exit(0)
os.wait()
while not os.path.exists(pidfile):
    time.sleep(0.01)
if len(sys.argv) > 1:
    sys.argv.pop(0)
    runpy.run_path(sys.argv[0], run_name="__main__")
else:
    print("ready", flush=True)
    time.sleep(120)
'''


def _daemon(pidfile: Path) -> psutil.Process:
    """The daemon, once it has written its pid: re-parented, in a session of its own."""
    for _ in range(600):
        if pidfile.exists():
            break
        time.sleep(0.05)
    daemon = psutil.Process(int(pidfile.read_text()))
    assert os.getsid(daemon.pid) != os.getsid(0)  # it left the command's session: a group kill misses it
    return daemon


def _gone(daemon: psutil.Process, within_s: float = 10.0) -> bool:
    with contextlib.suppress(psutil.TimeoutExpired):
        daemon.wait(timeout=within_s)
    return not daemon.is_running()


@pytest.fixture
def spawner(tmp_path: Path) -> Path:
    script = tmp_path / "spawner.py"
    script.write_text(SPAWNER)
    return script


def _still_running(pidfile: Path) -> bool:
    """Whether the daemon whose pid the file holds still runs (not a later process given the same pid)."""
    try:
        daemon = psutil.Process(int(pidfile.read_text()))
        return daemon.is_running() and daemon.status() != psutil.STATUS_ZOMBIE \
            and "spawner.py" in " ".join(daemon.cmdline())
    except psutil.Error:
        return False


def _kill_if_left(pidfile: Path) -> None:
    with contextlib.suppress(OSError, ValueError, psutil.Error):
        daemon = psutil.Process(int(pidfile.read_text()))
        if "spawner.py" in " ".join(daemon.cmdline()):
            daemon.kill()


def test_stop_ends_a_double_forked_daemon_of_the_command(tmp_path: Path, spawner: Path) -> None:
    pidfile = tmp_path / "daemon.pid"
    try:
        proc, report = _run(tmp_path, "--stop", "--", sys.executable, str(spawner), str(pidfile),
                            str(LOOP_FIXTURES / "train_loop.py"), env={"STEPS": "100000"})
        assert report is not None and report["loop"]["stopped"] is True, proc.stderr
        assert pidfile.exists()  # it did start
        assert not _still_running(pidfile), "the daemon outlived envdoctor run --stop"
        assert not leftover_children()
    finally:
        _kill_if_left(pidfile)


@pytest.mark.parametrize("clear_env", ["", "1"], ids=["marked", "cleared-environment"])
def test_sigterm_to_envdoctor_ends_the_command_and_its_daemon(tmp_path: Path, spawner: Path, clear_env: str) -> None:
    """Also a daemon that replaced its whole environment (no mark): on Linux it was re-parented to envdoctor."""
    if clear_env and not sys.platform.startswith("linux"):
        pytest.skip("only Linux has a subreaper")
    pidfile = tmp_path / "daemon.pid"
    proc = subprocess.Popen(envdoctor_argv("run", "--", sys.executable, str(spawner), str(pidfile)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(tmp_path),
                            start_new_session=True, env={**os.environ, "CLEAR_ENV": clear_env, "PYTHONFAULTHANDLER": "1"})
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        daemon = _daemon(pidfile)
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)  # PYTHONFAULTHANDLER: where it waits, every thread
            pytest.fail(f"envdoctor run did not end after SIGTERM:\n{proc.communicate()[1]}")
        assert proc.returncode == 128 + signal.SIGTERM, err  # the command's status, as before
        assert _gone(daemon, 0.5), "the daemon outlived envdoctor run stopped by SIGTERM"
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        _kill_if_left(pidfile)


def test_a_command_that_ends_by_itself_keeps_what_it_chose_to_leave(tmp_path: Path, spawner: Path) -> None:
    """Not stopped: the command's own daemon is its business (a server it starts on purpose)."""
    pidfile = tmp_path / "daemon.pid"
    script = tmp_path / "quick.py"
    script.write_text("print('done')\n")
    try:
        proc = subprocess.run(envdoctor_argv("run", "--", sys.executable, str(spawner), str(pidfile), str(script)),
                              capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
        assert proc.returncode == 0 and proc.stdout == "done\n", proc.stderr
        assert _daemon(pidfile).is_running()
    finally:
        _kill_if_left(pidfile)
