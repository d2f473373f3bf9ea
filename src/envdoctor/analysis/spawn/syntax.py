"""Questions answered from the syntax tree alone: guards, generators, bound names, CUDA mentions."""
from __future__ import annotations

import ast
import re
from array import array
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from itertools import accumulate
from typing import overload

from envdoctor.collector import collector_paused

#: Characters `str.splitlines` breaks lines at and Python's tokenizer does not (a form feed is whitespace to it).
_NOT_PYTHON_BREAKS = re.compile("[\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
_PYTHON_BREAK = re.compile(r"\r\n|\r|\n")


def _odd_breaks(text: str) -> bool:
    """Whether `text` holds a character in _NOT_PYTHON_BREAKS: in ASCII text (most source) five
    substring tests, about ten times faster than the pattern's search."""
    if text.isascii():
        return "\x0c" in text or "\x0b" in text or "\x1c" in text or "\x1d" in text or "\x1e" in text
    return _NOT_PYTHON_BREAKS.search(text) is not None


def source_lines(text: str) -> list[str]:
    """The lines of Python source as the parser numbers them: broken at \\n, \\r\\n and \\r only.

    `str.splitlines` also breaks at form feeds (the ^L page breaks of older
    code), \\x1c-\\x1e, \\x85 and \\u2028: every line after one would be quoted
    and re-read one line off (a fix that moves the wrong statement).
    """
    if not _odd_breaks(text):
        return text.splitlines()
    lines = _PYTHON_BREAK.split(text)
    if lines and lines[-1] == "":
        lines.pop()
    return lines


class SourceLines(Sequence[str]):
    """A kept module's lines (`source_lines`), held as one text and where each line starts: a list of
    strings costs about 57 bytes a line more (NeMo's kept modules: 39 MiB as lists, 385,000 lines)."""

    __slots__ = ("_text", "_starts")

    def __init__(self, lines: list[str]) -> None:
        # No line holds a "\n" (source_lines breaks there), so the text splits back into exactly these lines.
        self._text = "\n".join(lines)
        self._starts = array("q", accumulate(map((1).__add__, map(len, lines)), initial=0))

    def __len__(self) -> int:
        return len(self._starts) - 1

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        starts = self._starts
        if isinstance(index, slice):
            first, stop, step = index.indices(len(starts) - 1)
            if step != 1:
                return [self[i] for i in range(first, stop, step)]
            if first >= stop:
                return []
            return self._text[starts[first]:starts[stop] - 1].split("\n")
        if index < 0:
            index += len(starts) - 1
        if not 0 <= index < len(starts) - 1:
            raise IndexError("line index out of range")
        return self._text[starts[index]:starts[index + 1] - 1]

    def __iter__(self) -> Iterator[str]:
        return iter(self[:])


def _own_nodes(func: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a function body, not descending into nested functions or classes."""
    todo = list(ast.iter_child_nodes(func))
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        yield node
        todo.extend(ast.iter_child_nodes(node))


def _children(node: ast.AST) -> list[ast.AST]:
    """The nodes directly under `node`, in field order (`ast.iter_child_nodes` as a list, without its generators)."""
    found: list[ast.AST] = []
    for name in node._fields:
        child = getattr(node, name, None)
        if isinstance(child, ast.AST):
            found.append(child)
        elif isinstance(child, list):
            for item in child:
                if isinstance(item, ast.AST):
                    found.append(item)
    return found


def child_expressions(node: ast.AST) -> list[ast.expr]:
    """The expressions directly under `node`, in field order."""
    return [child for child in _children(node) if isinstance(child, ast.expr)]


def _target_names(node: ast.AST) -> Iterator[str]:
    """The names bound or deleted anywhere under `node` (`ast.walk`'s nodes, without its generators)."""
    todo = [node]
    while todo:
        sub = todo.pop()
        if isinstance(sub, ast.Name):
            if isinstance(sub.ctx, (ast.Store, ast.Del)):
                yield sub.id
            continue
        if isinstance(sub, ast.Constant):
            continue
        if isinstance(sub, ast.MatchAs) and sub.name:
            yield sub.name
        todo.extend(_children(sub))


_BODIES = ("body", "orelse", "finalbody", "handlers", "cases")
#: The fields of a statement that bind what they name (`x` in `x = …`, `for x in …`, `with … as x`).
_TARGETS = ("targets", "target", "optional_vars")
#: What the source of an expression must hold for a name to be bound inside it: a comprehension or `:=`.
_BINDS_INSIDE = re.compile(r"\bfor\b|:=")


def _names_bound_in(value: ast.AST, lines: Sequence[str]) -> Iterable[str]:
    """The names an expression outside a target binds (a comprehension's variables, `:=`).

    Its own lines are read first: without `for` or `:=` there, nothing inside it
    binds a name, and its nodes need not be walked (most expressions).
    """
    first, last = getattr(value, "lineno", None), getattr(value, "end_lineno", None)
    if first is not None and last is not None and 1 <= first <= last <= len(lines) \
            and not any(("for" in line or ":=" in line) and _BINDS_INSIDE.search(line) for line in lines[first - 1:last]):
        return ()
    return _target_names(value)


def bound_names(body: list[ast.stmt], lines: Sequence[str]) -> set[str]:
    """Every name a block may bind in its own scope (assignments, loops, with, imports, defs …).

    `lines` is the source of the module the block is in. Each statement's names
    are kept on the node itself, so long elif chains cost linear time and every
    script walking a shared module's code reuses them.
    """
    names: set[str] = set()
    for stmt in body:
        cached = getattr(stmt, "_envdoctor_bound", None)
        if cached is None:
            found: set[str] = set()
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                found.add(stmt.name)  # what the body binds is local to it
            elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
                found.update((a.asname or a.name).split(".")[0] for a in stmt.names)
            else:
                for field_name, value in ast.iter_fields(stmt):
                    if field_name in _BODIES and isinstance(value, list):
                        for child in value:
                            if isinstance(child, (ast.ExceptHandler, ast.match_case)):
                                if isinstance(child, ast.ExceptHandler) and child.name:
                                    found.add(child.name)
                                if isinstance(child, ast.match_case):
                                    found.update(_target_names(child.pattern))
                                found |= bound_names(child.body, lines)
                        if value and isinstance(value[0], ast.stmt):
                            found |= bound_names(value, lines)
                    elif field_name in _TARGETS:
                        for target in value if isinstance(value, list) else [value]:
                            if isinstance(target, ast.AST):
                                found.update(_target_names(target))
                    elif isinstance(value, ast.AST):
                        found.update(_names_bound_in(value, lines))  # walrus in tests
                    elif isinstance(value, list):
                        for item in value:
                            if isinstance(item, ast.withitem):
                                found.update(_names_bound_in(item.context_expr, lines))
                                if item.optional_vars is not None:
                                    found.update(_target_names(item.optional_vars))
                            elif isinstance(item, ast.AST):
                                found.update(_names_bound_in(item, lines))
            cached = frozenset(found)
            stmt._envdoctor_bound = cached  # type: ignore[attr-defined]  # a mark of our own on the node
        names |= cached
    return names


def is_generator_node(func: ast.AST) -> bool:
    return any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in _own_nodes(func))


#: The fields that hold annotations: they run nothing (a parameter's, a return's, a local variable's).
_ANNOTATIONS = frozenset({"annotation", "returns"})


def mentions_cuda(func: ast.AST) -> bool:
    """Whether the function's code names CUDA (`.cuda`, "cuda:0"); an annotation
    (`-> torch.cuda.FloatTensor`) touches nothing, and kept trees drop them (strip_bodies)."""
    todo = [func]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Attribute) and node.attr == "cuda":
            return True
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("cuda"):
            return True
        for name, value in ast.iter_fields(node):
            if isinstance(value, ast.AST):
                if name not in _ANNOTATIONS:
                    todo.append(value)
            elif isinstance(value, list):
                todo.extend(item for item in value if isinstance(item, ast.AST))
    return False


def guard_polarity(test: ast.expr) -> bool | None:
    """True for `__name__ == "__main__"` (any order, either quotes), False for `!=`, else None.

    `if __name__ == "__main__" and x:` still guards its body; `or` does not.
    """
    # Asked of every `if` test and comparison the walk meets: the node types are final (the parser
    # makes no subclasses), and a comparison that names no `__name__` is none, so most are answered
    # by a type test and an attribute read.
    if isinstance(test, ast.BoolOp):
        if isinstance(test.op, ast.And) and any(guard_polarity(v) is True for v in test.values):
            return True
        return None
    if not isinstance(test, ast.Compare) or len(test.ops) != 1:
        return None
    left, op, right = test.left, test.ops[0], test.comparators[0]
    left_name, right_name = _is_dunder_name(left), _is_dunder_name(right)
    if not (left_name or right_name):
        return None
    if isinstance(op, (ast.In, ast.NotIn)):
        if left_name and _is_main(right):
            return isinstance(op, ast.In)
        return None
    if (left_name and _is_main(right)) or (_is_main(left) and right_name):
        if isinstance(op, (ast.Eq, ast.Is)):
            return True
        if isinstance(op, (ast.NotEq, ast.IsNot)):
            return False
    return None


def _is_dunder_name(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "__name__"


def _is_main(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return node.value == "__main__"
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        # `__name__ in ("__main__", "__mp_main__")` is true in spawned workers too
        # (they import the script as __mp_main__): that is no guard.
        names = {e.value for e in node.elts if isinstance(e, ast.Constant)}
        return "__main__" in names and "__mp_main__" not in names
    return False


def matches_only_main(pattern: ast.pattern) -> bool:
    """A case pattern that matches "__main__" and not "__mp_main__" (what spawned workers see)."""
    if isinstance(pattern, ast.MatchValue):
        return isinstance(pattern.value, ast.Constant) and pattern.value.value == "__main__"
    if isinstance(pattern, ast.MatchOr):
        return (any(matches_only_main(p) for p in pattern.patterns)
                and not any(isinstance(p, ast.MatchValue) and isinstance(p.value, ast.Constant)
                            and p.value.value == "__mp_main__" for p in pattern.patterns))
    return False


def _drop_body(node: ast.AST) -> None:
    """Empty a function's body, marked to be read again from its module's lines when called (body_of)."""
    setattr(node, "body", [])  # noqa: B010 - a function node, typed as any node here
    setattr(node, "_envdoctor_stripped", True)  # noqa: B010 - a mark of our own on the node


def strip_bodies(tree: ast.Module) -> None:
    """Drop the bodies of a walked module's functions, to be read again from its lines when called.

    Once a module's top level has run, its functions' bodies are only needed
    if something calls them, and most are never called; they are most of the
    tree's memory (about 1 KB per line of source). `body_of` parses a body
    again from the module's lines, with its own line and column numbers. The
    annotations of their parameters and returns go too (a sixth of what is
    left of NeMo's trees): the walk never reads an annotation.
    """
    todo: list[ast.stmt] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.ClassDef):
            todo.extend(node.body)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.body and getattr(node, "end_lineno", None):
                _drop_body(node)
            args = node.args
            for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
                if arg is not None:
                    arg.annotation = None
            node.returns = None
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            todo.extend(node.body)
            todo.extend(getattr(node, "orelse", []))
            for handler in getattr(node, "handlers", []):
                todo.extend(handler.body)


class RestoredBodies:
    """The function bodies `body_of` parsed again, least recently used first, stripped once more (`trim`)
    beyond `limit` lines: without a bound every body any script called stayed whole for the rest of the
    check (NeMo: 1,739 bodies, 65,688 lines, about half the memory of its kept trees)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used: OrderedDict[ast.AST, int] = OrderedDict()
        self.lines = 0

    def touch(self, node: ast.AST) -> None:
        if node in self.used:
            self.used.move_to_end(node)

    def add(self, node: ast.AST, lines: int) -> None:
        self.used[node] = lines
        self.lines += lines

    def trim(self) -> None:
        """Strip the least recently used bodies again until the rest fit in `limit` lines. Only between
        scripts: a script's walk must see the nodes it met first again (its caches are keyed by them)."""
        while self.lines > self.limit and self.used:
            node, lines = self.used.popitem(last=False)
            self.lines -= lines
            _drop_body(node)


def body_of(node: ast.AST, lines: Sequence[str], restored: RestoredBodies | None = None) -> list[ast.stmt]:
    """A function's body, parsed again from `lines` when strip_bodies dropped it (and kept in `restored`)."""
    body = getattr(node, "body", None)
    if not isinstance(body, list):
        return []  # a lambda: its body is one expression, and never stripped
    if not getattr(node, "_envdoctor_stripped", False):
        if restored is not None:
            restored.touch(node)
        return body
    setattr(node, "_envdoctor_stripped", False)  # noqa: B010 - a mark of our own on the node
    start, end = getattr(node, "lineno", 1), getattr(node, "end_lineno", 1)
    text = lines[start - 1:end]
    if not text:
        return body
    indented = text[0][:1] in (" ", "\t")
    # The lines verbatim keep every column; a block opener lets an indented def parse; blank
    # lines before them give every node its line in the module (no pass over the nodes after).
    opener = "if 1:\n" if indented else ""
    padding = "\n" * max(start - 1 - opener.count("\n"), 0)
    source = padding + opener + "\n".join(text)
    try:
        with collector_paused():
            parsed = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return body
    outer = parsed.body[0]
    function = outer.body[0] if indented and isinstance(outer, ast.If) else outer
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return body
    if function.lineno != start:  # an indented def on the first line: no room for the opener
        ast.increment_lineno(function, start - function.lineno)
    setattr(node, "body", function.body)  # noqa: B010 - a function node, typed as any node here
    if restored is not None:
        restored.add(node, end - start + 1)
    return function.body
