"""Running the user's own command under observation: `envdoctor run -- CMD`.

The command runs as it is: it inherits stdin, stdout and stderr, stays in
envdoctor's process group (so a terminal's Ctrl-C and job control reach it as
they would without envdoctor), and its exit status is handed back. What
envdoctor adds is its environment: the bootstrap folder
(`envdoctor/inside/loop_bootstrap/`) first on PYTHONPATH, where every Python
interpreter the command starts (torchrun's ranks, spawned workers) finds the
observer, and two variables naming the events folder and the plan. The
folder is a private temporary folder, removed with the run; nothing is
written into the environment or the project.

While it runs, a sampling thread reads the CPU time of the whole process
tree (psutil), the private memory (USS) of every DataLoader worker the
observer named (DL010, against the observer's `progress` counts of samples
yielded) and, where NVML answers, each GPU's utilisation and memory;
the observer's window events say when each process's window started and
ended, so the samples inside it are the window's. Signals that are not the
terminal's (SIGTERM from CI, SIGHUP, SIGUSR1/2, a SIGINT sent by `kill`) are
forwarded to the command.

Nothing of the command is left behind when envdoctor ends it (`--stop`) or
is itself stopped (SIGTERM, SIGHUP, SIGINT, SIGQUIT): not its children, and
not a daemon that double-forked and left the tree. Every process of the
command carries a mark in its environment (`MARK_ENV`, set for the command,
inherited by every descendant, and put back by the bootstrap in any Python
process that lost it), and `_Tracker` finds the command's processes by it,
by the process tree seen while sampling, by the Python processes that loaded
the bootstrap, and by the sessions and process groups they started; the
stop ends them all, SIGTERM then SIGKILL, and looks again until none is
left. On Linux envdoctor is also the command's subreaper (`prctl
PR_SET_CHILD_SUBREAPER`), so a daemon that double-forks is re-parented to
envdoctor, not to init, and stays in its tree whatever its environment. A
process that escapes all of these (a subreaper of its own, on another
platform a cleared environment) is beyond this; a cgroup is not used.
When the command ends by itself, what it chose to leave running is its own.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import psutil  # imported where used: only `envdoctor run` needs it

    from envdoctor.process import SignalHandler

from envdoctor.inside.loader_growth import read_uss
from envdoctor.process import end_processes, handle_signals

BOOTSTRAP_DIR = Path(__file__).resolve().parent.parent / "inside" / "loop_bootstrap"
EVENTS_ENV = "ENVDOCTOR_LOOP_EVENTS"
PLAN_ENV = "ENVDOCTOR_LOOP_PLAN"
#: The mark every process of the command carries in its environment (the events folder: unique to the run).
MARK_ENV = "ENVDOCTOR_RUN_MARK"
#: Rounds of looking for the command's processes and ending them (a daemon may fork while it is ended).
END_ROUNDS = 4
#: Seconds between samples of the process tree's CPU time and the GPUs.
SAMPLE_EVERY_S = 0.5
#: Seconds the command gets to end after SIGTERM (--stop, or leftovers) before SIGKILL.
STOP_GRACE_S = 5.0
#: Signals handed on to the command as they arrive.
FORWARDED = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGQUIT")
                  if hasattr(signal, name))


#: Readings kept per series (a worker's memory, a loader's progress) however long the run: evenly thinned.
SERIES_LIMIT = 2048


class Series(list[tuple[float, int]]):
    """(time, value) readings over a run of any length: when LIMIT are held every other one is dropped and
    later ones are taken at the doubled stride, so what is kept stays evenly spread over the whole run."""

    def __init__(self) -> None:
        super().__init__()
        self.stride = 1
        self.offered = 0

    def add(self, when: float, value: int) -> None:
        if self.offered % self.stride == 0:
            self.append((when, value))
            if len(self) >= SERIES_LIMIT:
                del self[1::2]
                self.stride *= 2
        self.offered += 1


@dataclass
class CommandRun:
    """What one observed run of the command produced."""

    argv: tuple[str, ...]
    returncode: int | None = None
    start_error: str | None = None
    stopped: bool = False
    wall_s: float = 0.0
    events: list[dict[str, Any]] = field(default_factory=list)
    loaded: list[dict[str, Any]] = field(default_factory=list)
    cpu_samples: list[tuple[float, dict[tuple[int, float], float]]] = field(default_factory=list)
    gpu_samples: list[tuple[float, list[dict[str, Any]]]] = field(default_factory=list)
    #: Each named DataLoader worker's private memory (USS bytes) over time, by pid.
    worker_uss: dict[int, Series] = field(default_factory=dict)
    #: Each observed loader's samples yielded so far over time, by (process, loader).
    progress: dict[tuple[int, int], Series] = field(default_factory=dict)
    #: The whole machine's CPU seconds (busy, all) at each sample: how busy the neighbours keep it.
    machine_samples: list[tuple[float, float, float]] = field(default_factory=list)
    gpu_error: str | None = None
    usable_cpus: int = 1
    #: The signal that stopped envdoctor itself (forwarded to the command), if one did.
    stopped_by: int | None = None
    #: Processes of the command still running when it was ended, ended with it (daemons included).
    ended_leftovers: int = 0
    #: --tune: the observer's hand-over (the pickled loader, moved out of the events folder; the caller
    #: removes it), or None.
    tune: dict[str, Any] | None = None

    def take(self, events: Sequence[dict[str, Any]]) -> None:
        """File newly read events: `progress` counts into their series (a long run writes many), the rest kept."""
        for event in events:
            if event.get("event") == "progress":
                with contextlib.suppress(TypeError, ValueError):
                    key = (int(event.get("pid") or 0), int(event.get("loader") or 0))
                    self.progress.setdefault(key, Series()).add(float(event["time"]), int(event["samples"]))
            else:
                self.events.append(event)


def child_environment(environ: Mapping[str, str], events_dir: str, plan: Mapping[str, Any]) -> dict[str, str]:
    """The command's environment: the caller's, with the bootstrap first on PYTHONPATH."""
    env = dict(environ)
    existing = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(BOOTSTRAP_DIR) + (os.pathsep + existing if existing else "")
    env[EVENTS_ENV] = events_dir
    env[PLAN_ENV] = json.dumps(dict(plan))
    env[MARK_ENV] = events_dir
    return env


def read_events(folder: str, offsets: dict[str, int] | None = None) -> list[dict[str, Any]]:
    """The events written to `folder` since `offsets` (updated in place), in arrival order per process."""
    offsets = offsets if offsets is not None else {}
    events: list[dict[str, Any]] = []
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return events
    for name in names:
        if not (name.startswith("events-") and name.endswith(".jsonl")):
            continue
        path = os.path.join(folder, name)
        try:
            with open(path, "rb") as handle:
                handle.seek(offsets.get(name, 0))
                data = handle.read()
        except OSError:
            continue
        complete = data[: data.rfind(b"\n") + 1]
        offsets[name] = offsets.get(name, 0) + len(complete)
        for line in complete.splitlines():
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                if isinstance(event, dict):
                    events.append(event)
    return events


def _read_loaded(folder: str) -> list[dict[str, Any]]:
    rows = []
    with contextlib.suppress(OSError):
        for line in Path(folder, "loaded.jsonl").read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                rows.append(json.loads(line))
    return rows


class _Sampler(threading.Thread):
    """Samples the tree's CPU time and the GPUs until told to stop; notes every descendant seen."""

    def __init__(self, root_pid: int, run: CommandRun) -> None:
        super().__init__(name="envdoctor-run-sampler", daemon=True)
        self.root_pid = root_pid
        self.run_record = run
        self.halt = threading.Event()
        self.seen: dict[int, psutil.Process] = {}
        self._nvml: ModuleType | None = None
        self._named = 0  # events already searched for the workers the observer named
        #: The workers the observer named: pid -> its start time once first read (None before).
        self.workers: dict[int, float | None] = {}

    def tree(self) -> list[psutil.Process]:
        import psutil

        try:
            root = psutil.Process(self.root_pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return list(self.seen.values())
        for proc in procs:
            self.seen.setdefault(proc.pid, proc)
        return procs

    def sample(self) -> None:
        import psutil

        now = time.time()
        cpu: dict[tuple[int, float], float] = {}
        _reap_orphans(self.root_pid)
        tree = self.tree()
        for proc in tree:
            with contextlib.suppress(psutil.Error):
                with proc.oneshot():
                    times = proc.cpu_times()
                    cpu[(proc.pid, proc.create_time())] = times.user + times.system
        self.run_record.cpu_samples.append((now, cpu))
        self.worker_memory({pid: started for pid, started in cpu})
        with contextlib.suppress(Exception):
            machine = psutil.cpu_times()
            idle = machine.idle + getattr(machine, "iowait", 0.0)
            total = sum(machine)
            self.run_record.machine_samples.append((now, total - idle, total))
        if self._nvml is not None:
            self.run_record.gpu_samples.append((now, _gpu_sample(self._nvml)))

    def worker_memory(self, alive: Mapping[int, float]) -> None:
        """Each DataLoader worker the observer named, in the command's tree as this sample saw it (`alive`: pid ->
        start time) and the same process as when first read (not a reused pid): its USS.

        A worker missing from one sample is skipped, not forgotten: the tree is listed at the sample's start,
        so workers named by an event read since (forked just after the listing) are missing from it once, and a
        worker forgotten then would go unmeasured for the whole run (DL010 quiet on real growth).
        """
        events = self.run_record.events
        while self._named < len(events):
            event = events[self._named]
            self._named += 1
            if event.get("event") == "workers":
                for pid in event.get("pids") or []:
                    if isinstance(pid, int):
                        self.workers.setdefault(pid, None)
        for pid, started in sorted(self.workers.items()):
            if pid not in alive or started not in (None, alive[pid]):
                continue
            # Timed as read, not as the sample began: listing a busy tree can take a good part of a second,
            # and each reading is set against the samples the loader had yielded by then.
            when = time.time()
            uss = read_uss(pid)
            if uss is not None:
                self.workers[pid] = alive[pid]
                self.run_record.worker_uss.setdefault(pid, Series()).add(when, uss)

    def run(self) -> None:
        self._nvml = _nvml_or_none(self.run_record)
        try:
            while not self.halt.wait(SAMPLE_EVERY_S):
                self.sample()
        finally:
            if self._nvml is not None:
                with contextlib.suppress(Exception):
                    self._nvml.nvmlShutdown()


def _nvml_or_none(run: CommandRun) -> ModuleType | None:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as exc:  # no driver, no library: CUDA is reported as null
        run.gpu_error = f"{type(exc).__name__}: {exc}"
        return None
    return pynvml


def _gpu_sample(pynvml: ModuleType) -> list[dict[str, Any]]:
    rows = []
    try:
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            row: dict[str, Any] = {"index": index}
            with contextlib.suppress(pynvml.NVMLError):
                row["name"] = str(pynvml.nvmlDeviceGetName(handle))
            with contextlib.suppress(pynvml.NVMLError):
                row["util"] = float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
            with contextlib.suppress(pynvml.NVMLError):
                memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
                row["memory_used_bytes"], row["memory_total_bytes"] = int(memory.used), int(memory.total)
            rows.append(row)
    except pynvml.NVMLError:
        pass
    return rows


#: Signals that stop envdoctor, and so the whole command with it (SIGUSR1/2 are only passed on).
STOPPING = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP", "SIGINT", "SIGQUIT") if hasattr(signal, name))


@contextlib.contextmanager
def _forwarding(run: CommandRun | None = None) -> Iterator[Callable[[subprocess.Popen[bytes]], None]]:
    """Hand signals on to the command while it runs; put the old handlers back after.

    Entered before the command starts, so that a signal in between is not lost (it would end envdoctor
    and leave the command running): it waits, and reaches the command once the yielded `started(proc)`
    is called. A signal that stops envdoctor is noted in `run.stopped_by`: once the command has ended,
    whatever it left running is ended too.
    """
    target: list[subprocess.Popen[bytes]] = []
    pending: list[int] = []

    def send(signum: int) -> None:
        if not target:
            pending.append(signum)
            return
        with contextlib.suppress(ProcessLookupError, OSError):
            target[0].send_signal(signum)

    def forward(signum: int, frame: FrameType | None) -> None:
        if run is not None and signum in STOPPING:
            run.stopped_by = signum
        send(signum)

    def interrupt(signum: int, frame: FrameType | None) -> None:
        # From a terminal, Ctrl-C already reached the command (it shares our process group);
        # a SIGINT sent to envdoctor alone (kill -INT) is passed on.
        if run is not None:
            run.stopped_by = signum
        if not _terminal_foreground():
            forward(signum, frame)

    def started(proc: subprocess.Popen[bytes]) -> None:
        target.append(proc)
        while pending:
            send(pending.pop(0))

    previous: dict[int, SignalHandler] = {}
    if threading.current_thread() is threading.main_thread():
        previous = {**handle_signals(forward, FORWARDED), **handle_signals(interrupt, (signal.SIGINT,))}
    try:
        yield started
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _terminal_foreground() -> bool:
    """Whether envdoctor (and so the command) is the foreground job of a terminal: Ctrl-C reaches both."""
    if sys.platform == "win32":
        return sys.stdin is not None and sys.stdin.isatty()  # a console's Ctrl-C reaches every process on it
    try:
        return os.tcgetpgrp(sys.stdin.fileno()) == os.getpgrp()
    except (OSError, ValueError, AttributeError):
        return False


def _end_tree(proc: subprocess.Popen[bytes], sampler: _Sampler, grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM to the command and every descendant, SIGKILL to what is still there after the grace."""
    end_processes([p for p in sampler.tree() if p.pid != os.getpid()], grace_s)


class _Tracker:
    """Finds every process of the command: the tree seen while sampling, the processes carrying the run's
    mark in their environment (re-parented daemons too), the Python processes that loaded the bootstrap,
    and every process in a session or process group one of those started."""

    def __init__(self, sampler: _Sampler, events_dir: str) -> None:
        self.sampler = sampler
        self.events_dir = events_dir

    def find(self) -> list[psutil.Process]:
        import psutil

        me = os.getpid()
        found: dict[int, psutil.Process] = {}
        with contextlib.suppress(psutil.Error):  # the daemons re-parented to envdoctor, its subreaper
            found.update((p.pid, p) for p in psutil.Process(me).children(recursive=True))
        for pid, proc in list(self.sampler.seen.items()):
            with contextlib.suppress(psutil.Error):
                if proc.is_running():
                    found[pid] = proc
        for proc in psutil.process_iter():
            with contextlib.suppress(psutil.Error):
                if proc.pid not in found and proc.environ().get(MARK_ENV) == self.events_dir:
                    found[proc.pid] = proc
        for row in _read_loaded(self.events_dir):
            with contextlib.suppress(psutil.Error, TypeError, ValueError):
                proc = psutil.Process(int(row["pid"]))
                if proc.create_time() <= float(row["time"]) + 1.0:  # the same process, not a reused pid
                    found.setdefault(proc.pid, proc)
        found.update(_in_their_sessions(found))
        found.pop(me, None)
        for ancestor in _ancestors():
            found.pop(ancestor, None)
        return list(found.values())


def become_subreaper(on: bool = True) -> bool | None:
    """Linux: orphans of the command are re-parented to envdoctor rather than init (so they stay findable).

    Returns whether this process was a subreaper before (None where that cannot be read or set), so the
    caller can put it back: a process that runs a command in-process (`preflight`, a test, an agent's
    server) must not go on adopting orphans it never reaps, which would leave them zombies for good."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    pr_set_child_subreaper, pr_get_child_subreaper = 36, 37
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        was = ctypes.c_int(0)
        if int(libc.prctl(pr_get_child_subreaper, ctypes.byref(was), 0, 0, 0)) != 0:
            return None
        if int(libc.prctl(pr_set_child_subreaper, 1 if on else 0, 0, 0, 0)) != 0:
            return None
        return bool(was.value)
    except (OSError, AttributeError):
        return None


def _reap_orphans(command_pid: int) -> None:
    """Reap the orphans of the command that died after being re-parented to envdoctor (its subreaper), so
    that none stays a zombie while the run goes on; never the command itself (its status is Popen's)."""
    if not sys.platform.startswith("linux"):
        return
    import psutil

    with contextlib.suppress(psutil.Error):
        for child in psutil.Process().children():
            with contextlib.suppress(psutil.Error, ChildProcessError, OSError):
                if child.pid != command_pid and child.status() == psutil.STATUS_ZOMBIE:
                    os.waitpid(child.pid, os.WNOHANG)


def _ancestors() -> set[int]:
    import psutil

    with contextlib.suppress(psutil.Error):
        return {p.pid for p in psutil.Process().parents()}
    return set()


def _in_their_sessions(found: Mapping[int, psutil.Process]) -> dict[int, psutil.Process]:
    """The processes in the sessions and process groups the command's processes started (not envdoctor's
    own: a pipeline's other commands share that one)."""
    if sys.platform == "win32" or not found:
        return {}
    import psutil

    own = {os.getsid(0)}, {os.getpgrp()}
    sessions, groups = set(), set()
    for pid in found:
        with contextlib.suppress(OSError):
            sessions.add(os.getsid(pid))
            groups.add(os.getpgid(pid))
    sessions -= own[0]
    groups -= own[1]
    if not sessions and not groups:
        return {}
    more: dict[int, psutil.Process] = {}
    for proc in psutil.process_iter():
        with contextlib.suppress(OSError, psutil.Error):
            if proc.pid not in found and (os.getsid(proc.pid) in sessions or os.getpgid(proc.pid) in groups):
                more[proc.pid] = proc
    return more


def end_everything(tracker: _Tracker, grace_s: float = STOP_GRACE_S) -> int:
    """End every process of the command, SIGTERM then SIGKILL, looking again until none is left; how many."""
    ended: set[int] = set()
    for _ in range(END_ROUNDS):
        procs = tracker.find()
        if not procs:
            break
        ended.update(p.pid for p in procs)
        end_processes(procs, grace_s)
    return len(ended)


def _take_tune(events: Sequence[Mapping[str, Any]], events_dir: str) -> dict[str, Any] | None:
    """The observer's --tune hand-over, its pickle moved beside the events folder before that is removed."""
    tune = next((dict(e) for e in events if e.get("event") == "tune"), None)
    if tune is None or not tune.get("path"):
        return tune
    source = Path(str(tune["path"]))
    if source.parent.resolve() != Path(events_dir).resolve() or not source.is_file():
        tune.update(path=None, error="the loader's pickle is missing")
        return tune
    fd, kept = tempfile.mkstemp(prefix="envdoctor-tune-", suffix=".pkl")
    os.close(fd)
    os.replace(source, kept)
    tune["path"] = kept
    return tune


def window_closed(events: Sequence[Mapping[str, Any]]) -> bool:
    """Every process that iterated a DataLoader has closed a window on one of them."""
    iterating = {e.get("pid") for e in events if e.get("event") == "loader"}
    closed = {e.get("pid") for e in events if e.get("event") == "window"}
    return bool(iterating) and iterating <= closed


def _observe(proc: subprocess.Popen[bytes], run: CommandRun, sampler: _Sampler, events_dir: str,
             offsets: dict[str, int], stop: bool, on_window: Callable[[CommandRun], None] | None) -> None:
    """Read the events until the command ends (with `stop`: end it once its window closed)."""
    announced = False
    while True:
        try:
            proc.wait(timeout=0.25)
            break
        except subprocess.TimeoutExpired:
            pass
        run.take(read_events(events_dir, offsets))
        if not announced and window_closed(run.events):
            announced = True
            run.loaded = _read_loaded(events_dir)
            if stop:
                run.stopped = True
                _end_tree(proc, sampler)
                break
            if on_window is not None:
                on_window(run)
    run.returncode = proc.wait()


def run_command(argv: Sequence[str], plan: Mapping[str, Any], *, stop: bool = False,
                environ: Mapping[str, str] | None = None, usable_cpus: int = 1,
                on_window: Callable[[CommandRun], None] | None = None) -> CommandRun:
    """Run `argv` with the observer; return when it has ended (or, with `stop`, once its window closed)."""
    run = CommandRun(argv=tuple(argv), usable_cpus=usable_cpus)
    events_dir = tempfile.mkdtemp(prefix="envdoctor-run-")
    started = time.monotonic()
    was_subreaper: bool | None = None
    try:
        env = child_environment(os.environ if environ is None else environ, events_dir, plan)
        was_subreaper = become_subreaper()
        with _forwarding(run) as forward_to:
            try:
                proc = subprocess.Popen(list(argv), env=env)
            except OSError as exc:
                run.start_error = f"{argv[0]}: {exc.strerror or exc}"
                run.returncode = 127 if isinstance(exc, FileNotFoundError) else 126
                return run
            forward_to(proc)
            sampler = _Sampler(proc.pid, run)
            sampler.start()
            offsets: dict[str, int] = {}
            _observe(proc, run, sampler, events_dir, offsets, stop, on_window)
            if run.stopped or run.stopped_by is not None:  # still forwarding: a second signal is not lost
                run.ended_leftovers = end_everything(_Tracker(sampler, events_dir))
        sampler.halt.set()
        sampler.join(timeout=5)
        run.take(read_events(events_dir, offsets))
        run.loaded = _read_loaded(events_dir)
        run.tune = _take_tune(run.events, events_dir)
        return run
    finally:
        if was_subreaper is False:  # as it was: this process adopts no orphan after the run
            become_subreaper(on=False)
        run.wall_s = time.monotonic() - started
        shutil.rmtree(events_dir, ignore_errors=True)
