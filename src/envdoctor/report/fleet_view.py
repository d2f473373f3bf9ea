"""How the fleet is shown: what differs across nodes, side by side.

Text and Markdown reports call these when a Report carries `fleet` facts
(from `compare` or `--distributed`). What differs is what the FLT rules
decided: each row is drawn from one finding's evidence (drift, stragglers,
packages, channels), never recomputed here, so the table and the findings
always agree. With a few nodes every node is a column; with many, each row
lists its values with the nodes that have them, so the view stays readable
for 64 nodes.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, TypedDict

from envdoctor.facts.fleet import FIELDS, SIZE_TOLERANCE, Field, nodes_of, show_value
from envdoctor.model import Finding, Report
from envdoctor.report.safe import printable

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import RenderableType

    from envdoctor.facts.fleet import FleetFacts

#: Up to this many nodes are drawn as columns; beyond it rows group nodes by value.
MAX_COLUMNS = 6
ODD_MARK = " *"

_FIELDS: dict[str, Field] = {f.key: f for f in FIELDS}


class DifferenceRow(TypedDict):
    """One thing that differs across the nodes, as the side-by-side view draws it."""

    what: str
    #: The odd nodes out.
    odd: list[str]
    #: node -> its value as shown (absent nodes missing; a conda version may be None).
    values: dict[str, object]


def _value_row(evidence: Mapping[str, object], kind_of_package: str = "version") -> DifferenceRow:
    fld = _FIELDS.get(str(evidence.get("what")))
    label, kind = (fld.label, fld.kind) if fld and "source" not in evidence else (str(evidence["what"]), kind_of_package)
    odd, values = evidence["odd_nodes"], evidence["values"]
    return {"what": label, "odd": [str(n) for n in odd] if isinstance(odd, list) else [],
            "values": {str(n): show_value(v, kind) for n, v in values.items()} if isinstance(values, Mapping) else {}}


def difference_rows(findings: Iterable[Finding]) -> list[DifferenceRow]:
    """One row per thing that differs, from the FLT findings: its label, each node's value, the odd nodes."""
    rows: list[DifferenceRow] = []
    slow_by_metric: dict[str, DifferenceRow] = {}
    order = ("FLT001", "FLT002", "FLT005", "FLT006", "FLT003", "FLT004")
    for finding in sorted((f for f in findings if f.rule in order), key=lambda f: order.index(f.rule)):
        evidence = finding.evidence
        if finding.rule in ("FLT001", "FLT002", "FLT005"):
            rows.append(_value_row(evidence))
        elif finding.rule == "FLT006":
            fld = _FIELDS.get(str(evidence["metric"]))
            kind = fld.kind if fld else "rate"
            row = slow_by_metric.setdefault(str(evidence["metric"]), {
                "what": fld.label if fld else evidence["metric"], "odd": [],
                "values": {n: show_value(v, kind) for n, v in evidence["values"].items()}})
            if not row["odd"]:
                rows.append(row)
            row["odd"].append(evidence["node"])
        elif finding.rule == "FLT003":
            present, absent = evidence["present_on"], evidence["absent_on"]
            values = {n: present.get(n, "absent") for n in [*present, *absent]}
            rows.append({"what": evidence["package"], "odd": list(evidence["odd_nodes"]), "values": values})
        else:
            rows.append({"what": f"{evidence['package']} channel", "odd": list(evidence["odd_nodes"]),
                         "values": dict(evidence["channels"])})
    return rows


def same_everywhere(fleet: FleetFacts, rows: list[DifferenceRow]) -> list[str]:
    """'Python 3.11.7'-style notes for the fields every node has and no row says differ."""
    nodes = nodes_of(fleet)
    differing = {row["what"] for row in rows}
    notes = []
    for fld in FIELDS:
        values = [n["values"][fld.key] for n in nodes if fld.key in (n.get("values") or {})]
        if len(nodes) > 1 and len(values) == len(nodes) and fld.label not in differing:
            if fld.kind in ("rate", "bytes-rate"):
                notes.append(f"{fld.label} (no straggler)")
            elif len(set(map(str, values))) != 1:
                notes.append(f"{fld.label} (within {int(SIZE_TOLERANCE * 100)}%)")
            else:
                notes.append(f"{fld.label} {show_value(values[0], fld.kind)}")
    return notes


def _cell(row: DifferenceRow, node: str) -> str:
    value = row["values"].get(node)
    if value is None:
        return "?"
    return printable(value, 300) + (ODD_MARK if node in row["odd"] else "")


def _grouped_cell(row: DifferenceRow) -> str:
    groups: dict[str, list[str]] = {}
    for node, value in row["values"].items():
        groups.setdefault(str(value), []).append(node)
    parts = sorted(groups.items(), key=lambda item: -len(item[1]))
    return printable("; ".join(f"{value} on {', '.join(nodes)}" for value, nodes in parts))


def _title(fleet: FleetFacts) -> str:
    nodes = nodes_of(fleet)
    if fleet.get("mode") == "distributed":
        expected = fleet.get("world_size") or len(nodes)
        return f"Fleet: {len(nodes)} of {expected} ranks reported"
    skipped = len(fleet.get("unreadable") or [])
    plural = "s" if len(nodes) != 1 else ""
    return f"Fleet: {len(nodes)} report{plural} compared" + (f", {skipped} skipped" if skipped else "")


def _notes(fleet: FleetFacts, rows: list[DifferenceRow]) -> list[str]:
    lines = []
    collective = fleet.get("collective")
    if isinstance(collective, Mapping):
        outcome = "ok" if collective.get("ok") else f"FAILED ({collective.get('error')})"
        lines.append(f"{collective.get('backend', 'gloo')} all_reduce across {collective.get('world_size')} "
                     f"ranks: {outcome} in {collective.get('seconds', 0):.2f} s")
    same = same_everywhere(fleet, rows)
    if same:
        lines.append("same on every node: " + ", ".join(same))
    by_reason: dict[str, list[str]] = {}
    for note in fleet.get("not_compared") or []:
        by_reason.setdefault(note["reason"], []).append(note["label"])
    if by_reason:
        lines.append("not compared: " + "; ".join(
            f"{', '.join(labels)} ({reason})" for reason, labels in by_reason.items()))
    return lines


def fleet_renderables(report: Report) -> list[RenderableType]:
    """Rich renderables: the title, the side-by-side table, what agreed, what was not compared."""
    from rich.table import Table
    from rich.text import Text

    fleet = report.facts["fleet"]
    nodes = [n["node"] for n in nodes_of(fleet)]
    rows = difference_rows(report.findings)
    items: list[RenderableType] = [Text(_title(fleet), style="bold")]
    if not rows:
        items.append(Text("no differences across the nodes in what was compared", style="green"))
    elif len(nodes) <= MAX_COLUMNS:
        table = Table(title="what differs (* = the odd ones out)", title_justify="left")
        table.add_column("")
        for node in nodes:  # Text, never a str: rich would parse `[...]` in a host name as markup
            table.add_column(Text(printable(node, 200)), overflow="fold")
        for row in rows:
            cells = [Text(_cell(row, n), style="bold red" if n in row["odd"] else "") for n in nodes]
            table.add_row(Text(printable(row["what"], 200)), *cells)
        items.append(table)
    else:
        table = Table(title="what differs", title_justify="left")
        table.add_column("")
        table.add_column("values")
        table.add_column("odd nodes", style="bold red")
        for row in rows:
            table.add_row(Text(printable(row["what"], 200)), Text(_grouped_cell(row)),
                          Text(printable(", ".join(row["odd"]))))
        items.append(table)
    items += [Text(printable(line), style="dim") for line in _notes(fleet, rows)]
    return items


_MD_SPECIAL = re.compile(r"([\\`*_\[\]|<>&~])")


def _md(text: object) -> str:
    """A table cell: control characters shown escaped, nothing Markdown or HTML would obey (links, tags, `|`)."""
    return _MD_SPECIAL.sub(r"\\\1", printable(" ".join(str(text).split()), 300))


def fleet_markdown(report: Report) -> str:
    fleet = report.facts["fleet"]
    nodes = [n["node"] for n in nodes_of(fleet)]
    rows = difference_rows(report.findings)
    lines = [f"## {_title(fleet)}", ""]
    if not rows:
        lines.append("No differences across the nodes in what was compared.")
    elif len(nodes) <= MAX_COLUMNS:
        lines += ["| | " + " | ".join(_md(n) for n in nodes) + " |", "|---" * (len(nodes) + 1) + "|"]
        for row in rows:
            cells = [f"**{_md(row['values'].get(n, '?'))}**" if n in row["odd"] else _md(row["values"].get(n, "?"))
                     for n in nodes]
            lines.append(f"| {_md(row['what'])} | " + " | ".join(cells) + " |")
        lines += ["", "Bold: the odd ones out (differ from most nodes, or a straggler)."]
    else:
        lines += ["| | values | odd nodes |", "|---|---|---|"]
        lines += [f"| {_md(r['what'])} | {_md(_grouped_cell(r))} | {_md(', '.join(r['odd']))} |" for r in rows]
    lines += ["", *(f"- {_md(line)}" for line in _notes(fleet, rows))]
    return "\n".join(lines)


def fleet_heading(report: Report, fleet: FleetFacts) -> str:
    """The first line of a fleet report (there is no single target environment to name)."""
    where = "torch.distributed ranks" if fleet.get("mode") == "distributed" else "saved reports"
    count = len(nodes_of(fleet))
    return (f"envdoctor {report.tool['version']} — fleet of {count} node{'s' if count != 1 else ''} from {where}, "
            f"on {report.host['hostname']} ({report.host['platform']})")
