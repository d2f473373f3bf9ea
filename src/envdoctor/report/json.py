"""The JSON report: schema version 1, the contract CI jobs parse.

`schema.json` beside this module is the JSON Schema of that contract; it
ships in the wheel and the tests validate every report against it.
"""
from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable
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
    if text.isascii() and "\x7f" not in text:  # nothing to escape; both tests are C scans
        return text
    return _ESCAPED_IN_JSON.sub(lambda m: "\\u%04x" % ord(m.group()), text)


#: An array longer than this is written one element per line, each element compact: json's encoder
#: that indents is pure Python, about 3.5 times slower than its C one that does not (a million
#: findings: 12 s against 3.4 s here), and the file is about a quarter smaller.
LONG_ARRAY = 1_000


class _Rows:
    """A long array, stood in for by a placeholder while the rest is indented."""

    def __init__(self, items: list[object], depth: int, number: int) -> None:
        self.items, self.depth, self.number = items, depth, number


def _mark_long_arrays(value: object, rows: list[_Rows], depth: int = 0) -> object:
    """`value` with each array longer than LONG_ARRAY replaced by a `_Rows` (collected in `rows`);
    the elements of a long array are not walked."""
    if isinstance(value, dict):
        return {key: _mark_long_arrays(item, rows, depth + 1) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        if len(value) > LONG_ARRAY:
            rows.append(_Rows(list(value), depth, len(rows)))
            return rows[-1]
        return [_mark_long_arrays(item, rows, depth + 1) for item in value]
    return value


def _compact_encoder() -> Callable[[object], str]:
    """One element as compact JSON (what `json.dumps(item, ensure_ascii=False)` gives), by one C
    encoder made once: `json.dumps` makes a new one per call, which for a million elements is
    half the time."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # an interpreter without the C accelerator
        return json.JSONEncoder(default=_default, ensure_ascii=False).encode
    encode = make({}, _default, json.encoder.encode_basestring, None, ": ", ", ", False, False, True)
    return lambda item: "".join(encode(item, 0))


def dumps(data: object) -> str:
    """`data` as JSON indented by 2, but each array longer than LONG_ARRAY one compact element a line."""
    rows: list[_Rows] = []
    marked = _mark_long_arrays(data, rows)
    if not rows:
        return json.dumps(data, indent=2, default=_default, ensure_ascii=False)
    nonce = secrets.token_hex(8)  # a hostile report cannot spell the placeholder

    def default(value: object) -> object:
        if isinstance(value, _Rows):
            return f"\0envdoctor-rows-{nonce}-{value.number}\0"
        return _default(value)

    text = json.dumps(marked, indent=2, default=default, ensure_ascii=False)
    compact = _compact_encoder()
    for long in rows:
        inner = "  " * (long.depth + 1)
        lines = ",\n".join(inner + compact(item) for item in long.items)
        text = text.replace(json.dumps(f"\0envdoctor-rows-{nonce}-{long.number}\0"),
                            "[\n" + lines + "\n" + "  " * long.depth + "]", 1)
    return text


def render(report: Report) -> str:
    return escape_surrogates(dumps(report.to_dict())) + "\n"


def load_schema() -> dict[str, object]:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
