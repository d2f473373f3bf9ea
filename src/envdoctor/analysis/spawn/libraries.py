"""Loaders by what they are: library classes and functions read from the target's installed source.

A script builds `NeighborLoader(data, num_workers=6)` or calls
`Node2Vec(...).loader(num_workers=4)`; whether that is a DataLoader is a fact
of the library, not of the name. Where the library is installed in the
environment the script runs in, its source is read statically (parsed, never
imported): a class is a loader when its bases lead to
`torch.utils.data.DataLoader`, a function or method when it returns one.
Where it is not installed (the pre-commit hook's own venv), the catalog's
`library_loaders` table, built by reading the popular libraries' source, says
the same for their public names.

Reads are bounded: a few hundred files per check, a size limit per file, a
depth limit on base chains and re-exports; a file that cannot be read or
parsed is a name that stays unknown, never an exception.
"""
from __future__ import annotations

import ast
import os
import sys
from dataclasses import dataclass
from functools import cache

from envdoctor.analysis.spawn.names import LOADER_CLASSES
from envdoctor.analysis.spawn.reading import decode_source, read_bytes
from envdoctor.collector import collector_paused

#: Most library files parsed in one check, the largest one read, the longest chain followed.
MAX_FILES = 300
MAX_FILE_BYTES = 2 * 1024 * 1024
MAX_DEPTH = 12
#: Libraries never read: the standard library's and torch's own names are known by the tables.
STDLIB = frozenset(getattr(sys, "stdlib_module_names", ()))
NEVER_READ = frozenset({"torch", "numpy", "builtins", "typing", "typing_extensions", "functools", "itertools",
                        "multiprocessing", "concurrent", "os", "sys", "collections", "abc"})


@dataclass(frozen=True)
class LoaderTable:
    """The catalog's library_loaders table: loader classes and loader-returning functions and methods."""

    classes: frozenset[str]
    #: Fully qualified functions, or `module.Class.method` for methods.
    returns_loader: frozenset[str]


@cache
def loader_table() -> LoaderTable:
    """The shipped table (catalog/library_loaders.toml), read once when first needed."""
    from envdoctor.catalog import load_data

    data = load_data("library_loaders")
    classes: set[str] = set()
    returns: set[str] = set()
    for entry in data.get("library", []):
        classes.update(entry.get("classes", ()))
        returns.update(entry.get("returns_loader", ()))
    return LoaderTable(frozenset(classes), frozenset(returns))


class _Source:
    """One parsed library module: its top-level names, by what they bind."""

    def __init__(self, dotted: str, tree: ast.Module, package: str) -> None:
        self.dotted = dotted
        self.package = package
        #: name -> the qualified name an import binds it to.
        self.imports: dict[str, str] = {}
        self.defs: dict[str, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef] = {}
        #: name -> the expression a plain `name = expr` binds.
        self.aliases: dict[str, ast.expr] = {}
        self.stars: list[str] = []
        self._read(tree.body)

    def _absolute(self, stmt: ast.ImportFrom) -> str:
        if not stmt.level:
            return stmt.module or ""
        parts = self.package.split(".") if self.package else []
        if stmt.level > 1:
            parts = parts[:max(len(parts) - (stmt.level - 1), 0)]
        return ".".join([*parts, *([stmt.module] if stmt.module else [])])

    def _read(self, body: list[ast.stmt]) -> None:
        for stmt in body:
            if isinstance(stmt, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                self.defs.setdefault(stmt.name, stmt)
            elif isinstance(stmt, ast.ImportFrom):
                base = self._absolute(stmt)
                for alias in stmt.names:
                    if alias.name == "*":
                        self.stars.append(base)
                    else:
                        self.imports.setdefault(alias.asname or alias.name, f"{base}.{alias.name}")
            elif isinstance(stmt, ast.Import):
                for alias in stmt.names:
                    if alias.asname:
                        self.imports.setdefault(alias.asname, alias.name)
                    else:
                        top = alias.name.split(".")[0]
                        self.imports.setdefault(top, top)
            elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                self.aliases.setdefault(stmt.targets[0].id, stmt.value)
            elif isinstance(stmt, ast.If):  # `if backend == "pytorch": from .dataloader import *`
                self._read(stmt.body)
                self._read(stmt.orelse)
            elif isinstance(stmt, ast.Try):
                self._read(stmt.body)


class LibraryLoaders:
    """Which library names are DataLoaders or return one, asked once per name for a whole check."""

    def __init__(self, search_path: list[str] | tuple[str, ...] | None) -> None:
        self.search_path = tuple(p for p in (search_path or ()) if p and os.path.isdir(p))
        self.table = loader_table()
        self._sources: dict[str, _Source | None] = {}
        self._classes: dict[str, bool] = {}
        self._returns: dict[str, bool] = {}
        self._tops: dict[str, bool] = {}
        self.files_read = 0

    # -- the questions the walk asks -------------------------------------------

    def is_loader_class(self, name: str, read: bool = True) -> bool:
        """Whether `name` (fully qualified, as the script imports it) is a DataLoader class.

        With `read` False only the tables answer (the walk asks so for a call that cannot set
        num_workers: what it builds starts no worker, whatever it is)."""
        if name in LOADER_CLASSES or name in self.table.classes:
            return True
        return self._read_is_loader(name, 0) if read and self._readable(name) else False

    def returns_loader(self, name: str, read: bool = True) -> bool:
        """Whether calling the function or method `name` (`pkg.Class.method`) gives a DataLoader."""
        if name in self.table.returns_loader:
            return True
        return self._read_returns(name, 0) if read and self._readable(name) else False

    def installed(self, name: str) -> bool:
        """Whether the library `name` belongs to can be read from the target's path."""
        return self._readable(name)

    # -- reading -----------------------------------------------------------------

    def _readable(self, name: str) -> bool:
        top = name.split(".")[0]
        known = self._tops.get(top)
        if known is None:
            known = self._tops[top] = (top not in NEVER_READ and top not in STDLIB
                                       and self._find(top) is not None)
        return known

    def _find(self, dotted: str) -> tuple[str, str] | None:
        """(file, package) of the module `dotted` on the search path, or None."""
        parts = dotted.split(".")
        if not all(p.isidentifier() for p in parts):
            return None
        for root in self.search_path:
            base = os.path.join(root, *parts)
            init = os.path.join(base, "__init__.py")
            if os.path.isfile(init):
                return init, dotted
            if os.path.isfile(base + ".py"):
                return base + ".py", dotted.rpartition(".")[0]
        return None

    def _module(self, dotted: str) -> _Source | None:
        if dotted in self._sources:
            return self._sources[dotted]
        source = None
        found = self._find(dotted) if self.files_read < MAX_FILES else None
        if found is not None:
            self.files_read += 1
            data, _ = read_bytes(found[0], MAX_FILE_BYTES)
            text = decode_source(data)[0] if data is not None else None
            if text is not None:
                try:
                    with collector_paused():
                        source = _Source(dotted, ast.parse(text), found[1])
                except (SyntaxError, ValueError, RecursionError, MemoryError):
                    source = None
        self._sources[dotted] = source
        return source

    def _locate(self, name: str, depth: int) -> tuple[_Source, ast.AST | str] | None:
        """Where `name` is defined: (module, its def or value) or (module, another qualified name)."""
        module_name, _, attr = name.rpartition(".")
        if not module_name or depth > MAX_DEPTH:
            return None
        module = self._module(module_name)
        if module is None:
            return None
        if attr in module.defs:
            return module, module.defs[attr]
        if attr in module.imports:
            return module, module.imports[attr]
        if attr in module.aliases:
            return module, module.aliases[attr]
        if self._find(name) is not None:  # a submodule
            return None
        for star in module.stars:
            if self._locate(f"{star}.{attr}", depth + 1) is not None:
                return module, f"{star}.{attr}"
        return None

    def _qualify(self, module: _Source, node: ast.expr) -> str | None:
        """The qualified name an expression of `module` names (`torch.utils.data.DataLoader`, `Base`)."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.insert(0, node.attr)
            node = node.value
        if isinstance(node, ast.Subscript):  # `Sampler[int]`
            return self._qualify(module, node.value) if not parts else None
        if not isinstance(node, ast.Name):
            return None
        head = node.id
        if head in module.imports:
            return ".".join([module.imports[head], *parts])
        if head in module.defs or head in module.aliases:
            return ".".join([module.dotted, head, *parts])
        for star in module.stars:
            return ".".join([star, head, *parts])
        return None

    def _read_is_loader(self, name: str, depth: int) -> bool:
        if name in self._classes:
            return self._classes[name]
        self._classes[name] = False  # a cycle of bases or re-exports is no loader
        result = False
        if name in LOADER_CLASSES or name in self.table.classes:
            result = True
        elif depth <= MAX_DEPTH and self._readable(name):
            found = self._locate(name, depth)
            if found is not None:
                module, what = found
                if isinstance(what, str):
                    result = self._read_is_loader(what, depth + 1)
                elif isinstance(what, ast.ClassDef):
                    result = any(self._read_is_loader(q, depth + 1) for base in what.bases
                                 if (q := self._qualify(module, base)) is not None)
                elif isinstance(what, ast.expr):
                    target = self._wrapped(what)
                    q = self._qualify(module, target) if target is not None else None
                    result = q is not None and self._read_is_loader(q, depth + 1)
        self._classes[name] = result
        return result

    @staticmethod
    def _wrapped(node: ast.expr) -> ast.expr | None:
        """`Other`, or `deprecated(...)(Other)`: the class an alias stands for."""
        if isinstance(node, (ast.Name, ast.Attribute)):
            return node
        if isinstance(node, ast.Call) and len(node.args) == 1 and isinstance(node.func, ast.Call):
            return node.args[0]
        return None

    def _read_returns(self, name: str, depth: int) -> bool:
        if name in self._returns:
            return self._returns[name]
        self._returns[name] = False
        result = False
        if name in self.table.returns_loader:
            result = True
        elif depth <= MAX_DEPTH:
            owner, _, method = name.rpartition(".")
            found = self._locate(name, depth)
            if found is not None and isinstance(found[1], str):
                result = self._read_returns(found[1], depth + 1)
            elif found is not None and isinstance(found[1], (ast.FunctionDef, ast.AsyncFunctionDef)):
                result = self._function_returns_loader(found[0], found[1], depth)
            elif found is None:  # a method: `pkg.Class.method`
                result = self._method_returns(owner, method, depth)
        self._returns[name] = result
        return result

    def _method_returns(self, cls_name: str, method: str, depth: int) -> bool:
        found = self._locate(cls_name, depth)
        if found is None:
            return False
        module, what = found
        if isinstance(what, str):
            return self._read_returns(f"{what}.{method}", depth + 1)
        if not isinstance(what, ast.ClassDef):
            return False
        for stmt in what.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == method:
                return self._function_returns_loader(module, stmt, depth, owner=cls_name)
        return any(self._read_returns(f"{q}.{method}", depth + 1) for base in what.bases
                   if (q := self._qualify(module, base)) is not None)

    def _function_returns_loader(self, module: _Source, func: ast.FunctionDef | ast.AsyncFunctionDef,
                                 depth: int, owner: str | None = None) -> bool:
        """Whether a `return` of `func` gives a loader: a loader class called, a name bound to one,
        or (a method of class `owner`) another method of its class that returns one
        (`return self._dataloader_factory("train")`)."""
        built: set[str] = set()
        returns: list[ast.expr] = []
        for node in ast.walk(func):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and self._builds_loader(
                    module, node.value, depth):
                built.update(t.id for t in node.targets if isinstance(t, ast.Name))
            elif isinstance(node, ast.Return) and node.value is not None:
                returns.append(node.value)
        for value in returns:
            if isinstance(value, ast.Call) and self._builds_loader(module, value, depth):
                return True
            if isinstance(value, ast.Name) and value.id in built:
                return True
            if owner is not None and isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) \
                    and isinstance(value.func.value, ast.Name) and value.func.value.id == "self" \
                    and self._read_returns(f"{owner}.{value.func.attr}", depth + 1):
                return True
        return False

    def _builds_loader(self, module: _Source, call: ast.Call, depth: int) -> bool:
        name = self._qualify(module, call.func)
        return name is not None and self._read_is_loader(name, depth + 1)


@cache
def table_only() -> LibraryLoaders:
    """The reader for a walk without a project: the catalog's table alone."""
    return LibraryLoaders(None)
