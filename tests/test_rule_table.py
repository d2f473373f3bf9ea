"""One table over the whole catalog: every rule fires on its fixture and stays quiet on its near-miss.

The fixtures are declared in one place, `fixtures/rules.toml`: for each rule id, a `fires` and a
`quiet` fixture (paths under `fixtures/`) and, in `from`, the test whose case each one records.
Every pair runs through the one harness below, with only that rule selected: on `fires` the rule
must give at least one finding, each of that rule and each with evidence; on `quiet` it must give
none; on both it must run (a rule skipped for a missing section, or raising, is neither).

A fixture is a recorded-facts file: `{"config": {Config field: value}, "facts": {section: ...}}`,
the snapshot the rule reads (`Facts.from_dict`), taken from a real case of that rule's own tests
(a prefix those tests build, a script the spawn guard analysed, a `/proc` capture, a loader run):
rules are pure functions of the facts, so the snapshot is the whole input. How to add one is in
CONTRIBUTING.md ("Adding a rule").
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from envdoctor.catalog import load_catalog
from envdoctor.config import Config
from envdoctor.engine import run_rules
from envdoctor.facts import Facts
from envdoctor.model import Finding

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
INDEX_FILE = FIXTURES / "rules.toml"
INDEX: dict[str, dict[str, str]] = tomllib.loads(INDEX_FILE.read_text(encoding="utf-8"))
CATALOG = load_catalog()
RULE_IDS = [meta.id for meta in CATALOG.rules]

#: Rules without their fixtures in fixtures/rules.toml yet: those that arrived while the table was made
#: (issue 30), whose tests run the rule in another process or on a real loader. The list only shrinks: a
#: rule that gets its pair must leave it, and a new rule never enters it.
NO_FIXTURES_YET: set[str] = set()


def run_fixture(rule: str, fixture: str) -> tuple[list[Finding], list[dict[str, Any]]]:
    """The one harness: the recorded facts of `fixture`, only `rule` selected: (findings, errors)."""
    recorded = json.loads((FIXTURES / fixture).read_text(encoding="utf-8"))
    settings = {name: tuple(value) if isinstance(value, list) else value
                for name, value in recorded.get("config", {}).items()}
    config = Config(**{**settings, "select": (rule,)})
    facts = Facts.from_dict(recorded["facts"], config)
    [meta] = [meta for meta in CATALOG.rules if meta.id == rule]
    return run_rules(CATALOG, [meta], facts, {})


def record_fixture(facts: Facts, path: Path) -> None:
    """Write what a rule read from `facts` (its sections, the settings that differ from the defaults) as a
    fixture this harness replays: call it once at the end of the rule's own test, on the case to keep."""
    import dataclasses

    default = Config()
    settings = {f.name: getattr(facts.config, f.name) for f in dataclasses.fields(Config)
                if f.name != "select" and getattr(facts.config, f.name) != getattr(default, f.name)}
    sections = {name: value for name, value in facts._sections.items() if value is not None}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"config": settings, "facts": sections}, indent=1, sort_keys=True, default=list) + "\n",
                    encoding="utf-8")


def test_a_recorded_fixture_replays_as_it_was(tmp_path: Path) -> None:
    rule = next(rule for rule, case in CASES if case == "fires")
    recorded = json.loads((FIXTURES / INDEX[rule]["fires"]).read_text(encoding="utf-8"))
    settings = {name: tuple(value) if isinstance(value, list) else value for name, value in recorded["config"].items()}
    facts = Facts.from_dict(recorded["facts"], Config(**settings))
    record_fixture(facts, tmp_path / "again.json")
    assert run_fixture(rule, str(tmp_path / "again.json"))[0] == run_fixture(rule, INDEX[rule]["fires"])[0]


def test_every_rule_declares_a_fires_and_a_quiet_fixture() -> None:
    lacking = {rule for rule in RULE_IDS
               if not (INDEX.get(rule, {}).get("fires") and INDEX.get(rule, {}).get("quiet"))}
    new = sorted(lacking - NO_FIXTURES_YET)
    assert not new, f"rules without a fires and a quiet fixture in {INDEX_FILE.name}: {new} (CONTRIBUTING.md, 'Adding a rule')"
    done = sorted(NO_FIXTURES_YET - lacking)
    assert not done, f"these have their fixtures now: delete them from NO_FIXTURES_YET: {done}"
    unknown = sorted(set(INDEX) - set(RULE_IDS))
    assert not unknown, f"{INDEX_FILE.name} names rules the catalog does not have: {unknown}"


def test_every_declared_fixture_exists() -> None:
    missing = [f"{rule}.{case}: {entry[case]}" for rule, entry in INDEX.items() for case in ("fires", "quiet")
               if case in entry and not (FIXTURES / entry[case]).is_file()]
    assert not missing, f"fixtures named in {INDEX_FILE.name} that are not there: {missing}"


CASES = [(rule, case) for rule in RULE_IDS if rule in INDEX for case in ("fires", "quiet") if case in INDEX[rule]]


@pytest.mark.parametrize("rule, case", CASES, ids=[f"{rule}-{case}" for rule, case in CASES])
def test_rule_on_its_fixture(rule: str, case: str) -> None:
    findings, errors = run_fixture(rule, INDEX[rule][case])
    assert not errors, f"{rule} did not run on {INDEX[rule][case]}: {errors}"
    if case == "fires":
        assert findings, f"{rule} stayed quiet on its fires fixture {INDEX[rule][case]}"
        assert {f.rule for f in findings} == {rule}
        assert all(f.evidence for f in findings), f"{rule} fired without evidence"
    else:
        assert not findings, f"{rule} fired on its quiet fixture: {[f.message for f in findings]}"


def test_the_harness_tells_fires_from_quiet(tmp_path: Path) -> None:
    # The harness itself can fail: a rule's fires fixture, run for another rule of the same sections, is
    # not that rule's finding; and an empty snapshot skips a rule that needs its section (an error).
    rule = next(rule for rule, case in CASES if case == "fires")
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"facts": {}}), encoding="utf-8")
    findings, errors = run_fixture(rule, str(empty))
    assert not findings
    fired, _ = run_fixture(rule, INDEX[rule]["fires"])
    assert fired and all(f.rule == rule for f in fired)
