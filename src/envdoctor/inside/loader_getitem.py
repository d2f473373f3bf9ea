"""`__getitem__` timed in the main process: per-sample cost, CPU against waiting, reads against decoding.

Part of the standalone runner (see loader_runner.py).
"""
from __future__ import annotations

import time
from collections.abc import Iterator

from loader_outcomes import DatasetFailure, first_line, raised
from loader_session import Session
from loader_timing import batch_stats, schedstat


def index_stream(s: Session) -> Iterator[object]:
    """Indices in the order the user's loader would ask for them (first epoch)."""
    from torch.utils.data import BatchSampler, SequentialSampler

    if s.kwargs.get("batch_sampler") is not None:
        batches = s.kwargs["batch_sampler"]
    else:
        sampler = s.kwargs.get("sampler") or SequentialSampler(range(s.length or 0))
        batches = BatchSampler(sampler, s.batch_size, False)
    for batch in batches:
        yield from batch

#: Samples re-timed with one intra-op thread against the pool torch started with.
RETIME_SAMPLES = 12
#: Longest the re-time may take, seconds.
RETIME_S = 0.4
#: Slow samples are re-timed after this many, before the rest of the batch.
EARLY_SAMPLES = 4
#: One thread this much faster: the pool contends (the threshold SYS005 uses, rules/system/runtime.py).
POOL_SLOWDOWN = 1.5


def pool_contended(threads: dict[str, object]) -> bool:
    pooled, single = threads.get("threads_median_s"), threads.get("one_thread_median_s")
    if not isinstance(pooled, (int, float)) or not isinstance(single, (int, float)):
        return False
    return bool(pooled and single and pooled >= POOL_SLOWDOWN * single)


def _fetch(s: Session, index: object) -> float:
    t0 = time.perf_counter()
    s.tracked[index]
    return time.perf_counter() - t0


def thread_retime(s: Session, indices: list[object]) -> dict[str, object]:
    """The same samples fetched alternately with torch's intra-op threads and with one thread.

    At num_workers=0 the samples are made in the training process, whose
    intra-op pool has as many threads as CPUs; on CPUs other processes hold,
    a parallel region waits for its slowest thread, and one thread can be
    faster. Workers run one thread each (DataLoader sets it), so this is the
    main process's own contention. Alternating the two settings sample by
    sample lets a busy neighbour slow both alike.
    """
    torch = s.torch
    threads = int(torch.get_num_threads())
    out: dict[str, object] = {"intra_op_threads": threads}
    if threads <= 1 or not indices or s.tracked is None or s.left() < 4 * RETIME_S:
        return out
    s.guarded(max(2.0, 4 * RETIME_S), "re-timing __getitem__ with one intra-op thread", "getitem",
              limit_per_sample=True)
    pooled: list[float] = []
    single: list[float] = []
    start = time.perf_counter()
    try:
        for k, index in enumerate(indices):
            if time.perf_counter() - start > RETIME_S and len(single) >= 3:
                break
            for one in ((False, True) if k % 2 == 0 else (True, False)):
                torch.set_num_threads(1 if one else threads)
                (single if one else pooled).append(_fetch(s, index))
    except Exception:
        return out  # the probe above fetched these samples; a failure now is no finding of ours
    finally:
        torch.set_num_threads(threads)
        s.watchdog.disarm()
    if pooled and single:
        out["threads_median_s"] = sorted(pooled)[len(pooled) // 2]
        out["one_thread_median_s"] = sorted(single)[len(single) // 2]
        out["retimed_samples"] = len(single)
    return out


# complexity: 29 — one timed loop whose state is shared by its steps: the stop conditions (budget, batch, end of
# the data), the per-sample clocks (wall, thread CPU, scheduler wait), and the early re-time that may switch the rest
# of the batch to one untimed thread. Fetching, the figures and the collate are steps of their own.
def probe(s: Session) -> None:
    """Time `__getitem__` in this process (num_workers=0), then collate one batch the user's way."""
    torch = s.torch
    budget = max(0.3, min(1.0, 0.06 * float(s.plan["budget_s"])))
    limit = max(3.0, min(0.35 * float(s.plan["budget_s"]), s.left() - 1.0))
    s.guarded(limit, "fetching samples in the main process", "getitem", limit_per_sample=True)
    s.failure_workers = 0
    samples: list[object] = []
    times: list[float] = []
    cpu: list[float] = []
    read_s: list[float] = []
    decode_s: list[float] = []
    indices: list[object] = []
    process0 = time.process_time()
    process_cpu = loop_s = 0.0
    aside_cpu = aside_s = 0.0  # the early re-time, left out of the probe's own totals
    threads_seen: dict[str, object] | None = None
    timing = True
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
            item = _fetch_sample(s, stream, index, split, t0, read_s, decode_s)
        except StopIteration:
            break
        except Exception as exc:
            raise raised(exc, index, 0, s.length) from None
        t1, c1 = time.perf_counter(), time.thread_time()
        sched1 = schedstat("thread-self")
        if len(samples) < s.batch_size:
            samples.append(item)
        count += 1
        if not timing:
            continue
        times.append(t1 - t0)
        if not s.iterable and len(indices) < RETIME_SAMPLES:
            indices.append(index)
        cpu.append(c1 - c0)
        if sched0 and sched1:
            blocked += max(0.0, (t1 - t0) - (sched1[0] - sched0[0]) - (sched1[1] - sched0[1]))
        process_cpu = time.process_time() - process0 - aside_cpu
        loop_s = time.perf_counter() - start - aside_s
        if len(times) == EARLY_SAMPLES and count < s.batch_size and loop_s > budget / 8 and not s.iterable:
            # Slow samples: settle now whether torch's threads are the cause. If they are, the rest of the
            # batch the collate check needs is fetched with one thread (and not timed), so the contention
            # does not eat the budget of the worker counts still to measure.
            wall0, cpu0 = time.perf_counter(), time.process_time()
            threads_seen = thread_retime(s, indices)
            aside_s, aside_cpu = time.perf_counter() - wall0, time.process_time() - cpu0
            s.guarded(limit, "fetching samples in the main process", "getitem", limit_per_sample=True)
            if pool_contended(threads_seen):
                torch.set_num_threads(1)
                timing = False
    if not timing:
        torch.set_num_threads(threads_seen["intra_op_threads"] if threads_seen else 1)
    s.watchdog.disarm()
    if not times:
        raise DatasetFailure("empty", "the dataset yielded no samples", index=None, num_workers=0)
    getitem = _timings(times, cpu, blocked, read_s, decode_s)
    # Every thread of this process (torch's intra-op pool too) against the wall time, per sample.
    getitem["process_cpu_per_sample_s"] = process_cpu / len(times)
    getitem["wall_per_sample_s"] = loop_s / len(times)
    getitem.update(threads_seen if threads_seen is not None else thread_retime(s, indices))
    if not timing:
        getitem["rest_one_thread"] = True
    # Estimates of batch times use the median: one slow first sample (a lazy open) must not
    # make every later estimate a second long.
    s.per_sample_s = getitem["median_s"]
    s.events.result("getitem", getitem)
    _collate_one_batch(s, samples)


def _fetch_sample(s: Session, stream: Iterator[object], index: object, split: bool, t0: float, read_s: list[float], decode_s: list[float]
           ) -> object:
    """One sample: the next of an iterable dataset, else dataset[index], its read and decode timed apart (from
    `t0`) when the dataset splits them."""
    if s.iterable:
        return next(stream)
    if split:
        s.tracked.current[0] = index
        raw = s.dataset.read_sample(index)
        t_mid = time.perf_counter()
        item = s.dataset.decode_sample(index, raw)
        read_s.append(t_mid - t0)
        decode_s.append(time.perf_counter() - t_mid)
        s.tracked.current[0] = -1
        return item
    return s.tracked[index]


def _timings(times: list[float], cpu: list[float], blocked: float, read_s: list[float], decode_s: list[float]
             ) -> dict[str, object]:
    """The timed samples' figures: mean, median and slowest, the CPU and blocked shares, the read/decode split."""
    total = sum(times)
    getitem: dict[str, object] = {
        "samples": len(times),
        "per_sample_s": total / len(times),
        "median_s": sorted(times)[len(times) // 2],
        "max_s": max(times),
        "cpu_fraction": round(min(1.0, sum(cpu) / total), 3) if total > 0 else None,
        "blocked_fraction": round(min(1.0, blocked / total), 3) if total > 0 else None,
    }
    if read_s:  # only a dataset that splits read and decode fills these
        getitem["read_s"] = sum(read_s) / len(read_s)
        getitem["decode_s"] = sum(decode_s) / len(decode_s)
    return getitem


def _collate_one_batch(s: Session, samples: list[object]) -> None:
    """One batch, collated the way the user's loader does it (result `batch`)."""
    from torch.utils.data import default_collate

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
    stats = batch_stats(batch, s.torch)
    stats["sample_types"] = sorted({type(s).__module__ + "." + type(s).__qualname__ for s in samples[:4]})
    s.events.result("batch", stats)

