"""PKG rules: conda records against the Python distributions actually on disk.

PKG001 conda-pip-double, PKG002 duplicate-distribution, PKG003
broken-requirement, PKG004 conflicting-distributions, PKG005
altered-conda-files, PKG006 shadowed-package, PKG007 spec-drift, PKG009
unreadable-metadata. Every rule reads the "packages" facts (and PKG007 the
"spec" facts); the conda-name table and the known clashes are data in
rules/conda_names.toml and rules/conflicts.toml.

One broken state is reported once: pip installed over a conda package is
PKG001 (or PKG004 when it is torch over pytorch), two dist-infos for one name
are PKG002, and PKG005 leaves out the records those already explain, since
pip's overwriting is what changed their files.
"""
from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

from envdoctor.catalog import load_data
from envdoctor.facts import Facts
from envdoctor.facts.packages import conda_distribution, dist_name_from_dir, normalize
from envdoctor.rules import Hit
from envdoctor.rules.channels import channel_name
from envdoctor.rules.install_commands import conda, conda_reinstall, pip, shell_quote
from envdoctor.versions import sortable_version

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


def dist_key_of(record: dict[str, Any]) -> str | None:
    """The Python distribution a conda record provides (the facts say; older facts are mapped here)."""
    if "distribution" in record:
        return record["distribution"]
    owned = {name: name for name in record.get("dist_names") or []}
    return conda_distribution(record["name"], owned)[0]


@dataclass
class CondaPython:
    """A conda record that provides a Python distribution, and what is on disk for it."""

    record: dict[str, Any]
    key: str
    env_dists: list[dict[str, Any]]
    #: ok, absent, replaced (pip over conda), doubled (two dist-infos) or clash (PKG004 owns it)
    state: str


def _is_conda_copy(dist: dict[str, Any], record: dict[str, Any]) -> bool:
    return dist.get("conda_record") == record["name"] and dist.get("installer") in (None, "conda") \
        and same_version(record["version"], dist["version"])


def _conda_pip_entries() -> list[dict[str, Any]]:
    return list(load_data("conflicts").get("conda_pip", []))


#: The last classification, kept while the same packages facts are asked about again.
_STATES_CACHE: list[Any] = [None, None]


def conda_python_states(facts: Facts) -> list[CondaPython]:
    """Each conda record with a Python distribution, classified once for all PKG rules."""
    packages = facts["packages"]
    if _STATES_CACHE[0] is packages:
        return _STATES_CACHE[1]
    states = _classify(packages)
    _STATES_CACHE[:] = [packages, states]
    return states


def _classify(packages: dict[str, Any]) -> list[CondaPython]:
    records = (packages.get("conda") or {}).get("records") or []
    by_key: dict[str, list[dict[str, Any]]] = {}
    for dist in packages.get("distributions") or []:
        if dist["location"] in OWN_LOCATIONS:
            by_key.setdefault(dist["key"], []).append(dist)
    clash_names = {name: entry for entry in _conda_pip_entries() for name in entry["conda"]}
    states = []
    for record in records:
        key = dist_key_of(record)
        if not key:
            continue
        dists = by_key.get(key, [])
        if not dists:
            state = "absent"
        elif len(dists) > 1:
            state = "doubled"
        elif _is_conda_copy(dists[0], record):
            state = "ok"
        else:
            state = "replaced"
            entry = clash_names.get(record["name"])
            if entry and any(fnmatch.fnmatch(key, pattern) for pattern in entry["dists"]):
                state = "clash"
        states.append(CondaPython(record, key, dists, state))
    return states


# ---------------------------------------------------------------- PKG001


def find_conda_pip_doubles(facts: Facts) -> Iterator[Hit]:
    packages = facts["packages"]
    for item in conda_python_states(facts):
        if item.state != "replaced":
            continue
        record, dist = item.record, item.env_dists[0]
        installer = dist.get("installer") or "an unknown installer"
        if same_version(record["version"], dist["version"]):
            what = f"{installer} reinstalled it over conda's copy at the same version"
        else:
            what = f"{installer} replaced it with {dist['version']}"
        yield Hit(
            message=(f"{record['name']} is recorded by conda as {record['version']} but {what}: "
                     "conda and pip now disagree about what is installed"),
            evidence={"package": record["name"], "distribution": dist["name"],
                      "conda_version": record["version"], "installed_version": dist["version"],
                      "installer": dist.get("installer"), "channel": channel_name(record),
                      "build": record["build"], "path": dist["path"]},
            fix=f"{pip(packages, 'uninstall', '-y', dist['name'])} && {conda_reinstall(packages, [record])}",
        )


# ---------------------------------------------------------------- PKG002


def find_duplicate_distributions(facts: Facts) -> Iterator[Hit]:
    packages = facts["packages"]
    groups: dict[str, list[dict[str, Any]]] = {}
    for dist in packages.get("distributions") or []:
        if dist["location"] in OWN_LOCATIONS:
            groups.setdefault(dist["key"], []).append(dist)
    conda_by_key = {item.key: item.record for item in conda_python_states(facts)}
    for key, dists in sorted(groups.items()):
        if len(dists) < 2:
            continue
        record = conda_by_key.get(key)
        versions = [d["version"] for d in dists]
        if record is not None:
            strays = [d for d in dists if not _is_conda_copy(d, record)]
            keep_text = f"conda's {record['version']}"
            restore = conda_reinstall(packages, [record])
        else:
            keep = max(dists, key=lambda d: sortable_version(d["version"]))
            strays = [d for d in dists if d is not keep]
            keep_text = keep["version"]
            restore = pip(packages, "install", "--force-reinstall", "--no-deps", f"{keep['name']}=={keep['version']}")
        remove = "rm -rf " + " ".join(_shell_path(d["path"]) for d in strays)
        yield Hit(
            message=(f"{dists[0]['name']} is installed {len(dists)} times in the environment "
                     f"({', '.join(versions)}): `import` loads one, `pip list` and `pip check` read another"),
            evidence={"package": dists[0]["name"], "versions": versions,
                      "paths": [d["path"] for d in dists],
                      "installers": [d.get("installer") for d in dists],
                      "conda_version": record["version"] if record else None,
                      "channel": channel_name(record) if record else None},
            fix=f"{remove} && {restore}   # keeps {keep_text}",
        )


def _labels(dists: list[dict[str, Any]]) -> list[str]:
    return [f"{d['name']} {d['version']}" for d in dists]


def _shell_path(path: str) -> str:
    return shell_quote(path)


# ---------------------------------------------------------------- PKG003


def visible_distributions(packages: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The distribution import metadata finds first for each name (sys.path order)."""
    visible: dict[str, dict[str, Any]] = {}
    for dist in sorted(packages.get("distributions") or [], key=lambda d: d["order"]):
        visible.setdefault(dist["key"], dist)
    return visible


@cache
def _parsed_version(text: str) -> Any:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(text)
    except InvalidVersion:
        return None


def find_broken_requirements(facts: Facts) -> Iterator[Hit]:
    from packaging.requirements import InvalidRequirement, Requirement

    packages = facts["packages"]
    markers = packages.get("markers")
    visible = visible_distributions(packages)
    conda_names = {item.key: item.record["name"] for item in conda_python_states(facts)}
    parsed: dict[str, Any] = {}
    for dist in visible.values():
        for text in dist.get("requires") or []:
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
                version = _parsed_version(installed["version"])
                if version is None or req.specifier.contains(version, prereleases=True):
                    continue
                problem = "out-of-range"
                message = (f"{dist['name']} {dist['version']} requires {req.name}{req.specifier} "
                           f"but {installed['version']} is installed")
            else:
                problem = "missing"
                message = f"{dist['name']} {dist['version']} requires {req.name}{req.specifier}, which is not installed"
            # pip must get what was asked for: a direct URL is not the index's package of that name.
            wanted = (f"{req.name}{'[' + ','.join(sorted(req.extras)) + ']' if req.extras else ''}"
                      + (f" @ {req.url}" if req.url else str(req.specifier)))
            conda_name = conda_names.get(dep_key) or _conda_name_for(dep_key)
            owned_by_conda = (installed is not None and installed.get("conda_record")) or \
                (installed is None and dist.get("conda_record"))
            if owned_by_conda and packages.get("conda", {}).get("present"):
                fix = conda(packages, "install", f"{conda_name or req.name}{_conda_specifier(req.specifier)}")
            else:
                fix = pip(packages, "install", wanted)
            yield Hit(
                message=message,
                evidence={"package": dist["name"], "version": dist["version"], "requirement": str(req),
                          "dependency": req.name, "installed_version": installed["version"] if installed else None,
                          "problem": problem},
                fix=fix,
            )


def _conda_name_for(dist_key: str) -> str | None:
    """The conda package that provides a distribution not installed yet (torch -> pytorch), from the table."""
    for conda_name, dist_name in load_data("conda_names")["conda_to_dist"].items():
        if dist_name and normalize(dist_name) == dist_key:
            return conda_name
    return None


def _conda_specifier(specifier: Any) -> str:
    # conda reads `numpy>=2,<3`; `==` pins are spelled with one `=` plus the full version.
    text = str(specifier)
    return text.replace("==", "=") if text.startswith("==") and "," not in text else text


# ---------------------------------------------------------------- PKG004


@cache
def _clash_patterns(patterns: tuple[str, ...]) -> dict[str, Any]:
    """A clash's members parsed once: normalized name -> specifier (empty for any version)."""
    from packaging.requirements import Requirement

    return {normalize(req.name): req.specifier for req in map(Requirement, patterns)}


def _clash_members(clash: dict[str, Any], visible: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    from packaging.version import InvalidVersion, Version

    members = []
    for key, specifier in _clash_patterns(tuple(clash["dists"])).items():
        dist = visible.get(key)
        if dist is None or dist["location"] == "stdlib":
            continue
        if specifier:
            try:
                if not specifier.contains(Version(dist["version"]), prereleases=True):
                    continue
            except InvalidVersion:
                continue
        members.append(dist)
    return members


def _required_by_another(members: list[dict[str, Any]], markers: dict[str, str] | None) -> set[str]:
    """Members another member depends on (for the target): a wrapper and its build, not two builds.

    On Windows `tensorflow` 2.11-2.15 is a thin wheel that requires `tensorflow-intel`,
    which holds the code: both installed is the normal state, and removing one breaks it.
    """
    from packaging.requirements import InvalidRequirement, Requirement

    keys = {d["key"] for d in members}
    required = set()
    for dist in members:
        for text in dist.get("requires") or []:
            try:
                req = Requirement(text)
            except InvalidRequirement:
                continue
            dep = normalize(req.name)
            if dep not in keys or dep == dist["key"]:
                continue
            if req.marker is not None:
                try:
                    if not markers or not req.marker.evaluate({**markers, "extra": ""}):
                        continue
                except Exception:
                    continue
            required.add(dep)
    return required


def distribution_clashes(packages: dict[str, Any]) -> Iterator[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Each known clash (rules/conflicts.toml) with two or more of its members installed."""
    visible = visible_distributions(packages)
    for clash in load_data("conflicts").get("clash", []):
        members = _clash_members(clash, visible)
        if len(members) >= 2:
            wrapped = _required_by_another(members, packages.get("markers"))
            if len([d for d in members if d["key"] not in wrapped]) >= 2:
                yield clash, members


def _remove(packages: dict[str, Any], dists: list[dict[str, Any]]) -> str:
    """Remove distributions with the tool that installed each: conda's own with conda, the rest with pip."""
    by_conda = sorted({d["conda_record"] for d in dists if d.get("conda_record")})
    by_pip = [d["name"] for d in dists if not d.get("conda_record")]
    steps = []
    if by_conda:  # --force: only this package, not everything that depends on it
        steps.append(conda(packages, "remove", "--force", *by_conda))
    if by_pip:
        steps.append(pip(packages, "uninstall", "-y", *by_pip))
    return " && ".join(steps)


def find_conflicting_distributions(facts: Facts) -> Iterator[Hit]:
    packages = facts["packages"]
    data = load_data("conflicts")
    installed = [d for d in visible_distributions(packages).values() if d["location"] != "stdlib"]
    for clash, members in distribution_clashes(packages):
        order = [normalize(n) for n in clash["prefer"]]
        keep = min(members, key=lambda d: order.index(d["key"]) if d["key"] in order else len(order))
        others = [d for d in members if d is not keep]
        # The clashing wheels share files: removing one deletes part of the other, so reinstall it.
        if keep.get("conda_record"):
            restore = conda(packages, "install", "--force-reinstall", f"{keep['conda_record']}={keep['version']}")
        else:
            restore = pip(packages, "install", "--force-reinstall", "--no-deps", f"{keep['name']}=={keep['version']}")
        yield Hit(
            message=(f"{' and '.join(_labels(members))} are both installed: "
                     f"{clash['reason']}"),
            evidence={"clash": clash["id"],
                      "installed": [{"package": d["name"], "version": d["version"], "installer": d.get("installer"),
                                     "location": d["location"]} for d in members],
                      "keep": keep["name"]},
            fix=f"{_remove(packages, others)} && {restore}",
        )
    records = {r["name"]: r for r in (packages.get("conda") or {}).get("records") or []}
    states = {item.record["name"]: item for item in conda_python_states(facts)}
    for entry in data.get("conda_pip", []):
        for conda_name in entry["conda"]:
            record = records.get(conda_name)
            if record is None:
                continue
            state = states.get(conda_name)
            if state is not None and state.state in ("doubled", "ok", "absent") and \
                    any(fnmatch.fnmatch(state.key, p) for p in entry["dists"]):
                continue  # PKG002 reports a doubled copy; an intact conda copy is no clash
            wheels = [d for d in installed if d.get("conda_record") is None and d.get("installer") != "conda"
                      and any(fnmatch.fnmatch(d["key"], p) for p in entry["dists"])]
            if not wheels:
                continue
            torch = visible_distributions(packages).get("torch")
            if entry["id"] == "cuda" and torch is not None and not torch.get("conda_record"):
                # `conda remove` takes the packages that depend on it along: say which, before they go.
                takes = sorted(r["name"] for r in records.values() if conda_name in (r.get("depends") or ()))
                fix = conda(packages, "remove", conda_name) + "   # torch comes from pip and uses the nvidia wheels" \
                    + (f"; conda also removes what depends on {conda_name}: {', '.join(takes)}" if takes else "")
            else:
                fix = f"{pip(packages, 'uninstall', '-y', *(d['name'] for d in wheels))} && {conda_reinstall(packages, [record])}"
            yield Hit(
                message=(f"{', '.join(_labels(wheels))} from pip beside "
                         f"{conda_name} {record['version']} from conda: {entry['reason']}"),
                evidence={"clash": entry["id"], "conda_package": conda_name, "conda_version": record["version"],
                          "channel": channel_name(record),
                          "installed": [{"package": d["name"], "version": d["version"],
                                         "installer": d.get("installer"), "location": d["location"]} for d in wheels]},
                fix=fix,
            )


# ---------------------------------------------------------------- PKG005


def find_altered_conda_files(facts: Facts) -> Iterator[Hit]:
    packages = facts["packages"]
    states = conda_python_states(facts)
    explained = {item.record["name"] for item in states if item.state in ("replaced", "doubled", "clash")}
    # A clashing twin (pillow-simd over conda's pillow) rewrote files PKG004 already reports.
    clashing = {d["key"] for _, members in distribution_clashes(packages) for d in members}
    explained |= {item.record["name"] for item in states if item.key in clashing}
    checked_by = (packages.get("conda") or {}).get("checked_by", "size")
    for record in (packages.get("conda") or {}).get("records") or []:
        if not record.get("missing_count") and not record.get("changed_count"):
            continue
        if record["name"] in explained:
            continue
        parts = []
        if record["missing_count"]:
            parts.append(f"{record['missing_count']} missing")
        if record["changed_count"]:
            parts.append(f"{record['changed_count']} changed ({checked_by})")
        yield Hit(
            message=(f"files of {record['name']} {record['version']} differ from what conda installed: "
                     f"{' and '.join(parts)} of {record['checked_files']} checked"),
            evidence={"package": record["name"], "version": record["version"], "build": record["build"],
                      "channel": channel_name(record), "missing": record.get("missing", []),
                      "missing_count": record["missing_count"],
                      "changed": [c["path"] for c in record.get("changed", [])], "changed_count": record["changed_count"],
                      "checked_by": checked_by, "record": record["file"]},
            fix=conda(packages, "install", "--force-reinstall", f"{record['name']}={record['version']}={record['build']}"),
        )


# ---------------------------------------------------------------- PKG006


def find_shadowed_packages(facts: Facts) -> Iterator[Hit]:
    packages = facts["packages"]
    outside = [d for d in packages.get("site_dirs") or [] if d["location"] in SHADOW_LOCATIONS and d.get("modules")]
    if not outside:
        return
    dists_in: dict[tuple[str, str], dict[str, Any]] = {}
    for dist in packages.get("distributions") or []:
        dists_in.setdefault((dist["site_dir"], dist["key"]), dist)
    reported = set()
    for dist in packages.get("distributions") or []:
        if dist["location"] not in OWN_LOCATIONS:
            continue
        for name in dist.get("import_names") or []:
            shadow = next((d for d in outside if d["order"] < dist["order"] and name in d["modules"]
                           and not _is_editable_source(dist, d["path"], name)), None)
            if shadow is None or (dist["key"], shadow["path"]) in reported:
                continue
            reported.add((dist["key"], shadow["path"]))
            copy = dists_in.get((shadow["path"], dist["key"]))
            where = {"user": "the user site", "pythonpath": "a PYTHONPATH entry",
                     "cwd": "the working directory", "other": "a directory earlier on sys.path"}[shadow["location"]]
            shadow_path = os.path.join(shadow["path"], (shadow.get("module_files") or {}).get(name, name))
            if shadow["location"] == "user" and copy is not None:
                fix = (f"{pip(packages, 'uninstall', '-y', copy['name'])}   # removes the user-site copy first; "
                       f"or export PYTHONNOUSERSITE=1 to ignore {shadow['path']}")
            elif shadow["location"] == "pythonpath":
                fix = (f"remove {shadow['path']} from PYTHONPATH (e.g. `unset PYTHONPATH` in the job script), "
                       f"or rename {shadow_path}")
            elif shadow["location"] == "cwd":
                fix = f"start training from another directory, or rename {shadow_path} (it hides the installed {name})"
            else:
                # Moved aside, not deleted: the stray copy may be someone's source, and a move undoes.
                moves = [shadow_path] + ([copy["path"]] if copy else [])
                fix = " && ".join(f"mv {_shell_path(p)} {_shell_path(p + '.disabled')}" for p in moves) \
                    + f"   # it hides the installed {name}; delete it once training works" \
                    + ("; or export PYTHONNOUSERSITE=1" if shadow["location"] == "user" else "")
            shown = f" {copy['version']}" if copy else ""
            yield Hit(
                message=(f"`import {name}` loads the copy{shown} in {where} ({shadow['path']}), not the "
                         f"environment's {dist['name']} {dist['version']}"),
                evidence={"package": dist["name"], "version": dist["version"], "import_name": name,
                          "shadow_path": shadow_path, "shadow_location": shadow["location"],
                          "shadow_version": copy["version"] if copy else None, "env_path": dist["path"]},
                fix=fix,
            )


def _is_editable_source(dist: dict[str, Any], directory: str, name: str) -> bool:
    """Is `directory`/`name` the very code an editable install of `dist` points at?

    `pip install -e .` in a project, then training started from that project
    (or with its src/ on PYTHONPATH), finds the same files twice on sys.path:
    that is one copy, not a shadow.
    """
    paths = dist.get("editable_paths")
    if not paths:
        return False
    real = os.path.realpath(directory)
    return real in paths or any(os.path.realpath(os.path.join(directory, n)) in paths
                                for n in (name, name + ".py"))


# ---------------------------------------------------------------- PKG007


def conda_version_matches(wanted: str | None, installed: str) -> bool:
    """Does `installed` satisfy a conda version constraint (`=1.26`, `==1.26.4`, `>=2,<3`, `1.26.*`)?"""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import InvalidVersion, Version

    if not wanted:
        return True
    for alternative in wanted.split("|"):
        alternative = alternative.strip()
        if alternative.startswith("==") and "," not in alternative:
            if same_version(alternative[2:], installed) or fnmatch.fnmatch(installed, alternative[2:]):
                return True
            continue
        if alternative.startswith("=") and not alternative.startswith("=="):
            prefix = alternative[1:].rstrip("*").rstrip(".")
            if installed == prefix or installed.startswith(prefix + ".") or same_version(prefix, installed):
                return True
            continue
        if "*" in alternative and alternative[:1] not in "<>!~=":
            if fnmatch.fnmatch(installed, alternative):
                return True
            continue
        try:
            if SpecifierSet(alternative).contains(Version(installed), prereleases=True):
                return True
        except (InvalidSpecifier, InvalidVersion):
            return True  # a constraint we cannot judge is not reported as drift
    return False


def _channel_members(channels: list[str]) -> set[str]:
    families = load_data("channels")["families"]
    members = set()
    for channel in channels:
        name = channel_name({"channel": channel}) or channel
        members.add(name)
        if name == "defaults":
            members.update(families["defaults"])
    return members


def compare_spec(spec: dict[str, Any], packages: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Each way the environment differs from the --against file: missing, version, channel."""
    source = os.path.basename(spec["path"])
    conda_present = bool((packages.get("conda") or {}).get("present"))
    records = {r["name"]: r for r in (packages.get("conda") or {}).get("records") or []}
    visible = visible_distributions(packages)
    allowed = _channel_members(spec.get("channels") or [])
    base = {"file": spec["path"]}
    for entry in spec.get("conda") or []:
        name = entry["name"]
        if conda_present:
            record = records.get(name)
            installed = record["version"] if record else None
            channel = channel_name(record) if record else None
        else:
            if name == "python":
                installed, channel = packages.get("python"), None
            else:
                table = load_data("conda_names")["conda_to_dist"]
                dist = visible.get(normalize(table.get(name) or name))
                installed, channel = (dist["version"] if dist else None), None
        evidence = {**base, "package": name, "wanted": entry["spec"], "installed_version": installed,
                    "installed_channel": channel, "wanted_channel": entry.get("channel"), "source": "conda",
                    "line": entry.get("line")}
        version = entry.get("version") or ""
        pin = "==" + version.lstrip("=") if version.startswith("=") else version
        if conda_present:
            install = conda(packages, "install", entry["spec"])
        elif name == "python":  # pip cannot change the interpreter of a venv: it must be rebuilt
            wanted = version.lstrip("=<>!~").split(",")[0].rstrip(".*") or "3"
            install = f"python{wanted} -m venv --clear {_shell_path(packages['prefix'])}   # then reinstall its packages"
        else:
            install = pip(packages, "install", name + pin)
        if installed is None:
            yield {"message": f"{source} asks for {entry['spec']} but {name} is not installed",
                   "evidence": {**evidence, "problem": "missing"}, "fix": install}
            continue
        if not conda_version_matches(entry.get("version"), installed):
            yield {"message": f"{source} asks for {entry['spec']} but {name} {installed} is installed",
                   "evidence": {**evidence, "problem": "version"}, "fix": install}
            continue
        wanted_channel = entry.get("channel")
        if channel and not channel.startswith("file:") and (
                (wanted_channel and channel_name({"channel": wanted_channel}) != channel)
                or (not wanted_channel and allowed and channel not in allowed)):
            target = wanted_channel or (spec.get("channels") or ["conda-forge"])[0]
            yield {"message": (f"{source} takes {name} from {wanted_channel or ', '.join(spec['channels'])} "
                               f"but {name} {installed} came from {channel}"),
                   "evidence": {**evidence, "problem": "channel",
                                "wanted_channel": wanted_channel or spec.get("channels")},
                   "fix": conda(packages, "install", "--override-channels", "-c", target, "--force-reinstall",
                                f"{name}={installed}")}
    for entry in spec.get("pip") or []:
        from packaging.requirements import Requirement
        from packaging.version import InvalidVersion, Version

        req = Requirement(entry["spec"])
        markers = packages.get("markers")
        if req.marker is not None and markers:
            try:
                if not req.marker.evaluate({**markers, "extra": ""}):
                    continue
            except Exception:
                continue
        dist = visible.get(normalize(req.name))
        # A requirement pulled in by `-r other.txt` is reported where it is written.
        source = os.path.basename(entry.get("file") or spec["path"])
        evidence = {**base, "file": entry.get("file") or spec["path"], "package": req.name, "wanted": entry["spec"],
                    "installed_version": dist["version"] if dist else None, "source": "pip",
                    "line": entry.get("line")}
        fix = pip(packages, "install", str(req).split(";")[0].strip())
        if dist is None:
            yield {"message": f"{source} asks for {entry['spec']} but {req.name} is not installed",
                   "evidence": {**evidence, "problem": "missing"}, "fix": fix}
            continue
        try:
            ok = not req.specifier or req.specifier.contains(Version(dist["version"]), prereleases=True)
        except InvalidVersion:
            ok = True
        if not ok:
            yield {"message": f"{source} asks for {entry['spec']} but {req.name} {dist['version']} is installed",
                   "evidence": {**evidence, "problem": "version"}, "fix": fix}


def find_spec_drift(facts: Facts) -> Iterator[Hit]:
    if not facts.config.against:
        return
    spec = facts["spec"]
    if not spec:
        return
    for drift in compare_spec(spec, facts["packages"]):
        yield Hit(message=drift["message"], evidence=drift["evidence"], fix=drift["fix"])


# ---------------------------------------------------------------- PKG009

_PROJECT_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$")


def find_unreadable_metadata(facts: Facts) -> Iterator[Hit]:
    packages = facts["packages"]
    for problem in packages.get("unreadable") or []:
        path = problem["path"]
        base = os.path.basename(path)
        if problem["kind"] == "conda-meta":
            stem = base[:-5] if base.endswith(".json") else base
            parts = stem.rsplit("-", 2)
            guess = f"{parts[0]}={parts[1]}={parts[2]}" if len(parts) == 3 else stem
            fix = (f"mv {_shell_path(path)} {_shell_path(path + '.broken')} && "
                   + conda(packages, "install", "--force-reinstall", guess))
            package = parts[0] if len(parts) == 3 else stem
        elif problem["kind"] in ("dist-info", "egg-info"):
            name, version = dist_name_from_dir(base)
            package = name
            owner = problem.get("conda_record")
            if owner:
                fix = conda(packages, "install", "--force-reinstall", f"{owner}={version}" if version else owner)
            elif not _PROJECT_NAME.match(name):  # not a name pip could install (a file name that is not UTF-8)
                fix = f"rm -rf {_shell_path(path)}   # then reinstall the package it belonged to"
            else:
                fix = (f"rm -rf {_shell_path(path)} && "
                       + pip(packages, "install", "--force-reinstall", "--no-deps",
                             f"{name}=={version}" if version else name))
        elif problem["kind"] == "conda-meta-dir":
            package = None
            fix = (f"ls -ld {_shell_path(path)}   # conda-meta must be a folder of package records: "
                   f"restore it, or recreate the environment at {packages.get('prefix')}")
        else:
            package = None
            fix = f"check the permissions of {path}"
        yield Hit(
            message=(f"cannot read the conda-meta folder {path}: {problem['reason']} (nothing conda recorded "
                     "could be checked; the rest was)" if problem["kind"] == "conda-meta-dir" else
                     f"cannot read {problem['kind']} metadata {path}: {problem['reason']} "
                     "(the rest was still checked)"),
            evidence={"path": path, "kind": problem["kind"], "reason": problem["reason"], "package": package,
                      "conda_record": problem.get("conda_record")},
            fix=fix,
        )


RULES = {
    "PKG001": find_conda_pip_doubles,
    "PKG002": find_duplicate_distributions,
    "PKG003": find_broken_requirements,
    "PKG004": find_conflicting_distributions,
    "PKG005": find_altered_conda_files,
    "PKG006": find_shadowed_packages,
    "PKG007": find_spec_drift,
    "PKG009": find_unreadable_metadata,
}
