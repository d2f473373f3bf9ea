"""The "packages" facts: the target environment as conda and pip themselves see it.

Read-only and from files only: every conda-meta record (name, version, build,
channel, the files it owns and whether they are still as installed), every
Python distribution on the target interpreter's import path (dist-info and
egg-info: version, INSTALLER, Requires-Dist, direct_url.json, the import names
it provides) and in which kind of site dir it lives (the environment's own, a
user site, PYTHONPATH, the working directory). No inspected package is
imported, pip and conda are never run, and nothing is written.

A record or dist-info that cannot be parsed is listed under `unreadable` with
the file and the reason; everything else is still read.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypedDict


class PackagesFacts(TypedDict, total=False):
    """The `packages` facts section (what `gather_packages` returns; the report's facts.packages)."""

    conda: Any
    distributions: Any
    interpreter: Any
    kind: Any
    markers: Any
    prefix: Any
    python: Any
    site_dirs: Any
    unreadable: Any


#: How many missing/changed paths a record keeps as evidence (the counts are exact).
KEEP_PATHS = 20

#: The most a metadata file (conda-meta record, RECORD, INSTALLER ...) is read in full.
MAX_FILE_BYTES = 64 << 20
#: METADATA larger than this is read only up to the end of its headers.
MAX_METADATA_BYTES = 16 << 20

_NORMALIZE = re.compile(r"[-_.]+")
_DIST_DIR = re.compile(r"(?:^|/)([^/]+)\.(dist-info|egg-info)(?:/|$)")


def normalize(name: str) -> str:
    """PEP 503 normalized name: `Pillow_SIMD` and `pillow-simd` are one distribution."""
    return _NORMALIZE.sub("-", name).lower()


def dist_name_from_dir(dirname: str) -> tuple[str, str | None]:
    """`numpy-1.26.4.dist-info` -> ("numpy", "1.26.4"); egg-info may carry "-py3.11" too."""
    stem = dirname.rsplit(".", 1)[0]
    name, sep, rest = stem.partition("-")
    version = rest.split("-py", 1)[0] if sep else None
    return name, version or None


# ---------------------------------------------------------------- reading files


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


# ---------------------------------------------------------------- conda-meta


def _type_problem(data: Any) -> str | None:
    """Why a parsed conda-meta record is not a record, or None when it is one."""
    if not isinstance(data, dict):
        return f"the record is a JSON {type(data).__name__}, not an object"
    for key in ("name", "version", "build"):
        if not isinstance(data.get(key), str) or not data.get(key):
            value = data.get(key)
            return f"field {key!r} is {'missing' if value is None else type(value).__name__ + ' ' + repr(value)[:40]}, expected a string"
    for key in ("channel", "url", "subdir"):
        if data.get(key) is not None and not isinstance(data[key], str):
            return f"field {key!r} is {type(data[key]).__name__}, expected a string"
    files = data.get("files")
    if files is not None and (not isinstance(files, list) or not all(isinstance(f, str) for f in files)):
        return f"field 'files' is {type(files).__name__}, expected a list of paths"
    paths_data = data.get("paths_data")
    if paths_data is not None:
        paths = paths_data.get("paths") if isinstance(paths_data, dict) else None
        if not isinstance(paths, list) or not all(isinstance(p, dict) and isinstance(p.get("_path"), str) for p in paths):
            return "field 'paths_data' has no list of paths"
        files = [*(files or ()), *(p["_path"] for p in paths)]
    # No file name holds a NUL byte: such a path is corruption (and os.stat would raise on it).
    bad = next((f for f in files or () if "\x00" in f), None)
    if bad is not None:
        return f"a recorded path holds a NUL byte ({bad[:60]!r})"
    return None


def _sha256(path: str) -> str | None:
    digest = hashlib.sha256()
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except (OSError, ValueError):
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO in place of a file would block the read
            return None
        for block in iter(lambda: os.read(fd, 1 << 20), b""):
            digest.update(block)
    except OSError:
        return None
    finally:
        os.close(fd)
    return digest.hexdigest()


def _skip_check(rel: str, path_type: str | None) -> bool:
    # Bytecode comes and goes with every interpreter run; directories carry no content.
    return path_type in ("directory", "pyc_file", "unix_python_entry_point", "windows_python_entry_point_script") \
        or rel.endswith(".pyc") or "__pycache__/" in rel


def check_record_files(prefix: str, record: dict[str, Any], deep: bool) -> dict[str, Any]:
    """Which of a record's files are missing or differ from what conda recorded.

    By default the size is compared (cheap: one stat per file); with `deep`
    the sha256 as well. Files conda rewrote at install (a prefix placeholder)
    are compared by `sha256_in_prefix` only.
    """
    missing: list[str] = []
    changed: list[dict[str, Any]] = []
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
        if _skip_check(rel, path_type):
            continue
        checked += 1
        full = os.path.join(prefix, rel)
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
            if expected:
                actual = _sha256(full)
                if actual != expected:
                    changed.append({"path": rel, "recorded_sha256": expected, "sha256": actual})
    # Lists only where something is wrong: big healthy environments stay small facts.
    result: dict[str, Any] = {"checked_files": checked, "missing_count": len(missing), "changed_count": len(changed)}
    if missing:
        result["missing"] = missing[:KEEP_PATHS]
    if changed:
        result["changed"] = changed[:KEEP_PATHS]
    return result


def _owned_dists(files: Iterable[str]) -> dict[str, str]:
    """dist-info/egg-info folders (relative path -> normalized name) a record's files include."""
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
    rules/conda_names.toml (pytorch -> torch, py-opencv -> opencv-python).
    """
    names = sorted(set(owned.values()))
    if names:
        key = normalize(name)
        return (key if key in names else names[0]), "files"
    from envdoctor.catalog import load_data

    table = load_data("conda_names")["conda_to_dist"]
    if name in table:
        return (normalize(table[name]) or None), "table"
    return None, None


def _dependency_names(depends: Any) -> list[str]:
    """`["numpy >=1.26", "libopenblas"]` -> ["libopenblas", "numpy"]; anything else -> []."""
    if not isinstance(depends, list):
        return []
    return sorted({d.split()[0] for d in depends if isinstance(d, str) and d.split()})


def read_conda_meta(prefix: Path, deep: bool) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Every conda-meta record of `prefix`, and the ones that could not be read."""
    meta_dir = prefix / "conda-meta"
    unreadable: list[dict[str, Any]] = []
    if not meta_dir.is_dir():
        if os.path.lexists(meta_dir):
            # Something is there but it is no folder (a file, a dangling or looping link):
            # conda itself cannot use this prefix, which is not the same as "not conda".
            try:
                os.stat(meta_dir)
                reason = "is not a directory"
            except OSError as exc:
                reason = exc.strerror or str(exc)
            unreadable.append({"path": str(meta_dir), "kind": "conda-meta-dir", "reason": reason})
        return {"present": False, "records": []}, unreadable
    records = []
    try:
        names = sorted(n for n in os.listdir(meta_dir) if n.endswith(".json"))
    except OSError as exc:
        unreadable.append({"path": str(meta_dir), "kind": "conda-meta-dir", "reason": exc.strerror or str(exc)})
        names = []
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
        problem = _type_problem(data)
        if problem:
            unreadable.append({"path": path, "kind": "conda-meta", "reason": problem})
            continue
        files = data.get("files") or []
        owned = _owned_dists(files)
        distribution, source = conda_distribution(data["name"], owned)
        record = {
            "name": data["name"],
            "version": data["version"],
            "build": data["build"],
            "channel": data.get("channel"),
            "url": data.get("url"),
            "subdir": data.get("subdir"),
            "file": path,
            "files_count": len(files),
            "dist_names": sorted(set(owned.values())),
            "distribution": distribution,
            "distribution_from": source,
            # Names only: what `conda remove` would take along with a package (CHN003's fix).
            "depends": _dependency_names(data.get("depends")),
            "_dist_dirs": sorted(owned),  # dropped once gather_packages has mapped owners
        }
        record.update(check_record_files(str(prefix), data, deep))
        records.append(record)
    return {"present": True, "checked_by": "sha256" if deep else "size", "records": records}, unreadable


# ---------------------------------------------------------------- distributions


def _parse_headers(text: str) -> dict[str, list[str]]:
    """RFC 822 headers of METADATA / PKG-INFO, up to the body (faster than email.parser)."""
    headers: dict[str, list[str]] = {}
    last: str | None = None
    for line in text.splitlines():
        if not line:
            break
        if line[0] in " \t" and last is not None:
            headers[last][-1] += " " + line.strip()
            continue
        key, sep, value = line.partition(":")
        if not sep:
            continue
        last = key.strip().lower()
        headers.setdefault(last, []).append(value.strip())
    return headers


def _requires_from_egg(text: str) -> list[str]:
    """requires.txt of an egg-info, in Requires-Dist form (extras sections left out)."""
    requires = []
    marker = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            extra, _, cond = section.partition(":")
            marker = "skip" if extra else cond
            continue
        if marker == "skip":
            continue
        requires.append(f"{line}; {marker}" if marker else line)
    return requires


def _import_names(folder: str, has_top_level: bool, record_text: str | None) -> list[str]:
    """Top-level import names a distribution provides: top_level.txt, else its RECORD."""
    if has_top_level:
        text = _read_text(os.path.join(folder, "top_level.txt")) or ""
        names = {line.strip().split("/")[0] for line in text.splitlines() if line.strip()}
        if names:
            return sorted(names)
    names = set()
    for line in (record_text or "").splitlines():
        path = line.split(",", 1)[0].strip().strip('"')
        if not path or path.startswith("..") or path.startswith("/"):
            continue
        first = path.split("/", 1)[0]
        if first.endswith((".dist-info", ".egg-info", ".data", ".pth")) or first == "__pycache__":
            continue
        if "/" in path:
            names.add(first)
        elif first.endswith(".py"):
            names.add(first[:-3])
        elif first.endswith((".so", ".pyd")):
            names.add(first.split(".", 1)[0])
    return sorted(names)


def _read_text(path: str) -> str | None:
    try:
        return read_bytes(path).decode("utf-8", errors="replace")
    except OSError:
        return None


def read_distribution(folder: Path | str) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """One dist-info / egg-info: (distribution facts, None) or (None, why it is unreadable)."""
    folder = str(folder)
    is_egg = folder.endswith(".egg-info")
    bad = {"path": folder, "kind": "egg-info" if is_egg else "dist-info"}
    try:
        # One listing instead of one failed open per optional file: big envs have thousands.
        present = set(os.listdir(folder))
        is_dir = True
    except NotADirectoryError:
        present, is_dir = set(), False
        if not is_egg:  # only an egg-info may be a single file (distutils wrote those)
            try:
                mode = os.stat(folder).st_mode
                kind = next((text for test, text in _FILE_KINDS if test(mode)), "a file")
            except OSError as exc:
                kind = exc.strerror or str(exc)
            return None, {**bad, "reason": f"the dist-info is {kind}, not a directory"}
    except OSError as exc:
        return None, {**bad, "reason": exc.strerror or str(exc)}
    meta_name = "PKG-INFO" if is_egg else "METADATA"
    meta_file = os.path.join(folder, meta_name) if is_dir else folder
    if is_dir and meta_name not in present:
        return None, {**bad, "reason": f"{meta_name} is missing"}
    try:
        raw = read_bytes(meta_file, MAX_METADATA_BYTES + 1, head=True)
        whole = len(raw) <= MAX_METADATA_BYTES
    except OSError as exc:
        why = exc.strerror or str(exc)
        label = meta_name if is_dir else "the egg-info file"
        return None, {**bad, "reason": f"{label} {why}" if why.startswith("is ") else f"{label}: {why}"}
    if not whole:
        # A long description body (a README of many MiB) is no reason to hold it all: the headers decide.
        ends = [i for i in (raw.find(b"\n\n"), raw.find(b"\r\n\r\n")) if i >= 0]
        if not ends:
            return None, {**bad, "reason": (f"{meta_name} headers do not end within "
                                            f"its first {MAX_METADATA_BYTES} bytes")}
        raw = raw[:min(ends)]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, {**bad, "reason": f"{meta_name} is not UTF-8 ({exc.reason} at byte {exc.start})"}
    headers = _parse_headers(text)
    name = (headers.get("name") or [""])[0]
    version = (headers.get("version") or [""])[0]
    if not name or not version:
        return None, {**bad, "reason": f"{meta_name} has no {'Name' if not name else 'Version'} field"}
    requires = headers.get("requires-dist", [])
    installer = record_text = direct_url = None
    if is_dir:
        if is_egg:
            requires = _requires_from_egg(_read_text(os.path.join(folder, "requires.txt")) or "") \
                if "requires.txt" in present else []
        if "INSTALLER" in present:
            installer = (_read_text(os.path.join(folder, "INSTALLER")) or "").strip() or None
        if "top_level.txt" not in present:
            record_file = "installed-files.txt" if is_egg else "RECORD"
            record_text = _read_text(os.path.join(folder, record_file)) if record_file in present else None
        if "direct_url.json" in present:
            try:
                loaded = json.loads(_read_text(os.path.join(folder, "direct_url.json")) or "")
                if isinstance(loaded, dict):
                    direct_url = {"url": loaded.get("url"),
                                  "editable": bool((loaded.get("dir_info") or {}).get("editable"))}
            except (ValueError, RecursionError):
                pass
    editable_paths = None
    if direct_url and direct_url["editable"] and "RECORD" in present:
        editable_paths = _editable_paths(os.path.dirname(folder), _read_text(os.path.join(folder, "RECORD")) or "")
    return {
        "name": name,
        "key": normalize(name),
        "version": version,
        "path": folder,
        "installer": installer,
        "requires": requires,
        "import_names": _import_names(folder, "top_level.txt" in present, record_text if not is_egg else None),
        **({"direct_url": direct_url} if direct_url else {}),
        **({"editable_paths": editable_paths} if editable_paths else {}),
    }, None


_FINDER_MAPPING = re.compile(r"^MAPPING\s*(?::[^=\n]*)?=\s*(\{.*?\})\s*$", re.M | re.S)


def _editable_paths(site_dir: str, record_text: str) -> list[str]:
    """Where an editable install's code really is: the folders its `.pth` files add to
    sys.path, and the package paths a setuptools editable finder maps names to.

    That code is the environment's own even though it lies outside the prefix,
    so the same folder met earlier on sys.path (the project as working
    directory, or on PYTHONPATH) is no shadow of it.
    """
    import ast

    paths = set()
    for line in record_text.splitlines():
        rel = line.split(",", 1)[0].strip().strip('"')
        if "/" in rel or "\x00" in rel or not rel.endswith((".pth", ".py")):
            continue
        text = _read_text(os.path.join(site_dir, rel)) or ""
        if rel.endswith(".pth"):
            for entry in text.splitlines():
                entry = entry.strip()
                if entry and not entry.startswith(("#", "import ", "import\t")) and "\x00" not in entry:
                    paths.add(os.path.realpath(os.path.join(site_dir, entry)))
        elif rel.startswith("__editable__") and rel.endswith("_finder.py"):
            match = _FINDER_MAPPING.search(text)
            try:
                mapping = ast.literal_eval(match.group(1)) if match else {}
            except (ValueError, SyntaxError):
                mapping = {}
            if isinstance(mapping, dict):
                paths.update(os.path.realpath(v) for v in mapping.values() if isinstance(v, str) and "\x00" not in v)
    return sorted(paths)


def _module_files(directory: str) -> dict[str, str]:
    """Importable top-level names in a non-environment directory, each with the entry that provides it.

    A folder without `__init__.py` is only a namespace package, which never
    wins over a regular package later on the path, so it is not counted.
    Where several entries give one name, the one Python imports wins (a
    package before a module).
    """
    found: dict[str, str] = {}
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except OSError:
        return {}
    for entry in entries:
        name = entry.name
        if name.startswith(".") or name == "__pycache__":
            continue
        try:
            if entry.is_dir():
                if os.path.exists(os.path.join(entry.path, "__init__.py")):
                    found[name] = name  # a regular package beats a module of the same name
            elif name.endswith(".py"):
                found.setdefault(name[:-3], name)
            elif name.endswith((".so", ".pyd")):
                found.setdefault(name.split(".", 1)[0], name)
        except OSError:
            continue
    return dict(sorted(found.items()))


def _inside(path: str, folder: str | None) -> bool:
    if not folder:
        return False
    folder = os.path.normpath(folder)
    path = os.path.normpath(path)
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def classify_path(entry: str, index: int, target: dict[str, Any]) -> str:
    """env, stdlib, user, pythonpath, cwd, base or other: why this directory is on sys.path."""
    prefix = target.get("prefix")
    real_prefix = os.path.realpath(prefix) if prefix else None
    stdlib = target.get("stdlib") or []
    if entry.endswith(".zip") or any(os.path.normpath(entry) == os.path.normpath(s) for s in stdlib) \
            or os.path.basename(entry) == "lib-dynload":
        return "stdlib"
    # The environment's own site-packages is "env" however it got on the path: job scripts often
    # `export PYTHONPATH=$CONDA_PREFIX/lib/python3.X/site-packages`, which must not turn the env's
    # own packages into "copies outside the environment" and switch every env check off.
    own_sites = {os.path.realpath(p) for p in [*(target.get("site_packages") or []), target.get("purelib")] if p}
    real_entry = os.path.realpath(entry)
    if real_entry in own_sites and (_inside(entry, prefix) or _inside(real_entry, real_prefix)):
        return "env"
    if target.get("user_site") and os.path.normpath(entry) == os.path.normpath(target["user_site"]):
        return "user"
    if any(os.path.normpath(entry) == os.path.normpath(p) for p in target.get("pythonpath") or []):
        return "pythonpath"
    if index == 0 and target.get("cwd") and os.path.normpath(entry) == os.path.normpath(target["cwd"]):
        return "cwd"
    if _inside(entry, prefix) or _inside(os.path.realpath(entry), real_prefix):
        return "env"
    base = target.get("base_prefix")
    if base and _inside(entry, base):
        return "base"
    return "other"


def site_dirs_of(target: dict[str, Any]) -> list[dict[str, Any]]:
    """The directories distributions are looked up in, in import order, each classified."""
    prefix = Path(target["prefix"])
    entries = list(target.get("sys_path") or [])
    if not entries:
        # No interpreter could be asked: the prefix's own site-packages, as conda lays them out.
        entries = sorted(str(p) for p in prefix.glob("lib/python3*/site-packages")) + \
            [str(p) for p in (prefix / "Lib" / "site-packages",) if p.is_dir()]
    seen = set()
    dirs = []
    for index, entry in enumerate(entries):
        norm = os.path.normpath(entry)
        # One folder reached twice (Fedora's venv has lib64 -> lib, and both on sys.path)
        # is read once: counted twice, every package in it would look installed twice.
        real = os.path.realpath(norm)
        if real in seen or not os.path.isdir(norm):
            continue
        seen.add(real)
        location = classify_path(norm, index, target)
        dirs.append({"path": norm, "location": location, "order": len(dirs)})
    return dirs


def scan_site_dir(directory: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    dists, unreadable = [], []
    try:
        names = sorted(os.listdir(directory))
    except OSError as exc:
        return [], [{"path": directory, "kind": "site-dir", "reason": exc.strerror or str(exc)}]
    for name in names:
        if not name.endswith((".dist-info", ".egg-info")):
            continue
        dist, problem = read_distribution(os.path.join(directory, name))
        if dist is not None:
            dists.append(dist)
        elif problem is not None:
            unreadable.append(problem)
    return dists, unreadable


def gather_packages(facts: Any) -> dict[str, Any]:
    """The "packages" section: conda records, distributions, site dirs, unreadable metadata."""
    target = facts["target"]
    prefix = Path(target["prefix"])
    conda, unreadable = read_conda_meta(prefix, bool(facts.config.deep))
    # Keyed by real path: the prefix may be spelled through a symlink (--prefix /home/u/... where
    # /home is a link) while the interpreter's sys.path spells it the other way, or the reverse.
    owners: dict[str, str] = {}
    for record in conda["records"]:
        for folder in record.pop("_dist_dirs"):
            owners[os.path.realpath(os.path.join(str(prefix), folder))] = record["name"]
    site_dirs = site_dirs_of(target)
    distributions = []
    for site_dir in site_dirs:
        if site_dir["location"] == "stdlib":
            continue
        dists, problems = scan_site_dir(site_dir["path"])
        unreadable.extend(problems)
        for dist in dists:
            dist["site_dir"] = site_dir["path"]
            dist["location"] = site_dir["location"]
            dist["order"] = site_dir["order"]
            owner = owners.get(os.path.realpath(dist["path"]))
            if owner:
                dist["conda_record"] = owner
            distributions.append(dist)
        if site_dir["location"] in ("user", "pythonpath", "cwd", "other"):
            files = _module_files(site_dir["path"])
            site_dir["modules"] = sorted(files)
            site_dir["module_files"] = files
    for problem in unreadable:
        owner = owners.get(os.path.realpath(problem["path"]))
        if owner:
            problem["conda_record"] = owner
    return {
        "prefix": str(prefix),
        "kind": target.get("kind"),
        "interpreter": target.get("interpreter"),
        "python": target.get("python"),
        "markers": target.get("markers"),
        "conda": conda,
        "site_dirs": site_dirs,
        "distributions": distributions,
        "unreadable": unreadable,
    }
