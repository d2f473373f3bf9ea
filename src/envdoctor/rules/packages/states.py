"""What the PKG rules share: which copy of each distribution counts, and how conda's
records relate to the distributions on disk.

Pure functions of the "packages" facts. `conda_python_states` classifies each
conda record once per call (ok, absent, replaced, doubled, clash), so PKG001,
PKG002, PKG004 and PKG005 agree on one reading of the environment.
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from envdoctor.catalog import load_data
from envdoctor.facts.conda_meta import CondaRecord
from envdoctor.facts.distributions import Distribution
from envdoctor.facts.packages import PackagesFacts, SiteDir

if TYPE_CHECKING:  # pragma: no cover
    from packaging.version import Version

#: Where an environment's own distributions live (PKG002 looks only here).
OWN_LOCATIONS = ("env",)
#: Directories outside the environment that can shadow it (PKG006).
SHADOW_LOCATIONS = ("user", "pythonpath", "cwd", "other")


@lru_cache(maxsize=8192)
def same_version(conda_version: str, python_version: str) -> bool:
    """Conda and pip spell versions alike except for local labels (`2.5.1+cu121`)."""
    from packaging.version import InvalidVersion, Version

    try:
        return Version(conda_version).public == Version(python_version).public
    except InvalidVersion:
        return conda_version.replace("_", "-") == python_version.replace("_", "-")


@lru_cache(maxsize=8192)
def parsed_version(text: str) -> Version | None:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(text)
    except InvalidVersion:
        return None


@dataclass
class CondaPython:
    """A conda record that provides a Python distribution, and what is on disk for it."""

    record: CondaRecord
    key: str
    env_dists: list[Distribution]
    #: ok, absent, replaced (pip over conda), doubled (two dist-infos) or clash (PKG004 owns it)
    state: str


def is_conda_copy(dist: Distribution, record: CondaRecord) -> bool:
    return dist.get("conda_record") == record["name"] and dist["installer"] in (None, "conda") \
        and same_version(record["version"], dist["version"])


def conda_python_states(packages: PackagesFacts) -> list[CondaPython]:
    """Each conda record with a Python distribution, classified for all PKG rules."""
    by_key: dict[str, list[Distribution]] = {}
    for dist in packages["distributions"]:
        if dist.get("location") in OWN_LOCATIONS:
            by_key.setdefault(dist["key"], []).append(dist)
    clash_names = {name: entry for entry in load_data("conflicts").get("conda_pip", []) for name in entry["conda"]}
    states = []
    for record in packages["conda"]["records"]:
        key = record["distribution"]
        if not key:
            continue
        dists = by_key.get(key, [])
        if not dists:
            state = "absent"
        elif len(dists) > 1:
            state = "doubled"
        elif is_conda_copy(dists[0], record):
            state = "ok"
        else:
            state = "replaced"
            entry = clash_names.get(record["name"])
            if entry and any(fnmatch.fnmatch(key, pattern) for pattern in entry["dists"]):
                state = "clash"
        states.append(CondaPython(record, key, dists, state))
    return states


def visible_distributions(packages: PackagesFacts) -> dict[str, Distribution]:
    """The distribution import metadata finds first for each name (sys.path order)."""
    visible: dict[str, Distribution] = {}
    for dist in sorted(packages["distributions"], key=lambda d: d.get("order", 0)):
        visible.setdefault(dist["key"], dist)
    return visible


def labels(dists: list[Distribution]) -> list[str]:
    return [f"{d['name']} {d['version']}" for d in dists]


def owner_text(dist: Distribution) -> str:
    """Who put a copy there, as people say it: "Debian's python3-yaml (dpkg)", "pip", "conda's numpy"."""
    owner = dist.get("owner")
    if owner is None:
        return dist["installer"] or "an unknown installer"
    tool, package = owner["tool"], owner["package"]
    if tool == "dpkg":
        text = f"Debian's {package} (dpkg)"
    elif tool == "rpm":
        text = f"the OS package {package} (rpm)"
    elif tool in ("conda", "pixi") and package:
        text = f"{tool}'s {package} package"
    elif tool == "unknown":
        text = "an unknown installer"
    else:
        text = tool
    return text + (" (editable)" if owner.get("editable") else "")


def owner_tool(dist: Distribution) -> str:
    owner = dist.get("owner")
    return owner["tool"] if owner else (dist["installer"] or "unknown")


def imported_copy(copies: list[Distribution], site_dirs: list[SiteDir]) -> tuple[Distribution | None, str | None]:
    """The copy `import` loads, and the import name that decides it.

    The first folder on sys.path that holds one of the copies' import names
    (a package with `__init__.py`, a module or an extension) is where `import`
    finds it; the copy whose metadata sits in that folder is the one loaded.
    Two copies in that same folder share it (their files are mixed): None.
    """
    # The distribution's own name first (`yaml` before PyYAML's private `_yaml`): the import people run.
    keys = {dist["key"] for dist in copies}
    names = sorted({name for dist in copies for name in dist["import_names"]},
                   key=lambda n: (n.lower().replace("_", "-") not in keys and not any(k.endswith(n.lower()) for k in keys),
                                  n.startswith("_"), n))
    for site_dir in sorted(site_dirs, key=lambda d: d["order"]):
        found = next((name for name in names if name in site_dir["module_files"]), None)
        if found is None:
            continue
        here = [d for d in copies if d.get("site_dir") == site_dir["path"]]
        return (here[0] if len(here) == 1 else None), found
    return None, None
