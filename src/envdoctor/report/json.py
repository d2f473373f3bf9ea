"""The JSON report: schema version 1, the contract CI jobs parse.

`schema.json` beside this module is the JSON Schema of that contract; it
ships in the wheel and the tests validate every report against it.
"""
from __future__ import annotations

import json
import re
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


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def escape_surrogates(text: str) -> str:
    """JSON text with lone surrogates written as `\\udcXX` escapes.

    A file name that is not UTF-8 reaches Python as lone surrogates
    (surrogateescape), which no UTF-8 writer accepts. They can only stand
    inside JSON strings, so escaping them keeps the JSON valid and the path
    exact: `json.loads` gives the same str back, and `os.fsencode` the bytes.
    """
    return _LONE_SURROGATE.sub(lambda m: "\\u%04x" % ord(m.group()), text)


def render(report: Report) -> str:
    return escape_surrogates(json.dumps(report.to_dict(), indent=2, default=_default, ensure_ascii=False)) + "\n"


def load_schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
