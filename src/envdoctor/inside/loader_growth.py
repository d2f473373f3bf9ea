"""A process's private memory, and its growth against the samples it produced: DL010's measurement, shared.

The smoke test (loader_memory.py, in the target's interpreter) and `envdoctor
run` (envdoctor.loop, reading the user's own workers from outside) both read
each DataLoader worker's USS against the samples it delivered and fit the
slope after a warm-up here, so both measure growth the same way. The
standard library only, as every module of this folder; envdoctor imports it
as `envdoctor.inside.loader_growth`.
"""
from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import TypedDict

#: Share of each worker's readings (the first ones) left out as warm-up.
WARMUP_SHARE = 0.3


class WorkerGrowth(TypedDict):
    """One worker's private memory (USS) read against the samples it delivered."""

    samples: int
    uss_start_bytes: int
    uss_end_bytes: int
    readings: int
    fitted_readings: int
    #: Least-squares slope after the warm-up, and its standard error; None with too few readings.
    bytes_per_sample: float | None
    stderr_bytes_per_sample: float | None


def read_uss(pid: int) -> int | None:
    """Private memory of a process in bytes (pages only it maps), or None where it cannot be read.

    /proc/PID/smaps_rollup (Linux 4.14 on), else the same fields summed over /proc/PID/smaps. A process whose
    address space is gone (a zombie, or one exiting: a DataLoader worker as its epoch ends) lists no mapping
    there: None, not 0 bytes (read as 0, the last reading of an epoch erased a worker's measured growth).
    """
    for name in ("smaps_rollup", "smaps"):
        try:
            with open(f"/proc/{pid}/{name}", encoding="ascii", errors="replace") as fh:
                total, mapped = 0, 0
                for line in fh:
                    if line.startswith(("Private_Clean:", "Private_Dirty:")):
                        total += int(line.split()[1]) * 1024
                    elif line.startswith("Rss:"):
                        mapped += int(line.split()[1])
                return total if mapped else None
        except (OSError, ValueError, IndexError):
            continue
    return None


def uss_source() -> str:
    """Where `read_uss` reads: /proc/PID/smaps_rollup, or /proc/PID/smaps on kernels before 4.14."""
    return "smaps_rollup" if os.path.exists(f"/proc/{os.getpid()}/smaps_rollup") else "smaps"


def fit(points: Sequence[tuple[float, float]]) -> tuple[float, float] | None:
    """Least-squares slope of memory on samples, and its standard error; None with too few points."""
    n = len(points)
    if n < 3:
        return None
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx <= 0:
        return None
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx
    residual = sum((y - my - slope * (x - mx)) ** 2 for x, y in points)
    stderr = math.sqrt(residual / (n - 2) / sxx)
    return slope, stderr


def worker_growth(points: Sequence[tuple[int, int]]) -> WorkerGrowth:
    """One worker's readings (samples delivered, USS bytes), oldest first: the growth after the warm-up."""
    kept = points[int(len(points) * WARMUP_SHARE):]
    fitted = fit(kept)
    return {"samples": points[-1][0], "uss_start_bytes": points[0][1], "uss_end_bytes": points[-1][1],
            "readings": len(points), "fitted_readings": len(kept),
            "bytes_per_sample": round(fitted[0], 2) if fitted else None,
            "stderr_bytes_per_sample": round(fitted[1], 2) if fitted else None}
