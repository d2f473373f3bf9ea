"""PKG007 spec-drift: the installed environment against an environment.yml or requirements file.

The `--against` file is read by facts/spec.py; this compares its conda and
pip entries with the conda records and the visible distributions: missing,
another version, or another channel than the file asks.
"""
from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from envdoctor.catalog import load_data
from envdoctor.facts import Facts
from envdoctor.facts.conda_meta import CondaRecord
from envdoctor.facts.distributions import Distribution, normalize
from envdoctor.facts.packages import PackagesFacts
from envdoctor.facts.spec import CondaWanted, PipWanted, SpecFacts
from envdoctor.remedies.install_commands import Fix, advice, conda, fix_of, pip_fix, shell_quote
from envdoctor.rules import Hit
from envdoctor.rules.channels import channel_name
from envdoctor.rules.packages.states import same_version, visible_distributions

if TYPE_CHECKING:
    from packaging.requirements import Requirement


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


def compare_spec(spec: SpecFacts | dict[str, Any], packages: PackagesFacts) -> Iterator[dict[str, Any]]:
    """Each way the environment differs from the --against file: missing, version, channel."""
    here = _Installed(records={r["name"]: r for r in packages["conda"]["records"]},
                      visible=visible_distributions(packages), allowed=_channel_members(spec.get("channels") or []))
    for entry in spec.get("conda") or []:
        yield from _conda_drift(entry, spec, packages, here)
    for pip_entry in spec.get("pip") or []:
        yield from _pip_drift(pip_entry, spec, packages, here.visible)


@dataclass(frozen=True)
class _Installed:
    """What the environment holds, looked up by name: conda records, visible distributions, allowed channels."""

    records: dict[str, CondaRecord]
    visible: dict[str, Distribution]
    #: the channels (and their families' members) the file lists
    allowed: set[str]


def _conda_installed(name: str, packages: PackagesFacts, here: _Installed) -> tuple[str | None, str | None]:
    """(installed version, its channel) of a conda dependency: from conda-meta, else from what pip sees."""
    if packages["conda"]["present"]:
        record = here.records.get(name)
        return (record["version"], channel_name(record)) if record else (None, None)
    if name == "python":
        return packages["python"], None
    table = load_data("conda_names")["conda_to_dist"]
    dist = here.visible.get(normalize(table.get(name) or name))
    return (dist["version"] if dist else None), None


def _conda_install(entry: CondaWanted, packages: PackagesFacts) -> Fix:
    """How to install the entry as the file asks: conda where there is conda, else pip or a new venv."""
    name, version = entry["name"], entry.get("version") or ""
    if packages["conda"]["present"]:
        return fix_of(conda(packages, "install", entry["spec"]))
    if name == "python":  # pip cannot change the interpreter of a venv: it must be rebuilt
        wanted = version.lstrip("=<>!~").split(",")[0].rstrip(".*") or "3"
        return advice(f"python{wanted} -m venv --clear {shell_quote(packages['prefix'])}   "
                      "# then reinstall its packages")
    pin = "==" + version.lstrip("=") if version.startswith("=") else version
    return pip_fix(packages, "install", name + pin)


def _conda_drift(entry: CondaWanted, spec: SpecFacts | dict[str, Any], packages: PackagesFacts,
                 here: _Installed) -> Iterator[dict[str, Any]]:
    name, source = entry["name"], os.path.basename(spec["path"])
    installed, channel = _conda_installed(name, packages, here)
    wanted_channel = entry.get("channel")
    evidence = {"file": spec["path"], "package": name, "wanted": entry["spec"], "installed_version": installed,
                "installed_channel": channel, "wanted_channel": wanted_channel, "source": "conda",
                "line": entry.get("line")}
    if installed is None:
        yield {"message": f"{source} asks for {entry['spec']} but {name} is not installed",
               "evidence": {**evidence, "problem": "missing"}, "fix": _conda_install(entry, packages)}
        return
    if not conda_version_matches(entry.get("version"), installed):
        yield {"message": f"{source} asks for {entry['spec']} but {name} {installed} is installed",
               "evidence": {**evidence, "problem": "version"}, "fix": _conda_install(entry, packages)}
        return
    if not channel or channel.startswith("file:"):
        return
    if wanted_channel:
        other = channel_name({"channel": wanted_channel}) != channel
    else:
        other = bool(here.allowed) and channel not in here.allowed
    if other:
        target = wanted_channel or (spec.get("channels") or ["conda-forge"])[0]
        yield {"message": (f"{source} takes {name} from {wanted_channel or ', '.join(spec['channels'])} "
                           f"but {name} {installed} came from {channel}"),
               "evidence": {**evidence, "problem": "channel", "wanted_channel": wanted_channel or spec.get("channels")},
               "fix": fix_of(conda(packages, "install", "--override-channels", "-c", target, "--force-reinstall",
                                   f"{name}={installed}"))}


def _pip_drift(entry: PipWanted, spec: SpecFacts | dict[str, Any], packages: PackagesFacts,
               visible: Mapping[str, Distribution]) -> Iterator[dict[str, Any]]:
    from packaging.requirements import Requirement
    from packaging.version import InvalidVersion, Version

    req = Requirement(entry["spec"])
    if not _applies(req, packages["markers"]):
        return
    dist = visible.get(normalize(req.name))
    # A requirement pulled in by `-r other.txt` is reported where it is written.
    file = entry.get("file") or spec["path"]
    source = os.path.basename(file)
    evidence = {"file": file, "package": req.name, "wanted": entry["spec"],
                "installed_version": dist["version"] if dist else None, "source": "pip", "line": entry.get("line")}
    fix = pip_fix(packages, "install", str(req).split(";")[0].strip())
    if dist is None:
        yield {"message": f"{source} asks for {entry['spec']} but {req.name} is not installed",
               "evidence": {**evidence, "problem": "missing"}, "fix": fix}
        return
    try:
        ok = not req.specifier or req.specifier.contains(Version(dist["version"]), prereleases=True)
    except InvalidVersion:
        ok = True
    if not ok:
        yield {"message": f"{source} asks for {entry['spec']} but {req.name} {dist['version']} is installed",
               "evidence": {**evidence, "problem": "version"}, "fix": fix}


def _applies(req: Requirement, markers: Mapping[str, str] | None) -> bool:
    """Whether the requirement's environment marker holds here (no markers known: it does)."""
    if req.marker is None or not markers:
        return True
    try:
        return bool(req.marker.evaluate({**markers, "extra": ""}))
    except Exception:  # a marker this packaging cannot evaluate: the line is not judged
        return False


def find_spec_drift(facts: Facts) -> Iterator[Hit]:
    if not facts.config.against:
        return
    spec = facts["spec"]
    if not spec:
        return
    for drift in compare_spec(spec, facts["packages"]):
        yield Hit(message=drift["message"], evidence=drift["evidence"], **drift["fix"].hit())


RULES = {
    "PKG007": find_spec_drift,
}
