"""The JSON Schema's `facts` and the facts TypedDicts say the same thing, key for key.

Every report the tests build is validated against the schema, where each
section allows only its TypedDict's keys; this test keeps the schema equal
to the TypedDicts. Together, a key a probe adds without typing it, or a key
typed but missing from the schema, fails a test.
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("update_schema_facts", ROOT / "scripts" / "update_schema_facts.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SCRIPT = _script()
SECTIONS = SCRIPT.section_types()


def _facts_schema() -> dict:
    from envdoctor.report.json import load_schema

    return load_schema()["properties"]["facts"]


def test_the_overloads_name_a_typeddict_for_every_probe() -> None:
    from envdoctor.facts import PROBES

    assert set(PROBES) <= set(SECTIONS)
    assert {"system", "packages", "torch", "gpu", "storage", "fleet"} <= set(SECTIONS)


@pytest.mark.parametrize("section", sorted(set(SECTIONS) - set(SCRIPT.TOP_LEVEL)))
def test_schema_lists_exactly_the_typeddict_keys(section: str) -> None:
    described = _facts_schema()["properties"].get(section)
    assert described is not None, f"schema.json has no facts.{section}: run python scripts/update_schema_facts.py"
    keys = SCRIPT.keys_of(SECTIONS[section])
    assert sorted(described["properties"]) == keys, "run python scripts/update_schema_facts.py"
    assert described["additionalProperties"] is False
    assert described["type"] == ["object", "null"]


def test_the_script_changes_nothing_else_in_the_schema() -> None:
    path = ROOT / "src" / "envdoctor" / "report" / "schema.json"
    text = path.read_text(encoding="utf-8")
    updated = json.loads(SCRIPT.with_facts(text))
    original = json.loads(text)
    assert {k: v for k, v in updated.items() if k != "properties"} == \
           {k: v for k, v in original.items() if k != "properties"}
    assert {k: v for k, v in updated["properties"].items() if k != "facts"} == \
           {k: v for k, v in original["properties"].items() if k != "facts"}


def test_a_report_with_an_untyped_key_does_not_validate() -> None:
    from envdoctor.config import Config
    from envdoctor.engine import run_check
    from support import validate_report

    report = run_check(Config(no_loader=True, select=("SYS003",))).to_dict()
    validate_report(report)
    report["facts"]["system"]["not_in_the_typeddict"] = 1
    with pytest.raises(AssertionError, match="not_in_the_typeddict"):
        validate_report(report)
    report["facts"]["system"].pop("not_in_the_typeddict")
    report["facts"]["made_up_section"] = {}
    with pytest.raises(AssertionError, match="made_up_section"):
        validate_report(report)
