"""The SARIF 2.1.0 formatter: structure, rule metadata from the catalog, locations, levels.

GitHub code scanning rejects a whole SARIF file when one result lacks a
physical location, so findings without a location must not become results;
they travel as notifications tied to their rule. When the official SARIF
2.1.0 JSON Schema is available locally (ENVDOCTOR_SARIF_SCHEMA=path), the
output is validated against it as well.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from envdoctor.catalog import load_catalog
from envdoctor.model import Finding, Location, Report, Severity
from envdoctor.report import render
from envdoctor.report.sarif import artifact_location, to_sarif
from support import run_envdoctor
from test_spawn_fixtures import FIXTURE_DIR


def make_report(findings: list[Finding], errors: list[dict] | None = None) -> Report:
    return Report(tool={"name": "envdoctor", "version": "0.1.0"}, generated_at="2026-11-29T21:00:00Z",
                  host={"hostname": "h", "platform": "linux-64"},
                  target={"prefix": "/opt/env", "kind": "conda", "python": "3.11.7"},
                  facts={}, findings=findings, errors=errors or [])


GUARD = Finding(rule="SPW001", name="missing-main-guard", severity=Severity.ERROR,
                message="train.py:31: for-loop over DataLoader at import time",
                evidence={"line": 31, "num_workers": 4}, fix="Call `main()` only from the guard.",
                location=Location("scripts/train.py", 31, 5))
SHM = Finding(rule="SYS002", name="shm-too-small", severity=Severity.ERROR,
              message="/dev/shm is 64.0 MiB", evidence={"shm_bytes": 67108864}, fix="docker run --shm-size=8g ...")
START = Finding(rule="SPW002", name="start-method", severity=Severity.INFO, message="workers use spawn",
                evidence={"start_method": "spawn"}, fix="persistent_workers=True",
                location=Location("train.py", 3, 1))
PARSE = Finding(rule="SPW004", name="unparsable-script", severity=Severity.WARNING, message="cannot be parsed",
                evidence={}, fix="fix it", location=Location("bad dir/ünï.py", 7, 20))


def structural_check(log: dict) -> None:
    """What SARIF 2.1.0 and GitHub's ingestion require, checked by hand."""
    assert log["version"] == "2.1.0" and log["$schema"].endswith("sarif-2.1.0.json")
    [run] = log["runs"]
    driver = run["tool"]["driver"]
    assert driver["name"] == "envdoctor" and driver["rules"]
    ids = [r["id"] for r in driver["rules"]]
    assert len(ids) == len(set(ids))
    for result in run["results"]:
        assert result["level"] in ("error", "warning", "note", "none")
        assert result["message"]["text"]
        assert driver["rules"][result["ruleIndex"]]["id"] == result["ruleId"]
        [location] = result["locations"]  # GitHub: at least one, with an artifact URI
        physical = location["physicalLocation"]
        assert physical["artifactLocation"]["uri"]
        assert physical["region"]["startLine"] >= 1 and physical["region"]["startColumn"] >= 1
    for note in run["invocations"][0]["toolExecutionNotifications"]:
        assert note["message"]["text"] and note["level"] in ("error", "warning", "note", "none")


def test_located_findings_are_results_with_level_location_evidence_and_fix(tmp_path):
    log = to_sarif(make_report([GUARD, START, PARSE]), root=tmp_path)
    structural_check(log)
    results = log["runs"][0]["results"]
    assert [(r["ruleId"], r["level"]) for r in results] == [("SPW001", "error"), ("SPW002", "note"),
                                                            ("SPW004", "warning")]
    guard = results[0]
    assert guard["locations"][0]["physicalLocation"] == {
        "artifactLocation": {"uri": "scripts/train.py", "uriBaseId": "%SRCROOT%"},
        "region": {"startLine": 31, "startColumn": 5}}
    assert guard["properties"]["evidence"] == {"line": 31, "num_workers": 4}
    assert guard["properties"]["fix"] == "Call `main()` only from the guard."
    assert guard["message"]["text"].endswith("Fix: Call `main()` only from the guard.")
    assert results[2]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "bad%20dir/%C3%BCn%C3%AF.py"
    assert log["runs"][0]["originalUriBaseIds"]["%SRCROOT%"]["uri"] == tmp_path.resolve().as_uri() + "/"


def test_findings_without_location_become_notifications_so_github_accepts_the_file(tmp_path):
    log = to_sarif(make_report([SHM, GUARD], errors=[{"probe": "gpu", "message": "NVML failed",
                                                      "traceback": "Traceback ..."}]), root=tmp_path)
    structural_check(log)
    run = log["runs"][0]
    assert [r["ruleId"] for r in run["results"]] == ["SPW001"]
    notes = run["invocations"][0]["toolExecutionNotifications"]
    finding_note = notes[0]
    assert finding_note["associatedRule"]["id"] == "SYS002"
    rules = run["tool"]["driver"]["rules"]
    assert rules[finding_note["associatedRule"]["index"]]["id"] == "SYS002"
    assert finding_note["level"] == "error"
    assert finding_note["properties"]["evidence"] == {"shm_bytes": 67108864}
    assert notes[1]["level"] == "error" and notes[1]["message"]["text"] == "probe gpu: NVML failed"
    assert "traceback" not in notes[1]["properties"]
    assert run["invocations"][0]["executionSuccessful"] is False


def test_rule_metadata_and_help_come_from_the_catalog():
    catalog = load_catalog()
    log = to_sarif(make_report([]))
    rules = {r["id"]: r for r in log["runs"][0]["tool"]["driver"]["rules"]}
    assert list(rules) == catalog.ids()
    for meta in catalog.rules:
        rule = rules[meta.id]
        assert rule["name"] == meta.name
        assert rule["shortDescription"]["text"] == " ".join(meta.summary.split())
        assert rule["defaultConfiguration"]["level"] == {"error": "error", "warning": "warning",
                                                         "info": "note"}[meta.severity.value]
        for part in ("what", "why", "fix"):
            first_words = " ".join(getattr(meta, part).split()[:6])
            assert first_words in " ".join(rule["help"]["text"].split())
        assert "**Why it matters**" in rule["help"]["markdown"]
    assert log["runs"][0]["results"] == []


def test_artifact_locations_relative_absolute_and_outside_the_root(tmp_path):
    inside = tmp_path / "src" / "train.py"
    assert artifact_location(str(inside), tmp_path) == {"uri": "src/train.py", "uriBaseId": "%SRCROOT%"}
    outside = Path("/opt/elsewhere/train.py")
    assert artifact_location(str(outside), tmp_path) == {"uri": "file:///opt/elsewhere/train.py"}
    assert artifact_location("./a/b.py", tmp_path) == {"uri": "a/b.py", "uriBaseId": "%SRCROOT%"}
    assert artifact_location("../up.py", tmp_path)["uri"].startswith("file:///")


def test_render_goes_through_the_shared_format_table():
    text = render(make_report([GUARD]), "sarif")
    assert json.loads(text)["runs"][0]["results"][0]["ruleId"] == "SPW001"


def test_cli_sarif_for_the_spawn_fixtures(tmp_path):
    proc = run_envdoctor("check", "--no-loader", "--select", "SPW001", "SPW004", "--format", "sarif",
                         "--output", str(tmp_path / "out.sarif"), "--", str(FIXTURE_DIR / "main_unguarded.py"),
                         str(FIXTURE_DIR / "syntax_error.py"), cwd=str(FIXTURE_DIR.parent))
    assert proc.returncode == 1, proc.stderr
    log = json.loads((tmp_path / "out.sarif").read_text(encoding="utf-8"))
    structural_check(log)
    got = [(r["ruleId"], r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
            r["locations"][0]["physicalLocation"]["region"]["startLine"]) for r in log["runs"][0]["results"]]
    assert got == [("SPW001", "spawn/main_unguarded.py", 10), ("SPW004", "spawn/syntax_error.py", 7)]


@pytest.mark.skipif(not os.environ.get("ENVDOCTOR_SARIF_SCHEMA"), reason="set ENVDOCTOR_SARIF_SCHEMA to the "
                    "official sarif-schema-2.1.0.json to validate against it")
def test_against_the_official_sarif_schema(tmp_path):
    import jsonschema

    schema = json.loads(Path(os.environ["ENVDOCTOR_SARIF_SCHEMA"]).read_text(encoding="utf-8"))
    validator = jsonschema.Draft7Validator(schema, format_checker=jsonschema.FormatChecker())
    log = to_sarif(make_report([GUARD, SHM, START, PARSE], errors=[{"rule": "SYS001", "message": "boom"}]),
                   root=tmp_path)
    errors = [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(log)]
    assert errors == []
