"""The report as GitHub-flavoured Markdown, for CI job summaries and pull requests."""
from __future__ import annotations

from envdoctor.model import Report
from envdoctor.report.text import format_value, summary_line


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def render(report: Report) -> str:
    target = report.target
    fleet = report.facts.get("fleet")
    if fleet:  # compare / --distributed: many nodes, no single environment to name
        where = f"fleet of {len(fleet.get('nodes') or [])} nodes, compared on `{report.host['hostname']}`"
    else:
        where = (f"{target.get('kind') or '?'} environment `{target.get('prefix') or '?'}` "
                 f"(Python {target.get('python') or '?'}) on `{report.host['hostname']}` "
                 f"({report.host['platform']})")
    lines = [
        "# envdoctor report",
        "",
        f"**{summary_line(report)}** — {where}, envdoctor {report.tool['version']}, {report.generated_at}",
        "",
    ]
    if fleet:  # the side-by-side view comes before the findings
        from envdoctor.fleet.view import fleet_markdown

        lines += [fleet_markdown(report), "", "## Findings", ""]
    if report.findings:
        lines += ["| severity | rule | finding | evidence | fix |", "|---|---|---|---|---|"]
        for f in report.findings:
            where = f" (`{f.location.path}:{f.location.line}`)" if f.location else ""
            evidence = ", ".join(f"{k}={format_value(v)}" for k, v in f.evidence.items())
            lines.append(f"| {f.severity.value} | {f.rule} {f.name} | {_cell(f.message)}{where} | "
                         f"{_cell(evidence)} | {_cell(f.fix)} |")
    else:
        lines.append("No findings.")
    if report.loader:
        from envdoctor.report.loader_view import loader_markdown

        lines += ["", loader_markdown(report.loader)]
    if report.errors:
        lines += ["", "## Could not check", ""]
        for error in report.errors:
            who = error.get("rule") or f"probe {error.get('probe')}"
            lines.append(f"- **{who}**: {_cell(error.get('message', ''))}")
    return "\n".join(lines) + "\n"
