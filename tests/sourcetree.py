"""envdoctor's own source as the source checks read it: each file parsed and tokenized once per test process.

test_architecture.py, test_code_health.py and test_engine.py all read every module under src/ with
`ast` (the import graph, complexity, the CLI's importers) or `tokenize` (`Any`, suppressions).
Parsing the 35k lines is most of their cost, paid once here for whichever of them share a
process (all of them serially, often two under pytest-xdist). The trees are shared: a check
reads them and never changes them.
"""
from __future__ import annotations

import ast
import io
import tokenize
from functools import cache
from pathlib import Path
from typing import NamedTuple

SRC = Path(__file__).resolve().parent.parent / "src"


@cache
def python_files() -> tuple[Path, ...]:
    """Every .py file under src/, sorted."""
    return tuple(sorted(SRC.rglob("*.py")))


@cache
def text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


@cache
def parsed(path: Path) -> ast.Module:
    """The file's tree (the checks only read it)."""
    return ast.parse(text(path), str(path))


class Tokens(NamedTuple):
    """What the token checks read from one file, from a single pass of `tokenize`."""

    comments: tuple[tuple[int, str], ...]  # (line, text) of every comment token
    any_names: int  # NAME tokens spelt `Any` (the name, not the word in a string or comment)
    lines: int


@cache
def tokens(path: Path) -> Tokens:
    source = text(path)
    comments: list[tuple[int, str]] = []
    any_names = 0
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comments.append((token.start[0], token.string))
        elif token.type == tokenize.NAME and token.string == "Any":
            any_names += 1
    return Tokens(tuple(comments), any_names, len(source.splitlines()))
