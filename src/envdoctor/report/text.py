"""The human report, drawn with rich: a verdict, a checklist by area, then one block per finding.

Concise by default, like flutter doctor and ruff's concise format: the
verdict line, one line per area (packages, channels, limits, scripts,
storage, GPU, loader: ✓, what is wrong, or "not checked" and why), then one
block per rule with its fix, identical findings grouped ("SPW001 in 3
files"). `verbose` adds each finding's evidence, drawn as indented
`key: value` lines. Wrapped lines keep their indent, so the report reads at
80 columns. Every string from outside goes through `report.safe` and into
rich `Text` objects, so neither control characters nor rich markup in a file
or package name reach the terminal.
"""
from __future__ import annotations

import io
import os
from collections.abc import Iterable, Mapping
from typing import Any

from envdoctor.model import Finding, Report, Severity
from envdoctor.report.safe import MAX_ITEMS, clean_report, clean_tree, printable, printable_block

_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}
_MARK = {"error": "✗", "warning": "!", "info": "i"}
#: The areas of the checklist, in the order shown, with the rule families each covers.
AREAS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("packages", ("PKG",)), ("channels", ("CHN",)), ("limits", ("SYS",)), ("scripts", ("SPW",)),
    ("storage", ("DSK",)), ("GPU", ("GPU",)), ("loader", ("DL",)),
)
#: Which facts sections each area's rules read: a failed probe leaves the area unchecked.
_AREA_SECTIONS = {"packages": ("target", "packages"), "channels": ("target", "packages"),
                  "limits": ("system",), "scripts": ("scripts",), "storage": ("storage",),
                  "GPU": ("gpu", "torch"), "loader": ("loader",)}
#: Findings of one rule shown in full before "… and N more".
GROUP_LIMIT = 10
#: Rules shown in full before the rest are counted (a report with a million findings stays readable).
BLOCK_LIMIT = 40
SVG_WIDTH = 100
NOT_SELECTED = "not checked (not selected)"


def severity_counts(findings: Iterable[Finding]) -> dict[str, int]:
    """Findings per severity, like Report.summary but by identity (a million findings in well under a second)."""
    error = warning = info = 0
    for finding in findings:
        level = finding.severity
        if level is Severity.ERROR:
            error += 1
        elif level is Severity.WARNING:
            warning += 1
        else:
            info += 1
    return {"error": error, "warning": warning, "info": info}


def summary_line(report: Report, counts: dict[str, int] | None = None) -> str:
    counts = counts or severity_counts(report.findings)
    parts = [f"{counts['error']} error{'s' if counts['error'] != 1 else ''}",
             f"{counts['warning']} warning{'s' if counts['warning'] != 1 else ''}",
             f"{counts['info']} info"]
    return ", ".join(parts)


def format_value(value: Any, depth: int = 0) -> str:
    """A value on one line (Markdown tables, one-line summaries), bounded and printable."""
    if isinstance(value, float):
        return f"{value:.4g}"
    if depth > 3:
        return "…"
    if isinstance(value, (list, tuple)):
        items = [format_value(v, depth + 1) for v in value[:8]]
        more = f", … {len(value) - 8} more" if len(value) > 8 else ""
        return "[" + ", ".join(items) + more + "]"
    if isinstance(value, Mapping):
        pairs = list(value.items())
        body = ", ".join(f"{printable(k, 80)}: {format_value(v, depth + 1)}" for k, v in pairs[:8])
        return "{" + body + (f", … {len(pairs) - 8} more" if len(pairs) > 8 else "") + "}"
    return printable(value, 300)


# -- the checklist ---------------------------------------------------------------------------------

def _family(rule_id: str) -> str:
    return rule_id.rstrip("0123456789")


def _area_of(rule_id: str) -> str | None:
    family = _family(rule_id)
    return next((name for name, families in AREAS if family in families), None)


def _probe_failure(report: Report, area: str) -> str | None:
    sections = _AREA_SECTIONS.get(area, ())
    for error in report.errors:
        if error.get("probe") in sections:
            return f"{error['probe']} probe failed: {error.get('message', '')}"
        rule = error.get("rule")
        if rule and _area_of(str(rule)) == area:
            return f"{rule}: {error.get('message', '')}"
    return None


def area_statuses(report: Report) -> dict[str, tuple[str | None, str]]:
    """For each area of the checklist: (worst severity, "unchecked", "skipped" or None; what to say).

    None with "✓" means every selected rule of the area ran and found nothing;
    "unchecked" means a probe or rule of the area failed, "skipped" that none was
    selected or the loader did not run; the text says which. One pass over the
    findings, so a report with a million of them costs no more than a list.
    """
    area_of: dict[str, str | None] = {}
    found: dict[str, list[Finding]] = {area: [] for area, _ in AREAS}
    for finding in report.findings:
        if finding.rule not in area_of:
            area_of[finding.rule] = _area_of(finding.rule)
        area = area_of[finding.rule]
        if area is not None:
            found[area].append(finding)
    return {area: _area_status(report, area, found[area]) for area, _ in AREAS}


def _area_status(report: Report, area: str, found: list[Finding]) -> tuple[str | None, str]:
    families = dict(AREAS)[area]
    if found:
        counts = severity_counts(found)
        worst = next(level for level in ("error", "warning", "info") if counts[level])
        rules = list(dict.fromkeys(f.rule for f in found))
        names = {f.rule: f.name for f in found[:1000]}
        if len(rules) == 1:
            n = len(found)
            return worst, f"{rules[0]} {printable(names.get(rules[0], ''), 80)}" + (f" ({n} findings)" if n > 1 else "")
        return worst, f"{len(found)} findings: " + ", ".join(rules[:6]) + (" …" if len(rules) > 6 else "")
    failure = _probe_failure(report, area)
    if failure:
        return "unchecked", "not checked: " + printable(failure, 120)
    checked = report.checked
    if checked is not None:
        if not any(_family(r) in families for r in checked):
            return "skipped", NOT_SELECTED
    elif area != "loader" and not any(s in report.facts for s in _AREA_SECTIONS[area]):
        return "skipped", "not checked"
    if area == "loader" and not report.loader:
        return "skipped", "not checked (the smoke test did not run)"
    return None, "✓"


def unchecked_areas(report: Report) -> list[str]:
    """Areas whose checks were meant to run but could not (a probe or a rule failed)."""
    return [area for area, (level, _) in area_statuses(report).items() if level == "unchecked"]


# -- findings --------------------------------------------------------------------------------------

def group_findings(findings: Iterable[Finding]) -> list[list[Finding]]:
    """Findings grouped by rule and severity, in the order they come (worst first)."""
    groups: dict[tuple[str, int], list[Finding]] = {}
    for finding in findings:  # id(): severities are enum singletons, and hashing an Enum is slow
        groups.setdefault((finding.rule, id(finding.severity)), []).append(finding)
    return list(groups.values())


def _common_tail(messages: list[str]) -> str:
    """The sentences every message ends with (the shared explanation), or ""."""
    if len(messages) < 2:
        return ""
    split = [m.split(". ") for m in messages]
    tail: list[str] = []
    for parts in zip(*(reversed(s) for s in split)):
        if len(set(parts)) != 1:
            break
        tail.insert(0, parts[0])
    if not tail or any(len(s) <= len(tail) for s in split):
        return ""
    return ". ".join(tail)


def _where(finding: Finding) -> str:
    loc = finding.location
    if loc is None:
        return ""
    return f"{printable(loc.path, 300)}:{loc.line}:{loc.column}"


def _evidence_lines(value: Any, indent: int, depth: int = 0) -> list[tuple[int, str]]:
    """Evidence as (indent, text) lines: `key: value`, nested tables and lists indented below."""
    lines: list[tuple[int, str]] = []
    if isinstance(value, Mapping):
        items = list(value.items())
        for key, item in items[:MAX_ITEMS]:
            key_text = printable(key, 80)
            if _is_scalar(item) or depth >= 3:
                lines.append((indent, f"{key_text}: {format_value(item)}"))
            elif isinstance(item, (list, tuple)) and all(_is_scalar(v) for v in item) and len(format_value(item)) < 60:
                lines.append((indent, f"{key_text}: {format_value(item)}"))
            elif not item:
                lines.append((indent, f"{key_text}: {format_value(item)}"))
            else:
                lines.append((indent, f"{key_text}:"))
                lines += _evidence_lines(item, indent + 2, depth + 1)
        if len(items) > MAX_ITEMS:
            lines.append((indent, f"… {len(items) - MAX_ITEMS} more"))
    elif isinstance(value, (list, tuple)):
        for item in value[:MAX_ITEMS]:
            if isinstance(item, Mapping) and item:  # a YAML-like entry: "- first: …", the rest under it
                pairs = list(item.items())[:12]
                for number, (key, inner) in enumerate(pairs):
                    lines.append((indent + (2 if number else 0), f"{'- ' if not number else ''}{printable(key, 80)}: "
                                                                 f"{format_value(inner)}"))
            else:
                lines.append((indent, f"- {format_value(item)}"))
        if len(value) > MAX_ITEMS:
            lines.append((indent, f"… {len(value) - MAX_ITEMS} more"))
    else:
        lines.append((indent, format_value(value)))
    return lines


def _is_scalar(value: Any) -> bool:
    return not isinstance(value, (Mapping, list, tuple))


class _Writer:
    """Prints Text at a left indent; wrapped lines hang `hang` columns further in."""

    def __init__(self, console: Any) -> None:
        from rich.text import Text

        self.console, self._text = console, Text

    def line(self, text: Any = "", indent: int = 0, style: str = "", hang: int = 2) -> None:
        body = text if not isinstance(text, str) else self._text(text, style=style)
        width = max(20, self.console.width - indent)
        lines = body.wrap(self.console, width)
        if len(lines) > 1:  # the rest again, narrower: it hangs `hang` columns further in
            rest = body[len(lines[0].plain):]
            rest = rest[len(rest.plain) - len(rest.plain.lstrip()):]
            lines = [lines[0], *rest.wrap(self.console, max(20, width - hang))]
        for number, part in enumerate(lines):
            part.rstrip()
            pad = indent + (hang if number else 0)
            self.console.print(self._text(" " * pad) + part, soft_wrap=True)

    def text(self) -> Any:
        return self._text()


def _write_group(out: _Writer, group: list[Finding], verbose: bool) -> None:
    first = group[0]
    level = first.severity.value
    head = out.text()
    head.append(f"{_MARK[level]} {first.rule} ", style=_STYLE[level])
    head.append(printable(first.name, 80), style="bold")
    files = list(dict.fromkeys(f.location.path for f in group if f.location))
    if len(group) > 1:
        head.append(f" in {len(files)} files" if len(files) == len(group) and files else f" ×{len(group)}")
    out.line(head)
    shown = group[:GROUP_LIMIT]
    messages = [own_message(f) for f in shown]
    shared = len(set(messages)) == 1 and len(shown) > 1 and all(f.location for f in shown)
    tail = messages[0] if shared else _common_tail(messages)
    fixes = list(dict.fromkeys(_generic(f, f.fix) for f in shown if f.fix))
    for finding, message in zip(shown, messages):
        if shared:
            message = ""
        elif tail:
            message = message[: len(message) - len(tail)].rstrip(". ") + "."
        where = _where(finding)
        line = out.text()
        if where:
            line.append(where, style="dim")
            line.append("  " if message else "")
        line.append(printable_block(message))
        out.line(line, indent=2)
        if verbose and finding.evidence:
            for indent, text in _evidence_lines(dict(finding.evidence), 6):
                out.line(text, indent=indent, style="dim")
        if len(fixes) > 1 and finding.fix:
            _write_fix(out, finding.fix, indent=4)
    if len(group) > GROUP_LIMIT:
        out.line(f"… and {len(group) - GROUP_LIMIT} more {first.rule} findings (see --format json)", indent=2)
    if tail and (verbose or shared):  # the shared explanation, once; concise output leaves it to -v
        out.line(printable_block(tail), indent=2)
    if len(fixes) == 1:
        _write_fix(out, fixes[0], indent=2)


def own_message(finding: Finding) -> str:
    """The message without a leading `file:line: ` that the location already shows."""
    loc = finding.location
    if loc is not None:
        head, sep, rest = finding.message.partition(f":{loc.line}: ")
        if sep and head and loc.path.endswith(head):
            return rest
    return finding.message


def _generic(finding: Finding, text: str) -> str:
    """A fix that names its own file, with the file named generically, so per-file fixes group."""
    loc = finding.location
    return text.replace(loc.path, "each file") if loc is not None and loc.path in text else text


def _write_fix(out: _Writer, fix: str, indent: int) -> None:
    lines = printable_block(fix).splitlines() or [""]
    first = out.text()
    first.append("fix: ", style="green")
    first.append(lines[0])
    out.line(first, indent=indent)
    for rest in lines[1:]:
        out.line(rest, indent=indent + 5)


# -- the whole report ------------------------------------------------------------------------------

def _heading(report: Report) -> str:
    target = report.target
    where = f"{printable(target.get('kind') or '?', 40)} {printable(target.get('prefix') or '?', 300)}"
    python = f"Python {printable(target['python'], 40)}" if target.get("python") else "no Python found"
    return (f"envdoctor {printable(report.tool.get('version', '?'), 40)} — {where} ({python}) "
            f"on {printable(report.host.get('hostname', '?'), 100)}")


def _verdict(report: Report, statuses: dict[str, tuple[str | None, str]] | None = None) -> tuple[str, str]:
    counts = severity_counts(report.findings)
    worst = next((s for s in ("error", "warning", "info") if counts[s]), None)
    skipped = report.not_checked()
    unchecked = [area for area, (level, _) in (statuses or {}).items() if level == "unchecked"]
    if worst is None and (skipped or unchecked):
        worst = "warning"  # nothing found, but not everything could be looked at
    text = f"{_MARK.get(worst or '', '✓')} {summary_line(report, counts)}"
    if unchecked:
        text += f" — not checked: {', '.join(unchecked)}"
    return text, _STYLE.get(worst or "", "bold green")


def write(report: Report, console: Any, verbose: bool = False) -> None:
    """Draw the report on a rich Console."""
    out = _Writer(console)
    fleet = report.facts.get("fleet")
    if fleet:  # compare / --distributed: many nodes, no single environment to name
        from envdoctor.report.fleet_view import fleet_heading, fleet_renderables

        shown = clean_report(report)
        out.line(printable(fleet_heading(shown, shown.facts["fleet"]), 400), style="bold")
        text, style = _verdict(report)
        out.line(text, style=style)
        out.line()
        for item in fleet_renderables(shown):
            if isinstance(item, out.text().__class__):  # a line of text: wrapped lines indented
                out.line(item)
            else:
                console.print(item)
    elif report.loop is not None:  # envdoctor run: the user's own loop, not an environment's checklist
        from envdoctor.report.loop_view import loop_lines

        for indent, line in loop_lines(clean_tree(report.loop)):
            out.line(line, indent=indent, hang=11 if indent == 2 else 2)  # wrapped lines under the values
    else:
        out.line(_heading(report), style="bold")
        statuses = area_statuses(report)
        text, style = _verdict(report, statuses)
        out.line(text, style=style)
        out.line()
        unselected = []
        for area, _families in AREAS:
            level, status = statuses[area]
            if status == NOT_SELECTED:
                unselected.append(area)
                continue
            line = out.text()
            line.append(f"{area:<9} ", style="bold")
            style = _STYLE.get(level or "", "green" if level is None else "magenta" if level == "unchecked" else "dim")
            mark = _MARK.get(level or "", "")
            line.append(f"{mark} {status}" if mark else status, style=style)
            out.line(line, indent=2)
        if unselected:
            out.line(f"not checked (not selected): {', '.join(unselected)}", indent=2, style="dim")
    groups = group_findings(report.findings)
    for group in groups[:BLOCK_LIMIT]:
        out.line()
        _write_group(out, group, verbose)
    if len(groups) > BLOCK_LIMIT:
        rest = sum(len(g) for g in groups[BLOCK_LIMIT:])
        out.line()
        out.line(f"… {rest} more findings of {len(groups) - BLOCK_LIMIT} more rules (see --format json)")
    if report.loader:
        from envdoctor.report.loader_view import loader_renderables

        out.line()
        for item in loader_renderables(clean_tree(report.loader)):
            if isinstance(item, out.text().__class__):  # a summary line: wrapped lines indented
                out.line(item)
            else:
                console.print(item)
    if report.errors:
        out.line()
        out.line("Could not check", style="magenta underline")
        for error in report.errors[:MAX_ITEMS]:
            who = printable(error.get("rule") or f"probe {error.get('probe')}", 80)
            out.line(f"{who}: {printable(error.get('message', ''), 500)}", indent=2)
        if len(report.errors) > MAX_ITEMS:
            out.line(f"… {len(report.errors) - MAX_ITEMS} more", indent=2)
    if report.findings and not verbose and any(f.evidence for f in report.findings):
        out.line("-v: the evidence; `envdoctor explain RULE`: why it matters.", style="dim")


def make_console(file: Any = None, width: int | None = None, record: bool = False,
                 color: bool | None = None) -> Any:
    """A rich Console that never reads markup or emoji codes in what it prints."""
    from rich.console import Console

    kwargs: dict[str, Any] = {"highlight": False, "emoji": False, "markup": False, "record": record}
    if width is not None:
        kwargs["width"] = width
    if file is not None:
        kwargs["file"] = file
    if color is False:
        kwargs.update(force_terminal=False, no_color=True)
    elif color is True:
        kwargs["force_terminal"] = True
    return Console(**kwargs)


def render(report: Report, width: int = 80, verbose: bool = False) -> str:
    """The report as plain text (no colour, fixed width), for files and tests."""
    buffer = io.StringIO()
    write(report, make_console(buffer, width=width, color=False), verbose=verbose)
    return buffer.getvalue()


def svg_text(report: Report, verbose: bool = False) -> str:
    """The text report as an SVG picture, always drawn SVG_WIDTH columns wide, whatever stdout is."""
    with open(os.devnull, "w", encoding="utf-8") as sink:
        console = make_console(sink, width=SVG_WIDTH, record=True, color=True)
        write(report, console, verbose=verbose)
        return str(console.export_svg(title="envdoctor"))
