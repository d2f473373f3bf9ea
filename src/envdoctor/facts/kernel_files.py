"""Reading the small text files of /proc and /sys that the probes are built on."""
from __future__ import annotations

from pathlib import Path


def read_kernel_file(path: Path) -> str | None:
    """The file's text, stripped, or None when it is missing or unreadable."""
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None
