"""What every part of the runner shares: the event stream, the watchdog, the budget, the dataset under test.

Part of the standalone runner (see loader_runner.py): the standard library
only at import time, never envdoctor.
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Protocol

import loader_protocol  # the parts are found through the runner's own folder on sys.path


def _number(value: object, default: float = 0.0) -> float:
    """A number from the plan (JSON envdoctor wrote): ints and floats as they are, text parsed."""
    return float(value) if isinstance(value, (int, float, str)) and value != "" else default


class Tracked(Protocol):
    """The dataset wrapper that records which index each worker slot is fetching (loader_workloads)."""

    def in_progress(self) -> dict[int, int]: ...
    def oldest_fetch(self) -> tuple[int, float] | None: ...
    def failures(self) -> dict[int, int]: ...
    def slot_of_pid(self, pid: int) -> int | None: ...
    def reset(self) -> None: ...


class Events:
    """Writes events as JSON lines to a file descriptor: a pipe to envdoctor, or (Windows, a spawned
    runner) a file envdoctor tails, opened by the name the plan gives."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.lock = threading.Lock()

    @classmethod
    def for_plan(cls, plan: dict[str, object]) -> Events:
        path = plan.get("event_path")
        if path:
            # Binary: Windows would otherwise write each newline as CRLF.
            return cls(os.open(str(path), os.O_WRONLY | os.O_APPEND | getattr(os, "O_BINARY", 0)))
        return cls(int(_number(plan["event_fd"], -1)))

    def emit(self, ev: str, **fields: object) -> None:
        data = loader_protocol.encode(ev, fields)
        with self.lock:
            try:
                while data:
                    written = os.write(self.fd, data)
                    data = data[written:]
            except OSError:
                pass  # envdoctor has gone; nothing left to tell

    def phase(self, name: str, limit_s: float, **fields: object) -> None:
        self.emit(loader_protocol.PHASE, name=name, limit_s=round(limit_s, 3), **fields)

    def result(self, key: str, value: object) -> None:
        self.emit(loader_protocol.RESULT, key=key, value=value)

    def skip(self, what: str, reason: str) -> None:
        self.result("skip", {"what": what, "reason": reason})


def release_multiprocessing_files() -> None:
    """Run the cleanups multiprocessing leaves to finalizers, before this process ends without running them.

    Under spawn and forkserver every DataLoader queue holds named semaphores
    (/dev/shm/sem.mp-*) that multiprocessing unlinks only when the objects are
    collected or the interpreter exits normally; forkserver (and a Manager)
    listens on a socket in a temporary folder (pymp-*) that it removes only at
    a normal exit. The runner ends with os._exit, so it runs both cleanups
    itself. Unlinking a name leaves the semaphores working for processes that
    still use them. A finalizer skips, by itself, what the process this one was
    forked from made (preflight's fork of a training process: its semaphores and
    its folder are its own).
    """
    from multiprocessing import synchronize, util

    cleanups = {getattr(synchronize.SemLock, "_cleanup", None), getattr(util, "_remove_temp_dir", None)} - {None}
    registry = getattr(util, "_finalizer_registry", {})
    for finalizer in list(registry.values()):
        if getattr(finalizer, "_callback", None) in cleanups:
            try:
                finalizer()
            except Exception:
                pass


def announce_tempdir(events: Events) -> None:
    """Make multiprocessing's temporary folder now and name it to envdoctor, which removes it if this
    runner is killed (then no cleanup of its own runs). Not when the process already has one: a training
    process that preflight forked may use multiprocessing, and its folder is its own."""
    from multiprocessing import process, util

    config = getattr(process.current_process(), "_config", None)
    if isinstance(config, dict) and config.get("tempdir") is None:
        try:
            events.emit(loader_protocol.TEMPDIR, path=util.get_temp_dir())
        except OSError:
            pass  # no writable temporary folder: multiprocessing will say so itself if it needs one


class Watchdog:
    """Ends the runner when a phase overstays, saying which indices were in flight; and when the
    process that started it is gone (envdoctor killed outright), so no worker outlives it."""

    def __init__(self, events: Events, describe: Callable[[str], dict[str, object]]) -> None:
        self.events = events
        self.describe = describe
        self.deadline: float | None = None
        self.what = ""
        #: Set for a check that measures what the loader feeds (DL007/DL008): its label in the skipped list.
        self.check: str | None = None
        self.parent = os.getppid()
        self.cond = threading.Condition()
        thread = threading.Thread(target=self._watch, name="envdoctor-watchdog", daemon=True)
        thread.start()

    def arm(self, limit_s: float, what: str, check: str | None = None) -> None:
        with self.cond:
            self.deadline = time.monotonic() + max(0.1, limit_s)
            self.what = what
            self.check = check
            self.cond.notify()

    def disarm(self) -> None:
        with self.cond:
            self.deadline = None
            self.cond.notify()

    def _orphaned(self) -> bool:
        return os.getppid() != self.parent

    def _watch(self) -> None:
        while True:
            with self.cond:
                if self._orphaned():
                    break
                if self.deadline is None or self.deadline > time.monotonic():
                    left = 0.5 if self.deadline is None else self.deadline - time.monotonic()
                    self.cond.wait(min(0.5, max(0.01, left)))
                    continue
                what, check = self.what, self.check
            if check is not None:
                # The sweep already drew every sample it timed under the same watch; a data check that
                # overstays (workers slow to start under spawn on a busy machine) ran out of budget: a
                # skip, never a hang finding that would stop the training run.
                self.events.skip(check, f"{what} did not finish within the budget that was left")
                end_now(reason="budget", events=self.events)
            self.events.emit("failure", value=self.describe(what))
            end_now(reason="watchdog", events=self.events)
        end_now()  # orphaned: nobody reads the events any more, and no worker may outlive envdoctor


def end_now(reason: str | None = None, events: Events | None = None) -> None:
    """End the runner at once, its workers with it (they are its children: fork, spawn and forkserver)."""
    try:
        release_multiprocessing_files()
    except Exception:
        pass  # platforms without named semaphores; the exit below must happen regardless
    try:
        import multiprocessing

        for child in multiprocessing.active_children():
            child.kill()
    except Exception:
        pass
    if events is not None:
        events.emit("done", reason=reason)
    os._exit(0)


@dataclass
class Session:
    """The runner's shared state: the plan, the budget, and the dataset under test once it is built."""

    plan: dict[str, object]
    events: Events
    deadline: float = 0.0
    watchdog: Watchdog = field(init=False)
    # Set by the setup (loader_setup.Setup.build):
    torch: ModuleType | None = None
    DataLoader: Callable[..., Iterable[object]] | None = None
    dataset: object = None
    tracked: Tracked | None = None
    iterable: bool = False
    kwargs: dict[str, object] = field(default_factory=dict)
    user_kwargs: dict[str, object] = field(default_factory=dict)
    current: dict[str, object] = field(default_factory=dict)
    start_method: str = "fork"
    length: int | None = None
    batch_size: int = 32
    auto_collation: bool = True
    cap: int = 8
    import_s: float = 0.0
    # Set as the test goes:
    per_sample_s: float = 0.0
    runs: list[dict[str, object]] = field(default_factory=list)
    workers_ok: bool = True
    failure_workers: int | None = None
    #: The dataset's attributes as built (loader_hazards.built_state), put back before workers start.
    built: list[tuple[object, dict[str, object]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.deadline = time.monotonic() + _number(self.plan["budget_left_s"])
        self.watchdog = Watchdog(self.events, self.describe_stuck)

    @property
    def usable(self) -> int:
        return int(_number(self.plan.get("usable_cpus"), 1) or 1)

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def guarded(self, limit_s: float, what: str, phase: str, check: str | None = None, **fields: object) -> None:
        """Watch a phase; `check` names a data check whose overstay is a skip, not a hang."""
        self.events.phase(phase, limit_s, **fields)
        self.watchdog.arm(limit_s, what, check)

    def describe_stuck(self, what: str) -> dict[str, object]:
        busy = self.tracked.in_progress() if self.tracked is not None else {}
        index = next(iter(busy.values()), None)
        where = "main process" if 0 in busy or not busy else f"worker {min(busy) - 1}"
        return {"kind": "hung", "index": index, "num_workers": self.failure_workers,
                "where": "__getitem__" if busy else what,
                "message": (f"{what} did not finish in time" + (f"; index {index} was being fetched in the {where}"
                                                                if index is not None else "")),
                "exception": None, "signal": None, "in_progress": {str(k): v for k, v in busy.items()}}

    def as_built(self) -> None:
        """Before workers start: the dataset as it was built, not as reading samples in this process left
        it (a handle opened lazily by `__getitem__` here is released, not inherited by forked workers)."""
        if self.built:
            import loader_hazards

            loader_hazards.restore(self.built)

    def loader(self, nw: int, dataset: object, timeout: float, *, persistent: bool = False, pin: bool = False,
               kwargs: dict[str, object] | None = None) -> Iterable[object]:
        """A DataLoader with the user's settings and the ones under test."""
        options = dict(self.kwargs if kwargs is None else kwargs)
        options["num_workers"] = nw
        options["pin_memory"] = pin
        if nw > 0:
            self.as_built()
            options["prefetch_factor"] = self.current.get("prefetch_factor") or 2
            options["persistent_workers"] = persistent
            options["timeout"] = timeout
        else:
            options.pop("multiprocessing_context", None)
            options.pop("worker_init_fn", None)
        if self.DataLoader is None:
            raise RuntimeError("no DataLoader class yet: the setup sets it before any loader is made")
        return self.DataLoader(dataset, **options)
