"""The SARIF 2.1.0 formatter: every finding a located result, repository-relative URIs, fingerprints.

GitHub code scanning shows only results with a physical location, so
findings about the environment are located on the file that describes it
(the --against file, else pyproject.toml, else the first script). Every log
is validated against the official OASIS schema vendored in fixtures/sarif/.
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from envdoctor.catalog import load_catalog
from envdoctor.model import Finding, Location, Report, Severity
from envdoctor.report import RenderOptions, render
from envdoctor.report.sarif import DESCRIPTION_LIMIT, FINGERPRINT_KEY, artifact_location, to_sarif
from reportfixtures import make_train_repo
from support import run_cli, run_envdoctor
from test_spawn_fixtures import FIXTURE_DIR

SCHEMA = Path(__file__).resolve().parents[1] / "fixtures" / "sarif" / "sarif-schema-2.1.0.json"


@lru_cache(maxsize=1)
def _official_validator() -> Any:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    assert schema["id"].endswith("/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json")
    jsonschema.Draft4Validator.check_schema(schema)
    return jsonschema.Draft4Validator(schema, format_checker=jsonschema.FormatChecker())


def validate_sarif(log: dict[str, Any]) -> None:
    errors = [f"{list(e.path)}: {e.message}" for e in _official_validator().iter_errors(log)]
    assert errors == []


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


def located(result: dict[str, Any]) -> tuple[str, int, int]:
    physical = result["locations"][0]["physicalLocation"]
    return physical["artifactLocation"]["uri"], physical["region"]["startLine"], physical["region"]["startColumn"]


def test_file_findings_are_results_at_their_line_with_end_positions(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # locations are relative to where envdoctor ran
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "train.py").write_text("\n" * 30 + "    for x in loader:\n", encoding="utf-8")
    log = to_sarif(make_report([GUARD, START, PARSE]), root=tmp_path)
    validate_sarif(log)
    results = log["runs"][0]["results"]
    assert [(r["ruleId"], r["level"]) for r in results] == [("SPW001", "error"), ("SPW002", "note"),
                                                            ("SPW004", "warning")]
    guard = results[0]
    assert guard["locations"][0]["physicalLocation"] == {
        "artifactLocation": {"uri": "scripts/train.py", "uriBaseId": "%SRCROOT%"},
        # The region ends where line 31 ends ("    for x in loader:" is 20 characters).
        "region": {"startLine": 31, "startColumn": 5, "endLine": 31, "endColumn": 21}}
    assert guard["properties"]["evidence"] == {"line": 31, "num_workers": 4}
    assert guard["properties"]["fix"] == "Call `main()` only from the guard."
    assert guard["message"]["text"].endswith("Fix: Call `main()` only from the guard.")
    assert located(results[2]) == ("bad%20dir/%C3%BCn%C3%AF.py", 7, 20)
    assert results[2]["locations"][0]["physicalLocation"]["region"]["endColumn"] == 21  # file absent: one column
    assert log["runs"][0]["originalUriBaseIds"]["%SRCROOT%"]["uri"] == tmp_path.resolve().as_uri() + "/"


def test_environment_findings_are_results_on_the_against_file_then_pyproject(tmp_path):
    (tmp_path / "env").mkdir()
    (tmp_path / "env" / "environment.yml").write_text("name: train\ndependencies: [numpy=1.26]\n", encoding="utf-8")
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n", encoding="utf-8")
    log = to_sarif(make_report([SHM, GUARD]), root=tmp_path, against=str(tmp_path / "env" / "environment.yml"))
    validate_sarif(log)
    results = {r["ruleId"]: r for r in log["runs"][0]["results"]}
    assert located(results["SYS002"]) == ("env/environment.yml", 1, 1)
    assert results["SYS002"]["level"] == "error" and results["SYS002"]["properties"]["scope"] == "environment"
    assert results["SYS002"]["locations"][0]["physicalLocation"]["region"]["endColumn"] == len("name: train") + 1
    assert log["runs"][0]["invocations"][0]["toolExecutionNotifications"] == []
    without_against = to_sarif(make_report([SHM]), root=tmp_path)
    assert located(without_against["runs"][0]["results"][0]) == ("pyproject.toml", 1, 1)


def test_without_any_file_environment_findings_stay_notifications(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    log = to_sarif(make_report([SHM], errors=[{"probe": "gpu", "message": "NVML failed", "traceback": "T"}]),
                   root=tmp_path)
    validate_sarif(log)
    run = log["runs"][0]
    assert run["results"] == []
    notes = run["invocations"][0]["toolExecutionNotifications"]
    assert notes[0]["associatedRule"]["id"] == "SYS002"
    assert run["tool"]["driver"]["rules"][notes[0]["associatedRule"]["index"]]["id"] == "SYS002"
    assert notes[0]["properties"]["evidence"] == {"shm_bytes": 67108864}
    assert notes[1]["level"] == "error" and notes[1]["message"]["text"] == "probe gpu: NVML failed"
    assert "traceback" not in notes[1]["properties"]
    assert run["invocations"][0]["executionSuccessful"] is False


def test_fingerprints_on_every_result_stable_when_lines_move(tmp_path):
    (tmp_path / "pyproject.toml").write_text("", encoding="utf-8")
    moved = Finding(**{**GUARD.__dict__, "location": Location("scripts/train.py", 40, 5),
                       "evidence": {"line": 40, "num_workers": 4}})
    other = Finding(**{**GUARD.__dict__, "location": Location("scripts/other.py", 31, 5)})
    log = to_sarif(make_report([GUARD, moved, other, SHM]), root=tmp_path)
    prints = [r["partialFingerprints"][FINGERPRINT_KEY] for r in log["runs"][0]["results"]]
    assert len(prints) == 4 and all(len(p) == 32 for p in prints)
    assert prints[0] == prints[1]  # the same finding, two lines further down
    assert len({prints[0], prints[2], prints[3]}) == 3


def test_rule_metadata_from_the_catalog_and_descriptions_within_githubs_limit():
    catalog = load_catalog()
    log = to_sarif(make_report([]))
    validate_sarif(log)
    rules = {r["id"]: r for r in log["runs"][0]["tool"]["driver"]["rules"]}
    assert list(rules) == catalog.ids()
    for meta in catalog.rules:
        rule = rules[meta.id]
        assert rule["name"] == meta.name
        assert len(rule["shortDescription"]["text"]) <= DESCRIPTION_LIMIT
        assert len(rule["fullDescription"]["text"]) <= DESCRIPTION_LIMIT
        assert rule["fullDescription"]["text"].split()[:6] == meta.what.split()[:6]
        assert rule["defaultConfiguration"]["level"] == {"error": "error", "warning": "warning",
                                                         "info": "note"}[meta.severity.value]
        for part in ("what", "why", "fix"):  # the full docs, uncut, stay in help
            assert " ".join(getattr(meta, part).split()) in " ".join(rule["help"]["text"].split())
        assert "**Why it matters**" in rule["help"]["markdown"]
    longest = max(len(" ".join(m.what.split())) for m in catalog.rules)
    if longest > DESCRIPTION_LIMIT:  # the catalog does hold docs longer than GitHub takes
        assert any(r["fullDescription"]["text"].endswith("…") for r in rules.values())


def test_artifact_locations_relative_absolute_and_the_file_system_root(tmp_path, monkeypatch):
    inside = tmp_path / "src" / "train.py"
    assert artifact_location(str(inside), tmp_path) == {"uri": "src/train.py", "uriBaseId": "%SRCROOT%"}
    assert artifact_location("/opt/elsewhere/train.py", tmp_path) == {"uri": "file:///opt/elsewhere/train.py"}
    monkeypatch.chdir(tmp_path)
    assert artifact_location("./a/b.py", tmp_path) == {"uri": "a/b.py", "uriBaseId": "%SRCROOT%"}
    assert artifact_location("../up.py", tmp_path) == {"uri": (tmp_path.parent / "up.py").as_uri()}
    log = to_sarif(make_report([GUARD]), root=Path("/"))
    assert log["runs"][0]["originalUriBaseIds"]["%SRCROOT%"]["uri"] == "file:///"
    assert "file:////" not in json.dumps(log)


def test_cli_sarif_from_a_subfolder_is_repository_relative_and_locates_sys001(tmp_path):
    """The issue's case: run in train/, three SPW001 and a SYS001; code scanning must see all four."""
    repo = make_train_repo(tmp_path / "repo")
    out = tmp_path / "out.sarif"
    proc = run_envdoctor("check", "--no-loader", "--select", "SPW001,SYS001", "--format", "sarif", "-o", str(out),
                         "a.py", "b.py", "c.py", cwd=str(repo / "train"), prefix_cmd=["prlimit", "--nofile=256:4096"])
    assert proc.returncode == 1, proc.stderr
    log = json.loads(out.read_text(encoding="utf-8"))
    validate_sarif(log)
    run = log["runs"][0]
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == repo.resolve().as_uri() + "/"
    got = sorted((r["ruleId"], *located(r)) for r in run["results"])
    assert got == [("SPW001", "train/a.py", 8, 1), ("SPW001", "train/b.py", 7, 5), ("SPW001", "train/c.py", 8, 8),
                   ("SYS001", "pyproject.toml", 1, 1)]
    sys001 = next(r for r in run["results"] if r["ruleId"] == "SYS001")
    assert sys001["level"] in ("error", "warning") and sys001["properties"]["evidence"]["soft_limit"] == 256
    assert all(r["partialFingerprints"][FINGERPRINT_KEY] for r in run["results"])
    assert all("endColumn" in r["locations"][0]["physicalLocation"]["region"] for r in run["results"])
    assert run["invocations"][0]["toolExecutionNotifications"] == []


def test_cli_sarif_for_the_spawn_fixtures(tmp_path):
    proc = run_cli("check", "--no-loader", "--select", "SPW001,SPW004", "--format", "sarif",
                   "--output", str(tmp_path / "out.sarif"), "--", str(FIXTURE_DIR / "main_unguarded.py"),
                   str(FIXTURE_DIR / "syntax_error.py"), cwd=str(FIXTURE_DIR.parent))
    assert proc.returncode == 1, proc.stderr
    log = json.loads((tmp_path / "out.sarif").read_text(encoding="utf-8"))
    validate_sarif(log)
    got = [(r["ruleId"], *located(r)[:2]) for r in log["runs"][0]["results"]]
    # The envdoctor checkout is the repository: URIs start at its root, not at fixtures/.
    assert got == [("SPW001", "fixtures/spawn/main_unguarded.py", 10), ("SPW004", "fixtures/spawn/syntax_error.py", 7)]


@pytest.mark.parametrize("hostile", ["\x1b]0;pwned\x07x", "a\u202eb", "[/bold]x[link=http://e.vil]y", "\x9b2J"])
def test_hostile_strings_are_escaped_and_the_log_still_validates(tmp_path, hostile):
    finding = Finding(rule="PKG002", name="duplicate-distribution", severity=Severity.ERROR,
                      message=f"two copies of {hostile}", evidence={"package": hostile, hostile: [hostile]},
                      fix=f"pip uninstall {hostile}", location=Location(f"{hostile}.py", 1, 1))
    (tmp_path / "pyproject.toml").write_text("", encoding="utf-8")
    text = render(make_report([finding, SHM], errors=[{"probe": hostile, "message": hostile}]), "sarif",
                  RenderOptions())
    log = json.loads(text)
    validate_sarif(log)
    for char in "\x1b\x07\u202e\x9b":
        assert char not in json.dumps(log, ensure_ascii=False)
        assert char not in text
