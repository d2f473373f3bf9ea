"""The report as SARIF 2.1.0, for GitHub code scanning and other SARIF viewers.

One run, driven by `envdoctor`. `tool.driver.rules` holds every rule of the
catalog with its summary, its docs (what, why, example, fix) as help text and
Markdown, and its default level; severities map error/warning/info to the
SARIF levels error/warning/note.

Findings with a location (a file, a line, a column: the spawn guard, an
unparsable script) become `results`. GitHub rejects the whole file when a
single result has no physical location ("locationFromSarifResult: expected at
least one location"), and most envdoctor findings are about the environment,
not a file; those are written as `toolExecutionNotifications` of the
invocation, each tied to its rule (`associatedRule`) and carrying the same
message, evidence and fix, so nothing is lost and the file stays uploadable.
Rules or probes that failed are notifications too, at level error.

Paths are written as URIs relative to `%SRCROOT%` (the working directory)
when they lie under it, else as absolute `file://` URIs.
"""
from __future__ import annotations

import json
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote

from envdoctor.model import Finding, Report

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
SARIF_VERSION = "2.1.0"
LEVELS = {"error": "error", "warning": "warning", "info": "note"}
SRCROOT = "%SRCROOT%"
DOC_TITLES = (("what", "What it checks"), ("why", "Why it matters"), ("example", "Example"), ("fix", "Fix"))


def _rule_descriptor(meta: Any) -> dict[str, Any]:
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
        "shortDescription": {"text": " ".join(meta.summary.split())},
        "fullDescription": {"text": " ".join(meta.what.split())},
        "help": {"text": text, "markdown": markdown},
        "defaultConfiguration": {"level": LEVELS[meta.severity.value]},
        "properties": {"tags": [meta.family, meta.name], "family": meta.family, "origin": meta.origin},
    }


def artifact_location(path: str, root: Path | None = None) -> dict[str, Any]:
    """A SARIF artifactLocation for a path: relative to %SRCROOT% when it lies under it."""
    root = (root or Path.cwd()).resolve()
    candidate = Path(path)
    if candidate.is_absolute():
        try:
            relative = candidate.resolve().relative_to(root)
        except ValueError:
            return {"uri": candidate.resolve().as_uri()}
        return {"uri": quote(PurePosixPath(*relative.parts).as_posix()), "uriBaseId": SRCROOT}
    parts = [p for p in candidate.parts if p not in (".",)]
    if ".." in parts:  # outside the root: an absolute URI is the only honest one
        return {"uri": candidate.resolve().as_uri()}
    return {"uri": quote(PurePosixPath(*parts).as_posix()), "uriBaseId": SRCROOT}


def _message(finding: Finding) -> str:
    return finding.message + (f"\nFix: {finding.fix}" if finding.fix else "")


def _result(finding: Finding, index: dict[str, int], root: Path) -> dict[str, Any]:
    location = finding.location
    assert location is not None
    result: dict[str, Any] = {
        "ruleId": finding.rule,
        "level": LEVELS[finding.severity.value],
        "message": {"text": _message(finding)},
        "locations": [{
            "physicalLocation": {
                "artifactLocation": artifact_location(location.path, root),
                "region": {"startLine": max(1, location.line), "startColumn": max(1, location.column)},
            }
        }],
        "properties": {"name": finding.name, "severity": finding.severity.value,
                       "evidence": dict(finding.evidence), "fix": finding.fix},
    }
    if finding.rule in index:
        result["ruleIndex"] = index[finding.rule]
    return result


def _notification(finding: Finding, index: dict[str, int]) -> dict[str, Any]:
    rule: dict[str, Any] = {"id": finding.rule}
    if finding.rule in index:
        rule["index"] = index[finding.rule]
    return {
        "level": LEVELS[finding.severity.value],
        "message": {"text": _message(finding)},
        "associatedRule": rule,
        "properties": {"kind": "finding", "name": finding.name, "severity": finding.severity.value,
                       "evidence": dict(finding.evidence), "fix": finding.fix},
    }


def _error_notification(error: dict[str, Any]) -> dict[str, Any]:
    who = error.get("rule") or f"probe {error.get('probe')}"
    notification: dict[str, Any] = {
        "level": "error",
        "message": {"text": f"{who}: {error.get('message', '')}"},
        "properties": {"kind": "error", **{k: v for k, v in error.items() if k != "traceback"}},
    }
    if error.get("rule"):
        notification["associatedRule"] = {"id": error["rule"]}
    return notification


def to_sarif(report: Report, root: Path | None = None) -> dict[str, Any]:
    """The SARIF log as a dict."""
    from envdoctor.catalog import load_catalog

    root = (root or Path.cwd()).resolve()
    catalog = load_catalog()
    rules = [_rule_descriptor(meta) for meta in catalog.rules]
    index = {rule["id"]: i for i, rule in enumerate(rules)}
    located = [f for f in report.findings if f.location is not None]
    unlocated = [f for f in report.findings if f.location is None]
    invocation: dict[str, Any] = {
        "executionSuccessful": not report.errors,
        "endTimeUtc": report.generated_at,
        "toolExecutionNotifications": ([_notification(f, index) for f in unlocated]
                                       + [_error_notification(e) for e in report.errors]),
    }
    return {
        "$schema": SARIF_SCHEMA,
        "version": SARIF_VERSION,
        "runs": [{
            "tool": {"driver": {
                "name": "envdoctor",
                "version": str(report.tool.get("version", "")),
                "semanticVersion": str(report.tool.get("version", "")),
                "rules": rules,
            }},
            "originalUriBaseIds": {SRCROOT: {"uri": root.as_uri() + "/"}},
            "invocations": [invocation],
            "results": [_result(f, index, root) for f in located],
            "properties": {
                "summary": report.summary,
                "target": {k: report.target.get(k) for k in ("prefix", "kind", "python")},
                "host": report.host,
                "schema_version": report.schema_version,
            },
        }],
    }


def render(report: Report) -> str:
    """The report as a SARIF 2.1.0 document (JSON text)."""
    from envdoctor.report.json import escape_surrogates

    return escape_surrogates(json.dumps(to_sarif(report), indent=2, default=str, ensure_ascii=False)) + "\n"
