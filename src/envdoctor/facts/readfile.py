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


class NotRegularFile(OSError):
    """A FIFO, device, socket or folder where a file should be; `kind` says which ("a FIFO")."""

    def __init__(self, kind: str) -> None:
        super().__init__(errno.EINVAL, f"is {kind}, not a regular file")
        self.kind = kind


class TooLarge(OSError):
    """A file over the read limit; `size` is its size, or None when it grew while it was read."""

    def __init__(self, limit: int, size: int | None) -> None:
        reason = f"is {size} bytes, more than the {limit} read" if size is not None \
            else f"is more than the {limit} bytes read"
        super().__init__(errno.EFBIG, reason)
        self.limit = limit
        self.size = size


def open_regular(path: str, extra_flags: int = 0) -> int:
    """A descriptor of `path` when it is a regular file, never blocking on a FIFO or device.

    Opened with O_NONBLOCK and judged by fstat of that very descriptor, so a
    symlink swapped in between a stat and the open cannot get past; anything
    else raises NotRegularFile (an OSError).
    """
    # O_BINARY: Windows would otherwise translate CRLF and stop at a Ctrl+Z byte.
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_BINARY", 0) \
        | extra_flags
    try:
        fd = os.open(path, flags)
    except ValueError as exc:  # a NUL byte in a name taken from a file's contents
        raise OSError(errno.EINVAL, str(exc)) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(next((text for test, text in _FILE_KINDS if test(mode)), "not a regular file"))
    except OSError:
        os.close(fd)
        raise
    return fd


def read_bytes(path: str, limit: int = MAX_FILE_BYTES, head: bool = False) -> bytes:
    """The bytes of a regular file (see `open_regular`), never more than `limit`.

    A FIFO or device where a metadata file should be would otherwise block the
    whole run (nobody writes to it). A file over `limit` raises TooLarge, or
    with `head` gives its first `limit` bytes.
    """
    fd = open_regular(path)
    try:
        size = os.fstat(fd).st_size
        if size > limit and not head:
            raise TooLarge(limit, size)
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
            raise TooLarge(limit, None)
        return data
    finally:
        os.close(fd)
