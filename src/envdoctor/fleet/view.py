"""How the fleet is shown: what differs across nodes, side by side.

Text and Markdown reports call these when a Report carries `fleet` facts
(from `compare` or `--distributed`). With a few nodes every node is a column;
with many, each row lists its values with the nodes that have them, so the
view stays readable for 64 nodes.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from envdoctor.fleet.drift import (
    SIZE_TOLERANCE,
    channel_drift,
    nodes_of,
    not_compared,
    package_drift,
    stragglers,
    value_drift,
)
from envdoctor.fleet.nodes import FIELDS, show_value

#: Up to this many nodes are drawn as columns; beyond it rows group nodes by value.
MAX_COLUMNS = 6
ODD_MARK = " *"


def difference_rows(fleet: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per thing that differs: its label, each node's value as text, the odd nodes."""
    rows: list[dict[str, Any]] = []
    for group in ("core", "version", "limit"):
        for drift in value_drift(fleet, group):
            rows.append({"what": drift["label"], "odd": drift["odd_nodes"],
                         "values": {n: show_value(v, drift["kind"]) for n, v in drift["values"].items()}})
    slow_by_metric: dict[str, dict[str, Any]] = {}
    for slow in stragglers(fleet):
        row = slow_by_metric.setdefault(slow["key"], {
            "what": slow["label"], "odd": [],
            "values": {n: show_value(v, slow["kind"]) for n, v in slow["values"].items()}})
        row["odd"].append(slow["node"])
    rows += slow_by_metric.values()
    packages = package_drift(fleet)
    for drift in packages["versions"]:
        rows.append({"what": drift["package"], "odd": drift["odd_nodes"], "values": dict(drift["values"])})
    for drift in packages["presence"]:
        odd = drift["absent_on"] if drift["majority"] == "present" else list(drift["present_on"])
        values = {n: drift["present_on"].get(n, "absent") for n in [*drift["present_on"], *drift["absent_on"]]}
        rows.append({"what": drift["package"], "odd": odd, "values": values})
    for drift in channel_drift(fleet):
        rows.append({"what": f"{drift['package']} channel", "odd": drift["odd_nodes"],
                     "values": dict(drift["channels"])})
    return rows


def same_everywhere(fleet: Mapping[str, Any]) -> list[str]:
    """'Python 3.11.7'-style notes for the fields every node has with one value."""
    nodes = nodes_of(fleet)
    differing = {row["what"] for row in difference_rows(fleet)}
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


def _cell(row: Mapping[str, Any], node: str) -> str:
    value = row["values"].get(node)
    if value is None:
        return "?"
    return str(value) + (ODD_MARK if node in row["odd"] else "")


def _grouped_cell(row: Mapping[str, Any]) -> str:
    groups: dict[str, list[str]] = {}
    for node, value in row["values"].items():
        groups.setdefault(str(value), []).append(node)
    parts = sorted(groups.items(), key=lambda item: -len(item[1]))
    return "; ".join(f"{value} on {', '.join(nodes)}" for value, nodes in parts)


def _title(fleet: Mapping[str, Any]) -> str:
    nodes = nodes_of(fleet)
    if fleet.get("mode") == "distributed":
        expected = fleet.get("world_size") or len(nodes)
        return f"Fleet: {len(nodes)} of {expected} ranks reported"
    skipped = len(fleet.get("unreadable") or [])
    plural = "s" if len(nodes) != 1 else ""
    return f"Fleet: {len(nodes)} report{plural} compared" + (f", {skipped} skipped" if skipped else "")


def _notes(fleet: Mapping[str, Any]) -> list[str]:
    lines = []
    collective = fleet.get("collective")
    if isinstance(collective, Mapping):
        outcome = "ok" if collective.get("ok") else f"FAILED ({collective.get('error')})"
        lines.append(f"{collective.get('backend', 'gloo')} all_reduce across {collective.get('world_size')} "
                     f"ranks: {outcome} in {collective.get('seconds', 0):.2f} s")
    same = same_everywhere(fleet)
    if same:
        lines.append("same on every node: " + ", ".join(same))
    by_reason: dict[str, list[str]] = {}
    for note in not_compared(fleet):
        by_reason.setdefault(note["reason"], []).append(note["label"])
    if by_reason:
        lines.append("not compared: " + "; ".join(
            f"{', '.join(labels)} ({reason})" for reason, labels in by_reason.items()))
    return lines


def fleet_renderables(fleet: Mapping[str, Any]) -> list[Any]:
    """Rich renderables: the title, the side-by-side table, what agreed, what was not compared."""
    from rich.table import Table
    from rich.text import Text

    nodes = [n["node"] for n in nodes_of(fleet)]
    rows = difference_rows(fleet)
    items: list[Any] = [Text(_title(fleet), style="bold")]
    if not rows:
        items.append(Text("no differences across the nodes in what was compared", style="green"))
    elif len(nodes) <= MAX_COLUMNS:
        table = Table(title="what differs (* = the odd ones out)", title_justify="left")
        table.add_column("")
        for node in nodes:
            table.add_column(node, overflow="fold")
        for row in rows:
            cells = [Text(_cell(row, n), style="bold red" if n in row["odd"] else "") for n in nodes]
            table.add_row(row["what"], *cells)
        items.append(table)
    else:
        table = Table(title="what differs", title_justify="left")
        table.add_column("")
        table.add_column("values")
        table.add_column("odd nodes", style="bold red")
        for row in rows:
            table.add_row(row["what"], _grouped_cell(row), ", ".join(row["odd"]))
        items.append(table)
    items += [Text(line, style="dim") for line in _notes(fleet)]
    return items


def _md(text: Any) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def fleet_markdown(fleet: Mapping[str, Any]) -> str:
    nodes = [n["node"] for n in nodes_of(fleet)]
    rows = difference_rows(fleet)
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
    lines += ["", *(f"- {_md(line)}" for line in _notes(fleet))]
    return "\n".join(lines)


def fleet_heading(report: Any, fleet: Mapping[str, Any]) -> str:
    """The first line of a fleet report (there is no single target environment to name)."""
    where = "torch.distributed ranks" if fleet.get("mode") == "distributed" else "saved reports"
    count = len(nodes_of(fleet))
    return (f"envdoctor {report.tool['version']} — fleet of {count} node{'s' if count != 1 else ''} from {where}, "
            f"on {report.host['hostname']} ({report.host['platform']})")
