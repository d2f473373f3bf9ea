"""One fix at a time: a lock file in the journal folder, held for a whole `fix` or `fix --undo`.

Two fixes of one environment at once would each snapshot a state the other is changing, and
the roots they write overlap across environments (the user site), so every fix and undo takes
`<journal folder>/fix.lock` (an OS lock: released by the kernel when the holder dies, even by
SIGKILL, so no stale lock ever blocks the next run). The file says who holds it.

The lock is opened without following a link and without truncating (`O_NOFOLLOW`, no
`O_TRUNC`), in the user's own 0700 journal folder, and must be a plain file of the user's
with one name: a link or a hard link planted there (a shared `XDG_CACHE_HOME` under `sudo
-E`) is refused, and its target is never written.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import stat
import sys
from pathlib import Path
from types import TracebackType
from typing import IO

LOCK_NAME = "fix.lock"


class Locked(Exception):
    """Another fix holds the lock; the message names it and its holder."""


def _try_lock(handle: IO[str]) -> bool:
    if sys.platform == "win32":
        import msvcrt

        try:
            msvcrt.locking(handle.fileno(), msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    import fcntl

    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


class FixLock:
    """`with FixLock(root, what):` — or raise Locked naming the lock file and the fix that holds it."""

    def __init__(self, root: Path, what: str) -> None:
        self.path = root / LOCK_NAME
        self.what = what
        self._handle: IO[str] | None = None

    def __enter__(self) -> FixLock:
        from envdoctor.fix.journal import JournalError, private_root
        from envdoctor.fix.safeio import O_CLOEXEC, O_NOFOLLOW

        private_root(self.path.parent)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o600)
        except OSError as exc:
            raise JournalError(f"cannot open the fix lock {self.path}: {exc.strerror or exc}"
                               + (" (it is a symbolic link: remove it)" if os.path.islink(self.path) else "")) from None
        st = os.fstat(fd)
        mine = sys.platform == "win32" or st.st_uid == os.geteuid()
        if not stat.S_ISREG(st.st_mode) or not mine or st.st_nlink != 1:
            os.close(fd)
            raise JournalError(f"the fix lock {self.path} is not a plain file of yours with one name: "
                               "refusing to use it (remove it)")
        handle = os.fdopen(fd, "r+", encoding="utf-8")
        handle.seek(0)  # Windows locks bytes from the position: always the first one
        if not _try_lock(handle):
            handle.seek(0)
            holder = _holder(handle.read(4096))
            handle.close()
            raise Locked(f"another envdoctor fix is running ({holder}): it holds the lock {self.path}; "
                         "wait for it to finish (the lock goes when that process ends)")
        handle.seek(0)
        handle.truncate()
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        handle.write(json.dumps({"pid": os.getpid(), "started": stamp, "what": self.what}) + "\n")
        handle.flush()
        self._handle = handle
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._handle is not None:
            self._handle.close()  # closing releases the lock
            self._handle = None


def _holder(text: str) -> str:
    try:
        data: object = json.loads(text)
    except ValueError:
        return "holder unknown"
    if not isinstance(data, dict):
        return "holder unknown"
    return f"pid {data.get('pid')}, {str(data.get('what'))[:200]}, since {data.get('started')}"
