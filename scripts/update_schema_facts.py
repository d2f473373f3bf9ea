"""Regenerate the `facts` part of the report's JSON Schema from the facts TypedDicts.

Each section a report carries under `facts` is typed by the TypedDict that
`Facts.__getitem__`'s overloads name (src/envdoctor/facts/__init__.py); the
schema lists exactly that TypedDict's keys, and no others, so the types, the
schema and the reports cannot drift apart. Run after changing a facts
TypedDict: `python scripts/update_schema_facts.py`. tests/test_schema_facts.py
fails while they disagree. Only `properties.facts` of schema.json is rewritten.
"""
from __future__ import annotations

import ast
import importlib
import json
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FACTS_INIT = ROOT / "src" / "envdoctor" / "facts" / "__init__.py"
SCHEMA = ROOT / "src" / "envdoctor" / "report" / "schema.json"
#: Sections the report carries at its top level (`target`, `loader`, `loop`), not under `facts`.
TOP_LEVEL = ("target", "loader", "loop")


def _imports(tree: ast.Module) -> dict[str, str]:
    """Name -> module of every `from X import Name` in the file (the TYPE_CHECKING block's too)."""
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                found[alias.asname or alias.name] = node.module
    return found


def section_types() -> dict[str, Any]:
    """Section name -> its TypedDict, read from the overloads of Facts.__getitem__."""
    tree = ast.parse(FACTS_INIT.read_text(encoding="utf-8"))
    modules = _imports(tree)
    sections: dict[str, Any] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.FunctionDef) and node.name == "__getitem__" and node.args.args[1:]):
            continue
        annotation = node.args.args[1].annotation
        if not (isinstance(annotation, ast.Subscript) and ast.unparse(annotation.value) == "Literal"):
            continue
        section = ast.literal_eval(annotation.slice)
        returns = ast.unparse(node.returns) if node.returns else ""
        type_name = returns.replace("| None", "").strip()
        sections[section] = getattr(importlib.import_module(modules[type_name]), type_name)
    return sections


def keys_of(typed_dict: Any) -> list[str]:
    return sorted(typed_dict.__required_keys__ | typed_dict.__optional_keys__)


def facts_schema() -> dict[str, Any]:
    """The schema of the report's `facts`: one object a section, with exactly its TypedDict's keys."""
    properties = {}
    for section, typed_dict in section_types().items():
        if section in TOP_LEVEL:
            continue
        properties[section] = {
            "type": ["object", "null"],
            "description": f"{typed_dict.__name__} ({typed_dict.__module__})",
            "properties": {key: {} for key in keys_of(typed_dict)},
            "additionalProperties": False,
        }
    return {
        "type": "object",
        "description": "What the probes observed, one object a section (facts hold observations, not verdicts)",
        "properties": properties,
        "additionalProperties": False,
    }


def _value_end(text: str, start: int) -> int:
    """The index just past the JSON object that opens at text[start] (strings skipped)."""
    depth, index, in_string = 0, start, False
    while index < len(text):
        char = text[index]
        if in_string:
            if char == "\\":
                index += 1
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return index + 1
        index += 1
    raise ValueError("unbalanced JSON")


def with_facts(text: str) -> str:
    """schema.json's text with only its top-level `properties.facts` value replaced.

    The rest of the file is left byte for byte as it is, so edits to other parts
    of the schema merge without conflicts.
    """
    key = '\n    "facts": '
    start = text.index(key) + len(key)
    end = _value_end(text, start)
    rendered = json.dumps(facts_schema(), indent=2, ensure_ascii=False)
    # Short lists of strings on one line, as the rest of the file writes them.
    rendered = re.sub(r'\[\s*("[^"\n]*"(?:,\s*"[^"\n]*")*)\s*\]',
                      lambda m: "[" + ", ".join(re.findall(r'"[^"\n]*"', m.group(1))) + "]", rendered)
    rendered = rendered.replace("\n", "\n    ")
    updated = text[:start] + rendered + text[end:]
    assert json.loads(updated)["properties"]["facts"] == facts_schema()
    return updated


if __name__ == "__main__":
    SCHEMA.write_text(with_facts(SCHEMA.read_text(encoding="utf-8")), encoding="utf-8")
