"""The "packages" facts: the target environment as conda, pip and the OS each see it.

Read-only and from files only: every conda-meta record (facts/conda_meta.py),
every Python distribution on the target interpreter's import path (dist-info
and egg-info, facts/distributions.py) with the tool that owns it
(facts/owners.py: conda, pixi, dpkg, pip, uv …), the kind of site dir it
lives in (the environment's own, a user site, PYTHONPATH, the working
directory), the importable names of every site dir, the `.pth` files that run
code and who ships them, and what the fixes need to know about the
interpreter (PEP 668, a uv venv, pip present). No inspected package is
imported, pip and conda are never run, and nothing is written.

A record or dist-info that cannot be parsed is listed under `unreadable` with
the file and the reason; everything else is still read.
"""
from __future__ import annotations

import io
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from envdoctor.facts.conda_meta import CondaFacts, conda_distribution, read_conda_meta
from envdoctor.facts.distributions import (
    Distribution,
    Unreadable,
    _module_files,
    dist_name_from_dir,
    normalize,
    read_distribution,
    record_lists,
)
from envdoctor.facts.imports import ships_extensions
from envdoctor.facts.owners import OsPackages, Owner, os_packages, owner_of
from envdoctor.facts.readfile import MAX_FILE_BYTES, read_bytes
from envdoctor.facts.target import TargetFacts

if TYPE_CHECKING:  # pragma: no cover
    from envdoctor.config import FactsReader
    from envdoctor.facts.sitepath import PthFile

#: A Requires-Dist line on numpy itself (not numpy-financial).
_NUMPY_REQUIREMENT = re.compile(r"\s*numpy\s*(?:$|[<>=!~;\[(])", re.IGNORECASE)

__all__ = ["PackagesFacts", "conda_distribution", "dist_name_from_dir", "normalize", "read_distribution",
           "gather_packages"]


class SiteDir(TypedDict):
    """A folder on the import path, in import order."""

    path: str
    #: env, user, pythonpath, cwd, base, other (stdlib folders are not scanned)
    location: str
    order: int
    #: its real path (symlinks resolved), so rules compare folders without touching the disk
    real_path: str
    #: importable top-level names in it, each with the entry that provides it
    modules: list[str]
    module_files: dict[str, str]


class PthFact(TypedDict):
    """A `.pth` file with code lines (site would run them; envdoctor never does), and who ships it."""

    path: str
    site_dir: str
    code_lines: list[str]
    code_line_count: int
    #: the distribution whose RECORD lists it, or the OS / conda package that ships it; None when nobody
    owner: Owner | None


class Interpreter(TypedDict):
    """What a fix must know about the target interpreter."""

    #: the EXTERNALLY-MANAGED marker (PEP 668) when pip refuses to install there
    externally_managed: str | None
    #: the uv version when uv made this venv (pyvenv.cfg `uv = …`), else None
    uv_venv: str | None
    #: pip is installed where this interpreter imports it
    has_pip: bool


class PackagesFacts(TypedDict):
    """The `packages` facts section (what `gather_packages` returns; the report's facts.packages)."""

    prefix: str
    kind: str
    interpreter: str | None
    python: str | None
    markers: dict[str, str] | None
    conda: CondaFacts
    site_dirs: list[SiteDir]
    distributions: list[Distribution]
    unreadable: list[Unreadable]
    pth_files: list[PthFact]
    installer: Interpreter
    #: the OS package database read for owners (dpkg's admin dir), or None
    os_database: str | None


def _inside(path: str, folder: str | None) -> bool:
    if not folder:
        return False
    folder = os.path.normpath(folder)
    path = os.path.normpath(path)
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


# complexity: 25 — a sys.path entry is tried against each origin (env, stdlib, user, PYTHONPATH, cwd, base) in the
#   order Python adds them; the order is the rule.
def classify_path(entry: str, index: int, target: TargetFacts) -> str:
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
    user_site = target.get("user_site")
    if user_site and os.path.normpath(entry) == os.path.normpath(user_site):
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


def site_dirs_of(target: TargetFacts) -> list[SiteDir]:
    """The directories distributions are looked up in, in import order, each classified."""
    prefix = Path(target["prefix"])
    entries = list(target.get("sys_path") or [])
    if not entries:
        # No interpreter could be asked: the prefix's own site-packages, as conda lays them out.
        entries = sorted(str(p) for p in prefix.glob("lib/python3*/site-packages")) + \
            [str(p) for p in (prefix / "Lib" / "site-packages",) if p.is_dir()]
    seen = set()
    dirs: list[SiteDir] = []
    for index, entry in enumerate(entries):
        norm = os.path.normpath(entry)
        # One folder reached twice (Fedora's venv has lib64 -> lib, and both on sys.path)
        # is read once: counted twice, every package in it would look installed twice.
        real = os.path.realpath(norm)
        if real in seen or not os.path.isdir(norm):
            continue
        seen.add(real)
        location = classify_path(norm, index, target)
        dirs.append({"path": norm, "location": location, "order": len(dirs), "real_path": real,
                     "modules": [], "module_files": {}})
    return dirs


def scan_site_dir(directory: str) -> tuple[list[Distribution], list[Unreadable]]:
    dists: list[Distribution] = []
    unreadable: list[Unreadable] = []
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
        if problem is not None:
            unreadable.append(problem)
    return dists, unreadable


def _pth_owner(pth: PthFile, dists: list[Distribution], conda_owned: dict[str, str], env_kind: str,
               os_owned: OsPackages | None) -> Owner | None:
    """Who ships a `.pth`: a distribution's RECORD, a conda record, or the OS package manager."""
    real = os.path.realpath(pth["path"])
    if real in conda_owned:
        return owner_of(real, None, conda_owned[real], env_kind, None)
    if os_owned is not None and real in os_owned["owned"]:
        return owner_of(real, None, None, env_kind, os_owned)
    name = os.path.basename(pth["path"])
    for dist in dists:
        if dist["site_dir"] == pth["site_dir"] and record_lists(dist["path"], name):
            return {"tool": dist["owner"]["tool"], "package": dist["name"], "source": "RECORD",
                    "editable": dist["owner"]["editable"]}
    return None


#: Files hashed, and bytes read, per doubled distribution when telling whose files are on disk.
MAX_MATCH_FILES = 2000
MAX_MATCH_BYTES = 256 << 20


def _match_doubled_copies(distributions: list[Distribution]) -> None:
    """For copies of one name in one folder (`pip install --ignore-installed`, a stray dist-info): whose files
    are on disk. Each RECORD's hashes of the files under its import names are compared with the files."""
    groups: dict[tuple[str, str], list[Distribution]] = {}
    for dist in distributions:
        groups.setdefault((dist.get("site_dir", ""), dist["key"]), []).append(dist)
    for (site, _key), copies in groups.items():
        if len(copies) < 2 or not site:
            continue
        import base64
        import hashlib  # only for doubled copies: loading OpenSSL is no part of an ordinary run

        for dist in copies:
            listed = matching = 0
            budget = MAX_MATCH_BYTES
            for rel, digest in _record_hashes(dist["path"]):
                if listed >= MAX_MATCH_FILES or budget <= 0:
                    break
                if rel.split("/", 1)[0] not in dist["import_names"] and \
                        rel.split("/", 1)[0].removesuffix(".py") not in dist["import_names"]:
                    continue
                listed += 1
                try:
                    data = read_bytes(os.path.join(site, rel), MAX_FILE_BYTES)
                except OSError:
                    continue
                budget -= len(data)
                if base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode() == digest:
                    matching += 1
            dist["files_on_disk"] = {"listed": listed, "matching": matching}


def _record_hashes(dist_path: str) -> list[tuple[str, str]]:
    """(path, sha256 in RECORD's urlsafe base64) of every hashed RECORD row."""
    try:
        text = read_bytes(os.path.join(dist_path, "RECORD"), MAX_FILE_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return []
    import csv

    rows = []
    for row in csv.reader(io.StringIO(text)):
        if len(row) >= 2 and row[1].startswith("sha256=") and "\x00" not in row[0] and not row[0].startswith(("/", "..")):
            rows.append((row[0], row[1][len("sha256="):]))
    return rows


def gather_packages(facts: FactsReader) -> PackagesFacts:
    """The "packages" section: conda records, distributions and their owners, site dirs, `.pth` code."""
    target: TargetFacts = facts["target"]
    prefix = Path(target["prefix"])
    kind = target.get("kind") or "system"
    conda, problems, conda_owned = read_conda_meta(prefix, bool(facts.config.deep))
    unreadable: list[Unreadable] = list(problems)
    site_dirs = site_dirs_of(target)
    os_owned = _os_packages_for(target, kind, site_dirs)
    owners = _Owners(conda_owned, kind, os_owned)
    distributions = _scan_site_dirs(site_dirs, owners, unreadable)
    for problem in unreadable:
        real = os.path.realpath(problem["path"])
        record = conda_owned.get(real)
        if record:
            problem["conda_record"] = record
        if problem["kind"] in ("dist-info", "egg-info"):
            problem["owner"] = owner_of(real, None, record, kind, os_owned)
    _match_doubled_copies(distributions)
    for dist in distributions:
        # A compiled dependant of numpy breaks at import when numpy's major moves under it (PKG003 says error).
        if any(_NUMPY_REQUIREMENT.match(text) for text in dist["requires"]):
            dist["compiled"] = ships_extensions(dist["path"], dist["import_names"])
    _read_numpy_builds(distributions, os_owned)
    pth_files: list[PthFact] = [
        {"path": pth["path"], "site_dir": pth["site_dir"], "code_lines": pth["code_lines"],
         "code_line_count": pth["code_line_count"],
         "owner": _pth_owner(pth, distributions, conda_owned, kind, os_owned)}
        for pth in target.get("pth_files") or [] if pth["code_line_count"]]
    visible_pip = any(d["key"] == "pip" and d["location"] in ("env", "base", "user") for d in distributions)
    return {
        "prefix": str(prefix),
        "kind": kind,
        "interpreter": target.get("interpreter"),
        "python": target.get("python"),
        "markers": target.get("markers"),
        "conda": conda,
        "site_dirs": site_dirs,
        "distributions": distributions,
        "unreadable": unreadable,
        "pth_files": pth_files,
        "installer": {"externally_managed": target.get("externally_managed"),
                      "uv_venv": _uv_venv(target, kind, distributions, visible_pip),
                      "has_pip": visible_pip},
        "os_database": os_owned["database"] if os_owned else None,
    }


def _read_numpy_builds(distributions: list[Distribution], os_owned: OsPackages | None) -> None:
    """The NumPy major each compiled dependant of numpy was built against (PKG008 names a mismatch)."""
    from envdoctor.facts.numpy_build import numpy_builds, read_dpkg_depends

    compiled = [d for d in distributions if d.get("compiled") and d["key"] != "numpy"]
    if not compiled:
        return
    depends = read_dpkg_depends(os_owned["database"]) if os_owned and os_owned["manager"] == "dpkg" else {}
    builds = numpy_builds(compiled, depends)
    for dist in compiled:
        if dist["path"] in builds:
            dist["numpy_build"] = builds[dist["path"]]


def _os_packages_for(target: TargetFacts, kind: str, site_dirs: list[SiteDir]) -> OsPackages | None:
    """The OS package database that owns files here: the system's, or a system-site venv's base's."""
    if kind == "venv" and target.get("base_prefix") and any(d["location"] == "base" for d in site_dirs):
        # A --system-site-packages venv reads its base's site folders: their files belong to the
        # base's OS packages (python3-setuptools ships distutils-precedence.pth there).
        return os_packages(os.path.realpath(str(target["base_prefix"])))
    return os_packages(str(Path(target["prefix"]))) if kind == "system" else None


@dataclass(frozen=True)
class _Owners:
    """What tells who installed a file: conda's records (real path -> record), the env's kind, the OS's database."""

    conda_owned: dict[str, str]
    kind: str
    os_owned: OsPackages | None


def _scan_site_dirs(site_dirs: list[SiteDir], owners: _Owners, unreadable: list[Unreadable]) -> list[Distribution]:
    """Every distribution of every site folder but the stdlib's, placed and owned; each folder's module names."""
    distributions: list[Distribution] = []
    for site_dir in site_dirs:
        if site_dir["location"] == "stdlib":
            continue
        dists, found = scan_site_dir(site_dir["path"])
        unreadable.extend(found)
        for dist in dists:
            dist["site_dir"] = site_dir["path"]
            dist["location"] = site_dir["location"]
            dist["order"] = site_dir["order"]
            real = os.path.realpath(dist["path"])
            record = owners.conda_owned.get(real)
            if record:
                dist["conda_record"] = record
            editable = bool(dist.get("direct_url", {}).get("editable"))
            dist["owner"] = owner_of(real, dist["installer"], record, owners.kind, owners.os_owned, editable)
            distributions.append(dist)
        # Which names each folder provides: the copy `import` finds is the first folder that has it.
        files = _module_files(site_dir["path"])
        site_dir["modules"] = sorted(files)
        site_dir["module_files"] = files
    return distributions


def _uv_venv(target: TargetFacts, kind: str, distributions: list[Distribution], visible_pip: bool) -> str | None:
    """The uv version that made this venv, "unknown version …" when only INSTALLER says uv, else None."""
    if kind != "venv":
        return None
    # A venv uv made says so in pyvenv.cfg; one made otherwise but filled by uv, without pip, is uv's too.
    uv_venv = (target.get("pyvenv") or {}).get("uv")
    if not uv_venv and not visible_pip and any(
            d["owner"]["tool"] == "uv" for d in distributions if d["location"] == "env"):
        uv_venv = "unknown version (INSTALLER says uv)"
    return uv_venv
