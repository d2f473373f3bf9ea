"""The report as SARIF 2.1.0, for GitHub code scanning and other SARIF viewers.

One run, driven by `envdoctor`. `tool.driver.rules` holds every rule of the
catalog with its summary, its docs (what, why, example, fix) as help text and
Markdown, and its default level; severities map error/warning/info to the
SARIF levels error/warning/note. Descriptions are cut to GitHub's 1,024
characters (the full docs stay in `help`).

Every finding is a `result` with a physical location, because code scanning
ignores anything else: a finding about a file (the spawn guard) points at
its line and column, and a finding about the environment points at the file
that describes the environment (`report.locations.environment_anchor`: the
--against file, else pyproject.toml, else the first script). Only when there
is no such file does a finding travel as a notification of the invocation,
tied to its rule, so nothing is lost and the file stays uploadable. Rules or
probes that failed are notifications too, at level error.

URIs are relative to the repository root (the git work tree, else the
working directory), given as `%SRCROOT%`, so a job run from a subfolder
still names `train/a.py`. Every result carries `partialFingerprints`, which
stay the same when lines move, so an alert is tracked across commits.
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING
from urllib.parse import quote

from envdoctor.model import Finding, Report
from envdoctor.report.locations import Anchor, environment_anchor, relative_path, repository_root
from envdoctor.report.safe import clean_tree, printable, printable_block

if TYPE_CHECKING:  # pragma: no cover
    from envdoctor.catalog import RuleMeta

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
SARIF_VERSION = "2.1.0"
LEVELS = {"error": "error", "warning": "warning", "info": "note"}
SRCROOT = "%SRCROOT%"
DOC_TITLES = (("what", "What it checks"), ("why", "Why it matters"), ("example", "Example"), ("fix", "Fix"))
#: GitHub code scanning takes at most this many results a run; a log stays bounded beyond it.
MAX_RESULTS = 25_000
#: GitHub code scanning rejects longer rule descriptions.
DESCRIPTION_LIMIT = 1024
FINGERPRINT_KEY = "envdoctorFinding/v1"
#: The name envdoctor is published under (pyproject.toml's [project] name).
DISTRIBUTION = "envdoctor-pytorch"
#: Evidence keys that say where in a file, left out of the fingerprint so moved lines keep their alert.
_POSITION_KEYS = frozenset({"line", "column", "col", "lineno", "end_line", "cell"})


def _description(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= DESCRIPTION_LIMIT else flat[: DESCRIPTION_LIMIT - 1].rstrip() + "…"


def _rule_descriptor(meta: RuleMeta) -> dict[str, object]:
    def para(text: str) -> str:
        return "\n".join(line.rstrip() for line in text.strip().splitlines())

    text = "\n\n".join(f"{title}:\n{para(getattr(meta, part))}" for part, title in DOC_TITLES)
    markdown = "\n\n".join(
        f"**{title}**\n\n" + (f"```\n{para(getattr(meta, part))}\n```" if part == "example"
                              else para(getattr(meta, part)))
        for part, title in DOC_TITLES)
    return {
        "id": meta.id,
        "name": meta.name,
        "shortDescription": {"text": _description(meta.summary)},
        "fullDescription": {"text": _description(meta.what)},
        "help": {"text": text, "markdown": markdown},
        "defaultConfiguration": {"level": LEVELS[meta.severity.value]},
        "properties": {"tags": [meta.family, meta.name], "family": meta.family, "origin": meta.origin},
    }


def artifact_location(path: str, root: Path | None = None) -> dict[str, str]:
    """A SARIF artifactLocation: relative to %SRCROOT% (the repository root) when under it, else absolute."""
    root = (root or repository_root()).resolve()
    return dict(_artifact_location(path, root, str(Path.cwd())))


@lru_cache(maxsize=4096)
def _artifact_location(path: str, root: Path, cwd: str) -> tuple[tuple[str, str], ...]:
    relative = relative_path(path, root)
    if relative is not None:
        # As bytes: a file name that is not UTF-8 is %-encoded as it is on disk.
        return (("uri", quote(os.fsencode(relative))), ("uriBaseId", SRCROOT))
    absolute = Path(os.path.normpath(Path(cwd) / path))
    return (("uri", absolute.as_uri()),)


def _line_length(root: Path, relative: str, line: int) -> int | None:
    """The length of one line of a regular file under the root, for the region's end."""
    lengths = _line_lengths(str(root / PurePosixPath(relative)))
    return lengths[line - 1] if 0 < line <= len(lengths) else None


@lru_cache(maxsize=256)
def _line_lengths(path: str) -> tuple[int, ...]:
    """Every line's length in characters, read once per file (regular files, the first 16 MiB)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return ()
        with open(path, "rb") as fh:
            data = fh.read(16 * 1024 * 1024)
    except OSError:
        return ()
    return tuple(len(raw.rstrip(b"\r").decode("utf-8", "replace")) for raw in data.split(b"\n"))


def _region(root: Path, artifact: dict[str, str], line: int, column: int) -> dict[str, object]:
    line, column = max(1, line), max(1, column)
    length = _line_length(root, artifact["uri"], line) if "uriBaseId" in artifact else None
    end = (length + 1) if length is not None and length + 1 > column else column + 1
    return {"startLine": line, "startColumn": column, "endLine": line, "endColumn": end}


def fingerprint(finding: Finding, uri: str) -> str:
    """A stable identity for one finding: the rule, the file and the evidence, not the line."""
    evidence = {k: v for k, v in finding.evidence.items() if k not in _POSITION_KEYS}
    basis = json.dumps([finding.rule, uri, evidence], sort_keys=True, default=str, ensure_ascii=True)
    return hashlib.sha256(basis.encode("utf-8")).hexdigest()[:32]


def _message(finding: Finding) -> str:
    text = printable_block(finding.message, 8000)
    return text + (f"\nFix: {printable_block(finding.fix, 8000)}" if finding.fix else "")


def _properties(finding: Finding) -> dict[str, object]:
    return {"name": finding.name, "severity": finding.severity.value,
            "evidence": clean_tree(dict(finding.evidence)), "fix": printable_block(finding.fix, 8000),
            "fix_steps": clean_tree([step.to_dict() for step in finding.fix_steps])}


def _result(finding: Finding, index: dict[str, int], root: Path, anchor: Anchor | None) -> dict[str, object] | None:
    location = finding.location
    message = _message(finding)
    if location is not None:
        artifact = artifact_location(location.path, root)
        region = _region(root, artifact, location.line, location.column)
    elif anchor is not None:
        artifact = {"uri": quote(os.fsencode(anchor.path)), "uriBaseId": SRCROOT}
        region = _region(root, artifact, anchor.line, 1)
        message = f"{message}\n(about the environment; shown on {printable(anchor.path, 500)})"
    else:
        return None
    result: dict[str, object] = {
        "ruleId": finding.rule,
        "level": LEVELS[finding.severity.value],
        "message": {"text": message},
        "locations": [{"physicalLocation": {"artifactLocation": artifact, "region": region}}],
        "partialFingerprints": {FINGERPRINT_KEY: fingerprint(finding, artifact["uri"])},
        "properties": {**_properties(finding), "scope": "file" if location is not None else "environment"},
    }
    if finding.rule in index:
        result["ruleIndex"] = index[finding.rule]
    return result


def _notification(finding: Finding, index: dict[str, int]) -> dict[str, object]:
    rule: dict[str, object] = {"id": finding.rule}
    if finding.rule in index:
        rule["index"] = index[finding.rule]
    return {
        "level": LEVELS[finding.severity.value],
        "message": {"text": _message(finding)},
        "associatedRule": rule,
        "properties": {"kind": "finding", **_properties(finding)},
    }


def _error_notification(error: dict[str, object]) -> dict[str, object]:
    who = printable(error.get("rule") or f"probe {error.get('probe')}", 80)
    notification: dict[str, object] = {
        "level": "error",
        "message": {"text": f"{who}: {printable_block(error.get('message', ''), 4000)}"},
        "properties": {"kind": "error", **clean_tree({k: v for k, v in error.items() if k != "traceback"})},
    }
    if error.get("rule"):
        notification["associatedRule"] = {"id": printable(error["rule"], 80)}
    return notification


def _homepage() -> str | None:
    """The project's home page, from the installed distribution's metadata (none when run from a checkout)."""
    from importlib import metadata

    try:
        urls = metadata.metadata(DISTRIBUTION).get_all("Project-URL") or []
    except metadata.PackageNotFoundError:
        return None
    for entry in urls:
        label, _, url = entry.partition(",")
        if label.strip().lower() == "homepage" and url.strip():
            return url.strip()
    return None


def _root_uri(root: Path) -> str:
    uri = root.as_uri()
    return uri if uri.endswith("/") else uri + "/"


def to_sarif(report: Report, root: Path | None = None, against: str | None = None,
             scripts: Sequence[str] = ()) -> dict[str, object]:
    """The SARIF log as a dict."""
    from envdoctor.catalog import load_catalog

    root = (root or repository_root()).resolve()
    _line_lengths.cache_clear()  # files may have changed since the last log (a long-lived MCP server)
    _artifact_location.cache_clear()
    catalog = load_catalog()
    rules = [_rule_descriptor(meta) for meta in catalog.rules]
    index = {meta.id: i for i, meta in enumerate(catalog.rules)}
    anchor = environment_anchor(report.findings, root, against, scripts)
    results: list[dict[str, object]] = []
    notifications: list[dict[str, object]] = []
    for finding in report.findings[:MAX_RESULTS]:
        result = _result(finding, index, root, anchor)
        if result is None:
            notifications.append(_notification(finding, index))
        else:
            results.append(result)
    if len(report.findings) > MAX_RESULTS:
        notifications.append({"level": "warning", "message": {"text": (
            f"{len(report.findings) - MAX_RESULTS} more findings are not in this log (GitHub takes "
            f"{MAX_RESULTS:,} results a run); the JSON report has them all")}})
    invocation: dict[str, object] = {
        "executionSuccessful": not report.errors,
        "endTimeUtc": report.generated_at,
        "toolExecutionNotifications": notifications + [_error_notification(e) for e in report.errors],
    }
    return {
        "$schema": SARIF_SCHEMA,
        "version": SARIF_VERSION,
        "runs": [{
            "tool": {"driver": {
                "name": "envdoctor",
                "version": str(report.tool.get("version", "")),
                "semanticVersion": str(report.tool.get("version", "")),
                **({"informationUri": homepage} if (homepage := _homepage()) else {}),
                "rules": rules,
            }},
            "originalUriBaseIds": {SRCROOT: {"uri": _root_uri(root)}},
            "invocations": [invocation],
            "results": results,
            "properties": {
                "summary": report.summary,
                "target": clean_tree({k: report.target.get(k) for k in ("prefix", "kind", "python")}),
                "host": clean_tree(report.host),
                "schema_version": report.schema_version,
                # The report's verdict and checklist (envdoctor.verdict decided it; every format shows it).
                "verdict": clean_tree(report.verdict) if report.verdict is not None else None,
            },
        }],
    }


def render(report: Report, against: str | None = None, scripts: Sequence[str] = (),
           root: Path | None = None) -> str:
    """The report as a SARIF 2.1.0 document (JSON text)."""
    from envdoctor.report.json import LONG_ARRAY, escape_surrogates

    log = to_sarif(report, root=root, against=against, scripts=scripts)
    # Indented for a person to read; a large log is written compact (json's C encoder: see LONG_ARRAY).
    indent = 2 if len(report.findings) <= LONG_ARRAY else None
    return escape_surrogates(json.dumps(log, indent=indent, default=str, ensure_ascii=False)) + "\n"
