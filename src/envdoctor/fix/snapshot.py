"""What a package step may change, recorded before it runs and diffed after.

Before a pip or uv step: the distributions its argv names are found in the
prefix's site directories; every file their RECORD lists (dist-info included)
is copied into the journal with its sha256, and the inverse command is
computed from the dist-info and its direct_url.json (reinstall the recorded
version from the recorded source, or uninstall what the step adds). The
whole prefix is listed (path → inode, size, mtime, mode) so that after the
step the created, changed and removed paths are known exactly, and the files
the step left behind are hashed: undo verifies against those hashes.
"""
from __future__ import annotations

import csv
import io
import json
import os
import stat
from collections.abc import Mapping, Sequence
from typing import Any

from envdoctor.facts.packages import dist_name_from_dir, normalize
from envdoctor.fix.journal import Journal, describe, stat_key, walk_paths
from envdoctor.fix.tools import Target, package_arguments


def distribution_name(argument: str) -> str | None:
    """The normalized distribution a package argument names: a requirement, `name @ url`, or a wheel file."""
    base = os.path.basename(argument)
    if base.endswith((".whl", ".tar.gz", ".zip")) and ("/" in argument or os.path.exists(argument)):
        return normalize(base.split("-")[0])
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        return normalize(Requirement(argument).name)
    except InvalidRequirement:
        return None


def site_dirs(target: Target, report_target: dict[str, Any]) -> list[str]:
    """The target's own site directories that lie inside its prefix."""
    dirs = [*(report_target.get("site_packages") or []), report_target.get("purelib")]
    out = []
    for d in dirs:
        if d and os.path.isdir(d) and target.contains(d) and d not in out:
            out.append(d)
    return out


def find_distributions(names: set[str] | None, dirs: Sequence[str], with_files: bool = True) -> list[dict[str, Any]]:
    """Every dist-info / egg-info in `dirs` whose name is in `names` (None: all), with its files and source."""
    found = []
    for site in dirs:
        try:
            entries = sorted(os.listdir(site))
        except OSError:
            continue
        for entry in entries:
            if not entry.endswith((".dist-info", ".egg-info")):
                continue
            name, version = dist_name_from_dir(entry)
            if names is not None and normalize(name) not in names:
                continue
            folder = os.path.join(site, entry)
            found.append({"name": normalize(name), "version": version, "dist_info": folder,
                          "source": _recorded_source(folder),
                          "files": _recorded_files(site, folder) if with_files else []})
    return found


def _recorded_source(folder: str) -> str | None:
    try:
        with open(os.path.join(folder, "direct_url.json"), encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    url = data.get("url") if isinstance(data, dict) else None
    return url if isinstance(url, str) else None


def _recorded_files(site: str, folder: str) -> list[str]:
    """Absolute paths of the files RECORD lists, plus everything in the metadata folder."""
    paths: list[str] = []
    try:
        with open(os.path.join(folder, "RECORD"), encoding="utf-8", errors="surrogateescape") as fh:
            rows = list(csv.reader(io.StringIO(fh.read())))
    except OSError:
        rows = []
    for row in rows:
        if row and row[0]:
            paths.append(os.path.normpath(os.path.join(site, row[0])))
    if os.path.isdir(folder):
        for parent, _dirs, files in os.walk(folder):
            paths.extend(os.path.join(parent, f) for f in files)
    else:
        paths.append(folder)
    return sorted(set(paths))


def inverse_commands(tool: str, argv: Sequence[str], verb: str | None, names: set[str],
                     before: list[dict[str, Any]], python_option: str | None) -> list[list[str]]:
    """The commands that put the named distributions back as they were before the step."""
    present = {d["name"] for d in before}
    commands: list[list[str]] = []
    if tool == "pip":
        head = [argv[0], "-m", "pip"]
    else:
        head = [argv[0], "pip"]
    tail = ["--python", python_option] if tool == "uv" and python_option else []
    for dist in before:
        source = dist["source"]
        if source and source.startswith("file://") and not os.path.exists(source[len("file://"):]):
            source = None
        wanted = f"{dist['name']} @ {source}" if source else f"{dist['name']}=={dist['version']}"
        reinstall = "--force-reinstall" if tool == "pip" else "--reinstall"
        commands.append([*head, "install", *tail, "--no-deps", reinstall, wanted])
    if verb == "install":
        for name in sorted(names - present):
            commands.append([*head, "uninstall", *(["-y"] if tool == "pip" else []), *tail, name])
    return commands


def pip_would_install(argv: Sequence[str], environ: Mapping[str, str], timeout: float = 300.0) -> set[str]:
    """Every distribution a `pip install` would install or replace, dependencies included (`--dry-run --report`).

    pip resolves without changing anything; an old pip without `--report`, or a failed resolve,
    gives the empty set (undo then reinstalls what the step replaced unnamed, from its recorded source).
    """
    import tempfile

    from envdoctor.process import run_bounded

    with tempfile.TemporaryDirectory(prefix="envdoctor-fix-") as tmp:
        report_file = os.path.join(tmp, "report.json")
        run = run_bounded([*argv, "--dry-run", "--quiet", "--report", report_file], timeout, env=environ)
        try:
            with open(report_file, encoding="utf-8") as fh:
                report = json.load(fh)
        except (OSError, ValueError):
            return set()
    if not run.ok or not isinstance(report, dict):
        return set()
    names = set()
    for item in report.get("install") or []:
        name = (item.get("metadata") or {}).get("name") if isinstance(item, dict) else None
        if isinstance(name, str):
            names.add(normalize(name))
    return names


class PackageSnapshot:
    """The before-state of one package step, kept in the journal."""

    def __init__(self, journal: Journal, index: int, target: Target, dirs: Sequence[str],
                 environ: Mapping[str, str]) -> None:
        self.journal, self.index, self.target, self.dirs, self.environ = journal, index, target, dirs, environ

    def before(self, tool: str, argv: Sequence[str]) -> dict[str, Any]:
        """Copy the files of the distributions the step changes, list the prefix; the step's manifest part."""
        verb, args = package_arguments(tool, argv)
        names = {n for n in (distribution_name(a) for a in args) if n}
        if tool == "pip" and verb == "install":
            names |= pip_would_install(argv, self.environ)
        dists = find_distributions(names, self.dirs)
        copies: dict[str, dict[str, Any]] = {}
        for number, path in enumerate(p for d in dists for p in d["files"]):
            if path in copies or not self.target.contains_entry(path):
                continue
            entry = describe(path)
            if entry is None or entry["type"] not in ("file", "link"):
                continue
            stored = self.journal.copy_in(path, "snapshots", f"{self.index}/{number}")
            copies[path] = {"entry": entry, "stored": stored}
        listing = {path: stat_key(st) for path, st in walk_paths(self.target.prefix)}
        listing_file = self.journal.slot("listings", f"{self.index}-before.json")
        with open(listing_file, "w", encoding="utf-8", errors="surrogateescape") as fh:
            json.dump(listing, fh)
        python_option = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a in ("--python", "-p")), None)
        named = {d["dist_info"] for d in dists}
        return {
            "verb": verb,
            "tool": tool, "argv0": argv[0], "python_option": python_option,
            # Every other distribution's version and source: what to reinstall should the step replace it too.
            "installed": {d["dist_info"]: {k: d[k] for k in ("name", "version", "source")}
                          for d in find_distributions(None, self.dirs, with_files=False) if d["dist_info"] not in named},
            "distributions": [{k: d[k] for k in ("name", "version", "dist_info", "source")} for d in dists],
            "files_before": {p: c["entry"] for p, c in copies.items()},
            "snapshot": {p: c["stored"] for p, c in copies.items()},
            "listing_before": str(listing_file.relative_to(self.journal.path)),
            "inverse": inverse_commands(tool, argv, verb, names, dists, python_option),
        }

    def after(self, record: dict[str, Any]) -> dict[str, Any]:
        """What the step created, changed and removed, with the created and changed content hashed."""
        return diff_against_listing(self.journal, record, self.target)


def diff_against_listing(journal: Journal, record: dict[str, Any], target: Target) -> dict[str, Any]:
    with open(journal.stored(record["listing_before"]), encoding="utf-8", errors="surrogateescape") as fh:
        before: dict[str, list[int]] = json.load(fh)
    now = dict(walk_paths(target.prefix))
    created = {p: describe(p) for p in sorted(set(now) - set(before))}
    changed: dict[str, Any] = {}
    for path, st in now.items():
        if path in before and stat_key(st) != before[path] and not stat.S_ISDIR(st.st_mode):
            changed[path] = describe(path)
    removed = sorted(set(before) - set(now))
    uncovered = sorted(p for p in [*changed, *removed]
                       if p not in record["snapshot"] and not _is_dir_entry(before.get(p)))
    removed_dirs = {p: stat.S_IMODE(before[p][3]) for p in removed if _is_dir_entry(before[p])}
    # Distributions the step replaced without naming them (a dependency it upgraded): reinstalled on undo.
    replaced = [info for path, info in sorted(record.get("installed", {}).items()) if path in removed]
    reinstall = inverse_commands(record["tool"], [record["argv0"]], None, set(), replaced, record["python_option"])
    return {"created": created, "changed": changed, "removed": removed, "removed_dirs": removed_dirs,
            "not_snapshotted": uncovered, "reinstall": reinstall}


def _is_dir_entry(key: list[int] | None) -> bool:
    return key is not None and stat.S_ISDIR(key[3])


# ---------------------------------------------------------------- conda-owned steps


def conda_records(prefix: str | os.PathLike[str]) -> dict[str, dict[str, str]]:
    """name → {version, build, channel} from conda-meta/*.json: what a conda step changes, as conda sees it."""
    records: dict[str, dict[str, str]] = {}
    folder = os.path.join(prefix, "conda-meta")
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".json"))
    except OSError:
        return records
    for filename in names:
        try:
            with open(os.path.join(folder, filename), encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("name"), str):
            records[data["name"]] = {k: str(data.get(k) or "") for k in ("version", "build", "channel")}
    return records


def conda_inverse(executable: str, prefix: str, before: dict[str, dict[str, str]],
                  after: dict[str, dict[str, str]]) -> list[list[str]]:
    """The conda commands that bring the records from `after` back to `before`, exactly (name=version=build)."""
    commands = []
    for name, was in sorted(before.items()):
        if after.get(name) != was:
            channel = ["--override-channels", "-c", was["channel"]] if was["channel"] else []
            commands.append([executable, "install", "-p", prefix, "-y", "--no-deps", *channel,
                             f"{name}={was['version']}={was['build']}"])
    added = sorted(set(after) - set(before))
    if added:
        commands.append([executable, "remove", "-p", prefix, "-y", "--force", *added])
    return commands
