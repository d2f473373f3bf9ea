"""One timed run of the DataLoader: first-batch latency, steady-state samples/s, where the time went.

Part of the standalone runner (see loader_runner.py). What to time is a
`RunSpec` (the worker count, the loader's options, the estimates that size
its time limits) and how long is a `Span`: `SteadySlice` (the sweep: workers
persist across epochs, a small dataset runs epoch after epoch into one steady
state) or `WholeEpochs` (the persistent_workers comparison: each epoch timed
on its own). A run that ends early raises a `DatasetFailure` or a `RunCut`
(loader_outcomes).
"""
from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from loader_outcomes import BudgetEnd, DatasetFailure, FactoryProblem, SlowStart, read_failure, timed_out
from loader_session import Session
from loader_timing import (
    CpuWindow,
    abandon_workers,
    samples_in,
    set_timeout,
    shutdown,
    steady_state,
    worker_pids,
)


@dataclass(frozen=True)
class RunSpec:
    """What one run times: the worker count, the loader's options, and the estimates for its limits."""

    num_workers: int
    #: Seconds a worker start-up is expected to take (sizes the first batch's wait).
    startup_s: float = 0.0
    #: Seconds one batch is expected to take (sizes the hang limit).
    batch_s: float = 0.0
    pin_memory: bool = False
    persistent: bool = False
    #: Another dataset than the session's (a Subset for the epoch comparison).
    dataset: object = None
    kwargs: dict[str, object] | None = None
    label: str | None = None


@dataclass(frozen=True)
class SteadySlice:
    """Time a steady-state slice of this many seconds (three rounds of every worker at least)."""

    seconds: float

    def limit_s(self, spec: RunSpec, timeout: float, first_timeout: float) -> float:
        return self.seconds + timeout + first_timeout + 2.0


@dataclass(frozen=True)
class WholeEpochs:
    """Time this many whole epochs, each on its own."""

    count: int
    epoch_s: float = 0.0

    def limit_s(self, spec: RunSpec, timeout: float, first_timeout: float) -> float:
        return self.count * (spec.startup_s + self.epoch_s) + first_timeout + 2.0


@dataclass
class _Stamps:
    """Arrival times of batches, and where each epoch began."""

    stamps: list[tuple[float, int]] = field(default_factory=list)
    epoch_marks: list[tuple[float, int]] = field(default_factory=list)
    first_batch: float | None = None
    window: CpuWindow | None = None

    def epochs(self, separate: bool) -> list[list[tuple[float, int]]]:
        if not separate:
            return [self.stamps]
        bounds = [m[1] for m in self.epoch_marks] + [len(self.stamps)]
        return [self.stamps[bounds[k]:bounds[k + 1]] for k in range(len(self.epoch_marks))]


# complexity: 27 — one loop over epochs and their batches, whose stop conditions (the epoch's end, a first batch
# that is measure enough, the steady slice, the hang limit, the epochs asked for) and timeouts share its state.
def measure(s: Session, spec: RunSpec, span: SteadySlice | WholeEpochs) -> dict[str, object]:
    """One timed run (see the module's docstring); the run's record, as the `run` result carries it."""
    nw = spec.num_workers
    # A batch that does not come within `timeout` once the workers deliver is a hang. The first
    # batch of an epoch may take the rest of the budget: starting workers (under spawn each one
    # imports torch and unpickles the dataset) is slow, not stuck, and estimates of it are rough.
    hang_s = max(3.0, 10 * spec.batch_s + 2 * spec.startup_s)
    fetch_hang_s = max(3.0, 10 * spec.batch_s)  # one fetch's own run, which no start-up is part of
    timeout = round(min(hang_s, max(1.0, s.left() - 0.5)), 2)
    first_timeout = round(max(timeout, s.left() - 0.5), 2)
    steady = isinstance(span, SteadySlice)
    persistent = nw > 0 if steady else spec.persistent
    loader = _guarded_loader(s, spec, span, timeout, first_timeout, persistent)
    record = _Stamps()
    if nw == 0:
        # Nothing starts without workers: the processes' account covers the first batch too (which may be
        # all a slow num_workers=0 run times).
        record.window = CpuWindow([])
    warmup = max(1, nw) - 1
    start = time.perf_counter()
    hard_end = math.inf  # set when the first batch arrives: the steady slice, then the hang limit
    iterator = None
    epoch_started = False
    waiting_up_to = first_timeout
    try:
        done = False
        while not done:
            record.epoch_marks.append((time.perf_counter(), len(record.stamps)))
            iterator = iter(loader)
            set_timeout(iterator, first_timeout)
            waiting_up_to = first_timeout
            epoch_started = False
            finished_epoch = False
            while True:
                try:
                    batch = next(iterator)
                except StopIteration:
                    finished_epoch = True
                    break
                now = time.perf_counter()
                record.stamps.append((now, samples_in(batch, s.torch, s.batch_size) if s.auto_collation else 1))
                if not epoch_started:
                    epoch_started = True
                    # Never past the budget: a wait cut short by it is told from a hang below.
                    waiting_up_to = round(min(timeout, max(0.5, s.left() - 0.5)), 2)
                    set_timeout(iterator, waiting_up_to)
                if record.first_batch is None:
                    record.first_batch = now - start
                    if record.window is None:
                        record.window = CpuWindow(worker_pids(iterator))
                    if isinstance(span, SteadySlice):
                        hard_end = now + span.seconds + timeout
                        if nw == 0 and record.first_batch >= 2 * span.seconds:
                            # Without workers nothing starts: the first batch is a steady one, and one that
                            # takes twice the slice is measure enough (more would spend the worker counts').
                            done = True
                            break
                # Three rounds of every worker's batch past the warm-up, and the slice's time; or, for batches
                # so slow (torch's threads contending with other load at num_workers=0) that those rounds
                # would eat the budget of the worker counts still to time, twice the slice and one round
                # (two batches of every worker; one batch past the first without workers).
                if isinstance(span, SteadySlice) and _slice_done(span, record, warmup, nw, now):
                    done = True
                    break
                if now > hard_end:
                    done = True
                    break
            if not finished_epoch:
                break
            if isinstance(span, WholeEpochs):
                done = len(record.epoch_marks) >= span.count
                if not done and not persistent:
                    shutdown(iterator)
            elif len(record.epoch_marks) >= 200 or time.perf_counter() > hard_end:
                done = True
        usage = record.window.close() if record.window is not None else {}
    except DatasetFailure:
        raise
    except Exception as exc:
        waited = time.perf_counter() - (record.stamps[-1][0] if record.stamps else start)
        failure = _failure(s, exc, nw, iterator, waited, waiting_up_to, (hang_s, fetch_hang_s), epoch_started, start)
        if isinstance(failure, SlowStart):
            abandon_workers(iterator)
        raise failure from None
    finally:
        s.watchdog.disarm()
    shutdown(iterator)
    return _run_record(spec, span, record, warmup, persistent, start, usage)


def _guarded_loader(s: Session, spec: RunSpec, span: SteadySlice | WholeEpochs, timeout: float, first_timeout: float,
                    persistent: bool) -> Iterable[object]:
    """Arm the watch for the run and build its DataLoader (FactoryProblem when the settings are refused)."""
    nw = spec.num_workers
    s.guarded(span.limit_s(spec, timeout, first_timeout), f"the run with num_workers={nw}", "run",
              num_workers=nw, slice_s=round(span.seconds if isinstance(span, SteadySlice) else 0.0, 3),
              label=spec.label)
    s.failure_workers = nw
    if s.tracked is not None:
        s.tracked.reset()
    data = _dataset_of(s, spec)
    try:
        return s.loader(nw, data, first_timeout, persistent=persistent, pin=spec.pin_memory, kwargs=spec.kwargs)
    except (TypeError, ValueError) as exc:
        s.watchdog.disarm()
        raise FactoryProblem(f"DataLoader rejects the settings it was given: {type(exc).__name__}: {exc}") from None


def _dataset_of(s: Session, spec: RunSpec) -> object:
    """What the run's loader reads: the spec's own dataset, else the tracked wrapper, else the user's."""
    if spec.dataset is not None:
        return spec.dataset
    return s.tracked if s.tracked is not None else s.dataset


def _slice_done(span: SteadySlice, record: _Stamps, warmup: int, nw: int, now: float) -> bool:
    """Whether the steady slice is measured: three rounds of every worker's batch past the warm-up and the slice's
    time, or twice the slice for batches so slow those rounds would eat the budget."""
    if len(record.stamps) <= warmup + (max(2, nw) if nw else 1):
        return False
    steady_s = now - record.stamps[warmup][0]
    return (len(record.stamps) > warmup + max(4, 3 * nw) and steady_s >= span.seconds) or steady_s >= 2 * span.seconds


def _failure(s: Session, exc: Exception, nw: int, iterator: object, waited: float, waiting_up_to: float,
             hang_limits: tuple[float, float], epoch_started: bool, start: float) -> Exception:
    """What a run that raised means: the budget's end (BudgetEnd), or what read_failure makes of it.
    `hang_limits`: the wait for a batch, and one fetch's own run, that make a hang."""
    hang_s, fetch_hang_s = hang_limits
    was_timeout = timed_out(exc, iterator, waited, waiting_up_to)
    if was_timeout and epoch_started and waited < hang_s - 0.05:
        return BudgetEnd(nw, waited)  # the budget ran out before a wait could become a hang
    return read_failure(exc, nw, iterator, s.tracked, length=s.length, start_method=s.start_method,
                        was_timeout=was_timeout, delivered=epoch_started, waited_s=time.perf_counter() - start,
                        hang_s=fetch_hang_s)


def _run_record(spec: RunSpec, span: SteadySlice | WholeEpochs, record: _Stamps, warmup: int, persistent: bool,
                start: float, usage: dict[str, object]) -> dict[str, object]:
    """The run's record from its stamps: the steady state, the first batch, and each epoch's times."""
    nw = spec.num_workers
    epochs = record.epochs(separate=isinstance(span, WholeEpochs))
    first = record.first_batch
    run: dict[str, object] = {
        "num_workers": nw, "first_batch_s": round(first, 4) if first is not None else None,
        **steady_state(epochs, warmup, max(1, nw)), "batches": len(record.stamps),
        "epochs": len(record.epoch_marks), "seconds": round(time.perf_counter() - start, 3), **usage}
    if run["samples_per_s"] is None and nw == 0 and first and record.stamps and isinstance(span, SteadySlice):
        run.update(samples_per_s=round(record.stamps[0][1] / first, 2), from_first_batch=True)
    if spec.pin_memory:
        run["pin_memory"] = True
    if isinstance(span, WholeEpochs):
        run["persistent_workers"] = persistent
        run["epoch_s"] = [round((e[-1][0] if e else m[0]) - m[0], 4) for e, m in zip(epochs, record.epoch_marks)]
        run["epoch_first_batch_s"] = [round(e[0][0] - m[0], 4) if e else None
                                      for e, m in zip(epochs, record.epoch_marks)]
    return run
