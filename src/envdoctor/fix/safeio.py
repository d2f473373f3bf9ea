"""Changing files in an environment without following anyone's links, and moving them into the journal.

Undo and the rollback write into folders other users may be able to write too (a shared
environment, a planted link). So every change is made relative to a folder opened one
component at a time from its root without following a link (`O_NOFOLLOW`): a folder that
became a link on the way is an error, never a detour. A file is written beside its target
under an unpredictable name created exclusively (`O_CREAT|O_EXCL|O_NOFOLLOW`, mode 0600
until its bytes are in), its content checked against the hash the journal recorded, then
renamed over the target. What leaves the environment is renamed into the journal, or
(another file system) copied with its mode — and its owner where this user may set it —
then removed. Windows has no `dir_fd`: there the same steps run on paths.
"""
from __future__ import annotations

import errno
import hashlib
import os
import secrets
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager

O_NOFOLLOW: int = getattr(os, "O_NOFOLLOW", 0)
O_DIRECTORY: int = getattr(os, "O_DIRECTORY", 0)
O_CLOEXEC: int = getattr(os, "O_CLOEXEC", 0)
O_BINARY: int = getattr(os, "O_BINARY", 0)
#: Whether this platform can open and change files relative to an open folder.
DIR_FDS = sys.platform != "win32" and os.open in os.supports_dir_fd and os.rename in os.supports_dir_fd
#: What a name written beside its target carries: `.NAME.envdoctor-<16 random hex digits>`.
TEMP_MARK = ".envdoctor-"
_BLOCK = 1 << 20


def temp_name(name: str) -> str:
    """An unpredictable name beside `name`, short enough for any file system (255 bytes)."""
    base = os.fsencode(name)[:200].decode("utf-8", "ignore")
    return f".{base}{TEMP_MARK}{secrets.token_hex(8)}"


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


class Folder:
    """One folder under a root, opened without following a link in any component below the root."""

    def __init__(self, path: str, fd: int | None) -> None:
        self.path, self.fd = path, fd

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    # -- naming an entry of this folder: relative to the fd, or a path where there are no fds
    def _at(self, name: str) -> tuple[str, int | None]:
        return (name, self.fd) if self.fd is not None else (os.path.join(self.path, name), None)

    def lstat(self, name: str) -> os.stat_result:
        where, fd = self._at(name)
        return os.stat(where, dir_fd=fd, follow_symlinks=False)

    def exists(self, name: str) -> bool:
        try:
            self.lstat(name)
        except FileNotFoundError:
            return False
        return True

    def mkdir(self, name: str, mode: int) -> None:
        where, fd = self._at(name)
        os.mkdir(where, mode, dir_fd=fd)

    def write_file(self, name: str, source: str, mode: int, sha256: str) -> None:
        """Put the bytes of `source` (whose sha256 must be `sha256`) at `name` with `mode`, atomically."""
        tmp = temp_name(name)
        where, fd = self._at(tmp)
        out = os.open(where, os.O_WRONLY | os.O_CREAT | os.O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_BINARY, 0o600,
                      dir_fd=fd)
        try:
            digest = hashlib.sha256()
            src = os.open(source, os.O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_BINARY)
            try:
                while True:
                    block = os.read(src, _BLOCK)
                    if not block:
                        break
                    digest.update(block)
                    view = memoryview(block)
                    while view:
                        view = view[os.write(out, view):]
            finally:
                os.close(src)
            if digest.hexdigest() != sha256:
                raise OSError(errno.EIO, f"the journal's copy {source} does not hold the bytes it was kept for "
                                         f"(sha256 {digest.hexdigest()[:16]}…, not {sha256[:16]}…)")
            _fchmod(out, where, fd, mode)
        except BaseException:
            os.close(out)
            _unlink_quietly(where, fd)
            raise
        os.close(out)
        self.replace(tmp, name)

    def symlink(self, name: str, target: str) -> None:
        """A link `name` -> `target`, made under a fresh name and renamed over whatever is at `name`."""
        tmp = temp_name(name)
        where, fd = self._at(tmp)
        os.symlink(target, where, dir_fd=fd)
        self.replace(tmp, name)

    def replace(self, old: str, new: str) -> None:
        if self.fd is not None:
            os.replace(old, new, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        else:
            os.replace(os.path.join(self.path, old), os.path.join(self.path, new))

    def chmod_folder(self, name: str, mode: int) -> None:
        """Set the mode of the folder `name` in this one (opened without following a link)."""
        if self.fd is None:
            os.chmod(os.path.join(self.path, name), mode)
            return
        sub = os.open(name, os.O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, dir_fd=self.fd)
        try:
            _fchmod(sub, name, None, mode)
        finally:
            os.close(sub)

    def chmod_self(self, mode: int) -> None:
        if self.fd is None:
            os.chmod(self.path, mode)
        else:
            _fchmod(self.fd, self.path, None, mode)

    def move_out(self, name: str, destination: str) -> None:
        """Move the entry `name` (a file, link or whole folder, never followed) to `destination`."""
        where, fd = self._at(name)
        try:
            os.rename(where, destination, src_dir_fd=fd)
            return
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
        copy_entry(self, name, destination)
        remove_entry(self, name)


def _fchmod(fd: int, path: str, dir_fd: int | None, mode: int) -> None:
    if sys.platform == "win32":
        os.chmod(path, mode)
    else:
        os.fchmod(fd, mode)


def _unlink_quietly(where: str, fd: int | None) -> None:
    try:
        os.unlink(where, dir_fd=fd)
    except OSError:
        pass


def open_folder(root: str, path: str) -> Folder:
    """`path` (the root or a folder under it) opened with no link followed below the root.

    Raises OSError (ELOOP, ENOTDIR) when a component is a link or not a folder.
    """
    if not _under(path, root):
        raise OSError(errno.EINVAL, f"{path} is not under {root}")
    if not DIR_FDS:
        current = root
        for part in _parts(root, path):
            current = os.path.join(current, part)
            if os.path.islink(current) or not os.path.isdir(current):
                raise OSError(errno.ELOOP, f"{current} is a link or not a folder", current)
        return Folder(path, None)
    fd = os.open(root, os.O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    try:
        for part in _parts(root, path):
            sub = os.open(part, os.O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = sub
    except BaseException:
        os.close(fd)
        raise
    return Folder(path, fd)


def _parts(root: str, path: str) -> list[str]:
    rel = os.path.relpath(path, root)
    return [] if rel == "." else rel.split(os.sep)


class Folders:
    """Opened folders under one set of roots, the last few kept open (a restore goes path by path, in order)."""

    def __init__(self, roots: list[str]) -> None:
        self.roots = sorted(roots, key=len, reverse=True)
        self._open: dict[str, Folder] = {}

    def root_of(self, path: str) -> str:
        for root in self.roots:
            if _under(path, root):
                return root
        raise OSError(errno.EINVAL, f"{path} lies outside the roots the fix recorded")

    def get(self, folder: str) -> Folder:
        found = self._open.get(folder)
        if found is None:
            if len(self._open) >= 16:
                self.close()
            if any(os.path.dirname(root) == folder for root in self.roots) and \
                    not any(_under(folder, root) for root in self.roots):
                # The folder above a root (a root a step created, or one to put back): found as the fix found it.
                os.makedirs(folder, exist_ok=True)
                found = Folder(folder, os.open(folder, os.O_RDONLY | O_DIRECTORY | O_CLOEXEC) if DIR_FDS else None)
            else:
                found = open_folder(self.root_of(folder), folder)
            self._open[folder] = found
        return found

    def parent_of(self, path: str) -> tuple[Folder, str]:
        """The folder holding `path` (opened safely) and the entry's name in it."""
        return self.get(os.path.dirname(path)), os.path.basename(path)

    def forget(self, path: str) -> None:
        """A folder at or under `path` moved away: close what is open there."""
        for folder in [f for f in self._open if _under(f, path)]:
            self._open.pop(folder).close()

    def close(self) -> None:
        for folder in self._open.values():
            folder.close()
        self._open.clear()


@contextmanager
def folders(roots: list[str]) -> Iterator[Folders]:
    opened = Folders(roots)
    try:
        yield opened
    finally:
        opened.close()


def _set_owner(fd: int, st: os.stat_result) -> None:
    """Give a copy its original's owner where this user may (root); leave it this user's otherwise."""
    if sys.platform == "win32":
        return
    try:
        os.fchown(fd, st.st_uid, st.st_gid)
    except OSError:
        pass


def copy_file_private(source_fd: int, destination: str, st: os.stat_result) -> None:
    """Copy an open file to a new `destination`: created 0600 exclusively, then its original's mode and owner."""
    out = os.open(destination, os.O_WRONLY | os.O_CREAT | os.O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_BINARY, 0o600)
    try:
        while True:
            block = os.read(source_fd, _BLOCK)
            if not block:
                break
            view = memoryview(block)
            while view:
                view = view[os.write(out, view):]
        _set_owner(out, st)
        _fchmod(out, destination, None, stat.S_IMODE(st.st_mode))
        os.fsync(out)
    except BaseException:
        os.close(out)
        _unlink_quietly(destination, None)
        raise
    os.close(out)


def copy_path_private(source: str, destination: str) -> os.stat_result:
    """Copy the file `source` (a link is not followed: ELOOP) to a new `destination`, keeping mode and owner."""
    fd = os.open(source, os.O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_BINARY)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, f"{source} is not a regular file")
        copy_file_private(fd, destination, st)
    finally:
        os.close(fd)
    return st


def copy_entry(folder: Folder, name: str, destination: str) -> None:
    """Copy the entry `name` of `folder` (file, link or folder, recursively, no link followed) to `destination`."""
    st = folder.lstat(name)
    where, fd = folder._at(name)
    if stat.S_ISLNK(st.st_mode):
        os.symlink(os.readlink(where, dir_fd=fd) if fd is not None else os.readlink(where), destination)
    elif stat.S_ISREG(st.st_mode):
        src = os.open(where, os.O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_BINARY, dir_fd=fd)
        try:
            copy_file_private(src, destination, st)
        finally:
            os.close(src)
    elif stat.S_ISDIR(st.st_mode):
        os.mkdir(destination, 0o700)
        sub = _sub_folder(folder, name)
        try:
            for child in sorted(_listdir(sub)):
                copy_entry(sub, child, os.path.join(destination, child))
        finally:
            sub.close()
        os.chmod(destination, stat.S_IMODE(st.st_mode))
        if sys.platform != "win32":
            try:
                os.chown(destination, st.st_uid, st.st_gid, follow_symlinks=False)
            except OSError:
                pass
    # anything else (a socket, a fifo) is not content: it is removed with the rest


def _sub_folder(folder: Folder, name: str) -> Folder:
    if folder.fd is None:
        return Folder(os.path.join(folder.path, name), None)
    fd = os.open(name, os.O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, dir_fd=folder.fd)
    return Folder(os.path.join(folder.path, name), fd)


def _listdir(folder: Folder) -> list[str]:
    return os.listdir(folder.fd) if folder.fd is not None else os.listdir(folder.path)


def remove_entry(folder: Folder, name: str) -> None:
    """Remove the entry `name` of `folder` (a folder with everything in it), following no link."""
    st = folder.lstat(name)
    where, fd = folder._at(name)
    if stat.S_ISDIR(st.st_mode):
        sub = _sub_folder(folder, name)
        try:
            for child in _listdir(sub):
                remove_entry(sub, child)
        finally:
            sub.close()
        os.rmdir(where, dir_fd=fd)
    else:
        os.unlink(where, dir_fd=fd)


def move_path_out(path: str, destination: str) -> None:
    """Move `path` (not followed) to `destination`: a rename, else a private copy and a removal."""
    parent = Folder(os.path.dirname(path), None)
    if DIR_FDS:
        parent = Folder(os.path.dirname(path), os.open(os.path.dirname(path),
                                                         os.O_RDONLY | O_DIRECTORY | O_CLOEXEC))
    try:
        parent.move_out(os.path.basename(path), destination)
    finally:
        parent.close()


def entry_bytes(path: str) -> int:
    """The bytes the regular files at or under `path` hold (links and folders count nothing)."""
    try:
        st = os.lstat(path)
    except OSError:
        return 0
    if stat.S_ISREG(st.st_mode):
        return st.st_size
    if not stat.S_ISDIR(st.st_mode):
        return 0
    total = 0
    for folder, _dirs, files in os.walk(path):
        for name in files:
            try:
                sub = os.lstat(os.path.join(folder, name))
            except OSError:
                continue
            if stat.S_ISREG(sub.st_mode):
                total += sub.st_size
    return total


def device_of(path: str) -> int:
    """The file system of `path`, or of its nearest existing folder."""
    while True:
        try:
            return os.lstat(path).st_dev
        except OSError:
            parent = os.path.dirname(path)
            if parent == path:
                return -1
            path = parent


def free_bytes(path: str) -> int | None:
    """Bytes this user may still write on the file system of `path` (None where that is unknown)."""
    if sys.platform == "win32":
        import shutil

        try:
            return shutil.disk_usage(path).free
        except OSError:
            return None
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    try:
        vfs = os.statvfs(path)
    except OSError:
        return None
    return vfs.f_bavail * vfs.f_frsize


def file_size_limit() -> int | None:
    """The soft RLIMIT_FSIZE of this process in bytes (None: unlimited or not known here)."""
    if sys.platform == "win32":
        return None
    import resource

    soft, _hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    return None if soft == resource.RLIM_INFINITY else int(soft)
