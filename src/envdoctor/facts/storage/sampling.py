"""The data's files sampled: a bounded breadth-first walk that counts them and their sizes.

Only regular files are counted and listed (the read probe reads the list); FIFOs, sockets and
devices are never opened, symlinked folders are not followed, and the walk stops at a number of
files or seconds, whichever comes first, and says so.
"""
from __future__ import annotations

import os
import stat
import statistics
import time
from typing import TypedDict

#: Bounds of the directory walk.
SAMPLE_MAX_FILES = 2000
SAMPLE_MAX_SECONDS = 1.0


class FileSample(TypedDict):
    """The bounded walk's count of the data's files and their sizes."""

    file_count: int
    directories: int
    truncated: bool
    #: Entries that could not be read or stat-ed (permissions, symlink loops, vanished files).
    unreadable: int
    #: FIFOs, sockets and devices met on the walk: never opened.
    special: int
    total_bytes: int
    median_bytes: int | None
    p90_bytes: int | None
    max_files: int
    seconds: float


def _quantile(sorted_values: list[int], q: float) -> int:
    index = min(len(sorted_values) - 1, max(0, int(round(q * (len(sorted_values) - 1)))))
    return sorted_values[index]


def sample_files(root: str, max_files: int = SAMPLE_MAX_FILES,
                 max_seconds: float = SAMPLE_MAX_SECONDS) -> tuple[FileSample, list[tuple[str, int]]]:
    """A bounded breadth-first walk: how many files, and how big; and the (path, size) list it saw.

    Stops at `max_files` files or `max_seconds`, whichever comes first, and
    says so (`truncated`), so a huge tree never stalls the report. Only regular
    files are counted: FIFOs, sockets and devices are never opened (`special`),
    symlinked folders are not followed (no loops), and an entry that cannot be
    stat-ed (a symlink loop, no permission) is counted as `unreadable`.
    """
    start = time.monotonic()
    files: list[tuple[str, int]] = []
    directories = 0
    unreadable = 0
    special = 0
    truncated = False
    if os.path.isfile(root):
        try:
            files.append((root, os.stat(root).st_size))
        except OSError:
            unreadable += 1
    queue = [root] if os.path.isdir(root) else []
    while queue and not truncated:
        folder = queue.pop(0)
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    if len(files) >= max_files or time.monotonic() - start > max_seconds:
                        truncated = True
                        break
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            directories += 1
                            queue.append(entry.path)
                            continue
                        info = entry.stat()  # follows a symlink to a file; a loop raises ELOOP
                    except OSError:
                        unreadable += 1
                        continue
                    if stat.S_ISREG(info.st_mode):
                        files.append((entry.path, info.st_size))
                    elif not stat.S_ISDIR(info.st_mode):
                        special += 1
        except OSError:
            unreadable += 1
    sizes = sorted(size for _, size in files)
    sample: FileSample = {
        "file_count": len(files),
        "directories": directories,
        "truncated": truncated or bool(queue),
        "unreadable": unreadable,
        "special": special,
        "total_bytes": sum(sizes),
        "median_bytes": int(statistics.median(sizes)) if sizes else None,
        "p90_bytes": _quantile(sizes, 0.9) if sizes else None,
        "max_files": max_files,
        "seconds": round(time.monotonic() - start, 4),
    }
    return sample, files
