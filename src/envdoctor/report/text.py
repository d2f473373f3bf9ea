"""The human report, drawn with rich: a summary line, findings by severity, the loader.

Plain and readable when the output is not a terminal or NO_COLOR is set
(rich drops the styles itself); `render` gives the same report as plain text.
"""
from __future__ import annotations

import io
from typing import Any

from envdoctor.model import Report, Severity

_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}
_HEADING = {"error": "Errors", "warning": "Warnings", "info": "Info"}


def format_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        items = [format_value(v) for v in value[:8]]
        more = f", … {len(value) - 8} more" if len(value) > 8 else ""
        return "[" + ", ".join(items) + more + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {format_value(v)}" for k, v in list(value.items())[:8]) + "}"
    return str(value)


def summary_line(report: Report) -> str:
    counts = report.summary
    parts = [f"{counts['error']} error{'s' if counts['error'] != 1 else ''}",
             f"{counts['warning']} warning{'s' if counts['warning'] != 1 else ''}",
             f"{counts['info']} info"]
    skipped = report.not_checked()
    if skipped:  # a probe that could not run is not an all-clear
        parts.append("not checked: " + "; ".join(f"{', '.join(rules)} (the {probe} probe failed)"
                                                  for probe, rules in skipped.items()))
    return ", ".join(parts)


def write(report: Report, console: Any) -> None:
    """Draw the report on a rich Console."""
    from rich.markup import escape
    from rich.text import Text

    target = report.target
    fleet = report.facts.get("fleet")
    if fleet:  # compare / --distributed: many nodes, no single environment to name
        from envdoctor.fleet.view import fleet_heading

        console.print(Text(fleet_heading(report, fleet), style="bold"))
    else:
        where = f"{target.get('kind') or '?'} environment {target.get('prefix') or '?'}"
        python = f"Python {target['python']}" if target.get("python") else "no Python found"
        console.print(Text(f"envdoctor {report.tool['version']} — {where} ({python}) "
                           f"on {report.host['hostname']} ({report.host['platform']})", style="bold"))
    counts = report.summary
    worst = next((s for s in ("error", "warning", "info") if counts[s]), None)
    if worst is None and report.not_checked():
        worst = "warning"  # nothing found, but not everything could be looked at
    mark = {"error": "✗", "warning": "!", "info": "i", None: "✓"}[worst]
    console.print(Text(f"{mark} {summary_line(report)}", style=_STYLE.get(worst or "", "bold green")))
    if fleet:
        from envdoctor.fleet.view import fleet_renderables

        console.print()
        for item in fleet_renderables(report):
            console.print(item)
    for level in (Severity.ERROR, Severity.WARNING, Severity.INFO):
        group = [f for f in report.findings if f.severity == level]
        if not group:
            continue
        console.print()
        console.print(Text(_HEADING[level.value], style=f"{_STYLE[level.value]} underline"))
        for finding in group:
            head = Text()
            head.append(f"{finding.rule} ", style=_STYLE[level.value])
            head.append(f"{finding.name}", style="bold")
            if finding.location:
                loc = finding.location
                head.append(f"  {loc.path}:{loc.line}:{loc.column}", style="dim")
            console.print(head)
            console.print(Text("  " + finding.message))
            if finding.evidence:
                evidence = " ".join(f"{k}={format_value(v)}" for k, v in finding.evidence.items())
                console.print(Text("  evidence: ", style="dim") + Text(evidence))
            if finding.fix:
                console.print(Text("  fix: ", style="green") + Text(finding.fix))
    if report.loader:
        from envdoctor.report.loader_view import loader_renderables

        console.print()
        for item in loader_renderables(report.loader):
            console.print(item)
    if report.errors:
        console.print()
        console.print(Text("Could not check", style="magenta underline"))
        for error in report.errors:
            who = error.get("rule") or f"probe {error.get('probe')}"
            console.print(Text(f"  {who}: ") + Text(escape(str(error.get("message", "")))))


def render(report: Report, width: int = 100) -> str:
    """The report as plain text (no colour, fixed width), for files and tests."""
    from rich.console import Console

    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=False, no_color=True, width=width,
                      highlight=False, emoji=False, soft_wrap=False)
    write(report, console)
    return buffer.getvalue()
