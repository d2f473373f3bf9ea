"""The report as GitHub-flavoured Markdown, for `$GITHUB_STEP_SUMMARY` and pull requests.

The verdict, the checklist by area as a table (both the report's own
verdict, decided by `envdoctor.verdict`, only worded here), then one section per rule:
each finding as a list item (its file and line in a code span), the fix as a
fenced code block (multi-line fixes keep their lines), the evidence folded
in `<details>`. Strings from outside never become Markdown or HTML: free text
is backslash-escaped (so `__name__` is never bold), code spans and fences
are longer than any backtick run inside them, and `<`, `|` and newlines are
neutralised wherever they could end a table cell or open a tag.
"""
from __future__ import annotations

import re

from envdoctor.model import Finding, Report
from envdoctor.report.safe import MAX_ITEMS, clean_report, clean_tree, printable, printable_block
from envdoctor.report.text import (
    BLOCK_LIMIT,
    GROUP_LIMIT,
    _evidence_lines,
    area_label,
    area_line,
    first_names,
    group_findings,
    own_message,
    severity_counts,
    verdict_line,
    verdict_of,
)

_MARK = {"error": "✗", "warning": "!", "info": "i", "unchecked": "?", "skipped": "–", "n/a": "–", None: "✓"}
# Characters that mean something to CommonMark/GFM inline parsing, or to HTML.
# Parentheses, dots and dashes need no escape once `[` is escaped and no outside string starts a line.
_SPECIAL = re.compile(r"([\\`*_{}\[\]#!|~<>&:])")
# Code spans the rule authors wrote (`...`), and dunder names written without them.
_CODE = re.compile(r"(`+)(.+?)\1|(?<![\w`])(__\w+__)(?![\w`])", re.DOTALL)


def escape_text(value: object, limit: int = 4000) -> str:
    """Free text as Markdown that shows exactly that text: every special character escaped."""
    text = printable(value, limit)
    return _SPECIAL.sub(r"\\\1", text)


def code_span(value: object, limit: int = 1000) -> str:
    """`value` as an inline code span, whatever backticks it holds (never HTML, never bold)."""
    text = printable(value, limit).replace("|", "\u2223")  # a `|` would still end a GFM table cell
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text.strip() else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def prose(value: object, limit: int = 4000) -> str:
    """A rule's message: its own code spans (and bare `__dunder__` names) as code, the rest escaped."""
    text = printable(value, limit)
    out, last = [], 0
    for match in _CODE.finditer(text):
        out.append(escape_text(text[last:match.start()]))
        out.append(code_span(match.group(2) if match.group(2) is not None else match.group(3)))
        last = match.end()
    out.append(escape_text(text[last:]))
    return "".join(out)


def code_block(value: object, info: str = "", limit: int = 8000) -> str:
    """A fenced code block holding `value` line for line (a longer fence than any inside)."""
    text = printable_block(value, limit)
    longest = max((len(run) for run in re.findall(r"`{3,}", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{text}\n{fence}"


def _cell(value: object) -> str:
    return escape_text(value, 300)


def _group(group: list[Finding]) -> list[str]:
    first = group[0]
    level = first.severity.value
    files = list(dict.fromkeys(f.location.path for f in group if f.location))
    count = f", in {len(files)} files" if len(group) > 1 and len(files) == len(group) else (
        f", ×{len(group)}" if len(group) > 1 else "")
    lines = [f"### {_MARK[level]} {first.rule} {code_span(first.name, 80)} — {level}{count}", ""]
    for finding in group[:GROUP_LIMIT]:
        loc = finding.location
        where = f"{code_span(f'{loc.path}:{loc.line}:{loc.column}', 500)} — " if loc else ""
        lines.append(f"- {where}{prose(own_message(finding))}")
    if len(group) > GROUP_LIMIT:
        lines.append(f"- … and {len(group) - GROUP_LIMIT} more {first.rule} findings")
    fixes = list(dict.fromkeys(f.fix for f in group[:GROUP_LIMIT] if f.fix))
    for fix in fixes[:GROUP_LIMIT]:
        lines += ["", "Fix:", "", code_block(fix)]
    evidence = [f for f in group[:GROUP_LIMIT] if f.evidence]
    if evidence:
        body: list[str] = []
        for finding in evidence:
            if len(evidence) > 1 and finding.location:
                body.append(printable(f"{finding.location.path}:{finding.location.line}", 500))
            body += [" " * indent + text for indent, text in _evidence_lines(dict(finding.evidence), 2 if len(evidence) > 1 else 0)]
        lines += ["", "<details><summary>Evidence</summary>", "", code_block("\n".join(body), "text"), "", "</details>"]
    return lines + [""]


def _neutral(tree: object) -> object:
    """Strings of a nested view (loader, fleet) with nothing that Markdown or HTML would obey."""
    if isinstance(tree, str):
        return escape_text(tree)
    if isinstance(tree, dict):
        return {k: _neutral(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_neutral(v) for v in tree]
    return tree


def render(report: Report) -> str:
    target = report.target
    fleet = report.facts.get("fleet")
    if fleet:  # compare / --distributed: many nodes, no single environment to name
        where = f"fleet of {len(fleet.get('nodes') or [])} nodes, compared on {code_span(report.host.get('hostname', '?'))}"
    else:
        where = (f"{escape_text(target.get('kind') or '?')} environment {code_span(target.get('prefix') or '?')} "
                 f"(Python {escape_text(target.get('python') or '?')}) on {code_span(report.host.get('hostname', '?'))} "
                 f"({escape_text(report.host.get('platform', '?'))})")
    counts = severity_counts(report.findings)
    level, verdict_text = verdict_line(report, counts)
    lines = [
        "# envdoctor report",
        "",
        f"**{_MARK[level]} {escape_text(verdict_text)}** — {where}, "
        f"envdoctor {escape_text(report.tool.get('version', '?'))}, {escape_text(report.generated_at)}",
        "",
    ]
    if fleet:  # the side-by-side view comes before the findings
        from envdoctor.report.fleet_view import fleet_markdown

        lines += [fleet_markdown(clean_report(report, escape_text)), ""]
    else:
        lines += ["| area | status |", "|---|---|"]
        names = first_names(report.findings)
        for area in verdict_of(report)["areas"]:
            mark, status = area_line(report, area, names)
            lines.append(f"| {area_label(area)} | {_MARK[mark]} {_cell(status) if status != '✓' else ''} |"
                         .replace("  |", " |"))
        lines.append("")
    groups = group_findings(report.findings)
    if groups:
        lines += ["## Findings", ""]
        for group in groups[:BLOCK_LIMIT]:
            lines += _group(group)
        if len(groups) > BLOCK_LIMIT:
            rest = sum(len(g) for g in groups[BLOCK_LIMIT:])
            lines += [f"… {rest} more findings of {len(groups) - BLOCK_LIMIT} more rules (see the JSON report).", ""]
    else:
        lines += ["No findings.", ""]
    if report.loader:
        from envdoctor.report.loader_view import loader_markdown

        loader = _neutral(clean_tree(report.loader))
        lines += [loader_markdown(loader if isinstance(loader, dict) else {}), ""]
    if report.errors:
        lines += ["## Could not check", ""]
        for error in report.errors[:MAX_ITEMS]:
            who = error.get("rule") or f"probe {error.get('probe')}"
            lines.append(f"- **{escape_text(who, 80)}**: {escape_text(error.get('message', ''), 1000)}")
        if len(report.errors) > MAX_ITEMS:
            lines.append(f"- … {len(report.errors) - MAX_ITEMS} more")
    return "\n".join(lines).rstrip("\n") + "\n"
