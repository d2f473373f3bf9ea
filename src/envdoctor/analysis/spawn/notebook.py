"""A Jupyter notebook's code cells as one module, with each line traced back to its cell.

The kernel runs the cells as `__main__` in the order given; envdoctor reads them
in the file's order. IPython syntax that is not Python — line magics (`%time`,
`%matplotlib inline`), shell escapes (`!pip install x`, `files = !ls`), help
(`obj?`) and cell magics (`%%bash`) — is blanked out (`pass` where indented), keeping the line numbers;
the cell magics whose body is Python (`%%time`, `%%capture` …) keep the body.
A cell that still does not parse is skipped and named, the others are read.
"""
from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from typing import Any, TypedDict

from envdoctor.analysis.spawn.syntax import source_lines

#: Cell magics whose body is Python code the kernel runs.
PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "debug", "python", "python3"})
_SHELL_ASSIGN = re.compile(r"^\s*[\w.,\s\[\]()]+=\s*[!%]")
_HELP = re.compile(r"^[\w.\[\]()'\"*]+\?{1,2}$")


class SkippedCell(TypedDict):
    """A code cell that does not parse even with IPython's syntax blanked out."""

    cell: int
    line: int
    error: str


@dataclass
class NotebookSource:
    """The joined code: its text, and for each of its lines the (cell, line in cell) it came from."""

    text: str = ""
    origin: list[tuple[int, int]] = field(default_factory=list)
    cells: int = 0
    skipped: list[SkippedCell] = field(default_factory=list)

    def place(self, line: int) -> tuple[int, int]:
        """(cell, line in that cell) for a line of the joined text; cells count from 1, every cell counted."""
        if 1 <= line <= len(self.origin):
            return self.origin[line - 1]
        return (0, line)


def _is_ipython_line(stripped: str) -> bool:
    # `obj?` / `obj.method??` is help; a line of a call whose comment ends in "?"
    # (`batch_size=1,  # how many per batch?`) is Python.
    return (stripped.startswith(("%", "!", "?")) or bool(_HELP.match(stripped))
            or bool(_SHELL_ASSIGN.match(stripped)))


def _cell_lines(source: Any) -> list[str]:
    if isinstance(source, list):
        text = "".join(s for s in source if isinstance(s, str))
    elif isinstance(source, str):
        text = source
    else:
        text = ""
    return source_lines(text)


class _Continuation:
    """Where a cell's Python stands at the end of each line it reads: open brackets, an open string, a backslash.

    IPython takes `%`, `!` and `?` as its own syntax only at the start of a logical line; a line that
    continues an open bracket (`print('%d'` then `   %(epoch, n))`), a triple-quoted string or a
    backslash is Python, as the kernel runs it.
    """

    def __init__(self) -> None:
        self.depth = 0
        self.quote = ""
        self.backslash = False

    @property
    def open(self) -> bool:
        return self.depth > 0 or bool(self.quote) or self.backslash

    def read(self, line: str) -> None:
        i, n = 0, len(line)
        comment = False
        while i < n and not comment:
            if self.quote:
                i = self._in_string(line, i)
                continue
            char = line[i]
            comment = char == "#"
            if char in "'\"":
                self.quote = line[i:i + 3] if line[i:i + 3] in ("'''", '"""') else char
                i += len(self.quote)
                continue
            if char in "([{":
                self.depth += 1
            elif char in ")]}":
                self.depth = max(self.depth - 1, 0)
            i += 1
        # A backslash ends a line only outside a comment; a one-quote string does not outlive its line
        # unless that backslash continues it.
        self.backslash = not comment and line.rstrip("\r\n").endswith("\\") and len(self.quote) != 3
        if len(self.quote) == 1 and not self.backslash:
            self.quote = ""

    def _in_string(self, line: str, i: int) -> int:
        if line[i] == "\\":
            return i + 2
        if line.startswith(self.quote, i):
            end = i + len(self.quote)
            self.quote = ""
            return end
        return i + 1


def python_of_cell(lines: list[str]) -> list[str]:
    """The cell's lines with IPython-only syntax blanked, or `pass` where indented (same number of lines)."""
    if lines and lines[0].lstrip().startswith("%%"):
        magic = lines[0].lstrip()[2:].split(None, 1)[0] if lines[0].strip() != "%%" else ""
        if magic not in PYTHON_CELL_MAGICS:
            return [""] * len(lines)
        lines = ["", *lines[1:]]
    out = []
    continued = False
    python = _Continuation()
    for line in lines:
        stripped = line.strip()
        if not continued and not python.open and _is_ipython_line(stripped):
            # A magic line continued with a backslash blanks its continuation too. An indented one
            # (`if in_notebook:` then `    %load_ext autoreload`) is a statement of its block: `pass` there.
            indent = line[:len(line) - len(line.lstrip())]
            out.append(f"{indent}pass" if indent else "")
            continued = line.rstrip().endswith("\\")
            continue
        if continued:
            out.append("")
            continued = line.rstrip().endswith("\\")
            continue
        python.read(line)
        out.append(line)
    return out


def read_notebook(text: str) -> NotebookSource:
    """The code cells of a notebook document (nbformat 4, or 3's worksheets) as one source.

    Raises ValueError when the text is not a notebook.
    """
    try:
        document = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ValueError(f"not a notebook: invalid JSON ({exc})") from None
    if not isinstance(document, dict):
        raise ValueError("not a notebook: the JSON is not an object")
    cells = document.get("cells")
    if cells is None and isinstance(document.get("worksheets"), list):
        cells = [c for sheet in document["worksheets"] if isinstance(sheet, dict)
                 for c in sheet.get("cells", []) or []]
    if not isinstance(cells, list):
        raise ValueError("not a notebook: no list of cells")
    result = NotebookSource(cells=len(cells))
    joined: list[str] = []
    for number, cell in enumerate(cells, start=1):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        lines = python_of_cell(_cell_lines(cell.get("source", cell.get("input"))))
        try:
            ast.parse("\n".join(lines))
        except SyntaxError as exc:
            result.skipped.append({"cell": number, "line": max(exc.lineno or 1, 1), "error": f"SyntaxError: {exc.msg}"})
            continue
        except (ValueError, RecursionError, MemoryError) as exc:
            result.skipped.append({"cell": number, "line": 1, "error": f"{type(exc).__name__}: {exc}"})
            continue
        for i, line in enumerate(lines, start=1):
            joined.append(line)
            result.origin.append((number, i))
    result.text = "\n".join(joined) + ("\n" if joined else "")
    return result
