"""Who put each distribution there: the tool whose files they are.

A distribution's owner decides its fix (conda's with conda, dpkg's with apt,
pip's or uv's with that tool), and two metadata folders that one OS package
ships are one install, not a doubled one. Owners are read from files only:
conda-meta records (read by the conda-meta reader), the system package
manager's file lists (`/var/lib/dpkg/info/*.list`), and the `INSTALLER` file
pip, uv and poetry write.

The dpkg database is the one of the root file system the prefix belongs to:
`<root>/usr` is a system prefix whose packages dpkg records under
`<root>/var/lib/dpkg`, and the paths in its lists are relative to `<root>`.
For `/usr` that is the machine's own `/var/lib/dpkg`; a test builds its own
root with a real `var/lib/dpkg/info` tree beside `usr`.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TypedDict

#: At most this many dpkg file lists are read, each at most MAX_LIST_BYTES.
MAX_LISTS = 50_000
MAX_LIST_BYTES = 32 << 20
#: ... and no more than this in all (a big Ubuntu install has about 50 MiB of lists).
MAX_LISTS_TOTAL_BYTES = 1 << 30

#: Paths in a file list that matter here: Python metadata and `.pth` files of site folders.
_SITE_MARKERS = (b"-packages/",)
_WANTED_ENDINGS = (b".dist-info", b".egg-info", b".pth")

#: INSTALLER contents -> the tool people know. pixi installs PyPI packages with uv ("uv-pixi").
_INSTALLERS = {"pip": "pip", "uv": "uv", "uv-pixi": "pixi", "poetry": "poetry", "conda": "conda",
               "pixi": "pixi", "pdm": "pdm", "hatch": "hatch", "pipenv": "pip"}


class Owner(TypedDict):
    """Who owns one distribution's files."""

    #: conda, pixi, dpkg, pip, uv, poetry … (from the records, the OS lists or INSTALLER); unknown when nothing says
    tool: str
    #: the conda record or OS package that ships it (python3-yaml), else None
    package: str | None
    #: how that is known: conda-meta, dpkg, INSTALLER, RECORD, or none
    source: str
    #: an editable install (PEP 610 `dir_info.editable`): the code lives in a project folder
    editable: bool


class OsPackages(TypedDict):
    """What the system package manager's database was read from, and what it owns."""

    manager: str
    database: str
    #: real path of a metadata folder or `.pth` -> the OS package that lists it
    owned: dict[str, str]


def dpkg_database(prefix: str) -> tuple[str, str] | None:
    """(root, admin dir) of the dpkg database that records a system prefix `<root>/usr`, if any."""
    path = Path(prefix)
    if path.name != "usr":
        return None
    root = path.parent
    admin = root / "var" / "lib" / "dpkg"
    return (str(root), str(admin)) if (admin / "info").is_dir() else None


def read_dpkg_owned(root: str, admin: str) -> dict[str, str]:
    """Real path -> package, for the Python metadata and `.pth` files dpkg's lists name."""
    from envdoctor.facts.readfile import read_bytes

    info = os.path.join(admin, "info")
    try:
        names = sorted(n for n in os.listdir(info) if n.endswith(".list"))[:MAX_LISTS]
    except OSError:
        return {}
    owned: dict[str, str] = {}
    budget = MAX_LISTS_TOTAL_BYTES
    for name in names:
        try:
            data = read_bytes(os.path.join(info, name), min(MAX_LIST_BYTES, budget))
        except OSError:
            continue
        budget -= len(data)
        if budget <= 0:
            break
        if not any(marker in data for marker in _SITE_MARKERS):
            continue
        package = name[: -len(".list")].split(":", 1)[0]  # python3-yaml:amd64 -> python3-yaml
        for line in data.splitlines():
            line = line.rstrip(b"/")
            if not line.endswith(_WANTED_ENDINGS) or b"-packages/" not in line or b"\x00" in line:
                continue
            path = os.path.join(root, os.fsdecode(line).lstrip("/"))
            owned[os.path.realpath(path)] = package
    return owned


#: rpm prints every file of every package in one run; it gets this long.
RPM_TIMEOUT_S = 60.0
#: One line per file: the package, a tab, the path.
RPM_QUERY = ("-qa", "--queryformat", "[%{NAME}\t%{FILENAMES}\n]")


def rpm_database(prefix: str) -> tuple[str, str] | None:
    """(root, database dir) of the rpm database that records a system prefix `<root>/usr`, if rpm is here."""
    path = Path(prefix)
    if path.name != "usr" or shutil.which("rpm") is None:
        return None
    for database in (path.parent / "var" / "lib" / "rpm", path / "lib" / "sysimage" / "rpm"):
        if database.is_dir() and any(database.iterdir()):
            return str(path.parent), str(database)
    return None


def parse_rpm_files(text: str, root: str) -> dict[str, str]:
    """`rpm -qa --queryformat '[%{NAME}\t%{FILENAMES}\n]'` output -> real path -> package (Python files only)."""
    owned: dict[str, str] = {}
    for line in text.splitlines():
        package, sep, path = line.partition("\t")
        path = path.rstrip("/")
        if not sep or "-packages/" not in path or not path.endswith((".dist-info", ".egg-info", ".pth")):
            continue
        owned[os.path.realpath(os.path.join(root, path.lstrip("/")))] = package
    return owned


def read_rpm_owned(root: str) -> dict[str, str]:
    from envdoctor.process import run_bounded

    run = run_bounded(["rpm", "--root", root, *RPM_QUERY], RPM_TIMEOUT_S, env={**os.environ, "LC_ALL": "C"})
    return parse_rpm_files(run.stdout, root) if run.ok else {}


def os_packages(prefix: str) -> OsPackages | None:
    """The OS package database of a system prefix, read for Python files (None when there is none)."""
    found = dpkg_database(prefix)
    if found is not None:
        root, admin = found
        return {"manager": "dpkg", "database": admin, "owned": read_dpkg_owned(root, admin)}
    found = rpm_database(prefix)
    if found is not None:
        root, database = found
        return {"manager": "rpm", "database": database, "owned": read_rpm_owned(root)}
    return None


def owner_of(real_path: str, installer: str | None, conda_record: str | None, env_kind: str,
             os_owned: OsPackages | None, editable: bool = False) -> Owner:
    """The owner of a distribution whose metadata folder has real path `real_path`."""
    if conda_record:
        return {"tool": "pixi" if env_kind == "pixi" else "conda", "package": conda_record, "source": "conda-meta",
                "editable": editable}
    if os_owned is not None and real_path in os_owned["owned"]:
        return {"tool": os_owned["manager"], "package": os_owned["owned"][real_path], "source": os_owned["manager"],
                "editable": editable}
    if installer:
        tool = _INSTALLERS.get(installer.strip().lower(), installer.strip()[:40])
        return {"tool": tool, "package": None, "source": "INSTALLER", "editable": editable}
    return {"tool": "unknown", "package": None, "source": "none", "editable": editable}
