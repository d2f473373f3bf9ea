"""PKG004 conflicting-distributions and PKG005 altered-conda-files.

PKG004: two distributions known to clash (catalog/conflicts.toml) both
installed, or pip wheels beside the conda package they duplicate. PKG005:
files of a conda package missing or changed, leaving out the records PKG001,
PKG002 and PKG004 already explain.
"""
from __future__ import annotations

import fnmatch
from collections.abc import Iterator, Mapping
from functools import cache
from typing import Any

from envdoctor.catalog import load_data
from envdoctor.facts import Facts
from envdoctor.facts.conda_meta import CondaRecord
from envdoctor.facts.distributions import Distribution, normalize
from envdoctor.facts.packages import PackagesFacts
from envdoctor.remedies.install_commands import Command, conda, conda_reinstall, fix_of, pip_own
from envdoctor.rules import Hit
from envdoctor.rules.channels import channel_name
from envdoctor.rules.packages.states import conda_python_states, labels, owner_text, visible_distributions


@cache
def _clash_patterns(patterns: tuple[str, ...]) -> dict[str, Any]:
    """A clash's members parsed once: normalized name -> specifier (empty for any version)."""
    from packaging.requirements import Requirement

    return {normalize(req.name): req.specifier for req in map(Requirement, patterns)}


def _clash_members(clash: dict[str, Any], visible: dict[str, Distribution]) -> list[Distribution]:
    from packaging.version import InvalidVersion, Version

    members = []
    for key, specifier in _clash_patterns(tuple(clash["dists"])).items():
        dist = visible.get(key)
        if dist is None or dist.get("location") == "stdlib":
            continue
        if specifier:
            try:
                if not specifier.contains(Version(dist["version"]), prereleases=True):
                    continue
            except InvalidVersion:
                continue
        members.append(dist)
    return members


def _required_by_another(members: list[Distribution], markers: dict[str, str] | None) -> set[str]:
    """Members another member depends on (for the target): a wrapper and its build, not two builds.

    On Windows `tensorflow` 2.11-2.15 is a thin wheel that requires `tensorflow-intel`,
    which holds the code: both installed is the normal state, and removing one breaks it.
    """
    from packaging.requirements import InvalidRequirement, Requirement

    keys = {d["key"] for d in members}
    required = set()
    for dist in members:
        for text in dist["requires"]:
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


def distribution_clashes(packages: PackagesFacts) -> Iterator[tuple[dict[str, Any], list[Distribution]]]:
    """Each known clash (catalog/conflicts.toml) with two or more of its members installed."""
    visible = visible_distributions(packages)
    if len(visible) < 2:
        return  # no clash with fewer than two (and none to parse: a bare venv need not import packaging)
    for clash in load_data("conflicts").get("clash", []):
        members = _clash_members(clash, visible)
        if len(members) >= 2:
            wrapped = _required_by_another(members, packages["markers"])
            if len([d for d in members if d["key"] not in wrapped]) >= 2:
                yield clash, members


def _remove(packages: PackagesFacts, dists: list[Distribution]) -> list[Command]:
    """Remove distributions with the tool that installed each: conda's own with conda, the rest with pip."""
    by_conda = sorted({d["conda_record"] for d in dists if d.get("conda_record")})
    by_pip = [d["name"] for d in dists if not d.get("conda_record")]
    steps = []
    if by_conda:  # --force: only this package, not everything that depends on it
        steps.append(conda(packages, "remove", "--force", *by_conda))
    if by_pip:
        steps.extend(pip_own(packages, "uninstall", "-y", *by_pip))
    return steps


def find_conflicting_distributions(facts: Facts) -> Iterator[Hit]:
    packages = facts["packages"]
    for clash, members in distribution_clashes(packages):
        yield _twin_clash(packages, clash, members)
    yield from _conda_pip_clashes(packages)


def _twin_clash(packages: PackagesFacts, clash: Mapping[str, Any], members: list[Distribution]) -> Hit:
    """Two distributions that write the same files (pillow and pillow-simd): keep the preferred one."""
    order = [normalize(n) for n in clash["prefer"]]
    keep = min(members, key=lambda d: order.index(d["key"]) if d["key"] in order else len(order))
    others = [d for d in members if d is not keep]
    # The clashing wheels share files: removing one deletes part of the other, so reinstall it.
    if keep.get("conda_record"):
        restore = [conda(packages, "install", "--force-reinstall", f"{keep['conda_record']}={keep['version']}")]
    else:
        restore = pip_own(packages, "install", "--force-reinstall", "--no-deps", f"{keep['name']}=={keep['version']}")
    return Hit(
        message=(f"{' and '.join(labels(members))} are both installed: "
                 f"{clash['reason']}"),
        evidence={"clash": clash["id"],
                  "installed": [{"package": d["name"], "version": d["version"], "installer": d["installer"],
                                 "owner": owner_text(d), "location": d.get("location")} for d in members],
                  "keep": keep["name"]},
        **fix_of(*_remove(packages, others), *restore).hit(),
    )


def _conda_pip_clashes(packages: PackagesFacts) -> Iterator[Hit]:
    """A pip wheel beside the conda package that ships the same library (catalog/conflicts.toml's conda_pip)."""
    visible = visible_distributions(packages)
    installed = [d for d in visible.values() if d.get("location") != "stdlib"]
    records = {r["name"]: r for r in packages["conda"]["records"]}
    states = {item.record["name"]: item for item in conda_python_states(packages)}
    for entry in load_data("conflicts").get("conda_pip", []):
        for conda_name in entry["conda"]:
            record = records.get(conda_name)
            if record is None:
                continue
            state = states.get(conda_name)
            if state is not None and state.state in ("doubled", "ok", "absent") and \
                    any(fnmatch.fnmatch(state.key, p) for p in entry["dists"]):
                continue  # PKG002 reports a doubled copy; an intact conda copy is no clash
            wheels = [d for d in installed if d.get("conda_record") is None and d["installer"] != "conda"
                      and any(fnmatch.fnmatch(d["key"], p) for p in entry["dists"])]
            if wheels:
                yield _conda_pip_clash(packages, entry, record, wheels, records, visible.get("torch"))


def _conda_pip_clash(packages: PackagesFacts, entry: Mapping[str, Any], record: CondaRecord, wheels: list[Distribution],
                     records: dict[str, CondaRecord], torch: Distribution | None) -> Hit:
    conda_name = record["name"]
    if entry["id"] == "cuda" and torch is not None and not torch.get("conda_record"):
        # `conda remove` takes the packages that depend on it along: say which, before they go.
        takes = sorted(r["name"] for r in records.values() if conda_name in r["depends"])
        fix = fix_of(conda(packages, "remove", conda_name),
                     note="torch comes from pip and uses the nvidia wheels"
                     + (f"; conda also removes what depends on {conda_name}: {', '.join(takes)}" if takes else ""))
    else:
        remove = pip_own(packages, "uninstall", "-y", *(d["name"] for d in wheels))
        fix = fix_of(*remove, conda_reinstall(packages, [record]))
    return Hit(
        message=(f"{', '.join(labels(wheels))} from pip beside "
                 f"{conda_name} {record['version']} from conda: {entry['reason']}"),
        evidence={"clash": entry["id"], "conda_package": conda_name, "conda_version": record["version"],
                  "channel": channel_name(record),
                  "installed": [{"package": d["name"], "version": d["version"],
                                 "installer": d["installer"], "location": d.get("location")} for d in wheels]},
        **fix.hit(),
    )


def find_altered_conda_files(facts: Facts) -> Iterator[Hit]:
    packages = facts["packages"]
    states = conda_python_states(packages)
    explained = {item.record["name"] for item in states if item.state in ("replaced", "doubled", "clash")}
    # A clashing twin (pillow-simd over conda's pillow) rewrote files PKG004 already reports.
    clashing = {d["key"] for _, members in distribution_clashes(packages) for d in members}
    explained |= {item.record["name"] for item in states if item.key in clashing}
    checked_by = packages["conda"]["checked_by"]
    for record in packages["conda"]["records"]:
        if not record["missing_count"] and not record["changed_count"]:
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
            **fix_of(conda(packages, "install", "--force-reinstall",
                           f"{record['name']}={record['version']}={record['build']}")).hit(),
        )


RULES = {
    "PKG004": find_conflicting_distributions,
    "PKG005": find_altered_conda_files,
}
