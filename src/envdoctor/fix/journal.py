"""The journal: where a fix keeps everything it moved, and the manifest that says how to put it back.

One journal per `envdoctor fix` run, in `$XDG_CACHE_HOME/envdoctor/journal/<timestamp>/`
(`~/.cache` when the variable is unset): `manifest.json`, `before.json` (the listing
of every root the steps may write, taken before the first step: envdoctor.fix.state)
with `objects/` (those files' bytes, by content), `after.json` (what the fix left),
`leftovers/` (files of a removed version a verified fix took away) and `undone/`
(what `fix --undo` took away in turn). Nothing is ever deleted. The folder also
holds `fix.lock` (envdoctor.fix.lock).

The manifest is rewritten atomically and fsync'd before the first change and
after every step, so a fix that is interrupted (killed, power lost) can
still be undone from what it recorded.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import shutil
import stat
from pathlib import Path
from typing import Any

JOURNAL_VERSION = 2
#: Journals `fix --undo` passes over: already undone, or a fix that changed nothing.
SETTLED = ("undone", "undone-with-problems", "nothing-changed")

#: How one path looks: {"type": "file", "sha256", "mode"} | {"type": "link", "target"} | {"type": "dir", "mode"}.
Entry = dict[str, Any]


def journal_root() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
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


def write_json_durably(path: Path, data: Any) -> None:
    """Write `data` as JSON to `path` so that a crash leaves the old or the new file, never half of one."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8", errors="surrogateescape") as fh:
        json.dump(data, fh, indent=1, ensure_ascii=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


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
        try:
            root.mkdir(parents=True, exist_ok=True)
            path = root / stamp
            path.mkdir()
        except OSError as exc:
            raise JournalError(f"cannot create the fix journal under {root}: {exc.strerror or exc}") from None
        manifest = {"journal_version": JOURNAL_VERSION, "created": stamp, "target": target,
                    "status": "started", "steps": []}
        journal = cls(path, manifest)
        journal.save()
        return journal

    @classmethod
    def load(cls, path: Path) -> Journal:
        try:
            manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8", errors="surrogateescape"))
        except (OSError, ValueError) as exc:
            raise JournalError(f"cannot read the fix journal {path}: {exc}") from None
        if not isinstance(manifest, dict) or manifest.get("journal_version") != JOURNAL_VERSION:
            raise JournalError(f"{path}/manifest.json is not a journal this envdoctor can read")
        return cls(path, manifest)

    @classmethod
    def latest(cls, root: Path | None = None, prefix: Path | None = None) -> Journal | None:
        """The newest journal of a fix that changed something and is not undone yet (of `prefix`), or None."""
        root = root or journal_root()
        try:
            names = sorted((p.name for p in root.iterdir() if (p / "manifest.json").is_file()), reverse=True)
        except FileNotFoundError:
            return None
        for name in names:
            journal = cls.load(root / name)
            if prefix is not None and os.path.realpath(str(journal.manifest["target"].get("prefix"))) != \
                    os.path.realpath(prefix):
                continue
            if journal.manifest.get("status") not in SETTLED:
                return journal
        return None

    def save(self) -> None:
        try:
            write_json_durably(self.path / "manifest.json", self.manifest)
        except OSError as exc:
            raise JournalError(f"cannot write {self.path}/manifest.json: {exc.strerror or exc}") from None

    # ------------------------------------------------------------ keeping files

    def slot(self, area: str, name: str) -> Path:
        """A fresh place inside the journal for one stored path."""
        where = self.path / area / name
        where.parent.mkdir(parents=True, exist_ok=True)
        return where

    def keep(self, source: str, area: str, name: str) -> str:
        """Move `source` into the journal (never delete it); return where it went, relative to the journal."""
        where = self.slot(area, name)
        shutil.move(source, where)
        return str(where.relative_to(self.path))

    def copy_in(self, source: str, area: str, name: str) -> str:
        """Copy one file or link into the journal, keeping its bytes, mode and times."""
        where = self.slot(area, name)
        shutil.copy2(source, where, follow_symlinks=False)
        return str(where.relative_to(self.path))

    def stored(self, relative: str) -> Path:
        return self.path / relative
