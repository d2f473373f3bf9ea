"""Quantities as people read them: byte counts in binary units.

Rules, views and the fleet comparison all print sizes; the formatting lives
here, below all of them, rather than in any one rule module.
"""
from __future__ import annotations

#: Binary units, as /dev/shm, cgroup limits and `free -h` count them.
KIB = 1024
MIB = 1024**2
GIB = 1024**3


def human_bytes(n: float | None) -> str:
    """1536 -> '1.5 KiB'; None -> 'unknown'. Whole bytes below 1 KiB, one decimal above."""
    if n is None:
        return "unknown"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover
