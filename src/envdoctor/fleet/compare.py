"""`envdoctor compare`: saved reports from several machines, side by side.

Clusters run `envdoctor report --json --output reports/%N.json` on every node
through the scheduler they already have; `compare_paths` reads those files (or
the folders holding them), names and skips the ones it cannot use (not JSON,
not an envdoctor report, another schema version) and returns the fleet Report:
FLT findings for drift and stragglers, and the `fleet` facts the side-by-side
view is drawn from.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from envdoctor.facts.fleet import FLEET_REPORT_REASON
from envdoctor.model import SCHEMA_VERSION, Report

#: A report bigger than this is not read (a node's report is a few MB at most).
MAX_REPORT_BYTES = 64 * 2**20


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve() or os.path.samefile(a, b)
    except OSError:
        return False


def _expand(paths: list[str], output: str | None = None) -> list[Path]:
    """The report files: files as given, and the *.json files directly inside folders.

    The output path is never one of them: in `compare reports/ -o reports/fleet.json`
    it holds the previous run's fleet report, not a node's.
    """
    from envdoctor.errors import UsageError

    mine = Path(output) if output else None
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(p for p in path.glob("*.json")
                           if not p.is_dir() and not (mine is not None and _same_file(p, mine)))
            if not found:
                raise UsageError(f"{raw} is a folder without any .json report in it")
            files += found
        elif mine is not None and _same_file(path, mine):
            raise UsageError(f"{raw} is both a report to compare and the output (-o): give another output path")
        elif path.exists() or path.is_symlink():
            files.append(path)
        else:
            raise UsageError(f"no report at {raw}: the file does not exist")
    return list(dict.fromkeys(files))


def read_report(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """(report, None) for a usable envdoctor report, else (None, why it is skipped)."""
    from envdoctor.facts.readfile import read_bytes

    try:
        # A regular file only, never a blocking open, at most MAX_REPORT_BYTES.
        text = read_bytes(str(path), MAX_REPORT_BYTES).decode("utf-8")
    except UnicodeDecodeError:
        return None, "not a text file (undecodable bytes)"
    except OSError as exc:
        return None, f"cannot be read: {exc.strerror or exc}"
    if not text.strip():
        return None, "empty file"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON ({exc.msg}: line {exc.lineno} column {exc.colno})"
    except RecursionError:
        return None, "not usable JSON (nested too deep)"
    if not isinstance(data, dict) or not isinstance(data.get("tool"), dict) \
            or data["tool"].get("name") != "envdoctor":
        return None, "not an envdoctor report (no tool.name = envdoctor)"
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        return None, (f"schema_version {version!r}, but this envdoctor reads schema version "
                      f"{SCHEMA_VERSION}")
    if not isinstance(data.get("facts"), dict):
        return None, "an envdoctor report without facts"
    if isinstance(data["facts"].get("fleet"), dict):
        return None, FLEET_REPORT_REASON
    return data, None


def _labels(loaded: list[tuple[Path, dict[str, Any]]]) -> list[str]:
    """A name per node: its hostname, or the file name when hostnames repeat."""
    hostnames = [str((report.get("host") or {}).get("hostname") or path.stem) for path, report in loaded]
    if len(set(hostnames)) == len(hostnames):
        return hostnames
    stems = [path.stem for path, _ in loaded]
    if len(set(stems)) == len(stems):
        return stems
    return [str(path) for path, _ in loaded]


def compare_paths(paths: list[str], output: str | None = None) -> Report:
    """The fleet Report of the reports at `paths` (files, or folders of *.json files).

    `output`, where the fleet report will be written, is never read as a node's report.
    """
    from envdoctor.errors import UsageError
    from envdoctor.facts.fleet import FleetFacts, node_record
    from envdoctor.fleet import fleet_report
    from envdoctor.rules.fleet.drift import not_compared

    loaded: list[tuple[Path, dict[str, Any]]] = []
    unreadable: list[dict[str, str]] = []
    for path in _expand(paths, output):
        report, reason = read_report(path)
        if report is None:
            unreadable.append({"source": str(path), "reason": str(reason)})
        else:
            loaded.append((path, report))
    if not loaded:
        listing = "; ".join(f"{u['source']}: {u['reason']}" for u in unreadable)
        raise UsageError(f"none of the files given is a readable envdoctor report ({listing})")
    nodes = [node_record(label, report, str(path)) for label, (path, report) in zip(_labels(loaded), loaded)]
    fleet: FleetFacts = {"mode": "compare", "nodes": nodes, "unreadable": unreadable}
    fleet["not_compared"] = not_compared(fleet)
    return fleet_report(fleet)
