"""The report as GitHub Actions workflow commands: one annotation per finding.

`::error file=train/a.py,line=8,col=5,title=SPW001 missing-main-guard::message`
— GitHub shows each on the file and line in the job summary and the pull
request, like ruff's `--output-format github`. Findings about the environment
go on the file that describes it (`report.locations.environment_anchor`: the
--against file, else pyproject.toml, else the first script). Paths are
relative to the repository root, so a job that runs in a subfolder still
points at the right file. Values are escaped as GitHub's toolkit does: `%`,
CR and LF in the message, and `,` and `:` as well in properties; control
characters from outside are escaped before that, so no input can end the
line and start a command of its own. A last annotation carries the report's
verdict and its checklist (`Report.verdict`), as every format shows it.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from envdoctor.model import Finding, Report
from envdoctor.report.locations import Anchor, environment_anchor, relative_path, repository_root
from envdoctor.report.safe import printable, printable_block
from envdoctor.report.text import area_label, own_message, verdict_of

LEVELS = {"error": "error", "warning": "warning", "info": "notice"}
#: GitHub shows at most 10 annotations of a level per step and 50 per job; more only fill the log.
MAX_ANNOTATIONS = 200


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _command(level: str, properties: dict[str, object], message: str) -> str:
    props = ",".join(f"{key}={escape_property(str(value))}" for key, value in properties.items())
    return f"::{level} {props}::{escape_data(message)}" if props else f"::{level}::{escape_data(message)}"


def annotation(finding: Finding, root: Path, anchor: Anchor | None) -> str:
    """One workflow command for one finding."""
    properties: dict[str, object] = {}
    message = printable_block(own_message(finding), 4000)
    location = finding.location
    where = relative_path(location.path, root) if location is not None else None
    if location is not None and where is not None:
        properties.update(file=printable(where, 1000), line=max(1, location.line), col=max(1, location.column))
    else:
        if location is not None:  # a file outside the repository: name it in the message
            message = f"{printable(location.path, 1000)}:{location.line}: {message}"
        if anchor is not None:
            properties.update(file=printable(anchor.path, 1000), line=anchor.line)
    properties["title"] = f"{finding.rule} {printable(finding.name, 80)}"
    if finding.fix:
        message += "\nfix: " + printable_block(finding.fix, 4000)
    return _command(LEVELS[finding.severity.value], properties, message)


def render(report: Report, against: str | None = None, scripts: Sequence[str] = (),
           root: Path | None = None) -> str:
    root = root or repository_root()
    anchor = environment_anchor(report.findings, root, against, scripts)
    on_anchor: dict[str, object] = {"file": printable(anchor.path, 1000), "line": anchor.line} if anchor else {}
    shown = report.findings[:MAX_ANNOTATIONS]
    lines = [annotation(finding, root, anchor) for finding in shown]
    if len(report.findings) > len(shown):
        rest = len(report.findings) - len(shown)
        lines.append(_command("warning", {**on_anchor, "title": "envdoctor: more findings"},
                              f"{rest} more findings are not annotated; see the JSON or SARIF report"))
    for error in report.errors[:MAX_ANNOTATIONS]:
        who = printable(error.get("rule") or f"probe {error.get('probe')}", 80)
        lines.append(_command("warning", {**on_anchor, "title": f"envdoctor could not check {who}"},
                              printable_block(error.get("message", ""), 2000)))
    lines.append(verdict_annotation(report, on_anchor))
    return "".join(line + "\n" for line in lines)


def verdict_annotation(report: Report, on_anchor: dict[str, object]) -> str:
    """The report's verdict and checklist as one last annotation: a warning when not everything could be
    checked, else a notice (the findings carry their own levels)."""
    verdict = verdict_of(report)
    areas = ", ".join(f"{area_label(area)}: {status}" for area, status in verdict["areas"].items())
    level = "warning" if verdict["result"] == "unchecked" else "notice"
    return _command(level, {**on_anchor, "title": f"envdoctor verdict: {verdict['result']}"}, areas)
