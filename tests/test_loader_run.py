"""The supervision of the loader runner: sizes, the memory cap, and what is cleaned from /dev/shm."""
from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from envdoctor.loader import supervisor as loader_run
from envdoctor.process import group_alive, remove_multiprocessing_folder

#: The stage's grace past the budget in the deadline tests (3 s in the product): the kill at the deadline is
#: the mechanism under test, not the grace's length. A fake runner has written its events and started its
#: child within 0.5 s with a busy core beside a loaded machine; 1 s budget + 1 s grace leaves four times that.
SHORT_GRACE_S = 1.0


def test_parse_size() -> None:
    assert loader_run.parse_size("2G") == 2 * 1024**3
    assert loader_run.parse_size("512M") == 512 * 1024**2
    assert loader_run.parse_size("1.5GiB") == int(1.5 * 1024**3)
    assert loader_run.parse_size("1048576") == 1048576


def test_memory_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(loader_run.MEMORY_CAP_ENV, raising=False)
    assert loader_run.memory_cap(16 * 1024**3) == 8 * 1024**3
    assert loader_run.memory_cap(512 * 1024**2) == loader_run.MIN_MEMORY_CAP
    assert loader_run.memory_cap(None) is None
    monkeypatch.setenv(loader_run.MEMORY_CAP_ENV, "3G")
    assert loader_run.memory_cap(16 * 1024**3) == 3 * 1024**3


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs /dev/shm")
def test_clean_shm_removes_only_the_groups_segments() -> None:
    ours = Path("/dev/shm") / "torch_999991_123_0"
    theirs = Path("/dev/shm") / "torch_999992_456_0"
    before = loader_run._shm_names()
    try:
        ours.write_bytes(b"x")
        theirs.write_bytes(b"x")
        removed = loader_run._clean_shm(before, {999991})
        assert removed == [ours.name]
        assert not ours.exists() and theirs.exists()
    finally:
        for path in (ours, theirs):
            if path.exists():
                path.unlink()


def test_stage_deadline_kills_the_whole_group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A runner that ignores its plan and hangs (with a child of its own) is killed at the deadline."""
    fake = tmp_path / "fake_runner.py"
    fake.write_text(
        "import json, os, subprocess, sys, time\n"
        "plan = json.load(open(sys.argv[1]))\n"
        "fd = plan['event_fd']\n"
        "os.write(fd, (json.dumps({'ev': 'phase', 'name': 'getitem', 'limit_s': 30}) + '\\n').encode())\n"
        "os.write(fd, (json.dumps({'ev': 'index', 'i': 3}) + '\\n').encode())\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "open(plan['pidfile'], 'w').write(str(child.pid))\n"
        "time.sleep(60)\n")
    pidfile = tmp_path / "child.pid"
    monkeypatch.setattr(loader_run, "RUNNER_PATH", fake)
    monkeypatch.setattr(loader_run, "STAGE_GRACE_S", SHORT_GRACE_S)
    start = time.monotonic()
    outcome = loader_run.run_stage({"pidfile": str(pidfile)}, interpreter=sys.executable, budget_s=1.0)
    elapsed = time.monotonic() - start
    assert outcome.killed_for == "budget"
    assert outcome.last_index == 3 and outcome.last_phase["name"] == "getitem"
    assert elapsed < 3 * (1.0 + loader_run.STAGE_GRACE_S)  # the deadline the stage enforces; slack derived from it
    child = int(pidfile.read_text())
    assert not group_alive(outcome.pid)  # nothing of the group runs (a zombie init has yet to reap is gone)
    assert not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs /dev/shm")
def test_a_killed_group_leaves_no_named_semaphores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Spawn-context queues and locks are named semaphores in /dev/shm that multiprocessing's resource
    tracker (a child in the killed group) would have unlinked; killed, the supervisor must."""
    fake = tmp_path / "fake_runner.py"
    fake.write_text(
        "import json, multiprocessing, sys, time\n"
        "plan = json.load(open(sys.argv[1]))\n"
        "lock = multiprocessing.get_context('spawn').Lock()\n"
        "open(plan['namefile'], 'w').write(lock._semlock.name)\n"
        "time.sleep(60)\n")
    namefile = tmp_path / "name"
    monkeypatch.setattr(loader_run, "RUNNER_PATH", fake)
    monkeypatch.setattr(loader_run, "STAGE_GRACE_S", SHORT_GRACE_S)
    outcome = loader_run.run_stage({"namefile": str(namefile)}, interpreter=sys.executable, budget_s=1.0)
    assert outcome.killed_for == "budget"
    name = "sem." + namefile.read_text().lstrip("/")
    assert name in outcome.shm_removed
    assert not (Path("/dev/shm") / name).exists()


def test_runner_unlinks_its_semaphores_before_it_ends() -> None:
    """The runner ends with os._exit, which runs no finalizer: it unlinks its named semaphores itself."""
    import multiprocessing
    import subprocess

    probes = str(Path(loader_run.RUNNER_PATH).parent)
    code = ("import multiprocessing, os, sys; sys.path.insert(0, sys.argv[1]); import loader_runner\n"
            "lock = multiprocessing.get_context('spawn').Lock()\n"
            "print(lock._semlock.name, flush=True)\n"
            "loader_runner.release_multiprocessing_files(); os._exit(0)\n")
    assert multiprocessing  # the child uses it; nothing here starts a process pool
    proc = subprocess.run([sys.executable, "-c", code, probes], capture_output=True, text=True, timeout=60)
    name = "sem." + proc.stdout.strip().lstrip("/")
    assert proc.returncode == 0 and name != "sem.", proc.stderr
    assert not (Path("/dev/shm") / name).exists()


def test_cpu_time_without_scheduler_statistics(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kernels without schedstat: CPU time comes from /proc/<pid>/stat instead."""
    import builtins

    probes = str(Path(loader_run.RUNNER_PATH).parent)
    monkeypatch.syspath_prepend(probes)
    import loader_timing

    real_open = builtins.open

    def no_schedstat(path, *args, **kwargs):
        if str(path).endswith("/schedstat"):
            raise FileNotFoundError(path)
        return real_open(path, *args, **kwargs)

    start = time.process_time()
    while time.process_time() - start < 0.2:
        pass
    monkeypatch.setattr(builtins, "open", no_schedstat)
    run_s, wait_s = loader_timing.schedstat(os.getpid())
    assert run_s >= 0.15 and wait_s == 0.0


def test_no_plan_file_is_left_when_the_interpreter_cannot_start(tmp_path: Path) -> None:
    import glob
    import tempfile

    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "envdoctor-plan-*.json")))
    with pytest.raises(OSError):
        loader_run.run_stage({}, interpreter=str(tmp_path / "no-python"), budget_s=1.0)
    assert set(glob.glob(os.path.join(tempfile.gettempdir(), "envdoctor-plan-*.json"))) - before == set()


def test_a_group_of_zombies_is_not_alive() -> None:
    """A killed group whose processes are dead but not yet reaped (init reaps orphans, late in some
    containers) is gone; one live member keeps it alive."""
    import subprocess

    dead = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while "Z" not in Path(f"/proc/{dead.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        os.killpg(dead.pid, 0)  # the zombie is still in its group …
        assert not group_alive(dead.pid)  # … which has nothing left running
        assert group_alive(live.pid)
    finally:
        live.kill()
        live.wait()
        dead.wait()
    assert not group_alive(live.pid)


def test_only_a_folder_the_runner_can_have_made_is_removed_for_it(tmp_path: Path) -> None:
    """The runner names its multiprocessing folder in an event; envdoctor removes what that name points at only
    if it is what multiprocessing makes: a pymp-* folder, not a link, made since the stage began."""
    since = time.time()
    made = tmp_path / "pymp-abc_12"
    (made / "sub").mkdir(parents=True)
    (made / "listener-x").write_text("")
    other = tmp_path / "data"
    other.mkdir()
    link = tmp_path / "pymp-link"
    link.symlink_to(other)
    assert not remove_multiprocessing_folder(str(other), since)  # not multiprocessing's name
    assert not remove_multiprocessing_folder(str(link), since) and other.is_dir()  # a link is not followed
    assert not remove_multiprocessing_folder(str(made), time.time() + 60)  # older than the stage
    assert not remove_multiprocessing_folder(str(tmp_path / "pymp-gone"), since)
    assert not remove_multiprocessing_folder("pymp-abc_12", since)  # only a whole path is taken
    assert remove_multiprocessing_folder(str(made), since) and not made.exists()
    assert not remove_multiprocessing_folder(None, since)


def test_runner_removes_its_multiprocessing_folder_before_it_ends(tmp_path: Path) -> None:
    """os._exit runs no finalizer: the runner removes the pymp-* folder it made itself (forkserver's socket is
    in it), and names it at the start, so that envdoctor can remove it if the runner is killed."""
    import subprocess

    probes = str(Path(loader_run.RUNNER_PATH).parent)
    code = ("import os, sys; sys.path.insert(0, sys.argv[1]); import loader_runner, loader_session\n"
            "loader_session.announce_tempdir(loader_runner.Events(1))\n"
            "loader_runner.release_multiprocessing_files(); os._exit(0)\n")
    proc = subprocess.run([sys.executable, "-c", code, probes], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "TMPDIR": str(tmp_path)})
    (event,) = [json.loads(line) for line in proc.stdout.splitlines()]
    assert proc.returncode == 0 and event["ev"] == "tempdir", proc.stderr
    assert Path(event["path"]).parent == tmp_path and Path(event["path"]).name.startswith("pymp-")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the sockets a process holds from /proc")
def test_a_killed_process_s_multiprocessing_folder_is_found_by_its_socket_and_removed() -> None:
    """A process listening in its pymp-* folder (as forkserver, a Manager, a worker handing tensors over do) is
    ended: the folder, which only its normal exit removes, is found by the socket it held and removed after it."""
    import subprocess
    import tempfile

    import psutil

    from envdoctor.process import end_processes, held_multiprocessing_folders

    temp = tempfile.mkdtemp(prefix="envdoctor-sock-")  # short: a socket's path may hold 107 bytes
    try:
        code = ("import time; from multiprocessing import connection, util\n"
                "listener = connection.Listener(family='AF_UNIX')\n"
                "print(util.get_temp_dir(), flush=True); time.sleep(60)\n")
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                                env={**os.environ, "TMPDIR": temp})
        assert proc.stdout is not None
        folder = proc.stdout.readline().strip()
        assert held_multiprocessing_folders([proc.pid]) == {folder} and folder.startswith(temp)
        end_processes([psutil.Process(proc.pid)], grace_s=5)
        proc.wait(timeout=10)
        assert os.listdir(temp) == []
    finally:
        shutil.rmtree(temp, ignore_errors=True)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the files a process maps from /proc")
def test_the_named_semaphore_of_an_ended_tree_is_removed_when_its_resource_tracker_ends_with_it() -> None:
    """A spawn or forkserver queue's semaphores are unlinked by multiprocessing's resource tracker, which
    ignores SIGTERM and waits for its clients: a client that outlives the grace period is killed together
    with the tracker, and its semaphore stays in /dev/shm unless what the tree had mapped is noted first
    and removed after it (as `envdoctor run` ends a command, and the smoke test a stage)."""
    import subprocess

    import psutil

    from envdoctor.process import end_processes, mapped_shm

    code = ("import multiprocessing, signal, time\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "lock = multiprocessing.get_context('spawn').Lock()\n"
            "print(lock._semlock.name, flush=True); time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    path = Path("/dev/shm") / f"sem.{proc.stdout.readline().strip().lstrip('/')}"
    try:
        assert path.exists()
        tree = psutil.Process(proc.pid)
        procs = [tree, *tree.children(recursive=True)]  # the script and its resource tracker
        assert len(procs) == 2 and path.stat().st_ino in mapped_shm([proc.pid])
        end_processes(procs, grace_s=0.5)
        proc.wait(timeout=10)
        assert not path.exists()
    finally:
        proc.kill()
        path.unlink(missing_ok=True)
