"""PKG001 conda-pip-double, PKG002 duplicate-distribution, PKG003 broken-requirement:
conda records, OS packages and the Python distributions actually on disk.

Each distribution carries its owner (conda, pixi, dpkg, pip, uv …, from the
facts), and the owner decides the fix: conda's copy is restored with conda,
dpkg's with apt, pip's or uv's with that tool; nothing is deleted that another
package manager owns (metadata folders are moved aside, never `rm -rf`'d),
and an EXTERNALLY-MANAGED interpreter never gets a bare `pip install`.

One broken state is reported once: pip installed over a conda package is
PKG001 (or PKG004 when it is torch over pytorch), two metadata folders for one
name are PKG002, and PKG005 leaves out the records those already explain.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from envdoctor.catalog import load_data
from envdoctor.facts import Facts
from envdoctor.facts.conda_meta import CondaRecord
from envdoctor.facts.distributions import Distribution, normalize
from envdoctor.facts.packages import PackagesFacts
from envdoctor.model import Severity
from envdoctor.remedies.install_commands import (
    Fix,
    advice,
    conda,
    conda_reinstall,
    externally_managed,
    fix_of,
    managed_advice,
    move_aside,
    os_reinstall,
    os_remove_text,
    pip_fix,
    pip_own,
)
from envdoctor.rules import Hit
from envdoctor.rules.channels import channel_name
from envdoctor.rules.packages.states import (
    OWN_LOCATIONS,
    conda_python_states,
    imported_copy,
    is_conda_copy,
    owner_text,
    owner_tool,
    parsed_version,
    same_version,
    visible_distributions,
)
from envdoctor.versions import sortable_version

if TYPE_CHECKING:  # pragma: no cover
    from packaging.requirements import Requirement  # imported where used: a run that selects these rules

#: Owners whose files only their own tool may change.
SYSTEM_OWNERS = ("dpkg", "rpm")
PACKAGE_OWNERS = ("dpkg", "rpm", "conda", "pixi")
#: Owners a pip or uv command may change.
PIP_OWNERS = ("pip", "uv", "unknown", "poetry", "pdm", "hatch")


# ---------------------------------------------------------------- PKG001


def find_conda_pip_doubles(facts: Facts) -> Iterator[Hit]:
    packages = facts["packages"]
    for item in conda_python_states(packages):
        if item.state != "replaced":
            continue
        record, dist = item.record, item.env_dists[0]
        installer = dist["installer"] or "an unknown installer"
        if same_version(record["version"], dist["version"]):
            what = f"{installer} reinstalled it over conda's copy at the same version"
        else:
            what = f"{installer} replaced it with {dist['version']}"
        remove = pip_own(packages, "uninstall", "-y", dist["name"])
        yield Hit(
            message=(f"{record['name']} is recorded by conda as {record['version']} but {what}: "
                     "conda and pip now disagree about what is installed"),
            evidence={"package": record["name"], "distribution": dist["name"],
                      "conda_version": record["version"], "installed_version": dist["version"],
                      "installer": dist["installer"], "channel": channel_name(record),
                      "build": record["build"], "path": dist["path"]},
            **fix_of(*remove, conda_reinstall(packages, [record])).hit(),
        )


# ---------------------------------------------------------------- PKG002


def _one_package_ships_all(dists: list[Distribution]) -> bool:
    """One OS or conda package ships every copy, at one version (Debian's python3-cryptography
    has a .dist-info and an .egg-info of 38.0.4): one install, not a doubled one."""
    owners = {(d["owner"]["tool"], d["owner"]["package"]) for d in dists if d.get("owner")}
    if len(owners) != 1 or len(dists) != sum(1 for d in dists if d.get("owner")):
        return False
    tool, package = next(iter(owners))
    return tool in PACKAGE_OWNERS and package is not None \
        and all(same_version(dists[0]["version"], d["version"]) for d in dists)


def requirements_on(packages: PackagesFacts, key: str) -> list[tuple[Distribution, Requirement]]:
    """(dependant, requirement) for every visible distribution that requires `key` on this interpreter."""
    from packaging.requirements import InvalidRequirement, Requirement

    markers = packages["markers"]
    found = []
    for dist in visible_distributions(packages).values():
        for text in dist["requires"]:
            try:
                req = Requirement(text)
            except InvalidRequirement:
                continue
            if normalize(req.name) != key:
                continue
            if req.marker is not None:
                try:
                    if not markers or not req.marker.evaluate({**markers, "extra": ""}):
                        continue
                except Exception:  # an unknown marker variable: pip skips it too
                    continue
            found.append((dist, req))
    return found


def _broken_by(packages: PackagesFacts, key: str, version: str) -> list[str]:
    """Requirements on `key` that `version` does not meet ("trainkit requires PyYAML>=6.0.1")."""
    parsed = parsed_version(version)
    return [f"{dist['name']} {dist['version']} requires {req.name}{req.specifier}"
            for dist, req in requirements_on(packages, key)
            if req.specifier and parsed is not None and not req.specifier.contains(parsed, prereleases=True)]


# complexity: 23 — the fix depends on who owns each copy (conda, pip, the OS, an editable install): one branch per
#   owner pair.
def _doubled_fix(packages: PackagesFacts, dists: list[Distribution], record: CondaRecord | None,
                 imported: Distribution | None, same_dir: bool) -> tuple[Fix, str]:
    """The fix for one doubled distribution, by who owns each copy, and the copy it keeps."""
    name = dists[0]["name"]
    if record is not None:  # conda's copy is the one to keep: move the others' metadata aside, reinstall
        strays = [d for d in dists if not is_conda_copy(d, record)]
        return fix_of(*(move_aside(d["path"]) for d in strays), conda_reinstall(packages, [record]),
                      note=f"keeps conda's {record['version']}"), record["version"]
    system = [d for d in dists if owner_tool(d) in SYSTEM_OWNERS]
    if same_dir:
        if system:  # pip wrote over an OS package's files: give them back with the OS's tool
            keep = system[0]
            moves = [move_aside(d["path"]) for d in dists if d is not keep and owner_tool(d) in PIP_OWNERS]
            if len(moves) != len(dists) - 1:
                return advice(f"the copies of {name} belong to different system packages: "
                              f"reinstall {keep['owner']['package']} with the system package manager"), keep["version"]
            return fix_of(*moves, os_reinstall(keep["owner"]["tool"], str(keep["owner"]["package"])),
                          note=f"keeps {owner_text(keep)} {keep['version']}"), keep["version"]
        keep = max(dists, key=lambda d: sortable_version(d["version"]))
        moves = [move_aside(d["path"]) for d in dists if d is not keep]
        reinstall = pip_own(packages, "install", "--force-reinstall", "--no-deps", f"{keep['name']}=={keep['version']}")
        return fix_of(*moves, *reinstall, note=f"keeps {keep['version']}"), keep["version"]
    # Layered copies (pip's in /usr/local over dpkg's in /usr/lib/python3): each is whole; the first wins.
    first = imported or min(dists, key=lambda d: d.get("order", 0))
    rest = sorted((d for d in dists if d is not first), key=lambda d: d.get("order", 0))
    other = rest[0]
    needs_first = _broken_by(packages, first["key"], other["version"])
    if owner_tool(first) in PIP_OWNERS and not needs_first:
        # pip uninstall removes the first copy on sys.path: this one, never the OS's copy behind it.
        remove = pip_own(packages, "uninstall", "-y", first["name"])
        return fix_of(*remove, note=(f"keeps {other['version']} from {owner_text(other)}; to keep "
                                     f"{first['version']} instead, install it in a venv")), other["version"]
    if needs_first:
        return advice(f"keep {first['version']} from {owner_text(first)}: without it "
                      f"{'; '.join(needs_first)}. The hidden {other['version']} from {owner_text(other)} "
                      f"can only go with its own tool (`{os_remove_text(other['owner']['tool'], str(other['owner']['package']))}`"
                      f" for an OS package, if nothing else needs it); or move this stack into a venv"
                      if other.get("owner") else
                      f"keep {first['version']} from {owner_text(first)}: without it {'; '.join(needs_first)}"), \
            first["version"]
    return advice(f"{first['version']} from {owner_text(first)} comes first on sys.path and hides "
                  f"{', '.join(d['version'] + ' from ' + owner_text(d) for d in rest)}: remove the hidden "
                  f"copies with the tool that installed them (pip would remove the first copy it finds, "
                  f"{owner_text(first)}'s)"), first["version"]


def _whose_files(dists: list[Distribution], import_name: str) -> str:
    """For copies in one folder: the copy whose files `import` runs (every file its RECORD hashes is on disk)."""
    whole = [d for d in dists if (d.get("files_on_disk") or {}).get("listed")
             and d["files_on_disk"]["matching"] == d["files_on_disk"]["listed"]]
    site = dists[0].get("site_dir")
    if len(whole) == 1:
        runs = whole[0]
        others = ", ".join(d["version"] for d in dists if d is not runs)
        return (f"`import {import_name}` runs {runs['version']}'s files in {site} (all "
                f"{runs['files_on_disk']['listed']} its RECORD lists are on disk as recorded), under {others}'s "
                "metadata too; `pip list` reads one of the metadata folders")
    return (f"`import {import_name}` loads a mix of the copies' files in {site}, "
            "and `pip list` reads one of the metadata folders")


# complexity: 23 — which copy `import` loads (imported, told by its files, or unknown), what it breaks and whether the
#   copies share a folder each change the finding's words and severity.
def find_duplicate_distributions(facts: Facts) -> Iterator[Hit]:
    packages = facts["packages"]
    groups: dict[str, list[Distribution]] = {}
    for dist in packages["distributions"]:
        if dist.get("location") in OWN_LOCATIONS:
            groups.setdefault(dist["key"], []).append(dist)
    conda_by_key = {item.key: item.record for item in conda_python_states(packages)}
    for key, dists in sorted(groups.items()):
        if len(dists) < 2 or _one_package_ships_all(dists):
            continue
        record = conda_by_key.get(key)
        imported, import_name = imported_copy(dists, packages["site_dirs"])
        same_dir = len({d.get("site_dir") for d in dists}) == 1
        copies = ", ".join(f"{d['version']} from {owner_text(d)} in {d.get('site_dir')}" for d in dists)
        if imported is not None:
            loads = f"`import {import_name}` loads {imported['version']} from {imported.get('site_dir')}"
        elif import_name is not None:
            loads = _whose_files(dists, import_name)
        else:
            loads = "which copy `import` loads cannot be told from the files (no regular package or module of theirs)"
        breaks = _broken_by(packages, key, imported["version"]) if imported is not None else []
        fix, keeps = _doubled_fix(packages, dists, record, imported, same_dir)
        # Mixed files in one folder break whatever version is asked; layered whole copies only
        # break the dependants the imported one does not satisfy.
        severity = None if same_dir or breaks else Severity.WARNING
        yield Hit(
            message=(f"{dists[0]['name']} is installed {len(dists)} times in the environment ({copies}): "
                     f"{loads}" + (f"; {', '.join(breaks)}" if breaks else "")),
            evidence={"package": dists[0]["name"], "versions": [d["version"] for d in dists],
                      "paths": [d["path"] for d in dists],
                      "installers": [d["installer"] for d in dists],
                      "owners": [dict(d["owner"]) if d.get("owner") else None for d in dists],
                      "imported": ({"version": imported["version"], "path": imported["path"],
                                    "site_dir": imported.get("site_dir"), "import_name": import_name}
                                   if imported is not None else None),
                      "same_folder": same_dir, "breaks": breaks, "keeps": keeps,
                      "conda_version": record["version"] if record else None,
                      "channel": channel_name(record) if record else None},
            severity=severity,
            **fix.hit(),
        )


# ---------------------------------------------------------------- PKG003


def _conda_name_for(dist_key: str) -> str | None:
    """The conda package that provides a distribution not installed yet (torch -> pytorch), from the table."""
    for conda_name, dist_name in load_data("conda_names")["conda_to_dist"].items():
        if dist_name and normalize(dist_name) == dist_key:
            return conda_name
    return None


def _conda_specifier(specifier: object) -> str:
    # conda reads `numpy>=2,<3`; `==` pins are spelled with one `=` plus the full version.
    text = str(specifier)
    return text.replace("==", "=") if text.startswith("==") and "," not in text else text


def _requirement_fix(packages: PackagesFacts, dist: Distribution, installed: Distribution | None,
                     req: Requirement, wanted: str, conda_name: str | None) -> Fix:
    owned_by_conda = (installed is not None and installed.get("conda_record")) or \
        (installed is None and dist.get("conda_record"))
    if owned_by_conda and packages["conda"]["present"]:
        return fix_of(conda(packages, "install", f"{conda_name or req.name}{_conda_specifier(req.specifier)}"))
    if installed is not None and owner_tool(installed) in SYSTEM_OWNERS:
        return advice(f"{installed['name']} {installed['version']} comes from {owner_text(installed)}, which "
                      f"the system keeps at its release's version: create a venv "
                      f"(`{packages['interpreter']} -m venv --system-site-packages ~/venvs/train`) and "
                      f"install {wanted!r} there")
    if externally_managed(packages):
        if owner_tool(dist) in ("pip", "uv"):  # the user already installs with pip here: say so explicitly
            return fix_of(*pip_own(packages, "install", wanted))
        return advice(managed_advice(packages, f"install {wanted!r} (for {dist['name']}, from "
                                               f"{owner_text(dist)})"))
    return pip_fix(packages, "install", wanted)


def _other_major(req: Requirement, version: str) -> bool:
    """Does the requirement exclude every release of the installed version's major (numpy<2 under 2.2.6)?"""
    parsed = parsed_version(version)
    if parsed is None or not req.specifier:
        return False
    major = parsed.release[0]
    probes = [f"{major}.{minor}.0" for minor in range(0, 40)]
    return not any(req.specifier.contains(p, prereleases=True) for p in probes)


# complexity: 29 — each requirement line is parsed once, then passed over for an unparsable line, a marker that does not
#   hold here or a satisfied specifier before it is judged missing or mismatched: pip check's guards, in its order.
def find_broken_requirements(facts: Facts) -> Iterator[Hit]:
    packages = facts["packages"]
    markers = packages["markers"]
    visible = visible_distributions(packages)
    if not any(dist["requires"] for dist in visible.values()):
        return  # nothing to parse: a bare venv need not import packaging's parser
    from packaging.requirements import InvalidRequirement, Requirement

    conda_names = {item.key: item.record["name"] for item in conda_python_states(packages)}
    parsed: dict[str, Any] = {}
    for dist in visible.values():
        for text in dist["requires"]:
            if text not in parsed:  # the same requirement line recurs across many distributions
                try:
                    parsed[text] = Requirement(text)
                except InvalidRequirement:
                    parsed[text] = None
            req = parsed[text]
            if req is None:
                continue
            if req.marker is not None:
                if not markers:
                    continue
                try:
                    if not req.marker.evaluate({**markers, "extra": ""}):
                        continue
                except Exception:  # an unknown marker variable: pip skips it too
                    continue
            dep_key = normalize(req.name)
            installed = visible.get(dep_key)
            if installed is not None:
                if not req.specifier:
                    continue
                version = parsed_version(installed["version"])
                if version is None or req.specifier.contains(version, prereleases=True):
                    continue
                problem = "out-of-range"
                message = (f"{dist['name']} {dist['version']} requires {req.name}{req.specifier} "
                           f"but {installed['version']} is installed")
                if installed.get("owner"):
                    message += f" (from {owner_text(installed)})"
            else:
                problem = "missing"
                message = f"{dist['name']} {dist['version']} requires {req.name}{req.specifier}, which is not installed"
            # pip must get what was asked for: a direct URL is not the index's package of that name.
            wanted = (f"{req.name}{'[' + ','.join(sorted(req.extras)) + ']' if req.extras else ''}"
                      + (f" @ {req.url}" if req.url else str(req.specifier)))
            conda_name = conda_names.get(dep_key) or _conda_name_for(dep_key)
            fix = _requirement_fix(packages, dist, installed, req, wanted, conda_name)
            # An extension built for one NumPy major does not load under the other: that is an import error.
            abi_break = dep_key == "numpy" and dist.get("compiled") and installed is not None \
                and _other_major(req, installed["version"])
            yield Hit(
                message=message,
                evidence={"package": dist["name"], "version": dist["version"], "requirement": str(req),
                          "dependency": req.name, "installed_version": installed["version"] if installed else None,
                          "problem": problem, "owner": owner_text(dist),
                          "dependency_owner": owner_text(installed) if installed else None,
                          **({"compiled_dependant": True} if dep_key == "numpy" and dist.get("compiled") else {})},
                severity=Severity.ERROR if abi_break else None,
                **fix.hit(),
            )


RULES = {
    "PKG001": find_conda_pip_doubles,
    "PKG002": find_duplicate_distributions,
    "PKG003": find_broken_requirements,
}

