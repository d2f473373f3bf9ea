"""The JSON report: schema version 1, the contract CI jobs parse.

`schema.json` beside this module is the JSON Schema of that contract; it
ships in the wheel and the tests validate every report against it.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from envdoctor.model import Report

SCHEMA_PATH = Path(__file__).with_name("schema.json")


def _default(value: Any) -> Any:
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def render(report: Report) -> str:
    return json.dumps(report.to_dict(), indent=2, default=_default, ensure_ascii=False) + "\n"


def load_schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
