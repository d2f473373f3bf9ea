"""Python distributions on disk: dist-info and egg-info folders, read as data.

Each folder gives a name, version, INSTALLER, Requires-Dist, direct_url.json
(editable or not) and the import names it provides; a folder that cannot be
parsed is a problem entry (PKG009) while every other folder is still read. A
bad `direct_url.json` is a problem about that file only: the distribution it
belongs to is still counted.
"""
from __future__ import annotations

import ast
import json
import os
import re
from pathlib import Path
from typing import TypedDict

from envdoctor.facts.numpy_build import NumpyBuild
from envdoctor.facts.owners import Owner
from envdoctor.facts.readfile import _FILE_KINDS, read_bytes

#: METADATA larger than this is read only up to the end of its headers.
MAX_METADATA_BYTES = 16 << 20
#: The most of an editable finder module (`__editable___*_finder.py`) that is parsed.
MAX_FINDER_BYTES = 4 << 20

_NORMALIZE = re.compile(r"[-_.]+")


def normalize(name: str) -> str:
    """PEP 503 normalized name: `Pillow_SIMD` and `pillow-simd` are one distribution."""
    return _NORMALIZE.sub("-", name).lower()


def dist_name_from_dir(dirname: str) -> tuple[str, str | None]:
    """`numpy-1.26.4.dist-info` -> ("numpy", "1.26.4"); egg-info may carry "-py3.11" too."""
    stem = dirname.rsplit(".", 1)[0]
    name, sep, rest = stem.partition("-")
    version = rest.split("-py", 1)[0] if sep else None
    return name, version or None


class DirectUrl(TypedDict):
    url: str | None
    editable: bool


class _DistRequired(TypedDict):
    name: str
    key: str
    version: str
    path: str
    installer: str | None
    requires: list[str]
    import_names: list[str]


class Distribution(_DistRequired, total=False):
    """One dist-info / egg-info on the import path (the location keys are added by the probe)."""

    direct_url: DirectUrl
    #: where an editable install's code really is
    editable_paths: list[str]
    #: top-level `.pth` files its RECORD lists (relative to its site dir)
    pth_files: list[str]
    site_dir: str
    location: str
    order: int
    conda_record: str
    owner: Owner
    #: whether it ships compiled extensions (.so/.pyd in RECORD); read only for distributions that require numpy
    compiled: bool
    #: for a compiled dependant of numpy: the NumPy major it was built against and what says so
    #: (facts/numpy_build.py: the OS package's Depends, or its extension modules' strings)
    numpy_build: NumpyBuild
    #: for a copy doubled in its own folder: how many files its RECORD hashes under its import names
    #: ("listed") hold those bytes on disk ("matching"), which tells whose files `import` runs
    files_on_disk: dict[str, int]


class Unreadable(TypedDict, total=False):
    """A metadata file that could not be used (PKG009): the file, its kind and why."""

    path: str
    kind: str
    reason: str
    package: str | None
    conda_record: str
    owner: Owner


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


class _Unusable(Exception):
    """Why a dist-info / egg-info cannot be read (the reason a PKG009 problem gives)."""


def read_distribution(folder: Path | str) -> tuple[Distribution | None, Unreadable | None]:
    """One dist-info / egg-info: (distribution facts, None) or (None, why it is unreadable).

    A distribution whose only fault is its direct_url.json comes back with a
    problem about that file: (distribution facts, why direct_url.json is bad).
    """
    folder = str(folder)
    is_egg = folder.endswith(".egg-info")
    try:
        present = _listing(folder, is_egg)
        headers = _metadata_headers(folder, is_egg, present)
    except _Unusable as exc:
        return None, {"path": folder, "kind": "egg-info" if is_egg else "dist-info", "reason": str(exc)}
    name, version = headers["name"][0], headers["version"][0]
    requires = headers.get("requires-dist", [])
    installer = record_text = None
    direct_url: DirectUrl | None = None
    problem: Unreadable | None = None
    if present is not None:
        if is_egg:
            requires = _requires_from_egg(_read_text(os.path.join(folder, "requires.txt")) or "") \
                if "requires.txt" in present else []
        installer = _installer(folder, present)
        if not is_egg and "top_level.txt" not in present and "RECORD" in present:
            record_text = _read_text(os.path.join(folder, "RECORD"))
        if "direct_url.json" in present:
            direct_url, problem = _direct_url(os.path.join(folder, "direct_url.json"))
    editable_paths = None
    if direct_url and direct_url["editable"] and "RECORD" in (present or ()):
        editable_paths = _editable_paths(os.path.dirname(folder), _read_text(os.path.join(folder, "RECORD")) or "")
    dist: Distribution = {
        "name": name,
        "key": normalize(name),
        "version": version,
        "path": folder,
        "installer": installer,
        "requires": requires,
        "import_names": _import_names(folder, "top_level.txt" in (present or ()), record_text),
    }
    if direct_url:
        dist["direct_url"] = direct_url
    if editable_paths:
        dist["editable_paths"] = editable_paths
    return dist, problem


def _listing(folder: str, is_egg: bool) -> set[str] | None:
    """The folder's file names, or None for an egg-info that is a single file; raise _Unusable."""
    try:
        # One listing instead of one failed open per optional file: big envs have thousands.
        return set(os.listdir(folder))
    except NotADirectoryError:
        if is_egg:  # only an egg-info may be a single file (distutils wrote those)
            return None
        try:
            mode = os.stat(folder).st_mode
            kind = next((text for test, text in _FILE_KINDS if test(mode)), "a file")
        except OSError as exc:
            kind = exc.strerror or str(exc)
        raise _Unusable(f"the dist-info is {kind}, not a directory") from None
    except OSError as exc:
        raise _Unusable(exc.strerror or str(exc)) from None


def _metadata_headers(folder: str, is_egg: bool, present: set[str] | None) -> dict[str, list[str]]:
    """The METADATA / PKG-INFO headers, with a Name and a Version; raise _Unusable."""
    meta_name = "PKG-INFO" if is_egg else "METADATA"
    if present is not None and meta_name not in present:
        raise _Unusable(f"{meta_name} is missing")
    try:
        raw = read_bytes(os.path.join(folder, meta_name) if present is not None else folder,
                         MAX_METADATA_BYTES + 1, head=True)
    except OSError as exc:
        why = exc.strerror or str(exc)
        label = meta_name if present is not None else "the egg-info file"
        raise _Unusable(f"{label} {why}" if why.startswith("is ") else f"{label}: {why}") from None
    if len(raw) > MAX_METADATA_BYTES:
        # A long description body (a README of many MiB) is no reason to hold it all: the headers decide.
        ends = [i for i in (raw.find(b"\n\n"), raw.find(b"\r\n\r\n")) if i >= 0]
        if not ends:
            raise _Unusable(f"{meta_name} headers do not end within its first {MAX_METADATA_BYTES} bytes")
        raw = raw[:min(ends)]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Unusable(f"{meta_name} is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    headers = _parse_headers(text)
    for field in ("Name", "Version"):
        if not (headers.get(field.lower()) or [""])[0]:
            raise _Unusable(f"{meta_name} has no {field} field")
    return headers


def _installer(folder: str, present: set[str]) -> str | None:
    """INSTALLER's first line (pip, uv, conda …), or None."""
    if "INSTALLER" not in present:
        return None
    return (_read_text(os.path.join(folder, "INSTALLER")) or "").strip() or None


def _direct_url(path: str) -> tuple[DirectUrl | None, Unreadable | None]:
    """PEP 610's direct_url.json: its url and whether the install is editable, or why it is unusable."""
    bad: Unreadable = {"path": path, "kind": "direct_url"}
    try:
        loaded = json.loads(read_bytes(path).decode("utf-8", errors="replace"))
    except OSError as exc:
        return None, {**bad, "reason": exc.strerror or str(exc)}
    except (ValueError, RecursionError) as exc:
        return None, {**bad, "reason": f"not valid JSON: {str(exc)[:120]}"}
    if not isinstance(loaded, dict):
        return None, {**bad, "reason": f"is a JSON {type(loaded).__name__}, not an object"}
    url, dir_info = loaded.get("url"), loaded.get("dir_info", {})
    if not isinstance(url, str):
        return None, {**bad, "reason": f"field 'url' is {type(url).__name__}, expected a string"}
    if not isinstance(dir_info, dict):
        return None, {**bad, "reason": f"field 'dir_info' is {type(dir_info).__name__}, expected an object"}
    editable = dir_info.get("editable", False)
    if not isinstance(editable, bool):
        return None, {**bad, "reason": f"field 'dir_info.editable' is {type(editable).__name__}, expected true or false"}
    return {"url": url[:2000], "editable": editable}, None


def finder_mapping(text: str) -> dict[str, str]:
    """The `MAPPING = {...}` of a setuptools editable finder, parsed (never run, never regex-scanned)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id == "MAPPING":
            try:
                mapping = ast.literal_eval(value)
            except (ValueError, SyntaxError, RecursionError, TypeError, MemoryError):
                return {}
            if isinstance(mapping, dict):
                return {k: v for k, v in mapping.items() if isinstance(k, str) and isinstance(v, str)}
    return {}


def _editable_paths(site_dir: str, record_text: str) -> list[str]:
    """Where an editable install's code really is: the folders its `.pth` files add to
    sys.path, and the package paths a setuptools editable finder maps names to.

    That code is the environment's own even though it lies outside the prefix,
    so the same folder met earlier on sys.path (the project as working
    directory, or on PYTHONPATH) is no shadow of it.
    """
    paths: set[str] = set()
    for line in record_text.splitlines():
        rel = line.split(",", 1)[0].strip().strip('"')
        if "/" in rel or "\x00" in rel or not rel.endswith((".pth", ".py")):
            continue
        if rel.endswith(".pth"):
            for entry in (_read_text(os.path.join(site_dir, rel)) or "").splitlines():
                entry = entry.strip()
                if entry and not entry.startswith(("#", "import ", "import\t")) and "\x00" not in entry:
                    paths.add(os.path.realpath(os.path.join(site_dir, entry)))
        elif rel.startswith("__editable__") and rel.endswith("_finder.py"):
            try:
                source = read_bytes(os.path.join(site_dir, rel), MAX_FINDER_BYTES).decode("utf-8", errors="replace")
            except OSError:
                continue
            paths.update(os.path.realpath(v) for v in finder_mapping(source).values() if "\x00" not in v)
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




def record_lists(dist_path: str, name: str) -> bool:
    """Does the RECORD (or installed-files.txt) of a distribution list `name`, a file of its site dir?"""
    is_egg = dist_path.endswith(".egg-info")
    text = _read_text(os.path.join(dist_path, "installed-files.txt" if is_egg else "RECORD")) or ""
    wanted = os.path.join("..", name) if is_egg else name
    return any(line.split(",", 1)[0].strip().strip('"') == wanted for line in text.splitlines())
