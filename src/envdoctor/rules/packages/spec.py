"""PKG007 spec-drift: the installed environment against an environment.yml or requirements file.

The `--against` file is read by facts/spec.py; this compares its conda and
pip entries with the conda records and the visible distributions: missing,
another version, or another channel than the file asks.
"""
from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterator
from typing import Any

from envdoctor.catalog import load_data
from envdoctor.facts import Facts
from envdoctor.facts.distributions import normalize
from envdoctor.facts.packages import PackagesFacts
from envdoctor.facts.spec import SpecFacts
from envdoctor.remedies.install_commands import advice, conda, fix_of, pip_fix, shell_quote
from envdoctor.rules import Hit
from envdoctor.rules.channels import channel_name
from envdoctor.rules.packages.states import same_version, visible_distributions


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
    source = os.path.basename(spec["path"])
    conda_present = packages["conda"]["present"]
    records = {r["name"]: r for r in packages["conda"]["records"]}
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
                installed, channel = packages["python"], None
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
            install = fix_of(conda(packages, "install", entry["spec"]))
        elif name == "python":  # pip cannot change the interpreter of a venv: it must be rebuilt
            wanted = version.lstrip("=<>!~").split(",")[0].rstrip(".*") or "3"
            install = advice(f"python{wanted} -m venv --clear {shell_quote(packages['prefix'])}   "
                             "# then reinstall its packages")
        else:
            install = pip_fix(packages, "install", name + pin)
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
                   "fix": fix_of(conda(packages, "install", "--override-channels", "-c", target, "--force-reinstall",
                                f"{name}={installed}"))}
    for entry in spec.get("pip") or []:
        from packaging.requirements import Requirement
        from packaging.version import InvalidVersion, Version

        req = Requirement(entry["spec"])
        markers = packages["markers"]
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
        fix = pip_fix(packages, "install", str(req).split(";")[0].strip())
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
        yield Hit(message=drift["message"], evidence=drift["evidence"], **drift["fix"].hit())


RULES = {
    "PKG007": find_spec_drift,
}
