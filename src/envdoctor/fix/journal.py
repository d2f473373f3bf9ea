"""The journal: where a fix keeps everything it moved, and the manifest that says how to put it back.

One journal per `envdoctor fix` run, in `$XDG_CACHE_HOME/envdoctor/journal/<timestamp>/`
(`~/.cache` when the variable is unset; `~/Library/Caches` on macOS, `%LOCALAPPDATA%`
on Windows): `manifest.json`, `before.json` (the listing
of every root the steps may write, taken before the first step: envdoctor.fix.state)
with `objects/` (those files' bytes, by content), `after.json` (what the fix left),
`leftovers/` (files of a removed version a verified fix took away) and `undone/`
(what `fix --undo` took away in turn). Nothing is ever deleted. The folder also
holds `fix.lock` (envdoctor.fix.lock).

The manifest is rewritten atomically and fsync'd before the first change and
after every step, so a fix that is interrupted (killed, power lost) can
still be undone from what it recorded. It carries the sha256 of its own
content (`manifest_sha256`) and of every listing beside it (`files`), which
`fix --undo` checks before trusting any of it; the journal folders are the
user's own, 0700, and a folder owned by someone else is refused.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

JOURNAL_VERSION = 3
#: Journals `fix --undo` passes over: already undone, or a fix that changed nothing.
SETTLED = ("undone", "undone-with-problems", "nothing-changed")

class Entry(TypedDict, total=False):
    """How one path looks: {"type": "file", "sha256", "mode"} | {"type": "link", "target"} | {"type": "dir", "mode"}."""

    type: str
    sha256: str
    mode: int
    target: str


#: Called at every boundary between two changes a fix or an undo makes (tests stop the process there).
BOUNDARY_HOOKS: list[Callable[[str], None]] = []


def boundary(what: str) -> None:
    """One change is complete and the next has not begun: `what` says which."""
    for hook in BOUNDARY_HOOKS:
        hook(what)


def journal_root() -> Path:
    """The user's cache: $XDG_CACHE_HOME (else ~/.cache); on macOS ~/Library/Caches unless XDG_CACHE_HOME is
    set; on Windows %LOCALAPPDATA% (else ~/AppData/Local)."""
    home = os.path.expanduser("~")
    if sys.platform == "win32":
        cache = os.environ.get("LOCALAPPDATA") or os.path.join(home, "AppData", "Local")
    elif sys.platform == "darwin":
        cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(home, "Library", "Caches")
    else:
        cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
    return Path(cache) / "envdoctor" / "journal"


def sha256_of(path: str | os.PathLike[str]) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def describe(path: str | os.PathLike[str]) -> Entry | None:
    """What one path is now (not following a final symlink), or None when it is absent."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return {"type": "link", "target": os.readlink(path)}
    if stat.S_ISDIR(st.st_mode):
        return {"type": "dir", "mode": stat.S_IMODE(st.st_mode)}
    if stat.S_ISREG(st.st_mode):
        return {"type": "file", "sha256": sha256_of(path), "mode": stat.S_IMODE(st.st_mode)}
    return {"type": "other"}


def tree(path: str | os.PathLike[str]) -> dict[str, Entry]:
    """Every path under `path` (itself as "."), with what it is: the content a move must carry back."""
    top = describe(path)
    if top is None:
        return {}
    listing = {".": top}
    if top["type"] == "dir":
        for folder, dirs, files in os.walk(path):
            for name in sorted(dirs + files):
                full = os.path.join(folder, name)
                entry = describe(full)
                if entry is not None:
                    listing[os.path.relpath(full, path)] = entry
    return listing


def same_content(a: Entry | None, b: Entry | None) -> bool:
    """Equal for undo's purpose: the same type, bytes, mode or link target."""
    return a == b


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_durably(path: Path, data: object) -> str:
    """Write `data` as JSON to `path` so that a crash leaves the old or the new file, never half of one.

    Returns the sha256 of the bytes written.
    """
    from envdoctor.fix.safeio import O_CLOEXEC, O_NOFOLLOW

    text = json.dumps(data, indent=1, ensure_ascii=True).encode("ascii")
    tmp = path.with_name(path.name + ".tmp")
    try:
        os.unlink(tmp)  # a temporary file an interrupted write left
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
    try:
        view = memoryview(text)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    _fsync_dir(path.parent)
    return hashlib.sha256(text).hexdigest()


def manifest_hash(manifest: dict[str, Any]) -> str:
    """The sha256 of a manifest's content, its own `manifest_sha256` left out."""
    content = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    return hashlib.sha256(json.dumps(content, sort_keys=True, ensure_ascii=True).encode("ascii")).hexdigest()


def private_folder(path: Path) -> None:
    """Create `path` 0700, or check that the existing one is a folder (no link) of this user's and no one
    else may write; one of this user's that others may read is made 0700. JournalError says what is wrong."""
    try:
        path.mkdir(mode=0o700, parents=False, exist_ok=True)
        st = os.lstat(path)
    except OSError as exc:
        raise JournalError(f"cannot create the fix journal folder {path}: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise JournalError(f"{path} is not a folder (a link or a file is there): envdoctor keeps its journal "
                           "only in a folder of yours; remove it, or set XDG_CACHE_HOME to a folder of yours")
    if sys.platform == "win32":
        return
    if st.st_uid != os.geteuid():
        raise JournalError(f"the journal folder {path} belongs to uid {st.st_uid}, not to you (uid {os.geteuid()}): "
                           "envdoctor keeps its journal only in a folder of yours (set XDG_CACHE_HOME to one)")
    if stat.S_IMODE(st.st_mode) & 0o077:
        try:
            os.chmod(path, 0o700)
        except OSError as exc:
            raise JournalError(f"cannot make the journal folder {path} private: {exc.strerror or exc}") from None


def private_root(root: Path) -> None:
    """The journal root and the `envdoctor` folder above it, each private to this user (the cache above is
    created as usual)."""
    try:
        root.parent.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise JournalError(f"cannot create the fix journal under {root}: {exc.strerror or exc}") from None
    private_folder(root.parent)
    private_folder(root)


class JournalError(Exception):
    """The journal cannot be written or read; the message says which and why."""


class Journal:
    """One fix run's folder and manifest."""

    def __init__(self, path: Path, manifest: dict[str, Any]) -> None:
        self.path = path
        self.manifest = manifest

    # ------------------------------------------------------------ creating and finding

    @classmethod
    def create(cls, target: dict[str, Any], root: Path | None = None) -> Journal:
        root = root or journal_root()
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
        private_root(root)
        try:
            path = root / stamp
            path.mkdir(mode=0o700)
        except OSError as exc:
            raise JournalError(f"cannot create the fix journal under {root}: {exc.strerror or exc}") from None
        manifest = {"journal_version": JOURNAL_VERSION, "created": stamp, "target": target,
                    "status": "started", "steps": []}
        journal = cls(path, manifest)
        journal.save()
        return journal

    @classmethod
    def load(cls, path: Path) -> Journal:
        """Read a journal and check what can be checked without its target: JournalError says what fails."""
        try:
            st = os.lstat(path)
            with open(path / "manifest.json", encoding="utf-8", errors="surrogateescape") as fh:
                manifest = json.load(fh)
        except (OSError, ValueError) as exc:
            raise JournalError(f"cannot read the fix journal {path}: {exc}") from None
        if not isinstance(manifest, dict):
            raise JournalError(f"{path}/manifest.json is not a journal this envdoctor can read")
        if manifest.get("journal_version") != JOURNAL_VERSION:
            raise JournalError(f"{path} was written by another version of envdoctor (journal_version "
                               f"{manifest.get('journal_version')!r}, this one reads {JOURNAL_VERSION}): undo it with "
                               "that version")
        if not stat.S_ISDIR(st.st_mode) or (sys.platform != "win32" and st.st_uid != os.geteuid()):
            raise JournalError(f"{path} is not a folder of yours: it is not trusted")
        if manifest.get("manifest_sha256") != manifest_hash(manifest):
            raise JournalError(f"{path}/manifest.json was changed since envdoctor wrote it (its sha256 is not the "
                               "one it records)")
        return cls(path, manifest)

    def save(self) -> None:
        self.manifest["manifest_sha256"] = manifest_hash(self.manifest)
        try:
            write_json_durably(self.path / "manifest.json", self.manifest)
        except OSError as exc:
            raise JournalError(f"cannot write {self.path}/manifest.json: {exc.strerror or exc}") from None

    def write_listing(self, name: str, data: object) -> str:
        """Write one listing beside the manifest and record its sha256 there (saved with the manifest)."""
        digest = write_json_durably(self.path / name, data)
        self.manifest.setdefault("files", {})[name] = digest
        return digest

    def check_files(self) -> None:
        """Every listing the manifest names holds the bytes it recorded; JournalError names the one that does not."""
        files = self.manifest.get("files") or {}
        if not isinstance(files, dict):
            raise JournalError(f"{self.path}/manifest.json: `files` is not a mapping")
        for part in (self.manifest.get("before"), self.manifest.get("after")):
            for key in ("listing", "keys"):
                name = part.get(key) if isinstance(part, dict) else None
                if name is not None and name not in files:
                    raise JournalError(f"{self.path}: {name} has no recorded sha256")
        for name, digest in files.items():
            if not isinstance(name, str) or os.sep in name or name.startswith("."):
                raise JournalError(f"{self.path}: the manifest names a file {name!r} outside the journal")
            try:
                found = sha256_of(self.path / name)
            except OSError as exc:
                raise JournalError(f"cannot read {self.path / name}: {exc.strerror or exc}") from None
            if found != digest:
                raise JournalError(f"{self.path / name} was changed since envdoctor wrote it")

    # ------------------------------------------------------------ keeping files

    def slot(self, area: str, name: str) -> Path:
        """A fresh place inside the journal for one stored path (its folders made 0700)."""
        where = self.path / area / name
        folder = self.path
        for part in where.relative_to(self.path).parts[:-1]:
            folder = folder / part
            try:
                folder.mkdir(mode=0o700)
            except FileExistsError:
                pass
        return where

    def keep(self, source: str, area: str, name: str) -> str:
        """Move `source` (not followed) into the journal, never deleting it; return where it went."""
        from envdoctor.fix.safeio import move_path_out

        where = self.slot(area, name)
        move_path_out(source, str(where))
        return str(where.relative_to(self.path))

    def stored(self, relative: str) -> Path:
        return self.path / relative
