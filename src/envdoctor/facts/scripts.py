"""The "scripts" facts section: what each training script given to check does at run time.

`envdoctor check train.py tools/` hands its positional arguments to
`config.scripts`; folders are expanded to the Python files under them. Each
file is read as bytes, decoded the way the interpreter would (a coding
cookie or BOM, else UTF-8), parsed, and walked by `script_analysis` — never
imported or executed. A file that cannot be read, decoded or parsed is a
fact too (status "unreadable" or "unparsable", with the position), so one bad
file never stops the others being checked.

Nothing is gathered when no scripts were given: the section is then None.
"""
from __future__ import annotations

import ast
import io
import os
import sys
import tokenize
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypedDict


class ScriptsFacts(TypedDict, total=False):
    """The `scripts` facts section (the report's facts.scripts)."""

    given: Any
    files: Any


#: Folders never descended into when a directory is given.
SKIPPED_DIRS = frozenset({"__pycache__", "site-packages", "node_modules"})


def expand_paths(paths: tuple[str, ...] | list[str]) -> Iterator[tuple[str, bool]]:
    """(path, exists) for every script: files as given, folders expanded to their *.py files.

    Hidden folders, caches and virtual environments under a folder are skipped;
    a file named explicitly is always checked, whatever its suffix.
    """
    seen: set[str] = set()
    for given in paths:
        path = Path(given)
        if path.is_dir():
            for root, dirs, files in os.walk(given):
                dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIPPED_DIRS
                                 and not (Path(root) / d / "pyvenv.cfg").exists())
                for name in sorted(files):
                    if name.endswith(".py"):
                        full = os.path.join(root, name)
                        if full not in seen:
                            seen.add(full)
                            yield full, True
        elif given not in seen:
            seen.add(given)
            yield given, path.exists()


def _position(data: bytes, offset: int) -> tuple[int, int]:
    line = data.count(b"\n", 0, offset) + 1
    column = offset - (data.rfind(b"\n", 0, offset) + 1) + 1
    return line, column


def read_script(path: str) -> tuple[str | None, str | None, dict[str, Any]]:
    """(text, encoding, problem): the decoded source, or a problem dict saying why not."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        return None, None, {"status": "unreadable", "error": exc.strerror or str(exc)}
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:  # an unknown encoding named in the coding cookie
        return None, None, {"status": "unparsable", "error": str(exc), "line": 1, "column": 1}
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        line, column = _position(data, exc.start)
        declared = encoding != "utf-8"
        return None, encoding, {
            "status": "unparsable",
            "error": (f"byte 0x{data[exc.start]:02x} at line {line}, column {column} is not valid "
                      f"{encoding}" + ("" if declared else " and the file declares no other encoding")),
            "line": line, "column": column, "encoding": encoding,
        }
    if text.startswith("\ufeff"):
        text = text[1:]
    return text, encoding, {}


def analyse_script(path: str) -> dict[str, Any]:
    """The facts for one script: its status and, when it parses, where it starts workers."""
    from envdoctor.facts.script_analysis import analyse_source

    text, encoding, problem = read_script(path)
    info: dict[str, Any] = {"path": path}
    if problem:
        info.update(problem)
        return info
    assert text is not None
    info["encoding"] = encoding
    info["lines"] = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError as exc:
        # The grammar is envdoctor's own interpreter's: the rule compares it with the target's.
        info.update({"status": "unparsable", "error": f"SyntaxError: {exc.msg}",
                     "line": max(exc.lineno or 1, 1), "column": max(exc.offset or 1, 1),
                     "code": (exc.text or "").strip()[:200],
                     "parser_python": "{}.{}".format(*sys.version_info[:2])})
        return info
    except (ValueError, RecursionError, MemoryError) as exc:  # null bytes; absurd nesting
        info.update({"status": "unparsable", "error": f"{type(exc).__name__}: {exc}", "line": 1, "column": 1})
        return info
    info["status"] = "ok"
    info.update(analyse_source(tree, text))
    return info


def gather_scripts(facts: Any) -> dict[str, Any] | None:
    """The scripts section: one entry per script, or None when no scripts were given."""
    scripts = tuple(facts.config.scripts or ())
    if not scripts:
        return None
    files = []
    for path, exists in expand_paths(scripts):
        if not exists:
            files.append({"path": path, "status": "unreadable", "error": "no such file or directory"})
            continue
        files.append(analyse_script(path))
    return {"given": list(scripts), "files": files}
