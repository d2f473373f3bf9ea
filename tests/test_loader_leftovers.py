"""Nothing outlives the loader stage: not after SIGTERM or SIGHUP to envdoctor (how CI cancels a job), not a
process the dataset started in a session of its own, not workers that left the group, not a shared memory
segment a killed worker held. Real processes, checked with psutil and /dev/shm."""
from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from loadersupport import FIXTURES_DIR, dump, loader_report
from support import envdoctor_argv, findings

pytestmark = [pytest.mark.slow, pytest.mark.standalone]

#: Seconds every process of the stage may take to be gone.
GONE_WITHIN_S = 5.0


@pytest.fixture
def short_temp() -> Iterator[Path]:
    """A TMPDIR for forkserver: its socket path (TMPDIR/pymp-XXXXXXXX/listener-XXXXXXXX) must fit in the 107
    bytes of an AF_UNIX address, which pytest's own folders under xdist (`pytest-124/popen-gw2/test_…0/`)
    leave no room for."""
    folder = Path(tempfile.mkdtemp(prefix="ed-", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _plan_files(folder: Path) -> set[str]:
    return set(glob.glob(os.path.join(folder, "envdoctor-plan-*.json")))


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    living = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                living.append(proc)
        except psutil.NoSuchProcess:
            continue
    return living


def _wait_gone(procs: list[psutil.Process], seconds: float) -> list[psutil.Process]:
    end = time.monotonic() + seconds
    while _alive(procs) and time.monotonic() < end:
        time.sleep(0.05)
    return _alive(procs)


def _recorded(path: Path, kind: str) -> list[str]:
    if not path.exists():
        return []
    return [line.split(" ", 1)[1] for line in path.read_text().splitlines() if line.startswith(kind + " ")]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL],
                         ids=["SIGTERM", "SIGHUP", "SIGKILL"])
def test_a_signal_during_the_stage_leaves_no_worker_and_no_plan_file(signum: int, tmp_path: Path) -> None:
    """SIGTERM and SIGHUP end the stage cleanly and then envdoctor; SIGKILL leaves no cleanup to envdoctor,
    so the runner notices its parent is gone and ends itself and its workers."""
    # A temporary folder of its own: other envdoctor runs on this machine write plan files too.
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen([*envdoctor_argv("loader", "--dataset", "loaderfixtures.suite:remote_read",
                                             "--budget", "60", "--format", "json")],
                            cwd=str(FIXTURES_DIR), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        me = psutil.Process(proc.pid)
        # Wait until the runner has DataLoader workers: envdoctor, the runner, and at least one worker.
        deadline = time.monotonic() + 60
        family: list[psutil.Process] = []
        while time.monotonic() < deadline:
            family = me.children(recursive=True)
            if len(family) >= 2:
                break
            time.sleep(0.1)
        assert len(family) >= 2, "the runner never started workers"
        time.sleep(0.3)
        family = me.children(recursive=True)
        os.kill(proc.pid, signum)
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == -signum  # the signal still ends envdoctor, after the cleanup
    assert _wait_gone(family, GONE_WITHIN_S) == [], [p.pid for p in family]
    assert _plan_files(tmp_path) == set()


@pytest.mark.skipif(not hasattr(signal, "SIGHUP") or not shutil.which("nohup"), reason="needs SIGHUP and nohup")
def test_under_nohup_a_sighup_leaves_the_stage_running(tmp_path: Path) -> None:
    """`nohup envdoctor loader …` and the terminal closes: the SIGHUP its starter asked to ignore is ignored (the
    stage goes on and reports), not turned into an interrupted stage and exit status 1.

    The budget leaves the workers time to start after a slow import of torch on a busy machine (CI's took 4.6 s):
    with 6 s the stage once ended, its budget spent, before the test saw a worker."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen(["nohup", *envdoctor_argv("loader", "--dataset", "loaderfixtures.suite:remote_read",
                                                      "--budget", "12", "--format", "json", "-o",
                                                      str(tmp_path / "report.json"))],
                            cwd=str(FIXTURES_DIR), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env)
    try:
        me = psutil.Process(proc.pid)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(me.children(recursive=True)) < 2 and proc.poll() is None:
            time.sleep(0.1)
        assert proc.poll() is None, ("the stage ended before its workers started",
                                     (tmp_path / "report.json").read_text() if (tmp_path / "report.json").exists() else "")
        os.kill(proc.pid, signal.SIGHUP)
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    report = json.loads((tmp_path / "report.json").read_text())
    assert code in (0, 1) and report["loader"]["runs"], dump(report)  # it went on and measured
    assert not any("interrupt" in str(s.get("reason", "")) for s in report["loader"]["skipped"]), dump(report)
    assert _plan_files(tmp_path) == set()


def test_a_process_the_factory_started_in_its_own_session_is_killed(tmp_path: Path) -> None:
    record = tmp_path / "record"
    report, _, _ = loader_report("--dataset", "loaderfixtures.leftovers:escaping_factory", "--budget", "10",
                                 env={"ENVDOCTOR_TEST_RECORD": str(record)})
    (pid,) = _recorded(record, "pid")
    assert _recorded(record, "helper-up") == [pid], dump(report)  # it ran while the stage did
    helper = psutil.Process(int(pid)) if psutil.pid_exists(int(pid)) else None
    assert helper is None or _wait_gone([helper], GONE_WITHIN_S) == [], dump(report)
    # Gone, and not by itself: it would have written this on its way out of a normal end.
    assert _recorded(record, "helper-exited") == [], dump(report)


def test_workers_that_call_setsid_are_killed(tmp_path: Path) -> None:
    record = tmp_path / "record"
    report, _, _ = loader_report("--dataset", "loaderfixtures.leftovers:setsid_workers", "--budget", "10",
                                 env={"ENVDOCTOR_TEST_RECORD": str(record)})
    pids = [int(p) for p in _recorded(record, "pid")]
    assert pids, dump(report)  # the workers did leave the group
    procs = [psutil.Process(p) for p in pids if psutil.pid_exists(p)]
    assert _wait_gone(procs, GONE_WITHIN_S) == []


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs /dev/shm")
def test_shared_memory_of_a_killed_worker_is_removed(tmp_path: Path) -> None:
    record = tmp_path / "record"
    report, _, _ = loader_report("--dataset", "loaderfixtures.leftovers:shm_holder", "--budget", "20",
                                 env={"ENVDOCTOR_TEST_RECORD": str(record)})
    names = _recorded(record, "shm")
    assert names, dump(report)  # a worker created the segment and hung holding it
    (hit,) = findings(report, "DL006")
    assert hit["evidence"]["kind"] == "hung" and hit["evidence"]["index"] == 40
    for name in names:
        assert not Path("/dev/shm", name).exists(), name
    assert set(names) <= set(report["loader"]["runner"]["shm_removed"])


def _pymp_folders(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("pymp-*"))


def test_forkserver_workers_leave_no_multiprocessing_folder(short_temp: Path) -> None:
    """forkserver's server listens on a socket in a pymp-* folder that multiprocessing removes only at a normal
    exit; the runner ends with os._exit, so it removes the folder itself (every check did leave one under
    forkserver, Linux's default from Python 3.14)."""
    temp = short_temp
    report, _, _ = loader_report("--dataset", "loaderfixtures.leftovers:forkserver_workers", "--budget", "20",
                                 env={"TMPDIR": str(temp)})
    assert report["loader"]["start_method"] == "forkserver" and report["loader"]["runs"], dump(report)
    assert _pymp_folders(temp) == [], dump(report)
    assert report["loader"]["runner"]["tempdir_removed"] is None  # the runner's own cleanup did it


def test_a_killed_runner_s_multiprocessing_folder_is_removed(short_temp: Path) -> None:
    """The runner stops itself after forkserver workers ran, and is killed when the phase overstays: none of its
    own cleanup runs, so envdoctor removes the folder it named, socket and all."""
    temp = short_temp
    report, _, _ = loader_report("--dataset", "loaderfixtures.leftovers:stopped_after_forkserver", "--budget", "20",
                                 env={"TMPDIR": str(temp)})
    runner = report["loader"]["runner"]
    assert runner["killed_for"] == "phase", dump(report)
    assert _pymp_folders(temp) == [], dump(report)
    assert Path(runner["tempdir_removed"]).parent == temp and runner["tempdir_removed"].startswith(str(temp / "pymp-"))


def test_preflight_keeps_the_training_process_s_own_multiprocessing_folder(tmp_path: Path, short_temp: Path) -> None:
    """preflight forks the runner from the training process: a folder that process already had is its own (its
    forkserver listens there) and stays; the forked runner makes none of its own, and nothing is left after."""
    temp = short_temp
    script = tmp_path / "train.py"
    script.write_text(
        "import os, sys\n"
        "from multiprocessing import util\n"
        "from torch.utils.data import DataLoader\n"
        "import envdoctor\n"
        "from loaderfixtures.leftovers import Waits\n\n"
        "if __name__ == '__main__':\n"
        "    own = util.get_temp_dir()\n"
        "    loader = DataLoader(Waits(), batch_size=8, num_workers=2, multiprocessing_context='forkserver')\n"
        "    report = envdoctor.preflight(loader=loader, fail_on='never', budget_s=15)\n"
        "    print(os.path.isdir(own), sorted(os.listdir(os.environ['TMPDIR'])) == [os.path.basename(own)])\n",
        encoding="utf-8")
    proc = subprocess.run([sys.executable, str(script)], cwd=str(FIXTURES_DIR), capture_output=True, text=True,
                          timeout=240, env={**os.environ, "TMPDIR": str(temp), "PYTHONPATH": str(FIXTURES_DIR)})
    assert proc.returncode == 0 and proc.stdout.split() == ["True", "True"], (proc.stdout, proc.stderr[-3000:])
    assert _pymp_folders(temp) == []  # and the training process removed its own at its normal exit
