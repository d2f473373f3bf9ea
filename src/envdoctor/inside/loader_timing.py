"""Timing a DataLoader: the kernel's account of its processes, batch sizes, steady-state rates, iterator control.

Part of the standalone runner (see loader_runner.py): the standard library
only at import time, torch passed in.
"""
from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from types import ModuleType

#: Steady-state windows each run is split into, for the spread.
WINDOWS = 5


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def schedstat(pid: int | str) -> tuple[float, float] | None:
    """(seconds on a CPU, seconds waiting for one) of a task, from /proc.

    Kernels without scheduler statistics have no schedstat file; then the CPU
    time comes from /proc/<pid>/stat and the wait for a CPU counts as zero.
    """
    try:
        with open(f"/proc/{pid}/schedstat") as fh:
            run_ns, wait_ns, _ = fh.read().split()
        return int(run_ns) / 1e9, int(wait_ns) / 1e9
    except (OSError, ValueError):
        pass
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        # utime and stime are fields 14 and 15 of stat, 12 and 13 after the command name.
        return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS, 0.0
    except (OSError, ValueError, IndexError):
        return None


def process_cpu(pid: int) -> float | None:
    """CPU seconds of a whole process, every thread (a worker's queue feeder thread pickles its batches)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS
    except (OSError, ValueError, IndexError):
        return None


def peak_rss(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def busy_cpus() -> tuple[float, int] | None:
    """(CPU seconds spent busy so far, how many CPUs) over the CPUs this process may run on, from /proc/stat.

    Busy is every state but idle and iowait, whoever ran: over a window, minus
    what the loader's own processes used, it is the CPU time other processes
    took from the CPUs the loader could have had.
    """
    if not sys.platform.startswith("linux"):
        return None  # /proc/stat and sched_getaffinity are Linux's
    try:
        allowed = os.sched_getaffinity(0)  # type: ignore[attr-defined,unused-ignore]
        with open("/proc/stat") as fh:
            lines = fh.read().splitlines()
    except (OSError, AttributeError):
        return None
    busy = 0
    seen = 0
    for line in lines:
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or name == "cpu":
            continue
        try:
            cpu = int(name[3:])
            fields = [int(v) for v in rest.split()]
        except ValueError:
            continue
        if cpu not in allowed or len(fields) < 4:
            continue
        # user nice system idle iowait irq softirq steal (guest time is already inside user).
        busy += sum(fields[:3]) + sum(fields[5:8])
        seen += 1
    return (busy / _CLOCK_TICKS, seen) if seen else None


def threads_waiting() -> float | None:
    """Seconds the threads of this process have waited for a CPU (run queue), summed over its live threads."""
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return None
    total = 0.0
    found = False
    for tid in tids:
        stat = schedstat(f"self/task/{tid}")
        if stat is not None:
            total += stat[1]
            found = True
    return total if found else None


def worker_pids(iterator: object) -> list[int]:
    workers = getattr(iterator, "_workers", None) or []
    return [w.pid for w in workers if getattr(w, "pid", None)]


class CpuWindow:
    """How the main process and the workers spent a stretch of wall time."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids
        self.wall = time.perf_counter()
        self.main = os.times()
        self.workers = {pid: schedstat(pid) for pid in pids}
        self.processes = {pid: process_cpu(pid) for pid in pids}
        self.machine = busy_cpus()
        self.main_waiting = threads_waiting()

    def close(self) -> dict[str, object]:
        wall = max(1e-9, time.perf_counter() - self.wall)
        now = os.times()
        main_cpu = (now.user - self.main.user) + (now.system - self.main.system)
        out: dict[str, object] = {"main_cpu": round(main_cpu / wall, 3)}
        run = waiting = 0.0
        counted = 0
        for pid, start in self.workers.items():
            end = schedstat(pid)
            if start is None or end is None:
                continue
            run += end[0] - start[0]
            waiting += end[1] - start[1]
            counted += 1
        if counted:
            # run: computing; runqueue: ready but no CPU free; the rest: blocked
            # (sleeping on I/O, the network, or the index queue).
            out["worker_cpu"] = round(run / wall / counted, 3)
            out["worker_runqueue"] = round(waiting / wall / counted, 3)
            out["worker_blocked"] = round(max(0.0, 1 - (run + waiting) / wall / counted), 3)
        spent = [(end - start) for start, end in ((self.processes[p], process_cpu(p)) for p in self.pids)
                 if start is not None and end is not None]
        if spent:
            # All threads of each worker: what the handover costs them too, beside __getitem__.
            out["worker_process_cpu"] = round(sum(spent) / wall / len(spent), 3)
        waiting_now = threads_waiting()
        if self.main_waiting is not None and waiting_now is not None:
            # Every thread of the main process (torch's intra-op pool too), queued for a CPU.
            out["main_runqueue"] = round(max(0.0, waiting_now - self.main_waiting) / wall, 3)
        machine = busy_cpus()
        if self.machine is not None and machine is not None and machine[1] == self.machine[1]:
            own = main_cpu + (sum(spent) if spent else run)
            # CPUs other processes kept busy on the CPUs the loader may use, on average over the run.
            out["others_cpu"] = round(max(0.0, (machine[0] - self.machine[0]) - own) / wall, 3)
            out["stat_cpus"] = machine[1]
        rss = [r for r in (peak_rss(pid) for pid in self.pids) if r]
        if rss:
            out["worker_rss_bytes"] = max(rss)
        return out


# ---------------------------------------------------------------------------
# Batches: how many samples, how many bytes, how many tensors.


def leaves(root: object, limit: int) -> Iterator[object]:
    """What a nested sample or batch holds, in order: dicts by key, lists and tuples item by item.

    At most `limit` items are looked at (a hostile dataset may return anything).
    """
    stack = [root]
    seen = 0
    while stack and seen < limit:
        item = stack.pop()
        seen += 1
        if isinstance(item, dict):
            stack.extend(item[k] for k in sorted(item, key=repr, reverse=True))
        elif isinstance(item, (list, tuple)):
            stack.extend(reversed(item))
        else:
            yield item


def batch_stats(batch: object, torch: ModuleType) -> dict[str, object]:
    """Bytes and tensors in one collated batch, and what else it holds."""
    total = 0
    tensors = 0
    others: set[str] = set()
    for item in leaves(batch, 10000):
        if isinstance(item, torch.Tensor):
            total += item.element_size() * item.nelement()
            tensors += 1
        elif type(item).__module__ == "numpy" and hasattr(item, "nbytes"):
            total += int(item.nbytes)
            others.add("numpy." + type(item).__name__)
        elif isinstance(item, (str, bytes, int, float, bool)) or item is None:
            others.add(type(item).__name__)
        else:
            others.add(type(item).__module__ + "." + type(item).__qualname__)
    return {"batch_bytes": total, "tensors_per_batch": tensors, "non_tensor_types": sorted(others)}


def samples_in(batch: object, torch: ModuleType, default: int) -> int:
    stack = [batch]
    while stack:
        item = stack.pop(0)
        if isinstance(item, torch.Tensor):
            return int(item.shape[0]) if item.dim() else default
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            if item and not isinstance(item[0], (list, tuple, dict)) and not isinstance(item[0], torch.Tensor):
                return len(item)
            stack.extend(item)
    return default


def steady_state(epochs: list[list[tuple[float, int]]], warmup: int, workers: int = 1) -> dict[str, object]:
    """Samples/s after each epoch's warm-up batches, with its spread over windows.

    N workers deliver their batches in rounds of N, so each window spans at least one
    round; shorter windows would measure the bursts, not the rate.
    """
    intervals: list[tuple[float, int]] = []
    for stamps in epochs:
        start = min(warmup, len(stamps) - 1)
        for k in range(start + 1, len(stamps)):
            intervals.append((stamps[k][0] - stamps[k - 1][0], stamps[k][1]))
    if not intervals:
        return {"samples_per_s": None, "steady_batches": 0}
    seconds = sum(dt for dt, _ in intervals)
    samples = sum(n for _, n in intervals)
    rate = samples / seconds if seconds > 0 else None
    # Windows are whole rounds (a multiple of `workers` intervals), as equal as they can be.
    rounds = len(intervals) // workers
    windows = min(WINDOWS, rounds // 2 if workers == 1 else rounds) or 1
    size = max(1, rounds // windows) * workers if rounds else len(intervals)
    rates = []
    for w in range(windows):
        chunk = intervals[w * size:(w + 1) * size]
        dt = sum(d for d, _ in chunk)
        if dt > 0:
            rates.append(sum(n for _, n in chunk) / dt)
    rates.sort()
    out: dict[str, object] = {"samples_per_s": round(rate, 2) if rate else None, "steady_batches": len(intervals),
           "steady_s": round(seconds, 4), "windows": len(rates)}
    if rate and rates:
        out["samples_per_s_min"] = round(rates[0], 2)
        out["samples_per_s_max"] = round(rates[-1], 2)
        out["spread"] = round((rates[-1] - rates[0]) / rate, 3)
    return out




def set_timeout(iterator: object, seconds: float) -> None:
    """Change how long a worker iterator waits for its next batch (a DataLoader has one timeout for all)."""
    if getattr(iterator, "_timeout", 0):
        setattr(iterator, "_timeout", seconds)  # noqa: B010 — a private attribute of torch's iterator, not typed


def workers_alive(iterator: object) -> bool:
    """Every worker of the iterator still runs (a wait that ends with them alive is a timeout, not a death)."""
    workers = getattr(iterator, "_workers", None) or []
    try:
        return all(w.is_alive() for w in workers)
    except Exception:
        return False


def abandon_workers(iterator: object) -> None:
    """Kill workers that are still starting: a graceful shutdown waits seconds for each."""
    for worker in getattr(iterator, "_workers", None) or []:
        try:
            worker.kill()
            worker.join(timeout=1.0)
        except Exception:
            pass


def shutdown(iterator: object) -> None:
    """Stop an iterator's workers now rather than when the garbage collector gets to it."""
    if iterator is None:
        return
    stop = getattr(iterator, "_shutdown_workers", None)
    if stop is not None:
        try:
            stop()
        except Exception:
            pass
