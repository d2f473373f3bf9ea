"""Running the smoke test: one bounded child per stage, events read as they come.

The runner (`envdoctor/inside/loader_runner.py`) does the measuring inside the
target interpreter. This module starts it — as a script in a session of its
own, or, for `preflight(loader=...)`, as a forked child of the training
process — and supervises it:

- a hard deadline for the whole stage (the budget plus a short grace), a
  deadline for each phase the runner announces, and a memory cap on the
  runner and all its workers together; whichever is overstepped, the whole
  process group is killed, workers included;
- every event the runner wrote is kept, so a kill loses nothing measured;
- afterwards no process of the group survives, nor any descendant that left
  the group for a session of its own (every descendant's pid is tracked, with
  its start time, while the stage runs); `/dev/shm/torch_<pid>_*` segments
  that a killed process left behind are removed, as are the other /dev/shm
  files created during the stage that its processes had mapped — named
  semaphores (`sem.mp-*`, which spawn and forkserver queues use) and
  `multiprocessing.shared_memory` segments (`psm_*`);
- SIGTERM and SIGHUP to envdoctor while the stage runs (how CI cancels a job)
  end the stage the same way — nothing left running, no plan file left — and
  are then delivered again to whatever handled them before.

Windows has no fork, no process groups, no SIGHUP and no descriptors a child
can inherit by number. There the runner writes its events to a file it opens
by name (`_EventFile`, tailed here instead of a pipe), `preflight(loader=...)`
hands the user's objects over pickled instead of forking (see
`loader.choose_source`), the process tree is killed through psutil
(`process.kill_tree`), and SIGBREAK (Ctrl+Break, a closed console) ends the
stage where SIGHUP would. macOS keeps the pipe and the process groups.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import select
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, ModuleType
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import subprocess  # imported where a script is started: the fork does without it

from envdoctor.inside import loader_protocol
from envdoctor.process import (
    SHM_DIR,
    group_alive,
    handle_signals,
    hard_kill,
    kill_group,
    mapped_shm,
    remove_multiprocessing_folder,
    shm_inode,
)

RUNNER_PATH = Path(__file__).resolve().parent.parent / "inside" / "loader_runner.py"
#: Extra seconds past the budget before the whole stage is killed.
STAGE_GRACE_S = 3.0
#: Extra seconds past a phase's own limit before the group is killed (the runner's watchdog goes first).
PHASE_GRACE_S = 2.0
#: How often the memory of the group is read (and its descendants' pids noted).
MEMORY_POLL_S = 0.2
#: How often the /dev/shm files the descendants map are noted.
MAPS_POLL_S = 1.0
#: Overrides the memory cap (bytes, or with a K/M/G suffix), mainly for tests.
MEMORY_CAP_ENV = "ENVDOCTOR_LOADER_MEMORY_CAP"
#: The cap never goes below this: importing torch alone takes a few hundred MiB.
MIN_MEMORY_CAP = 1024**3
#: Events travel through a file, not an inherited pipe (Windows: no descriptor passes by number).
EVENTS_BY_FILE = sys.platform == "win32"
_SHM_NAME = re.compile(r"^torch_(\d+)_")

ProgressSink = Callable[[dict[str, object]], None]


@dataclass
class StageRun:
    """What one supervised run of the runner produced."""

    events: list[dict[str, Any]] = field(default_factory=list)
    pid: int | None = None
    returncode: int | None = None
    killed_for: str | None = None  # "budget", "phase", "memory" or None
    last_phase: dict[str, Any] | None = None
    last_index: object = None
    wall_s: float = 0.0
    peak_rss_bytes: int = 0
    memory_cap_bytes: int | None = None
    log_tail: str = ""
    shm_removed: list[str] = field(default_factory=list)
    #: Every pid seen among the runner's descendants, to tell its /dev/shm segments from other processes'.
    pids: set[int] = field(default_factory=set)
    #: The same descendants with their start times, to kill those that left the group (setsid).
    procs: dict[int, float] = field(default_factory=dict)
    #: Inodes of the /dev/shm files (semaphores, shared memory) the descendants had mapped.
    semaphores: set[int] = field(default_factory=set)
    #: The temporary folder the runner's multiprocessing made (loader_protocol.TEMPDIR), and the same path once
    #: removed here: it was still there when the stage ended (the runner killed before it could remove it).
    mp_tempdir: str | None = None
    tempdir_removed: str | None = None

    @property
    def finished(self) -> bool:
        return any(e.get("ev") == loader_protocol.DONE for e in self.events)

    def take(self, line: bytes, progress: ProgressSink | None) -> dict[str, Any] | None:
        """File one line of the runner's event stream; None when it holds no event."""
        event = loader_protocol.decode(line)
        if event is None:
            return None
        self.events.append(event)
        if event["ev"] == loader_protocol.PHASE:
            self.last_phase = event
        elif event["ev"] == loader_protocol.INDEX:
            self.last_index = event.get("i")
        elif event["ev"] == loader_protocol.TEMPDIR and isinstance(event.get("path"), str):
            self.mp_tempdir = str(event["path"])
        if progress is not None:
            try:
                progress(event)
            except Exception:
                pass  # a broken display must not break the measurement
        return event

    def signal_name(self) -> str | None:
        if self.returncode is not None and self.returncode < 0:
            try:
                return signal.Signals(-self.returncode).name
            except ValueError:
                return f"signal {-self.returncode}"
        return None


def parse_size(text: str) -> int:
    """'2G', '512M', '1048576' -> bytes."""
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    units = {"K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(float(text))


def memory_cap(available_bytes: int | None) -> int | None:
    """Half the memory available (cgroup-aware, at least 1 GiB), or the override in the environment."""
    override = os.environ.get(MEMORY_CAP_ENV)
    if override:
        try:
            return parse_size(override)
        except ValueError:
            pass
    return max(int(available_bytes * 0.5), MIN_MEMORY_CAP) if available_bytes else None


def _shm_names() -> set[str]:
    try:
        return set(os.listdir(SHM_DIR))
    except OSError:
        return set()


def _group_rss(pid: int, seen: set[int], started: dict[int, float] | None = None) -> int:
    """Private resident memory of a process and all its descendants; records their pids.

    File-backed and shared-memory pages (the libraries every forked worker maps,
    batches in /dev/shm) are left out, so N workers are not counted as N copies
    of torch; what a dataset allocates is anonymous memory and counts in full.
    """
    import psutil

    try:
        root = psutil.Process(pid)
        family = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for proc in family:
        try:
            info = proc.memory_info()
            total += max(0, info.rss - getattr(info, "shared", 0))
            seen.add(proc.pid)
            if started is not None and proc.pid not in started:
                started[proc.pid] = proc.create_time()
        except psutil.Error:
            continue
    return total


def _kill(outcome: StageRun, pid: int) -> None:
    """Kill the whole group, and every descendant seen that left it for a session of its own; first note
    the /dev/shm files they map (semaphores, shared memory): killed, nobody unlinks them."""
    _group_rss(pid, outcome.pids, outcome.procs)
    outcome.semaphores |= mapped_shm(outcome.pids | {pid})
    kill_group(pid)
    _kill_tracked(outcome.procs)


def _kill_tracked(procs: dict[int, float]) -> None:
    """SIGKILL each tracked process that still runs and is the one we saw (same start time)."""
    import psutil

    for tracked, started in procs.items():
        try:
            proc = psutil.Process(tracked)
            if abs(proc.create_time() - started) < 0.01:
                hard_kill(proc)
        except psutil.Error:
            continue


def _tracked_alive(procs: dict[int, float]) -> bool:
    import psutil

    for tracked, started in procs.items():
        try:
            proc = psutil.Process(tracked)
            if abs(proc.create_time() - started) < 0.01 and proc.status() != psutil.STATUS_ZOMBIE:
                return True
        except psutil.Error:
            continue
    return False


class _Child:
    """The runner's process as started: `poll()` is its returncode (negative: a signal), None while it runs."""

    def __init__(self, pid: int, popen: subprocess.Popen[bytes] | None = None) -> None:
        self.pid = pid
        #: The subprocess.Popen that started it (Windows knows a child by its handle); None for a forked pid.
        self.popen = popen

    def poll(self) -> int | None:
        return _waitpid_nohang(self.pid) if self.popen is None else self.popen.poll()


def _waitpid_nohang(pid: int) -> int | None:
    """A forked child's returncode if it ended (0 when it was reaped already), else None."""
    if sys.platform == "win32":
        raise OSError("no forked children on Windows")
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return 0
    return os.waitstatus_to_exitcode(status) if done else None


def _reap(child: _Child, wait_s: float) -> int | None:
    """Wait up to wait_s for the child to end; its returncode (negative: a signal)."""
    end = time.monotonic() + wait_s
    while True:
        code = child.poll()
        if code is not None:
            return code
        if time.monotonic() >= end:
            return None
        time.sleep(0.01)


class _EventPipe:
    """Events through a pipe the runner inherits by descriptor (POSIX); an empty read: every writer is gone."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()

    def for_plan(self) -> dict[str, object]:
        return {"event_fd": self.write_fd}

    def started(self) -> None:
        """The child holds its copy now: ours must go, or the pipe never reads as closed."""
        if self.write_fd >= 0:
            os.close(self.write_fd)
            self.write_fd = -1

    def read(self, timeout: float) -> tuple[bytes, bool]:
        """(bytes that came, whether every writer has gone)."""
        ready, _, _ = select.select([self.read_fd], [], [], timeout)
        if not ready:
            return b"", False
        data = os.read(self.read_fd, 1 << 16)
        return data, not data

    def close(self) -> None:
        self.started()
        os.close(self.read_fd)


class _EventFile:
    """Events appended to a file the runner opens by name, tailed here (Windows).

    A file never reads as closed: the end of the runner is told by its process.
    """

    def __init__(self) -> None:
        fd, self.path = tempfile.mkstemp(prefix="envdoctor-events-", suffix=".jsonl")
        self.reader = os.fdopen(fd, "rb")

    def for_plan(self) -> dict[str, object]:
        return {"event_path": self.path}

    def started(self) -> None:
        pass

    def read(self, timeout: float) -> tuple[bytes, bool]:
        data = self.reader.read(1 << 16)
        if not data and timeout > 0:
            time.sleep(timeout)
        return data or b"", False

    def close(self) -> None:
        self.reader.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)


_Events = _EventPipe | _EventFile


def _start_script(plan: dict[str, Any], interpreter: str, events: _Events, log: IO[str], cwd: str | None) -> _Child:
    import subprocess

    from envdoctor.facts.torch import probe_environment

    plan_file = tempfile.NamedTemporaryFile("w", suffix=".json", prefix="envdoctor-plan-", delete=False)
    plan["_plan_file"] = plan_file.name  # run_stage removes it, also when the interpreter cannot start
    with plan_file:
        json.dump({k: v for k, v in plan.items() if k != "_plan_file"} | events.for_plan(), plan_file)
    inherit = (events.write_fd,) if isinstance(events, _EventPipe) else ()
    proc = subprocess.Popen(
        [interpreter, "-B", str(RUNNER_PATH), plan_file.name],
        stdin=subprocess.DEVNULL, stdout=log, stderr=log, pass_fds=inherit,
        # probe_environment(): quiet, plus the threadpoolctl the torch probe may borrow. A session of its own
        # (POSIX; Windows ignores it) and on Windows a process group of its own, so Ctrl+C reaches envdoctor,
        # which ends the tree, and not the runner half-way through a write.
        start_new_session=True, creationflags=getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0),
        env=probe_environment(), cwd=cwd,
    )
    return _Child(proc.pid, proc)


def _runner_module() -> ModuleType:
    inside = str(RUNNER_PATH.parent)
    if inside not in sys.path:
        sys.path.insert(0, inside)
    import loader_runner

    return loader_runner


def _start_fork(plan: dict[str, Any], events: _EventPipe, log: IO[str], objects: dict[str, object]) -> _Child:
    """Run the runner in a forked child of this process (Linux): the user's own objects, as they are."""
    if sys.platform == "win32":
        raise OSError("Windows cannot fork")
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return _Child(pid)
    # The child: a session of its own, output to the log, then the runner, then out.
    code = 70
    try:
        os.setsid()
        os.close(events.read_fd)
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        loader_runner = _runner_module()
        loader_runner.run_plan({**plan, **events.for_plan()}, loader_runner.Events(events.write_fd),
                               objects["dataset"], objects["kwargs"], objects["description"])
        code = 0
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)


class StageInterrupted(BaseException):
    """SIGTERM or SIGHUP arrived while the stage ran (a BaseException: no `except Exception` swallows it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signum}")
        self.signum = signum


#: Signals that end the stage cleanly, then reach whatever handled them before: SIGTERM, and SIGHUP where
#: it exists (not on Windows), SIGBREAK where it exists (Windows: Ctrl+Break, the console closed).
STAGE_SIGNALS: tuple[int, ...] = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP", "SIGBREAK")
                                       if hasattr(signal, name))


@contextlib.contextmanager
def _signals_end_the_stage() -> Iterator[None]:
    """While the stage runs, SIGTERM/SIGHUP raise StageInterrupted (so its cleanup runs); afterwards the
    signal is delivered again under the handler that was there before (by default: the process ends)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise StageInterrupted(signum)

    previous = handle_signals(interrupt, STAGE_SIGNALS)
    try:
        yield
    except StageInterrupted as stop:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        previous = {}
        signal.raise_signal(stop.signum)
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_stage(plan: dict[str, Any], *, interpreter: str | None = None, objects: dict[str, Any] | None = None,
              budget_s: float, cwd: str | None = None, available_bytes: int | None = None,
              progress: ProgressSink | None = None) -> StageRun:
    """Start the runner, follow its events, enforce every limit, leave nothing behind."""
    with _signals_end_the_stage():
        return _run_stage(plan, interpreter=interpreter, objects=objects, budget_s=budget_s, cwd=cwd,
                          available_bytes=available_bytes, progress=progress)


def _run_stage(plan: dict[str, Any], *, interpreter: str | None, objects: dict[str, Any] | None,
               budget_s: float, cwd: str | None, available_bytes: int | None,
               progress: ProgressSink | None) -> StageRun:
    outcome = StageRun(memory_cap_bytes=memory_cap(available_bytes))
    shm_before = _shm_names()
    events: _Events = _EventFile() if EVENTS_BY_FILE else _EventPipe()
    log = tempfile.TemporaryFile("w+", prefix="envdoctor-loader-")
    start, started_at = time.monotonic(), time.time()
    child = None
    try:
        if objects is not None:
            if not isinstance(events, _EventPipe):
                raise OSError("the user's own objects cross by fork, and fork has no event file")
            child = _start_fork(plan, events, log, objects)
        else:
            assert interpreter is not None
            child = _start_script(plan, interpreter, events, log, cwd)
        outcome.pid = child.pid
        events.started()
        _follow(outcome, child, events, start + budget_s + STAGE_GRACE_S, progress)
    finally:
        # A SIGTERM now must not cut the cleanup short: it waits until everything is gone.
        blocked = _block_stage_signals()
        if child is not None:
            _kill(outcome, child.pid)
            code = _reap(child, 5.0)
            if outcome.returncode is None:
                outcome.returncode = code
            outcome.pids.add(child.pid)
            _wait_group_gone(child.pid, outcome.procs)
            outcome.shm_removed = _clean_shm(shm_before, outcome.pids, outcome.semaphores)
            if remove_multiprocessing_folder(outcome.mp_tempdir, started_at):
                outcome.tempdir_removed = outcome.mp_tempdir
        events.close()
        log.seek(0)
        outcome.log_tail = log.read()[-4000:]
        log.close()
        plan_file = plan.pop("_plan_file", None)
        if plan_file:
            try:
                os.unlink(plan_file)
            except OSError:
                pass
        outcome.wall_s = time.monotonic() - start
        if blocked and sys.platform != "win32":
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STAGE_SIGNALS)
    return outcome


def _block_stage_signals() -> bool:
    """Hold SIGTERM/SIGHUP back during the cleanup (POSIX; Windows cannot block signals)."""
    if sys.platform == "win32" or threading.current_thread() is not threading.main_thread():
        return False
    signal.pthread_sigmask(signal.SIG_BLOCK, STAGE_SIGNALS)
    return True


def _follow(outcome: StageRun, child: _Child, events: _Events, hard_deadline: float,
            progress: ProgressSink | None) -> None:
    pid = child.pid
    pending = b""
    phase_deadline: float | None = None
    next_poll = 0.0
    next_maps = 0.0
    while True:
        now = time.monotonic()
        data, closed = events.read(0.05)  # closed: every writer is gone, the runner (and its workers) ended
        if data:
            pending += data
            *lines, pending = pending.split(b"\n")
            for line in lines:
                event = outcome.take(line, progress)
                if event is not None and event["ev"] == loader_protocol.PHASE:
                    phase_deadline = time.monotonic() + float(event.get("limit_s") or 0) + PHASE_GRACE_S
        if outcome.finished:
            outcome.returncode = _reap(child, 2.0)
            return
        if closed:
            outcome.returncode = _reap(child, 2.0)
            if outcome.returncode is None:  # it closed the pipe yet lives on: end it
                _kill(outcome, pid)
                outcome.returncode = _reap(child, 2.0)
            _drain(outcome, events, pending, progress)
            return
        if not data:
            code = child.poll()
            if code is not None:
                outcome.returncode = code
                _drain(outcome, events, pending, progress)
                return
        if now > hard_deadline:
            outcome.killed_for = "budget"
            _kill(outcome, pid)
            return
        if phase_deadline is not None and now > phase_deadline:
            outcome.killed_for = "phase"
            _kill(outcome, pid)
            return
        if now >= next_poll:
            # Also collects the group's pids, so its leftover /dev/shm segments can be told apart.
            next_poll = now + MEMORY_POLL_S
            rss = _group_rss(pid, outcome.pids, outcome.procs)
            if now >= next_maps:
                # Shared memory a worker creates and is killed holding: noted while it is mapped.
                next_maps = now + MAPS_POLL_S
                outcome.semaphores |= mapped_shm(outcome.pids)
            outcome.peak_rss_bytes = max(outcome.peak_rss_bytes, rss)
            if outcome.memory_cap_bytes and rss > outcome.memory_cap_bytes:
                outcome.killed_for = "memory"
                _kill(outcome, pid)
                return


def _drain(outcome: StageRun, events: _Events, pending: bytes, progress: ProgressSink | None) -> None:
    """Events written just before the runner ended."""
    while True:
        data, closed = events.read(0)
        if not data or closed:
            break
        pending += data
    for line in pending.split(b"\n"):
        outcome.take(line, progress)


def _wait_group_gone(pgid: int, procs: dict[int, float] | None = None, wait_s: float = 3.0) -> None:
    """Killed processes take a moment to go; orphans are reaped by init, not by us (a zombie is gone:
    `group_alive`). On Windows there are no groups: the tracked descendants are what is waited for."""
    end = time.monotonic() + wait_s
    while (group_alive(pgid) or (procs and _tracked_alive(procs))) and time.monotonic() < end:
        kill_group(pgid)
        if procs:
            _kill_tracked(procs)
        time.sleep(0.02)


def _clean_shm(before: set[str], pids: set[int], semaphores: set[int] | frozenset[int] = frozenset()) -> list[str]:
    """Remove torch segments that processes of the killed group created and left, and the /dev/shm files
    (named semaphores, shared memory segments; by inode) that appeared during the stage and that its
    processes had mapped."""
    removed = []
    for name in sorted(_shm_names() - before):
        match = _SHM_NAME.match(name)
        if (match and int(match.group(1)) in pids) or shm_inode(name) in semaphores:
            try:
                os.unlink(os.path.join(SHM_DIR, name))
                removed.append(name)
            except OSError:
                pass
    return removed
