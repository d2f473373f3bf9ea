"""The project around a script: where its own modules are, read and parsed once each.

Python finds a script's imports through `sys.path`, whose first entry is the
script's own folder. A script inside a package (a folder with `__init__.py`)
usually runs with the package's parent on the path too (`python -m`, an
editable install), and a repository's root or its `src/` folder is where its
own packages live. Those folders, in that order, are the project's roots; a
module found there is read and walked like the script itself, anything else
(the standard library, installed packages) is known only by name.

Reads are bounded (regular files only, a size limit, a limit on the number
of modules), and a module that cannot be read or parsed is a problem
recorded for it, never an exception.
"""
from __future__ import annotations

import ast
import errno
import gc
import importlib.util
import os
import stat
import sys
from collections import OrderedDict
from pathlib import Path
from typing import TypedDict

from envdoctor.analysis.spawn.libraries import LibraryLoaders
from envdoctor.analysis.spawn.names import EXTERNAL_ROOTS
from envdoctor.analysis.spawn.reading import read_source
from envdoctor.analysis.spawn.syntax import RestoredBodies, SourceLines, source_lines, strip_bodies
from envdoctor.analysis.spawn.values import Module
from envdoctor.collector import collector_paused

#: Most modules read for one script (a monorepo must not turn one check into a crawl).
MAX_MODULES = 400
#: Lines of the scripts checked last whose trees are kept for a later import (SharedModules.keep_recent),
#: and of the modules a script imports whose bodies are kept whole until its walk ends (strip_later):
#: about 1 KB of memory a line.
RECENT_LINES = 5_000
UNSTRIPPED_LINES = 10_000
#: Lines of stripped function bodies parsed again for a call and kept whole for the next scripts' calls
#: (RestoredBodies): on NeMo, 20,000 of its 65,688 parse 583 bodies more, 23,000 lines (about 1% of the parse).
RESTORED_LINES = 20_000
#: Markers of a repository's root, looked for up to this many folders above the script.
ROOT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")
MAX_ROOT_DEPTH = 4
STDLIB = frozenset(getattr(sys, "stdlib_module_names", ())) | {"__future__"}


class ModuleProblem(TypedDict):
    """A project module the script imports that could not be read or parsed."""

    module: str
    path: str
    error: str
    line: int


#: The most names a folder's listing is read for (a script beside a million images is looked up by stat).
MAX_LISTED = 5_000
#: Whether ProjectFiles reads a folder's listing for the names it lacks (see ProjectFiles._absent).
_LISTED = sys.platform.startswith("linux")
#: A marker: no listing asked yet (no folder holds a name with a slash).
_UNLISTED = frozenset({"/"})
#: A package's own module, after its folder (which ends in a name: os.path.join's answer, without its cost).
_INIT = f"{os.sep}__init__.py"


def _names_in(folder: str) -> frozenset[str] | None:
    """The names in `folder` (empty where it is not there, or not a folder), or None where it cannot be
    listed (no permission, a loop of links) or holds more than MAX_LISTED names (a script beside its
    data): each name is then asked with a stat."""
    names: list[str] = []
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if len(names) >= MAX_LISTED:
                    return None
                names.append(entry.name)
    except (FileNotFoundError, NotADirectoryError):
        return frozenset()
    except (OSError, ValueError):
        return None
    return frozenset(names)


def _mode(path: str) -> int | None:
    """The st_mode of what `path` names, or None where Path.exists() says it does not exist."""
    try:
        return os.stat(path).st_mode
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP):
            return None
        raise
    except ValueError:  # a NUL byte in the name
        return None


class ProjectFiles:
    """What the file system says about the project, asked once per check.

    Every script of a repository checked at once asks the same questions: which
    roots its folder has, where `pkg.sub` lives under them, what a path really
    is, whether a library is installed. The answers do not change while the
    check runs, and asked again for each script they were a quarter million
    stats on a 2,000-file repository.
    """

    def __init__(self) -> None:
        self._layouts: dict[str, tuple[tuple[Path, ...], str]] = {}
        self._modules: dict[tuple[tuple[str, ...], str], tuple[str, str, bool] | None] = {}
        self._real_paths: dict[str, str] = {}
        self._installed: dict[str, bool] = {}
        self._modes: dict[str, int | None] = {}
        #: The names in each folder asked about (None: it cannot be listed, so each name is stat'ed).
        self._listings: dict[str, frozenset[str] | None] = {}

    def layout(self, script: str) -> tuple[list[Path], str]:
        """The script's `roots` and `package`, shared by the scripts of one folder."""
        if os.path.islink(script):  # its folder is where the link points
            folder = os.path.dirname(self.real(script))
            return list(self.roots(folder)), self.package(folder)
        folder = os.path.dirname(script)
        known = self._layouts.get(folder)
        if known is None:
            real = os.path.dirname(self.real(script))
            known = self._layouts[folder] = (self.roots(real), self.package(real))
        return list(known[0]), known[1]

    def roots(self, folder: str) -> tuple[Path, ...]:
        """The folders a script in `folder` (a real path) has its own imports looked up in, most specific
        first: its folder, the parent of the package it is in, and the repository's root (the nearest of
        MAX_ROOT_DEPTH folders that holds a ROOT_MARKERS file) and its `src/`."""
        roots = [folder, self._package_top(folder)]
        here = folder
        for _ in range(MAX_ROOT_DEPTH):
            if any(self._mode(os.path.join(here, marker)) is not None for marker in ROOT_MARKERS):
                roots += [here, os.path.join(here, "src")]
                break
            parent = os.path.dirname(here)
            if parent == here:
                break
            here = parent
        kept: list[Path] = []
        for i, root in enumerate(roots):
            mode = self._mode(root)
            if mode is not None and stat.S_ISDIR(mode) and root not in roots[:i]:
                kept.append(Path(root))
        return tuple(kept)

    def package(self, folder: str) -> str:
        """The package a script in `folder` (a real path) sits in (`pkg.sub` for pkg/sub/run.py with
        __init__.py files), for its relative imports."""
        parts: list[str] = []
        while self._is_package(folder) and len(parts) < 32:
            parts.insert(0, os.path.basename(folder))
            folder = os.path.dirname(folder)
        return ".".join(parts)

    def _package_top(self, folder: str) -> str:
        """The folder above the outermost package `folder` is in (`folder` itself outside a package)."""
        while self._is_package(folder):
            folder = os.path.dirname(folder)
        return folder

    def _is_package(self, folder: str) -> bool:
        """Whether `folder` holds an __init__.py file and is not the file system's root."""
        if os.path.dirname(folder) == folder:
            return False
        mode = self._mode(os.path.join(folder, "__init__.py"))
        return mode is not None and stat.S_ISREG(mode)

    def locate(self, roots: tuple[str, ...], dotted: str) -> tuple[str, str, bool] | None:
        """(path, package, is a namespace folder) of the module `dotted` under `roots`, or None."""
        key = (roots, dotted)
        if key not in self._modules:
            self._modules[key] = self._search(roots, dotted)
        return self._modules[key]

    def _mode(self, path: str) -> int | None:
        """_mode(path), asked once: the scripts of different folders search the same roots. A name its
        folder's listing lacks is not asked at all: most of the paths an import is looked for at are not
        there, and one listing a folder answers them all."""
        if path in self._modes:
            return self._modes[path]
        mode = self._modes[path] = None if self._absent(path) else _mode(path)
        return mode

    def _absent(self, path: str) -> bool:
        """Whether the listing of the folder `path` is in shows that it is not there. On Linux only, where
        a name is found only as spelled, as Python's own import finds it (a case-insensitive file system
        elsewhere answers a stat for `Foo.py` with `foo.py`)."""
        if not _LISTED:
            return False
        folder, slash, name = path.rpartition("/")  # os.path.split, without its cost (Linux paths only)
        if not slash or not name:
            return False
        folder = folder or "/"
        names = self._listings.get(folder, _UNLISTED)
        if names is _UNLISTED:
            names = self._listings[folder] = frozenset() if self._absent(folder) else _names_in(folder)
        return names is not None and name not in names

    def _search(self, roots: tuple[str, ...], dotted: str) -> tuple[str, str, bool] | None:
        parts = dotted.split(".")
        if not all(p.isidentifier() for p in parts):
            return None
        for root in roots:
            base = os.path.join(root, *parts)
            for path, package in ((base + _INIT, dotted), (base + ".py", dotted.rpartition(".")[0])):
                mode = self._mode(path)
                if mode is not None and not stat.S_ISDIR(mode):  # a FIFO too: the bounded read reports it
                    return path, package, False
            mode = self._mode(base)
            if mode is not None and stat.S_ISDIR(mode) and (len(parts) > 1 or any(Path(base).glob("*.py"))):
                return base, dotted, True
        return None

    def real(self, path: str) -> str:
        """os.path.realpath(path), each folder's resolved once: a path whose last part is no link is its
        folder's real path and that part (one lstat, not one for each folder above it)."""
        known = self._real_paths.get(path)
        if known is None:
            head, name = os.path.split(path)
            if os.name != "posix" or not head or name in ("", ".", "..") or head == path or os.path.islink(path):
                known = os.path.realpath(path)
            else:
                known = os.path.join(self.real(head), name)
            self._real_paths[path] = known
        return known

    def installed(self, top: str) -> bool:
        """Whether envdoctor's own interpreter can find the top-level module `top`."""
        known = self._installed.get(top)
        if known is None:
            try:
                known = importlib.util.find_spec(top) is not None
            except (ImportError, ValueError):
                known = False
            self._installed[top] = known
        return known


class SharedModules:
    """Modules already read and walked for earlier scripts of the same check, by file and name.

    A folder of scripts that import one package reads and walks that package
    once: a module's import-time findings are kept with it and replayed for
    every later script that imports it.
    """

    def __init__(self, library_path: list[str] | None = None) -> None:
        """`library_path`: where the target environment's libraries are (its sys.path); None for this
        interpreter's own, whose libraries are the target's when envdoctor checks the environment it runs in."""
        self.modules: dict[tuple[str, str, bool], Module] = {}
        #: Parsed sources by real path: a file checked as a script and imported as a module is parsed once.
        self.parsed: dict[str, tuple[tuple[int, int], ast.Module]] = {}
        self.files = ProjectFiles()
        #: Freeze each kept tree out of the garbage collector (only inside gather_scripts' settled heap).
        self.freeze = False
        #: Library classes and functions that are or return DataLoaders, read from the target's source.
        self.libraries = LibraryLoaders(sys.path if library_path is None else library_path)
        #: The trees of the scripts checked last, once walked, by real path (see keep_recent), and their lines.
        self.recent: OrderedDict[str, tuple[tuple[int, int], ast.Module, int]] = OrderedDict()
        self.recent_lines = 0
        #: Modules imported by the script being walked whose bodies are still whole (see strip_later).
        self.unstripped: list[Module] = []
        self.unstripped_lines = 0
        #: Function bodies parsed again for a call, kept for the next scripts' calls up to RESTORED_LINES.
        self.restored = RestoredBodies(RESTORED_LINES)

    def parse(self, path: str, text: str, keep: bool = True) -> ast.Module:
        """The tree of `text` (read from `path`), parsed once per check; raises what ast.parse raises.

        `keep` is False for a script: its tree is dropped after its own walk unless a
        module import needs it, so a folder of scripts is never held in memory at once
        (about 1 KB per line). A script's tree is kept a little while after its walk
        (keep_recent): the next scripts of its folder often import it (`model.py`, then
        `train.py`).
        """
        key = self.files.real(path)
        stamp = (len(text), hash(text))
        known = self.parsed.get(key)
        if known is not None and known[0] == stamp:
            return known[1]
        recent = self.recent.pop(key, None)
        if recent is not None:
            self.recent_lines -= recent[2]
            if recent[0] == stamp:
                if keep:
                    self.parsed[key] = recent[:2]
                return recent[1]
        # Keep the collector off this tree from now on: each collection would walk it again, a kept
        # module's for every later script (gather_scripts unfreezes when the check ends). A script's
        # own tree is freed by reference counting once its walk is over (Module.release), frozen or
        # not. Frozen before the collector is back on: the collection that turning it on starts
        # would otherwise walk the whole new tree first; the young garbage of the walk so far is
        # collected before (a short list then), so that none of it is frozen with the tree.
        freeze = self.freeze and gc.isenabled()
        if freeze:
            gc.collect(0)
        with collector_paused():  # the collections a tree's millions of allocations trigger find nothing
            tree = ast.parse(text, filename=path)
            if freeze:
                gc.freeze()
        if keep:
            self.parsed[key] = (stamp, tree)  # not the text itself: a large tree holds enough
        return tree

    def keep_recent(self, path: str, text: str, tree: ast.Module, lines: int) -> None:
        """A script's tree, its walk over, kept for a module import by the next scripts (`parse`), the
        oldest dropped beyond RECENT_LINES lines in all. Its walk left it as parsed: a script's bodies
        are never stripped, and the walk's marks on its nodes depend on the node and its text alone."""
        key = self.files.real(path)
        if key in self.parsed or lines > RECENT_LINES:
            return  # a module's tree already, kept (stripped) for good; or too large to keep
        self.recent[key] = ((len(text), hash(text)), tree, lines)
        self.recent_lines += lines
        while self.recent_lines > RECENT_LINES:
            self.recent_lines -= self.recent.popitem(last=False)[1][2]

    def strip_later(self, module: Module) -> None:
        """Strip an imported module's function bodies (strip_bodies) once the script that imported it
        is walked, not now, while UNSTRIPPED_LINES lines allow: that script's own functions mostly call
        into the modules it imports, whose bodies would otherwise be parsed again one by one."""
        if module.tree is None:
            return
        if self.unstripped_lines + len(module.lines) > UNSTRIPPED_LINES:
            strip_bodies(module.tree)
            return
        self.unstripped.append(module)
        self.unstripped_lines += len(module.lines)

    def strip_deferred(self) -> None:
        """The script's walk is over: strip the bodies of the modules it imported (see strip_later), and
        again those parsed for its calls beyond RESTORED_LINES, least recently used first."""
        for module in self.unstripped:
            if module.tree is not None:
                strip_bodies(module.tree)
        self.unstripped.clear()
        self.unstripped_lines = 0
        self.restored.trim()


class Project:
    """The modules of one script's project, found by dotted name and parsed once."""

    def __init__(self, roots: list[Path], absolute: bool = False, shared: SharedModules | None = None) -> None:
        self.roots = roots
        self._root_names = tuple(str(root) for root in roots)
        self.shared = shared if shared is not None else SharedModules()
        #: Paths are shown the way the script's was given: absolute, or relative to the working folder.
        self.absolute = absolute
        self.modules: dict[str, Module | None] = {}
        self.problems: list[ModuleProblem] = []
        self.lines_read = 0

    def is_external(self, dotted: str) -> bool:
        root = dotted.split(".")[0]
        return root in EXTERNAL_ROOTS or root in STDLIB

    def find(self, dotted: str) -> Module | None:
        """The project module `dotted` names, read and parsed (not yet walked), or None."""
        if dotted in self.modules:
            return self.modules[dotted]
        module = None if self.is_external(dotted) or len(self.modules) >= MAX_MODULES else self._load(dotted)
        self.modules[dotted] = module
        return module

    def _load(self, dotted: str) -> Module | None:
        found = self.shared.files.locate(self._root_names, dotted)
        if found is None:
            return None
        path, package, namespace = found
        if namespace:  # a folder of modules without __init__.py
            return Module(dotted, path, [], None, package=dotted, state="done")
        return self._parse(dotted, path, package)

    def _parse(self, dotted: str, path: str, package: str) -> Module:
        key = (self.shared.files.real(path), dotted, self.absolute)
        known = self.shared.modules.get(key)
        if known is not None:
            if known.problem is not None:
                self.problems.append({"module": dotted, "path": known.path, "error": known.problem,
                                      "line": known.problem_line})
            return known
        module = self._read(dotted, path, package)
        self.shared.modules[key] = module
        return module

    def _read(self, dotted: str, path: str, package: str) -> Module:
        shown = path if self.absolute else os.path.relpath(path)
        text, _, problem = read_source(path)
        if text is None:
            return self._broken(dotted, shown, package, problem.get("error", "cannot be read"), problem.get("line", 1))
        try:
            tree = self.shared.parse(path, text)
        except SyntaxError as exc:
            return self._broken(dotted, shown, package, f"SyntaxError: {exc.msg}", max(exc.lineno or 1, 1))
        except (ValueError, RecursionError, MemoryError) as exc:
            return self._broken(dotted, shown, package, f"{type(exc).__name__}: {exc}", 1)
        lines = SourceLines(source_lines(text))  # held for the rest of the check: one text, not a list
        self.lines_read += len(lines)
        return Module(dotted, shown, lines, tree, package=package)

    def _broken(self, dotted: str, path: str, package: str, error: str, line: int) -> Module:
        self.problems.append({"module": dotted, "path": path, "error": error, "line": line})
        return Module(dotted, path, [], None, package=package, state="done", problem=error, problem_line=line)

    def missing_reason(self, dotted: str, relative: bool) -> str | None:
        """Why an import that is not in the project cannot be read, or None for an installed library.

        A relative import always names a project module; an absolute one that
        neither the project nor envdoctor's own interpreter can find is missing too.
        """
        if relative:
            return f"no module {dotted} in the project"
        if self.is_external(dotted):
            return None
        top = dotted.split(".")[0]
        return None if self.shared.files.installed(top) else f"{top} is neither in the project nor installed"
