"""PKG009 unreadable-metadata: a metadata file that could not be used, and the rest still checked.

Every problem the packages probe met is one finding about that file: a
conda-meta record that is no JSON record, or that lists paths outside the
prefix; a dist-info or egg-info without usable METADATA; a bad
direct_url.json. (A Python that cannot start, or whose self-report is wrong,
stops the run with one line: see envdoctor.engine.) The fix uses the tool
that owns the file (conda, apt or dnf, pip/uv), moves a broken folder aside
instead of deleting it, and is advice where no command is safe.
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterator

from envdoctor.facts import Facts
from envdoctor.facts.distributions import Unreadable, dist_name_from_dir
from envdoctor.facts.packages import PackagesFacts
from envdoctor.remedies.install_commands import Fix, Move, advice, conda, fix_of, os_reinstall, pip_fix, shell_quote
from envdoctor.rules import Hit

_PROJECT_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$")


def _conda_record_fix(packages: PackagesFacts, path: str) -> tuple[Fix, str]:
    stem = os.path.basename(path)
    stem = stem[:-5] if stem.endswith(".json") else stem
    parts = stem.rsplit("-", 2)
    guess = f"{parts[0]}={parts[1]}={parts[2]}" if len(parts) == 3 else stem
    return fix_of(Move(path, path + ".broken"), conda(packages, "install", "--force-reinstall", guess)), \
        (parts[0] if len(parts) == 3 else stem)


def _dist_fix(packages: PackagesFacts, problem: Unreadable) -> tuple[Fix, str]:
    path = problem["path"]
    name, version = dist_name_from_dir(os.path.basename(path))
    owner = problem.get("owner")
    record = problem.get("conda_record")
    if record:
        return fix_of(conda(packages, "install", "--force-reinstall", f"{record}={version}" if version else record)), name
    if owner is not None and owner["tool"] in ("dpkg", "rpm") and owner["package"]:
        return fix_of(os_reinstall(owner["tool"], owner["package"])), name
    if not _PROJECT_NAME.match(name):  # not a name pip could install (a file name that is not UTF-8)
        return fix_of(Move(path, path + ".broken"), note="then reinstall the package it belonged to"), name
    return pip_fix(packages, "install", "--force-reinstall", "--no-deps", f"{name}=={version}" if version else name,
                   before=[Move(path, path + ".broken")], what=f"reinstall {name}"), name


def find_unreadable_metadata(facts: Facts) -> Iterator[Hit]:
    packages = facts["packages"]
    for problem in packages["unreadable"]:
        path, kind, reason = problem["path"], problem["kind"], problem["reason"]
        package: str | None = problem.get("package")
        message = f"cannot read {kind} metadata {path}: {reason} (the rest was still checked)"
        if kind == "conda-meta":
            fix, package = _conda_record_fix(packages, path)
        elif kind == "conda-meta-paths":
            message = f"the conda-meta record {path} {reason} (the rest was still checked)"
            fix = fix_of(conda(packages, "install", "--force-reinstall", package or ""),
                         note="rewrites the record from the package itself")
        elif kind in ("dist-info", "egg-info"):
            fix, package = _dist_fix(packages, problem)
        elif kind == "direct_url":
            package = dist_name_from_dir(os.path.basename(os.path.dirname(path)))[0]
            fix = advice(f"reinstall {package} the way it was installed (for an editable install, "
                         f"`pip install -e` again from its project), or move {shell_quote(path)} aside: "
                         "it is PEP 610's record of where the package came from")
        elif kind == "conda-meta-dir":
            message = (f"cannot read the conda-meta folder {path}: {reason} (nothing conda recorded "
                       "could be checked; the rest was)")
            fix = advice(f"ls -ld {shell_quote(path)}   # conda-meta must be a folder of package records: "
                         f"restore it, or recreate the environment at {packages['prefix']}")
        else:
            fix = advice(f"check the permissions of {path}")
        yield Hit(
            message=message,
            evidence={"path": path, "kind": kind, "reason": reason, "package": package,
                      "conda_record": problem.get("conda_record")},
            **fix.hit(),
        )


RULES = {
    "PKG009": find_unreadable_metadata,
}
