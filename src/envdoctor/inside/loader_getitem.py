"""`__getitem__` timed in the main process: per-sample cost, CPU against waiting, reads against decoding.

Part of the standalone runner (see loader_runner.py).
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from loader_outcomes import DatasetFailure, first_line, raised
from loader_session import Session
from loader_timing import batch_stats, schedstat


def index_stream(s: Session) -> Iterator[Any]:
    """Indices in the order the user's loader would ask for them (first epoch)."""
    from torch.utils.data import BatchSampler, SequentialSampler

    if s.kwargs.get("batch_sampler") is not None:
        batches = s.kwargs["batch_sampler"]
    else:
        sampler = s.kwargs.get("sampler") or SequentialSampler(range(s.length or 0))
        batches = BatchSampler(sampler, s.batch_size, False)
    for batch in batches:
        yield from batch

def probe(s: Session) -> None:
    """Time `__getitem__` in this process (num_workers=0), then collate one batch the user's way."""
    torch = s.torch
    from torch.utils.data import default_collate

    budget = max(0.3, min(1.0, 0.06 * float(s.plan["budget_s"])))
    limit = max(3.0, min(0.35 * float(s.plan["budget_s"]), s.left() - 1.0))
    s.guarded(limit, "fetching samples in the main process", "getitem", limit_per_sample=True)
    s.failure_workers = 0
    samples: list[Any] = []
    times, cpu, read_s, decode_s = [], [], [], []
    blocked = 0.0
    split = hasattr(s.dataset, "read_sample") and hasattr(s.dataset, "decode_sample")
    start = time.perf_counter()
    stream = iter(s.dataset) if s.iterable else index_stream(s)
    count = 0
    while True:
        elapsed = time.perf_counter() - start
        if count >= s.batch_size and (elapsed > budget or count >= 8 * s.batch_size):
            break
        if count >= s.batch_size * 64:
            break
        try:
            index = next(stream) if not s.iterable else count
        except StopIteration:
            break
        s.events.emit("index", i=index if isinstance(index, (int, str, float)) else repr(index))
        sched0 = schedstat("thread-self")
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            if s.iterable:
                item = next(stream)
            elif split:
                s.tracked.current[0] = index
                raw = s.dataset.read_sample(index)
                t_mid = time.perf_counter()
                item = s.dataset.decode_sample(index, raw)
                read_s.append(t_mid - t0)
                decode_s.append(time.perf_counter() - t_mid)
                s.tracked.current[0] = -1
            else:
                item = s.tracked[index]
        except StopIteration:
            break
        except Exception as exc:
            raise raised(exc, index, 0, s.length) from None
        t1, c1 = time.perf_counter(), time.thread_time()
        sched1 = schedstat("thread-self")
        times.append(t1 - t0)
        cpu.append(c1 - c0)
        if sched0 and sched1:
            blocked += max(0.0, (t1 - t0) - (sched1[0] - sched0[0]) - (sched1[1] - sched0[1]))
        if len(samples) < s.batch_size:
            samples.append(item)
        count += 1
    s.watchdog.disarm()
    if not times:
        raise DatasetFailure("empty", "the dataset yielded no samples", index=None, num_workers=0)
    total = sum(times)
    getitem = {
        "samples": len(times),
        "per_sample_s": total / len(times),
        "median_s": sorted(times)[len(times) // 2],
        "max_s": max(times),
        "cpu_fraction": round(min(1.0, sum(cpu) / total), 3) if total > 0 else None,
        "blocked_fraction": round(min(1.0, blocked / total), 3) if total > 0 else None,
    }
    if split and read_s:
        getitem["read_s"] = sum(read_s) / len(read_s)
        getitem["decode_s"] = sum(decode_s) / len(decode_s)
    # Estimates of batch times use the median: one slow first sample (a lazy open) must not
    # make every later estimate a second long.
    s.per_sample_s = getitem["median_s"]
    s.events.result("getitem", getitem)
    # One batch, collated the way the user's loader does it.
    s.guarded(max(2.0, min(10.0, s.left() - 0.5)), "collating one batch in the main process", "collate")
    collate = s.kwargs.get("collate_fn") or default_collate
    try:
        batch = collate(samples[: s.batch_size])
    except Exception as exc:
        kinds = sorted({type(s).__module__ + "." + type(s).__qualname__ for s in samples[:4]})
        raise DatasetFailure(
            "collate",
            f"collating {len(samples[: s.batch_size])} samples failed: {type(exc).__name__}: "
            f"{first_line(exc)} (__getitem__ returns {', '.join(kinds)})",
            index=None, num_workers=0, where="collate_fn", exception=type(exc).__name__) from None
    s.watchdog.disarm()
    stats = batch_stats(batch, torch)
    stats["sample_types"] = sorted({type(s).__module__ + "." + type(s).__qualname__ for s in samples[:4]})
    s.events.result("batch", stats)

