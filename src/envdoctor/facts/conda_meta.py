"""conda-meta records: what conda (or pixi, mamba, rattler) installed into a prefix.

Each `conda-meta/*.json` is read as data, bounded: its name, version, build,
channel (credentials in the channel URL redacted), the files it owns and
whether they are still as installed. A record that cannot be parsed, or that
lists a path outside the prefix, is listed under `unreadable`; a path outside
the prefix is never stat'ed, read or hashed. `--deep` hashing stops at a
byte and time budget and says what it left unhashed.
"""
from __future__ import annotations

import json
import os
import re
import stat
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from envdoctor.facts.readfile import open_regular, read_bytes
from envdoctor.redact import redact_url

if TYPE_CHECKING:
    from envdoctor.facts.distributions import Unreadable

#: How many missing/changed paths a record keeps as evidence (the counts are exact).
KEEP_PATHS = 20
#: `--deep` hashes no file over this size, no more than this in all, and stops after this long.
MAX_HASH_FILE_BYTES = 2 << 30
MAX_HASH_TOTAL_BYTES = 16 << 30
MAX_HASH_SECONDS = 60.0

_DIST_DIR = re.compile(r"(?:^|/)([^/]+)\.(dist-info|egg-info)(?:/|$)")


class NotHashed(TypedDict):
    path: str
    reason: str


class _RecordRequired(TypedDict):
    name: str
    version: str
    build: str
    channel: str | None
    url: str | None
    subdir: str | None
    file: str
    files_count: int
    dist_names: list[str]
    distribution: str | None
    distribution_from: str | None
    depends: list[str]
    checked_files: int
    missing_count: int
    changed_count: int


class CondaRecord(_RecordRequired, total=False):
    """One conda-meta record, as the facts keep it."""

    missing: list[str]
    changed: list[dict[str, Any]]
    #: paths the record names outside the prefix (never read)
    outside: list[str]
    not_hashed: list[NotHashed]


class CondaFacts(TypedDict):
    present: bool
    records: list[CondaRecord]
    #: size, or sha256 with --deep
    checked_by: str


@dataclass
class HashBudget:
    """What `--deep` may still hash: bytes and seconds, shared by every record."""

    bytes_left: int = MAX_HASH_TOTAL_BYTES
    deadline: float = field(default_factory=lambda: time.monotonic() + MAX_HASH_SECONDS)

    def refuse(self, size: int) -> str | None:
        """Why a file of `size` bytes is not hashed, or None when it may be."""
        if size > MAX_HASH_FILE_BYTES:
            return f"{size} bytes, more than the {MAX_HASH_FILE_BYTES} hashed per file"
        if size > self.bytes_left:
            return f"the {MAX_HASH_TOTAL_BYTES} bytes --deep hashes in all are used up"
        if time.monotonic() > self.deadline:
            return f"--deep stopped hashing after {MAX_HASH_SECONDS:.0f} s"
        return None


# complexity: 25 — one check per field of a conda-meta record, each a short guard: a field table would hide which
#   message goes with which field.
def _type_problem(data: object) -> str | None:
    """Why a parsed conda-meta record is not a record, or None when it is one."""
    if not isinstance(data, dict):
        return f"the record is a JSON {type(data).__name__}, not an object"
    for key in ("name", "version", "build"):
        if not isinstance(data.get(key), str) or not data.get(key):
            value = data.get(key)
            shown = "missing" if value is None else type(value).__name__ + " " + repr(value)[:40]
            return f"field {key!r} is {shown}, expected a string"
    for key in ("channel", "url", "subdir"):
        if data.get(key) is not None and not isinstance(data[key], str):
            return f"field {key!r} is {type(data[key]).__name__}, expected a string"
    files = data.get("files")
    if files is not None and (not isinstance(files, list) or not all(isinstance(f, str) for f in files)):
        return f"field 'files' is {type(files).__name__}, expected a list of paths"
    paths_data = data.get("paths_data")
    if paths_data is not None:
        paths = paths_data.get("paths") if isinstance(paths_data, dict) else None
        if not isinstance(paths, list) or not all(isinstance(p, dict) and isinstance(p.get("_path"), str)
                                                  for p in paths):
            return "field 'paths_data' has no list of paths"
        files = [*(files or ()), *(p["_path"] for p in paths)]
    # No file name holds a NUL byte: such a path is corruption (and os.stat would raise on it).
    bad = next((f for f in files or () if "\x00" in f), None)
    if bad is not None:
        return f"a recorded path holds a NUL byte ({bad[:60]!r})"
    return None


def _sha256(path: str, budget: HashBudget) -> str | None:
    import hashlib  # only where files are hashed (--deep): loading OpenSSL is no part of an ordinary run

    digest = hashlib.sha256()
    try:
        fd = open_regular(path)  # a FIFO in place of a file would block the read
    except OSError:
        return None
    try:
        for block in iter(lambda: os.read(fd, 1 << 20), b""):
            digest.update(block)
            budget.bytes_left -= len(block)
    except OSError:
        return None
    finally:
        os.close(fd)
    return digest.hexdigest()


def _skip_check(rel: str, path_type: str | None) -> bool:
    # Bytecode comes and goes with every interpreter run; directories carry no content.
    return path_type in ("directory", "pyc_file", "unix_python_entry_point", "windows_python_entry_point_script") \
        or rel.endswith(".pyc") or "__pycache__/" in rel


class _Containment:
    """Does a recorded path stay inside the prefix? Lexically, and through any links on the way
    (each folder's real path is worked out once)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.real_prefix = os.path.realpath(prefix)
        self._folders: dict[str, bool] = {}

    def _inside(self, real: str) -> bool:
        return real == self.real_prefix or real.startswith(self.real_prefix.rstrip(os.sep) + os.sep)

    def outside(self, rel: str, full: str, follow: bool = True) -> bool:
        if os.path.isabs(rel) or os.pardir in rel.replace("\\", "/").split("/"):
            return True
        folder = os.path.dirname(full)
        inside = self._folders.get(folder)
        if inside is None:
            inside = self._folders[folder] = self._inside(os.path.realpath(folder))
        if not inside:
            return True
        if not follow:  # a recorded symlink is only checked to exist, never followed
            return False
        try:
            is_link = stat.S_ISLNK(os.lstat(full).st_mode)
        except OSError:
            return False
        return is_link and not self._inside(os.path.realpath(full))


# complexity: 25 — each file of a record is checked for containment, type, size and (deep) hash within a budget, with
#   conda's prefix-rewritten files compared by their own hash.
def check_record_files(prefix: str, record: dict[str, Any], deep: bool,
                       budget: HashBudget | None = None) -> dict[str, Any]:
    """Which of a record's files are missing or differ from what conda recorded.

    By default the size is compared (cheap: one stat per file); with `deep`
    the sha256 as well, within `budget`. Files conda rewrote at install (a
    prefix placeholder) are compared by `sha256_in_prefix` only. A path that
    leaves the prefix is listed under `outside` and not touched.
    """
    budget = budget or HashBudget()
    containment = _Containment(prefix)
    missing: list[str] = []
    changed: list[dict[str, Any]] = []
    outside: list[str] = []
    not_hashed: list[NotHashed] = []
    checked = 0
    paths_data = record.get("paths_data")
    entries: Iterable[dict[str, Any]]
    if isinstance(paths_data, dict) and paths_data.get("paths"):
        entries = paths_data["paths"]
    else:
        entries = [{"_path": p} for p in record.get("files") or ()]
    for entry in entries:
        rel = entry["_path"]
        path_type = entry.get("path_type")
        full = os.path.join(prefix, rel)
        if containment.outside(rel, full, follow=path_type != "softlink"):
            outside.append(rel)
            continue
        if _skip_check(rel, path_type):
            continue
        checked += 1
        if path_type == "softlink":
            if not os.path.lexists(full):
                missing.append(rel)
            continue
        try:
            st = os.stat(full)
        except (OSError, ValueError):
            missing.append(rel)
            continue
        placeholder = entry.get("prefix_placeholder")
        size = entry.get("size_in_bytes")
        if not placeholder and isinstance(size, int) and st.st_size != size:
            changed.append({"path": rel, "recorded_size": size, "size": st.st_size})
            continue
        if deep:
            expected = entry.get("sha256_in_prefix") or (None if placeholder else entry.get("sha256"))
            if not expected:
                continue
            refused = budget.refuse(st.st_size)
            if refused:
                not_hashed.append({"path": rel, "reason": refused})
                continue
            actual = _sha256(full, budget)
            if actual != expected:
                changed.append({"path": rel, "recorded_sha256": expected, "sha256": actual})
    # Lists only where something is wrong: big healthy environments stay small facts.
    result: dict[str, Any] = {"checked_files": checked, "missing_count": len(missing), "changed_count": len(changed)}
    if missing:
        result["missing"] = missing[:KEEP_PATHS]
    if changed:
        result["changed"] = changed[:KEEP_PATHS]
    if outside:
        result["outside"] = outside[:KEEP_PATHS]
    if not_hashed:
        result["not_hashed"] = not_hashed[:KEEP_PATHS]
    return result


def _owned_dists(files: Iterable[str]) -> dict[str, str]:
    """dist-info/egg-info folders (relative path -> normalized name) a record's files include."""
    from envdoctor.facts.distributions import dist_name_from_dir, normalize

    owned: dict[str, str] = {}
    for rel in files:
        if ".dist-info/" not in rel and ".egg-info" not in rel:
            continue
        match = _DIST_DIR.search(rel)
        if match:
            folder = rel[: match.end(2)]
            owned[folder] = normalize(dist_name_from_dir(match.group(1) + "." + match.group(2))[0])
    return owned


def conda_distribution(name: str, owned: dict[str, str]) -> tuple[str | None, str | None]:
    """The Python distribution a conda package provides, and how that is known.

    The record's own files decide first (a record owning `torch-2.5.1.dist-info/`
    provides torch); records owning no dist-info fall back to the table in
    catalog/conda_names.toml (pytorch -> torch, py-opencv -> opencv-python).
    """
    from envdoctor.facts.distributions import normalize

    names = sorted(set(owned.values()))
    if names:
        key = normalize(name)
        return (key if key in names else names[0]), "files"
    from envdoctor.catalog import load_data

    table = load_data("conda_names")["conda_to_dist"]
    if name in table:
        return (normalize(table[name]) or None), "table"
    return None, None


def _dependency_names(depends: object) -> list[str]:
    """`["numpy >=1.26", "libopenblas"]` -> ["libopenblas", "numpy"]; anything else -> []."""
    if not isinstance(depends, list):
        return []
    return sorted({d.split()[0] for d in depends if isinstance(d, str) and d.split()})


def _unreadable_dir(meta_dir: Path) -> Unreadable | None:
    if not os.path.lexists(meta_dir):
        return None
    # Something is there but it is no folder (a file, a dangling or looping link):
    # conda itself cannot use this prefix, which is not the same as "not conda".
    try:
        os.stat(meta_dir)
        reason = "is not a directory"
    except OSError as exc:
        reason = exc.strerror or str(exc)
    return {"path": str(meta_dir), "kind": "conda-meta-dir", "reason": reason}


# complexity: 23 — every way a conda-meta file can be unusable is one recorded problem, and the loop goes on past
#   each.
def read_conda_meta(prefix: Path, deep: bool) -> tuple[CondaFacts, list[Unreadable], dict[str, str]]:
    """Every conda-meta record of `prefix`, the files that could not be used, and the
    dist-info folders the records own (real path -> record name)."""
    meta_dir = prefix / "conda-meta"
    unreadable: list[Unreadable] = []
    owners: dict[str, str] = {}
    if not meta_dir.is_dir():
        problem = _unreadable_dir(meta_dir)
        return {"present": False, "records": [], "checked_by": "size"}, [problem] if problem else [], owners
    records: list[CondaRecord] = []
    try:
        names = sorted(n for n in os.listdir(meta_dir) if n.endswith(".json"))
    except OSError as exc:
        unreadable.append({"path": str(meta_dir), "kind": "conda-meta-dir", "reason": exc.strerror or str(exc)})
        names = []
    budget = HashBudget()
    real_prefix = os.path.realpath(prefix)
    for filename in names:
        path = os.path.join(meta_dir, filename)
        try:
            data = json.loads(read_bytes(path).decode("utf-8"))
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
            # RecursionError: arrays nested thousands deep (garbage, or a hostile file) must not
            # take every PKG and CHN rule down with them.
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            unreadable.append({"path": path, "kind": "conda-meta", "reason": f"not valid JSON: {reason}"
                               if not isinstance(exc, OSError) else reason})
            continue
        wrong = _type_problem(data)
        if wrong:
            unreadable.append({"path": path, "kind": "conda-meta", "reason": wrong})
            continue
        files = data.get("files") or []
        owned = _owned_dists(f for f in files if not os.path.isabs(f) and ".." not in f.split("/"))
        distribution, source = conda_distribution(data["name"], owned)
        record: dict[str, Any] = {
            "name": data["name"],
            "version": data["version"],
            "build": data["build"],
            # A private channel's URL may carry `user:password@` or a `/t/<token>/`: never kept.
            "channel": redact_url(data["channel"]) if data.get("channel") else None,
            "url": redact_url(data["url"]) if data.get("url") else None,
            "subdir": data.get("subdir"),
            "file": path,
            "files_count": len(files),
            "dist_names": sorted(set(owned.values())),
            "distribution": distribution,
            "distribution_from": source,
            # Names only: what `conda remove` would take along with a package (CHN003's fix).
            "depends": _dependency_names(data.get("depends")),
        }
        record.update(check_record_files(str(prefix), data, deep, budget))
        if record.get("outside"):
            shown = ", ".join(repr(p)[:80] for p in record["outside"][:3])
            unreadable.append({"path": path, "kind": "conda-meta-paths", "package": data["name"],
                               "reason": f"lists paths outside the prefix ({shown}); they were not read"})
        for folder in owned:
            owners[os.path.realpath(os.path.join(real_prefix, folder))] = data["name"]
        records.append(record)  # type: ignore[arg-type]  # built key by key above; CondaRecord is its shape
    return {"present": True, "checked_by": "sha256" if deep else "size", "records": records}, unreadable, owners
