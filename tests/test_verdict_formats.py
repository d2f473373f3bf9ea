"""Every format tells the same verdict: each saved report, rendered as JSON, text, Markdown, GitHub and SARIF.

The saved reports (fixtures/reports/*.json, real runs of `envdoctor report`/`check`/`loader`/`compare`,
three edited to hold a failed probe, a section that does not apply, and no verdict at all as reports
saved before the field) cover each result and each area status. From every rendering the verdict is
read back as a person or a CI job would read it — the mark and the counts of the verdict line, the
checklist's lines, the last GitHub annotation, the SARIF run's properties — and compared with the
report's own `verdict`, which in turn is what `envdoctor.verdict.decide` says of the report.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from envdoctor.model import Finding, Location, Report, Severity
from envdoctor.report import RenderOptions, load_report, render
from envdoctor.report.text import AREA_LABELS
from envdoctor.verdict import decide, settle
from reportfixtures import loader_section, recommendation

REPORTS = sorted((Path(__file__).resolve().parents[1] / "fixtures" / "reports").glob("*.json"))
KEY_OF = {label: key for key, label in AREA_LABELS.items()}
Seen = tuple[str, dict[str, str] | None]  # (result, areas), areas None where a format shows no checklist


def _load(path: Path) -> Report:
    return settle(load_report(str(path)))


def _result_from_mark(mark: str, line: str) -> str:
    if mark in ("✓", "i"):
        return "ok"
    if mark == "✗":
        return "problems"
    counts = re.search(r"(\d+) errors?, (\d+) warnings?", line)
    assert counts, line
    return "problems" if int(counts.group(1)) + int(counts.group(2)) else "unchecked"


def _status_from_words(status: str) -> str:
    if status.startswith("not applicable"):
        return "not-applicable"
    if status.startswith("not checked"):
        return "not-checked"
    return "ok" if status.startswith(("✓", "i ")) or status == "" else "problem"


def from_json(report: Report) -> Seen:
    verdict = json.loads(render(report, "json"))["verdict"]
    return verdict["result"], verdict["areas"]


def from_sarif(report: Report) -> Seen:
    verdict = json.loads(render(report, "sarif"))["runs"][0]["properties"]["verdict"]
    return verdict["result"], verdict["areas"]


def from_github(report: Report) -> Seen:
    last = render(report, "github").splitlines()[-1]
    match = re.match(r"::(notice|warning) .*title=envdoctor verdict%3A (\w+)::(.*)$", last)
    assert match, last
    areas = dict(part.split(": ", 1) for part in match.group(3).split(", "))
    return match.group(2), {KEY_OF.get(label, label): status for label, status in areas.items()}


def from_text(report: Report) -> Seen:
    lines = render(report, "text", RenderOptions(width=400)).splitlines()
    result = _result_from_mark(lines[1][0], lines[1])
    if report.facts.get("fleet") is not None:
        return result, None  # the fleet view draws the nodes side by side instead of a checklist
    areas: dict[str, str] = {}
    for line in lines[3:]:
        if not line.strip():
            break
        if line.startswith("  not checked (not selected): "):
            areas.update({KEY_OF.get(a, a): "not-checked" for a in line.split(": ", 1)[1].split(", ")})
            continue
        label, status = line[2:11].strip(), line[12:]
        areas[KEY_OF.get(label, label)] = _status_from_words(status)
    return result, areas


def from_markdown(report: Report) -> Seen:
    lines = render(report, "markdown").splitlines()
    head = lines[2]
    assert head.startswith("**"), head
    result = _result_from_mark(head[2], head)
    if report.facts.get("fleet") is not None:
        return result, None
    areas: dict[str, str] = {}
    table = lines.index("| area | status |")
    for line in lines[table + 2:]:
        row = re.match(r"^\| (\S+) \| (\S) ?(.*) \|$", line)
        if not row:
            break
        mark, words = row.group(2), row.group(3)
        status = ("problem" if mark in ("✗", "!") else "ok" if mark in ("✓", "i")
                  else _status_from_words(words.replace("\\", "")))
        areas[KEY_OF.get(row.group(1), row.group(1))] = status
    return result, areas


FORMATS = {"json": from_json, "sarif": from_sarif, "github": from_github, "text": from_text,
           "markdown": from_markdown}


def _built(name: str) -> Report:
    """Reports made from reportfixtures' sections, as the report tests make them."""
    guard = Finding(rule="SPW001", name="missing-main-guard", severity=Severity.ERROR, message="loop at import",
                    location=Location("train/a.py", 8, 1))
    start = Finding(rule="SPW002", name="start-method", severity=Severity.INFO, message="spawn")
    base: dict[str, Any] = dict(tool={"name": "envdoctor", "version": "0.1.0"}, generated_at="t",
                                host={"hostname": "h", "platform": "linux-64"},
                                target={"prefix": "/opt/env", "kind": "conda", "python": "3.11.7"},
                                facts={"system": {}, "packages": {}, "scripts": {}, "storage": {}, "gpu": {},
                                       "torch": {}},
                                checked=["PKG001", "CHN001", "SYS001", "SPW001", "SPW002", "DSK001", "GPU001",
                                         "DL001"])
    made = {
        "built-loader": dict(findings=[start], loader=loader_section(recommendation=recommendation(2, 990.0))),
        "built-guard-and-skip": dict(findings=[guard], loader=loader_section(
            skipped=[{"what": "smoke test", "reason": "torch cannot be imported"}]),
            errors=[{"rule": "GPU001", "probe": "gpu", "message": "skipped: probe 'gpu' failed: NVML error"}]),
    }
    return settle(Report(**{**base, **made[name]}))


CASES = [*((p.stem, p) for p in REPORTS), ("built-loader", None), ("built-guard-and-skip", None)]


@pytest.mark.parametrize(("name", "path"), CASES, ids=[name for name, _ in CASES])
def test_every_format_renders_the_reports_verdict(name: str, path: Path | None) -> None:
    report = _load(path) if path is not None else _built(name)
    assert report.verdict is not None
    assert report.verdict == decide(report)  # what the engine decides of this report, and nothing else
    expected = report.verdict["result"], dict(report.verdict["areas"])
    for fmt, read in FORMATS.items():
        result, areas = read(report)
        assert result == expected[0], (fmt, result, expected)
        if areas is not None:
            assert areas == expected[1], (fmt, areas, expected[1])


def test_the_saved_reports_cover_every_result_and_status() -> None:
    # Guards the fixtures: the comparison above means little if every report says the same.
    verdicts = [_load(path).verdict for path in REPORTS]
    assert {v["result"] for v in verdicts if v} == {"ok", "problems", "unchecked"}
    statuses = {status for v in verdicts if v for status in v["areas"].values()}
    assert statuses == {"ok", "problem", "not-checked", "not-applicable"}
    causes = {d["cause"] for v in verdicts if v for d in v["details"].values()}
    assert {"failed", "not-selected", "not-run", "not-applicable", None} <= causes


def test_a_report_saved_before_the_verdict_gets_the_engines(tmp_path: Path) -> None:
    old = json.loads((REPORTS[0].parent / "old-no-verdict.json").read_text(encoding="utf-8"))
    assert "verdict" not in old
    report = _load(REPORTS[0].parent / "old-no-verdict.json")
    assert report.verdict is not None and report.verdict["result"] == "problems"
    assert report.verdict["areas"]["spawn"] == "problem" and report.verdict["areas"]["storage"] == "not-checked"


def test_what_the_verdict_says_of_each_saved_situation() -> None:
    def verdict(name: str) -> dict[str, Any]:
        loaded = _load(REPORTS[0].parent / f"{name}.json").verdict
        assert loaded is not None
        return dict(loaded)

    failed = verdict("probe-failed")  # nothing found, a probe failed: not an all-clear
    assert failed["result"] == "unchecked" and failed["unchecked"] == ["storage"]
    assert failed["details"]["storage"]["reason"].startswith("storage probe failed: OSError: statvfs timed out")
    hung = verdict("hung-start")
    assert hung["result"] == "problems" and hung["details"]["packages"]["rules"] == ["PKG010"]
    assert hung["details"]["loader"] == {"worst": None, "findings": 0, "rules": [], "cause": "failed",
                                         "reason": "the smoke test was skipped: the environment's Python did "
                                                   "not start within the 5 s budget"}
    assert verdict("gpu-not-applicable")["details"]["gpu"]["cause"] == "not-applicable"
    loader = verdict("loader-ok")  # an info finding (DL005) is a note, not a problem
    assert loader["result"] == "ok" and loader["areas"]["loader"] == "ok" and loader["worst"] == "info"
    assert list(verdict("fleet")["areas"]) == ["fleet"]


def test_preflight_prints_the_same_verdict() -> None:
    from envdoctor.api import preflight_summary

    first = preflight_summary(_load(REPORTS[0].parent / "probe-failed.json")).splitlines()[0]
    assert first == "envdoctor preflight: 0 errors, 0 warnings, 0 info — not checked: storage"


def test_render_gives_an_old_report_the_verdict() -> None:
    from support import run_cli

    old = str(REPORTS[0].parent / "old-no-verdict.json")
    proc = run_cli("render", old, "--format", "json")
    assert proc.returncode == 1, proc.stderr  # its SPW001 and SYS001 errors
    verdict = json.loads(proc.stdout)["verdict"]
    assert verdict["result"] == "problems" and verdict["areas"]["spawn"] == "problem"
    text = run_cli("render", old).stdout.splitlines()
    assert text[1].startswith("✗ 4 errors") and "  scripts   ✗ SPW001 missing-main-guard (3 findings)" in text


@pytest.mark.parametrize("broken", [
    "yes", {"result": "fine", "areas": {}, "details": {}}, {"result": "ok", "areas": {"packages": "ok"}, "details": {}},
    {"result": "ok", "areas": {"gpu": "green"}, "details": {"gpu": {"cause": None}}},
    {"result": "ok", "areas": {"gpu": "ok"}, "details": {"gpu": {"cause": "because"}}},
    {"result": "ok", "areas": {"gpu": "ok"}, "details": {"gpu": "none"}},
    {"result": "ok", "areas": {"\x9b31m": "ok"}, "details": {"\x9b31m": {"cause": None}}},
    {"result": "ok", "areas": {"gpu": "ok"}, "details": {"gpu": {"rules": ["GPU\x1b]0;x"]}}},
])
def test_a_saved_verdict_this_version_cannot_render_is_decided_again(broken: Any) -> None:
    data = json.loads((REPORTS[0].parent / "train-problems.json").read_text(encoding="utf-8"))
    data["verdict"] = broken
    report = Report.from_dict(data)
    assert report.verdict is None
    assert settle(report).verdict == decide(report) and report.verdict["result"] == "problems"
