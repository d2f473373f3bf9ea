"""Worker memory against the samples each worker produced (DL010), and OpenCV's threads inside the workers
(SYS007).

Part of the standalone runner (see loader_runner.py). One bounded run of the
user's dataset with its own sampler, batch size, worker_init_fn and start
method, and a collate_fn of ours that hands back only (worker pid, samples in
the batch, OpenCV's thread count there): nothing crosses between processes
but those three numbers, so the samples come as fast as `__getitem__` makes
them and what the workers' memory does is the dataset's doing. While it runs,
each worker's private memory (USS: Private_Clean + Private_Dirty of
/proc/PID/smaps_rollup, or of /proc/PID/smaps on older kernels; where there
is no /proc the measurement is skipped, saying so) is read against the samples that worker delivered. The slope after a
warm-up, fitted by least squares with its standard error, is the growth a
sample; the rule layer projects it to an epoch.
"""
from __future__ import annotations

import os
import threading
import time
from typing import Any

from loader_growth import read_uss, uss_source, worker_growth
from loader_hazards import opencv_threads
from loader_session import Session
from loader_timing import shutdown, worker_pids

#: Seconds the measurement runs at most once the first batch came; seconds between readings.
WINDOW_S = 1.0
READ_EVERY_S = 0.05
#: Workers measured when the user's own setting has none, and at most.
DEFAULT_WORKERS = 2
MAX_WORKERS = 4


class Tally:
    """The measurement's collate_fn: (worker pid, samples in the batch, OpenCV's threads in that worker)."""

    def __init__(self, batched: bool) -> None:
        self.batched = batched

    def __call__(self, batch: object) -> tuple[int, int, int | None]:
        count = len(batch) if self.batched and hasattr(batch, "__len__") else 1
        return os.getpid(), count, opencv_threads()


class _Reader:
    """Reads each worker's USS every READ_EVERY_S in a thread of its own, against the samples the worker had
    delivered: a reading walks the worker's page tables (milliseconds for a large heap), and the main thread
    must keep taking batches meanwhile or the workers stall on a full queue."""

    def __init__(self, pids: list[int], delivered: dict[int, int]) -> None:
        self.pids = pids
        self.delivered = delivered
        self.readings: dict[int, list[tuple[int, int]]] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="envdoctor-memory", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            for pid in self.pids:
                before = self.delivered.get(pid, 0)
                uss = read_uss(pid)
                after = self.delivered.get(pid, 0)
                if uss is not None:
                    self.readings.setdefault(pid, []).append(((before + after) // 2, uss))
            self.stop.wait(READ_EVERY_S)

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(timeout=1.0)


def _workers(s: Session) -> int:
    current = int(s.current.get("num_workers") or 0)
    return max(1, min(current if current > 0 else DEFAULT_WORKERS, MAX_WORKERS, s.cap))


def _options(s: Session, nw: int, timeout: float) -> dict[str, Any]:
    options: dict[str, Any] = {"num_workers": nw, "collate_fn": Tally(s.auto_collation), "timeout": timeout,
                               "prefetch_factor": 2}
    for key in ("batch_size", "shuffle", "sampler", "batch_sampler", "drop_last", "generator",
                "worker_init_fn", "multiprocessing_context"):
        if key in s.kwargs and s.kwargs[key] is not None:
            options[key] = s.kwargs[key]
    if options.get("batch_sampler") is not None:
        for key in ("batch_size", "shuffle", "sampler", "drop_last"):
            options.pop(key, None)
    return options


#: Seconds forked workers may take to deliver their first batch.
STARTUP_ALLOWANCE_S = 1.0


def budget_needed(s: Session) -> float:
    """Seconds the measurement needs (0 when it will not run): what the sweep keeps back for it.

    Forked workers only: under spawn and forkserver each worker unpickles its own copy of the dataset, so
    reading it copies nothing, and starting workers that import torch again would cost the sweep seconds.
    """
    if s.iterable or not s.length or s.start_method != "fork":
        return 0.0
    return STARTUP_ALLOWANCE_S + WINDOW_S + 0.5


def growth(s: Session) -> None:
    """DL010's measurement (result `memory`) and SYS007's worker side (result `opencv_workers`)."""
    if s.iterable or not s.workers_ok or not s.length:
        s.events.skip("worker memory growth (DL010)", "the dataset has no length" if s.workers_ok
                      else "workers cannot start")
        return
    if s.start_method != "fork":
        s.events.skip("worker memory growth (DL010)", f"under {s.start_method} each worker unpickles its own "
                      "copy of the dataset: reading it copies nothing (measured under fork only)")
        return
    if read_uss(os.getpid()) is None:
        s.events.skip("worker memory growth (DL010)", "this platform gives no per-process private memory")
        return
    nw = _workers(s)
    need = budget_needed(s)
    if s.left() < need:
        s.events.skip("worker memory growth (DL010)", f"not enough of the budget left ({s.left():.1f} s)")
        return
    s.guarded(max(1.0, s.left() - 0.3), "reading worker memory against samples", "memory",
              check="worker memory growth (DL010)", num_workers=nw)
    delivered: dict[int, int] = {}
    threads: dict[int, int | None] = {}
    iterator = None
    reader: _Reader | None = None
    start = time.perf_counter()
    epoch_done = False
    try:
        s.as_built()
        loader = s.DataLoader(s.dataset, **_options(s, nw, timeout=need))
        iterator = iter(loader)
        end = None
        while True:
            try:
                pid, count, cv2_threads = next(iterator)
            except StopIteration:
                epoch_done = True
                break
            delivered[pid] = delivered.get(pid, 0) + count
            threads[pid] = cv2_threads
            if reader is None:
                reader = _Reader(worker_pids(iterator), delivered)
                end = time.perf_counter() + WINDOW_S
            elif end is not None and time.perf_counter() >= end:
                break
    except Exception as exc:
        s.events.skip("worker memory growth (DL010)", f"reading with {nw} workers raised {type(exc).__name__}: "
                      f"{str(exc)[:200]}")
        return
    finally:
        if reader is not None:
            reader.finish()
        shutdown(iterator)
        s.watchdog.disarm()
    readings = reader.readings if reader is not None else {}
    s.events.result("memory", summarise(readings, nw, time.perf_counter() - start, epoch_done, s))
    seen = [t for t in threads.values() if t is not None]
    if seen:
        s.events.result("opencv_workers", {"num_workers": nw, "threads": max(seen)})


def summarise(readings: dict[int, list[tuple[int, int]]], nw: int, seconds: float, epoch_done: bool,
              s: Session) -> dict[str, Any]:
    workers = [worker_growth(points) for points in readings.values() if points]
    sampler = s.kwargs.get("sampler")
    shuffled = bool(s.kwargs.get("shuffle")) or type(sampler).__name__ == "RandomSampler"
    return {"num_workers": nw, "seconds": round(seconds, 3), "epoch_done": epoch_done, "shuffled": shuffled,
            "start_method": s.start_method, "workers": workers, "source": uss_source()}
