"""The read probe: sequential and random reads on the user's own files, bounded in bytes and seconds.

It keeps the page cache out of its numbers where it can: it opens files with O_DIRECT, and where
the file system refuses that it drops the file's cached pages with posix_fadvise(DONTNEED) before
and after reading. The method used is recorded (`cache_bypass`), so a figure served from RAM is
never passed off as a disk's. O_DIRECT and posix_fadvise are Linux's, so elsewhere the probe reads
through the cache and says so (`cache_bypass: none`). The reads run in a thread, so a file system
that stops answering cannot hold the report past the limit.
"""
from __future__ import annotations

import errno
import mmap
import os
import random
import sys
import threading
import time
from typing import TypedDict

from envdoctor.facts.readfile import open_regular

#: Bounds of the read probe: at most this many bytes and seconds, all reads together.
READ_MAX_BYTES = 64 * 1024**2
READ_MAX_SECONDS = 2.0
SEQUENTIAL_CHUNK = 1024**2
RANDOM_BLOCK = 64 * 1024
#: A file below this is read whole by the random-read pass (what a Dataset's __getitem__ does).
SMALL_FILE = 1024**2
#: O_DIRECT reads are aligned to this (the page size covers every common block size).
ALIGN = 4096


class ReadPass(TypedDict, total=False):
    """One pass of the read probe: sequential (largest files, front to back) or random."""

    bytes: int
    files: int
    reads: int
    seconds: float
    mib_per_s: float | None
    reads_per_s: float | None


class ReadProbe(TypedDict, total=False):
    """The read probe's figures, or `skipped` with the reason it did not run."""

    skipped: str
    max_bytes: int
    max_seconds: float
    seconds: float
    timed_out: bool
    sequential: ReadPass | None
    random: ReadPass | None
    bytes_read: int
    #: How the page cache was kept out of the figures: o_direct, fadvise_dontneed, none.
    cache_bypass: str | None
    note: str


class _Budget:
    """Bytes and seconds left to the read probe; every read asks it first."""

    def __init__(self, max_bytes: int, max_seconds: float) -> None:
        self.max_bytes = max_bytes
        self.max_seconds = max_seconds
        self.start = time.monotonic()
        self.read = 0

    def allow(self, wanted: int) -> int:
        if time.monotonic() - self.start >= self.max_seconds:
            return 0
        return max(0, min(wanted, self.max_bytes - self.read))


#: Linux's flag to read around the page cache (0 elsewhere: macOS and Windows have none os.open takes).
if sys.platform.startswith("linux"):
    _O_DIRECT = os.O_DIRECT
else:
    _O_DIRECT = 0


def _drop_cache(fd: int) -> bool:
    """Evict the file's clean pages from the page cache (a no-op on tmpfs); Linux only."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return True
    except (AttributeError, OSError):
        return False


def _pread(fd: int, length: int, offset: int) -> bytes:
    """Bytes at `offset`; Windows has no pread, and each descriptor here is one thread's."""
    if sys.platform == "win32":
        os.lseek(fd, offset, os.SEEK_SET)
        return os.read(fd, length)
    return os.pread(fd, length, offset)


class _Reader:
    """Opens files bypassing the page cache if it can, and remembers how it did."""

    def __init__(self) -> None:
        self.methods: set[str] = set()
        self._direct_ok = bool(_O_DIRECT)
        # O_DIRECT needs an aligned buffer; an anonymous mmap is page-aligned.
        self._buffer = mmap.mmap(-1, SEQUENTIAL_CHUNK)

    def open(self, path: str) -> tuple[int, bool]:
        """A descriptor of the regular file at `path`; OSError for anything else.

        Opened non-blocking and checked with fstat on that very descriptor: a
        file swapped for a FIFO after the walk would otherwise block the probe.
        """
        if self._direct_ok:
            try:
                return open_regular(path, _O_DIRECT), True
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                # tmpfs and some FUSE file systems refuse O_DIRECT: read through the cache.
        fd = open_regular(path)
        # Drop pages a previous reader left, so this read reaches the device.
        _drop_cache(fd)
        return fd, False

    def read(self, fd: int, direct: bool, offset: int, allowance: int) -> int:
        """Read at `offset`, never more than `allowance` bytes; the bytes read (0 at the end)."""
        if direct and sys.platform != "win32":
            # O_DIRECT wants aligned lengths: round down so the allowance holds.
            length = min(SEQUENTIAL_CHUNK, allowance - allowance % ALIGN)
            if length <= 0:
                return 0
            try:
                got = os.preadv(fd, [memoryview(self._buffer)[:length]], offset)
                self.methods.add("o_direct")
                return got
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                self._direct_ok = False  # the file system takes the flag but not the reads
                self.methods.add("fadvise_dontneed")
                _drop_cache(fd)
        return len(_pread(fd, min(allowance, SEQUENTIAL_CHUNK), offset))

    def close(self, fd: int, direct: bool) -> None:
        if not direct:
            # Leave the cache as we found it: our reads must not speed up the next measurement.
            self.methods.add("fadvise_dontneed" if _drop_cache(fd) else "none")
        os.close(fd)


def _sequential(files: list[tuple[str, int]], budget: _Budget, reader: _Reader) -> ReadPass:
    """Largest files first, front to back in 1 MiB reads: the streaming rate."""
    done = 0
    opened = 0
    start = time.monotonic()
    for path, size in sorted(files, key=lambda f: -f[1]):
        if size <= 0:
            continue
        if budget.allow(ALIGN) < ALIGN:
            break
        try:
            fd, direct = reader.open(path)
        except OSError:
            continue
        opened += 1
        try:
            offset = 0
            while offset < size:
                allowance = budget.allow(SEQUENTIAL_CHUNK)
                if allowance <= 0:
                    break
                got = reader.read(fd, direct, offset, allowance)
                if got <= 0:
                    break
                offset += got
                done += got
                budget.read += got
        except OSError:
            pass
        finally:
            reader.close(fd, direct)
    seconds = time.monotonic() - start
    # `files` says what the rate measured: over files smaller than a read it is the
    # cost of opening files, not the streaming rate (the random pass judges those).
    return {"bytes": done, "files": opened, "seconds": round(seconds, 4),
            "mib_per_s": round(done / 1024**2 / seconds, 2) if done and seconds > 0 else None}


def _random(files: list[tuple[str, int]], budget: _Budget, reader: _Reader, rng: random.Random) -> ReadPass:
    """Random reads the way a map-style Dataset does them: whole small files, or blocks of big ones."""
    done = 0
    reads = 0
    start = time.monotonic()
    candidates = [f for f in files if f[1] > 0]
    rng.shuffle(candidates)
    for path, size in candidates:
        if size <= SMALL_FILE:
            offset, want = 0, size + (-size) % ALIGN
        else:
            offset = rng.randrange(0, size - RANDOM_BLOCK) // ALIGN * ALIGN
            want = RANDOM_BLOCK
        allowance = budget.allow(want)
        if allowance < min(want, ALIGN):
            break
        try:
            fd, direct = reader.open(path)
        except OSError:
            continue
        got = 0
        try:
            while got < min(size - offset, allowance):
                step = reader.read(fd, direct, offset + got, allowance - got)
                if step <= 0:
                    break
                got += step
        except OSError:
            pass
        finally:
            reader.close(fd, direct)
        done += got
        budget.read += got
        reads += 1
    seconds = time.monotonic() - start
    return {"bytes": done, "reads": reads, "seconds": round(seconds, 4),
            "mib_per_s": round(done / 1024**2 / seconds, 2) if done and seconds > 0 else None,
            "reads_per_s": round(reads / seconds, 1) if reads and seconds > 0 else None}


def read_probe(files: list[tuple[str, int]], max_bytes: int = READ_MAX_BYTES,
               max_seconds: float = READ_MAX_SECONDS, seed: int = 0) -> ReadProbe:
    """Measure sequential and random reads on real files, within `max_bytes` and `max_seconds`.

    Half of each budget goes to each pass. The reads run in a thread so a
    file system that stops answering (a hung NFS server) cannot hold the
    report past the limit: the probe then says it timed out.
    """
    sequential: list[ReadPass] = []
    random_pass: list[ReadPass] = []
    methods: set[str] = set()

    def work() -> None:
        reader = _Reader()
        seq_budget = _Budget(max_bytes // 2, max_seconds / 2)
        sequential.append(_sequential(files, seq_budget, reader))
        rand_budget = _Budget(max_bytes - seq_budget.read, max_seconds - (time.monotonic() - seq_budget.start))
        random_pass.append(_random(files, rand_budget, reader, random.Random(seed)))
        methods.update(reader.methods)

    thread = threading.Thread(target=work, name="envdoctor-read-probe", daemon=True)
    start = time.monotonic()
    thread.start()
    thread.join(max_seconds + 1.0)
    elapsed = time.monotonic() - start
    used = sorted(methods)
    passes = [*sequential, *random_pass]
    return {
        "max_bytes": max_bytes,
        "max_seconds": max_seconds,
        "seconds": round(elapsed, 4),
        "timed_out": thread.is_alive(),
        "sequential": sequential[0] if sequential else None,
        "random": random_pass[0] if random_pass else None,
        "bytes_read": sum(p.get("bytes", 0) for p in passes),
        "cache_bypass": ("o_direct" if used == ["o_direct"] else "+".join(used) or None),
    }
