"""The JSON report: schema version 1, the contract CI jobs parse.

`schema.json` beside this module is the JSON Schema of that contract; it
ships in the wheel and the tests validate every report against it.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from envdoctor.model import Report

SCHEMA_PATH = Path(__file__).with_name("schema.json")


def _default(value: object) -> object:
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


# Lone surrogates, and what JSON may hold raw but a terminal would obey or a reader not see:
# DEL and C1 controls (0x9b is CSI), bidi embeddings/overrides/isolates, zero-width characters.
_ESCAPED_IN_JSON = re.compile("[\ud800-\udfff\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")


def escape_surrogates(text: str) -> str:
    """JSON text with lone surrogates, C1 controls and bidi characters written as `\\uXXXX` escapes.

    A file name that is not UTF-8 reaches Python as lone surrogates
    (surrogateescape), which no UTF-8 writer accepts; a C1 control or a bidi
    override in a package name would act on the terminal of whoever runs
    `cat report.json`. These characters can only stand inside JSON strings
    (json.dumps already escapes the C0 controls), so escaping them keeps the
    JSON valid and the value exact: `json.loads` gives the same str back.
    """
    return _ESCAPED_IN_JSON.sub(lambda m: "\\u%04x" % ord(m.group()), text)


def render(report: Report) -> str:
    return escape_surrogates(json.dumps(report.to_dict(), indent=2, default=_default, ensure_ascii=False)) + "\n"


def load_schema() -> dict[str, object]:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
