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

from envdoctor.facts.fleet import FLEET_REPORT_REASON, ExpectedNodes
from envdoctor.model import SCHEMA_VERSION, Finding, Location, Report, Severity

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


class _Reader:
    """json.loads hooks that keep a report readable and the output JSON: integers of any length,
    and NaN/Infinity (which are not JSON) read as null, each one counted for the note."""

    #: Python refuses to turn longer digit strings into int (sys.get_int_max_str_digits, 4300).
    MAX_INT_DIGITS = 4000

    def __init__(self) -> None:
        self.replaced: list[str] = []

    def parse_int(self, text: str) -> int | None:
        if len(text.lstrip("-")) <= self.MAX_INT_DIGITS:
            return int(text)
        self.replaced.append(f"an integer of {len(text.lstrip('-'))} digits")
        return None

    def parse_float(self, text: str) -> float | None:
        value = float(text)
        if value != value or value in (float("inf"), float("-inf")):
            self.replaced.append(f"{text[:20]} (beyond a float)")
            return None
        return value

    def parse_constant(self, text: str) -> None:
        self.replaced.append(text)
        return None

    def loads(self, text: str) -> object:
        return json.loads(text, parse_int=self.parse_int, parse_float=self.parse_float,
                          parse_constant=self.parse_constant)


def read_report(path: Path, replaced: list[str] | None = None) -> tuple[dict[str, object] | None, str | None]:
    """(report, None) for a usable envdoctor report, else (None, why it is skipped).

    `replaced`, when given, receives the values read as null (NaN, Infinity, over-long numbers).
    """
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
    reader = _Reader()
    try:
        data = reader.loads(text)
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON ({exc.msg}: line {exc.lineno} column {exc.colno})"
    except RecursionError:
        return None, "not usable JSON (nested too deep)"
    except ValueError as exc:  # a number Python cannot hold, whatever the hooks missed
        return None, f"not usable JSON ({exc})"
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
    if replaced is not None:
        replaced += reader.replaced
    return data, None


def _scheduler_node(report: dict[str, object]) -> str | None:
    host = report.get("host")
    scheduler = host.get("scheduler") if isinstance(host, dict) else None
    node = scheduler.get("node") if isinstance(scheduler, dict) else None
    return str(node) if node else None


def _hostname(report: dict[str, object]) -> object:
    host = report.get("host")
    return host.get("hostname") if isinstance(host, dict) else None


def _labels(loaded: list[tuple[Path, dict[str, object]]]) -> list[str]:
    """A name per node: the scheduler's node name, else its hostname, or the file name when those repeat."""
    names = [_scheduler_node(report) or str(_hostname(report) or path.stem)
             for path, report in loaded]
    if len(set(names)) == len(names):
        return names
    stems = [path.stem for path, _ in loaded]
    if len(set(stems)) == len(stems):
        return stems
    return [str(path) for path, _ in loaded]


def expected_nodes(expect: int | None, nodes: str | None,
                   environ: dict[str, str] | None = None) -> ExpectedNodes | None:
    """What compare expects: {"source", "nodes", "count"}, from --nodes/--expect or the job's node list."""
    from envdoctor.errors import UsageError
    from envdoctor.fleet.placement import expand_hostlist

    env = os.environ if environ is None else environ
    if expect is not None and expect < 1:
        raise UsageError(f"--expect {expect}: give the number of nodes that should have reported (1 or more)")
    source, names = None, None
    if nodes is not None:
        source, text = f"--nodes {nodes}", nodes
    elif expect is None and env.get("SLURM_JOB_NODELIST"):
        source, text = f"SLURM_JOB_NODELIST={env['SLURM_JOB_NODELIST']}", env["SLURM_JOB_NODELIST"]
    else:
        text = None
    if text is not None:
        try:
            names = expand_hostlist(text)
        except ValueError as exc:
            raise UsageError(f"{source}: not a Slurm host list ({exc})") from None
        if not names:
            raise UsageError(f"{source}: names no node")
    if expect is not None and names is not None and expect != len(names):
        raise UsageError(f"--expect {expect} but --nodes names {len(names)} nodes: give one of them, or agree")
    if names is None and expect is None:
        return None
    return {"source": source or f"--expect {expect}", "nodes": names or [],
            "count": len(names) if names is not None else expect}


def _match_expected(expected: ExpectedNodes, loaded: list[tuple[Path, dict[str, object]]],
                    labels: list[str]) -> ExpectedNodes:
    """Which expected nodes have a readable report (by scheduler node name, hostname, file name or label)."""
    seen: set[str] = set()
    for (path, report), label in zip(loaded, labels):
        seen |= {label, path.stem, str(_hostname(report) or "")}
        node = _scheduler_node(report)
        if node:
            seen.add(node)
    missing = [name for name in expected["nodes"] if name not in seen]
    return {**expected, "missing": missing, "reported": len(loaded)}


def _node_findings(loaded: list[tuple[Path, dict[str, object]]], labels: list[str],
                   fail_on: str) -> list[Finding]:
    """Each node's own findings at or above `fail_on`, once, with the nodes that have them."""
    if fail_on == "never":
        return []
    threshold = Severity.parse(fail_on).rank
    merged: dict[tuple[str, str, str], tuple[dict[str, object], list[str]]] = {}
    for (_path, report), label in zip(loaded, labels):
        items = report.get("findings")
        for item in items if isinstance(items, list) else []:
            if not isinstance(item, dict) or not item.get("rule") or not item.get("message"):
                continue
            try:
                severity = Severity.parse(str(item.get("severity")))
            except ValueError:
                continue
            if severity.rank < threshold:
                continue
            key = (str(item["rule"]), str(item["message"]), str(item.get("fix") or ""))
            merged.setdefault(key, (item, []))[1].append(label)
    found = []
    for item, nodes in merged.values():
        location = item.get("location")
        given = item.get("evidence")
        evidence: dict[str, object] = dict(given) if isinstance(given, dict) else {}
        try:
            where = Location(**location) if isinstance(location, dict) else None
        except TypeError:
            where = None
        found.append(Finding(
            rule=str(item["rule"]), name=str(item.get("name") or item["rule"]),
            severity=Severity.parse(str(item["severity"])),
            message=f"{item['message']} (on {', '.join(nodes)})",
            evidence={**evidence, "nodes": nodes}, fix=str(item.get("fix") or ""), location=where))
    return found


def compare_paths(paths: list[str], output: str | None = None, *, expect: int | None = None,
                  nodes: str | None = None, fail_on: str = "error",
                  environ: dict[str, str] | None = None) -> Report:
    """The fleet Report of the reports at `paths` (files, or folders of *.json files).

    `output`, where the fleet report will be written, is never read as a node's report.
    `expect`/`nodes` (or, when neither is given, the job's SLURM_JOB_NODELIST) say which nodes
    should have reported; a node without a readable report is FLT010. Each node's own findings at
    or above `fail_on` are listed once, with the nodes that have them.
    """
    from envdoctor.errors import UsageError
    from envdoctor.facts.fleet import FleetFacts, node_record
    from envdoctor.fleet import fleet_report
    from envdoctor.rules.fleet.drift import not_compared

    expected = expected_nodes(expect, nodes, environ)
    loaded: list[tuple[Path, dict[str, object]]] = []
    unreadable: list[dict[str, str]] = []
    replaced: dict[str, list[str]] = {}
    for path in _expand(paths, output):
        values: list[str] = []
        report, reason = read_report(path, values)
        if report is None:
            unreadable.append({"source": str(path), "reason": str(reason)})
        else:
            loaded.append((path, report))
            if values:
                replaced[str(path)] = values
    if not loaded and expected is None:
        listing = "; ".join(f"{u['source']}: {u['reason']}" for u in unreadable)
        raise UsageError(f"none of the files given is a readable envdoctor report ({listing})")
    labels = _labels(loaded)
    records = [node_record(label, report, str(path)) for label, (path, report) in zip(labels, loaded)]
    fleet: FleetFacts = {"mode": "compare", "nodes": records, "unreadable": unreadable}
    fleet["expected"] = (_match_expected(expected, loaded, labels) if expected is not None
                         else {"source": None, "nodes": [], "count": None, "missing": [],
                               "reported": len(loaded)})
    fleet["not_compared"] = not_compared(fleet)
    for label, (path, _report) in zip(labels, loaded):
        if str(path) in replaced:
            values = replaced[str(path)]
            shown = ", ".join(values[:6]) + (", …" if len(values) > 6 else "")
            fleet["not_compared"].append({
                "key": "non-json", "label": f"{len(values)} value{'s' if len(values) != 1 else ''} of {label}",
                "missing_on": [label],
                "reason": f"not JSON or too long to hold ({shown}): read as null"})
    return fleet_report(fleet, node_findings=_node_findings(loaded, labels, fail_on))
