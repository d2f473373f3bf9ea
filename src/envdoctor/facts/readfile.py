"""Reading a metadata file of an inspected environment: bounded, and never blocking.

Everything the package probes read (conda-meta records, METADATA, RECORD,
`.pth` files, dpkg lists, pyvenv.cfg) goes through `read_bytes`: regular files
only, a size limit, and no wait on a FIFO or device put where a file should be.
"""
from __future__ import annotations

import errno
import os
import stat

#: The most a metadata file (conda-meta record, RECORD, INSTALLER ...) is read in full.
MAX_FILE_BYTES = 64 << 20

_FILE_KINDS = ((stat.S_ISREG, "a file"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
               (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def read_bytes(path: str, limit: int = MAX_FILE_BYTES, head: bool = False) -> bytes:
    """The bytes of a regular file, never blocking and never more than `limit`.

    Opened with O_NONBLOCK and judged by fstat of that very descriptor: a FIFO
    or device where a metadata file should be would otherwise block the whole
    run (nobody writes to it), and a symlink swapped in between a stat and the
    open cannot get past. A file over `limit` raises, or with `head` gives its
    first `limit` bytes.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except ValueError as exc:  # a NUL byte in a name taken from a file's contents
        raise OSError(errno.EINVAL, str(exc)) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = next((text for test, text in _FILE_KINDS if test(info.st_mode)), "not a regular file")
            raise OSError(errno.EINVAL, f"is {kind}, not a regular file")
        if info.st_size > limit and not head:
            raise OSError(errno.EFBIG, f"is {info.st_size} bytes, more than the {limit} read")
        # Read to the end rather than to st_size: some file systems report 0 for files with content.
        chunks, left = [], limit if head else limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > limit and not head:  # grew while it was read
            raise OSError(errno.EFBIG, f"is more than the {limit} bytes read")
        return data
    finally:
        os.close(fd)

