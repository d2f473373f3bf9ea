"""The report as GitHub-flavoured Markdown, for CI job summaries and pull requests."""
from __future__ import annotations

from envdoctor.model import Report
from envdoctor.report.text import format_value, summary_line


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def render(report: Report) -> str:
    target = report.target
    lines = [
        "# envdoctor report",
        "",
        f"**{summary_line(report)}** — {target.get('kind') or '?'} environment "
        f"`{target.get('prefix') or '?'}` (Python {target.get('python') or '?'}) on "
        f"`{report.host['hostname']}` ({report.host['platform']}), envdoctor {report.tool['version']}, "
        f"{report.generated_at}",
        "",
    ]
    fleet = report.facts.get("fleet")
    if fleet:  # compare / --distributed: the side-by-side view comes first
        from envdoctor.fleet.view import fleet_markdown

        lines[2] = f"**{summary_line(report)}** — envdoctor {report.tool['version']}, {report.generated_at}"
        lines += [fleet_markdown(fleet), "", "## Findings", ""]
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
