"""The "scripts" facts section: what each training script or notebook given to check does at run time.

`envdoctor check train.py tools/ explore.ipynb` hands its positional
arguments to `config.scripts`; folders are expanded to the Python files and
notebooks under them. Each file is read with bounds (regular files only, a
size limit), decoded the way the interpreter would (a coding cookie or BOM,
else UTF-8), parsed, and walked by `envdoctor.analysis.spawn` together with the
project modules it imports — never imported or executed. A file that cannot
be read, decoded or parsed is a fact too (status "unreadable" or
"unparsable", with the position and the parser's message but never the line
itself: a file that is not Python may hold anything, credentials included), so
one bad file never stops the others being checked. A file named explicitly
that is not Python source — no .py/.pyw/.ipynb suffix and no Python shebang —
is not parsed at all (status "not-python").

Nothing is gathered when no scripts were given: the section is then None.
"""
from __future__ import annotations

import ast
import gc
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypedDict, cast

from envdoctor.analysis.spawn.project import ModuleProblem, SharedModules
from envdoctor.analysis.spawn.reading import SourceProblem, decode_source, read_bytes, read_source
from envdoctor.catalog import reads_main_guard
from envdoctor.facts.kernels import NotebookKernel, NotebookTarget, notebook_kernel, notebook_target
from envdoctor.facts.opencv_use import ScriptOpenCV, TargetOpenCV, begin, finish, target_opencv
from envdoctor.facts.readfile import read_bytes as read_head

if TYPE_CHECKING:  # pragma: no cover
    from envdoctor.config import FactsReader


class CodeAt(TypedDict, total=False):
    """A place in a file: the module-level statement of a start, or one call of the chain."""

    path: str
    line: int
    code: str
    call: str | None
    function: str
    cell: int


class ConstructedAt(TypedDict, total=False):
    path: str
    line: int
    column: int
    cell: int


class _MainObjectRequired(TypedDict):
    role: str  # dataset, sampler, batch_sampler, collate_fn, worker_init_fn
    name: str
    kind: str  # class, function
    line: int


class MainObject(_MainObjectRequired, total=False):
    """Something a notebook defines that DataLoader workers must unpickle."""

    local_in: str  # the function it is defined in: pickle cannot find `f.<locals>.name`


class _EventBase(TypedDict):
    kind: str
    path: str
    line: int
    column: int
    code: str
    guarded: bool
    seq: int
    entry: CodeAt
    via: list[CodeAt]


class WorkerStart(_EventBase, total=False):
    """Where worker processes start: iterating a DataLoader, Process.start(), a Pool …"""

    starts: str
    context: str | None
    num_workers: int | None
    num_workers_source: str
    #: The option setting that makes the workers start (`--workers > 0`) when its default is 0.
    only_with: str | None
    #: The options a branch around the start needs, each off by default (`if args.test_only:`):
    #: the start is real, but the script as run without them does not reach it.
    needs: str
    #: The training loop that iterates the loader (`Lightning Trainer`), for a trainer's run method.
    trainer: str
    #: The launcher that forces fork on the code it runs (accelerate's notebook_launcher).
    launcher: str
    constructed_at: ConstructedAt
    #: The loader is built only under the script's main guard and started outside it: each worker's
    #: re-import skips the guard and dies at the start on the loader it never built.
    built_under_guard: bool
    persistent_workers: bool
    worker_uses_cuda: bool
    main_objects: list[MainObject]
    callee: str
    reason: str | None
    cell: int


class StartMethodCall(_EventBase, total=False):
    method: str | None
    cell: int


class CudaInit(_EventBase, total=False):
    call: str
    cell: int


class _ScriptBase(TypedDict):
    path: str
    status: Literal["ok", "unreadable", "unparsable", "not-python"]


class ScriptFile(_ScriptBase, total=False):
    """One script or notebook: its status and, when it parses, where it starts workers."""

    kind: Literal["script", "notebook"]
    error: str
    line: int
    column: int
    encoding: str | None
    parser_python: str
    lines: int
    cell: int
    guard_lines: list[int]
    #: The main guards whose code was not walked: a check whose every rule reads only what runs at
    #: import time (SPW001, SPW004: the pre-commit hook) skips a guard that ends the script.
    skipped_guard_lines: list[int]
    worker_starts: list[WorkerStart]
    start_method_calls: list[StartMethodCall]
    cuda_inits: list[CudaInit]
    calls_followed: int
    truncated: bool
    modules_followed: list[str]
    module_problems: list[ModuleProblem]
    skipped_cells: list[dict[str, Any]]
    #: A notebook's kernel as Jupyter resolves it (facts.kernels).
    kernel: NotebookKernel | None
    #: cv2 imported, `cv2.setNumThreads` calls and worker_init_fn names in it and its project modules
    #: (facts.opencv_use); absent when it neither imports cv2 nor calls setNumThreads.
    opencv: ScriptOpenCV


class ScriptsFacts(TypedDict):
    """The `scripts` facts section (the report's facts.scripts)."""

    given: list[str]
    files: list[ScriptFile]
    #: The checked environment: its interpreter and prefix, and whether it has ipykernel
    #: (only when a notebook was given; facts.kernels resolves each notebook's kernel against it).
    notebook_target: NotebookTarget | None
    #: cv2 in the target (its default thread count), asked only when a script imports cv2.
    opencv_target: TargetOpenCV | None


#: Folders never descended into when a directory is given.
SKIPPED_DIRS = frozenset({"__pycache__", "site-packages", "node_modules"})
#: What a folder is expanded to (and files without a suffix whose first line is a Python shebang).
SUFFIXES = (".py", ".ipynb")
#: A file named explicitly is Python source with one of these suffixes, or with a Python shebang.
PYTHON_SUFFIXES = (".py", ".pyw", ".ipynb")
_PYTHON_SHEBANG = re.compile(rb"#![^\n]*(?:\b(?:python|pypy)[0-9.]*\b|\buv\b[^\n]*\brun\b)")


def _shebang_script(path: str) -> bool:
    """A regular file whose first line is a Python shebang (`train` run as `./train`); never blocks on a FIFO."""
    try:
        return is_python_source(path, read_head(path, limit=512, head=True))
    except OSError:
        return False


def expand_paths(paths: tuple[str, ...] | list[str]) -> Iterator[tuple[str, bool]]:
    """(path, exists) for every script: files as given, folders expanded to their *.py and *.ipynb files
    and to the files without a suffix that start with a Python shebang.

    Hidden folders, caches and virtual environments under a folder are skipped,
    and symbolic links to folders are not followed (no loops); a file named
    explicitly is always checked, whatever its suffix.
    """
    seen: set[str] = set()
    for given in paths:
        path = Path(given)
        if path.is_dir():
            for root, dirs, files in os.walk(given, onerror=lambda _err: None):
                dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIPPED_DIRS
                                 and not (Path(root) / d / "pyvenv.cfg").exists())
                for name in sorted(files):
                    full = os.path.join(root, name)
                    if name.endswith(SUFFIXES) or ("." not in name and _shebang_script(full)):
                        if full not in seen:
                            seen.add(full)
                            yield full, True
        elif given not in seen:
            seen.add(given)
            yield given, path.exists() or path.is_symlink()


def read_script(path: str) -> tuple[str | None, str | None, SourceProblem]:
    """(text, encoding, problem): the decoded source, or a problem dict saying why not."""
    return read_source(path)


def is_python_source(path: str, data: bytes) -> bool:
    """A .py/.pyw/.ipynb file, or one whose first line is a Python shebang (`#!/usr/bin/env python3`)."""
    return path.lower().endswith(PYTHON_SUFFIXES) or bool(_PYTHON_SHEBANG.match(data[:512]))


NOT_PYTHON = ("not Python source (no .py or .ipynb suffix and no Python shebang), so it was not parsed "
              "and nothing of it is shown")


def _parse(text: str, path: str, info: ScriptFile, shared: SharedModules | None = None) -> ast.Module | None:
    try:
        return shared.parse(path, text, keep=False) if shared is not None else ast.parse(text, filename=path)
    except SyntaxError as exc:
        # The grammar is envdoctor's own interpreter's: the rule compares it with the target's.
        # The position and the parser's message, never the line: it need not be Python at all.
        info.update({"status": "unparsable", "error": f"SyntaxError: {exc.msg}",
                     "line": max(exc.lineno or 1, 1), "column": max(exc.offset or 1, 1),
                     "parser_python": "{}.{}".format(*sys.version_info[:2])})
    except (ValueError, RecursionError, MemoryError) as exc:  # null bytes; absurd nesting
        info.update({"status": "unparsable", "error": f"{type(exc).__name__}: {exc}", "line": 1, "column": 1})
    return None


def analyse_script(path: str, project: bool = True, shared: SharedModules | None = None,
                   main_guard: bool = True, opencv_quiet: set[str] | None = None) -> ScriptFile:
    """The facts for one script or notebook: its status and, when it parses, where it starts workers.

    `main_guard` False: the code under a main guard that ends a script is not walked (see gather_scripts).
    `opencv_quiet`: the project modules this check found spelling neither cv2 nor setNumThreads (finish).
    """
    from envdoctor.analysis.spawn import analyse_source

    if path.endswith(".ipynb"):
        return analyse_notebook(path, project, shared, opencv_quiet)
    info: ScriptFile = {"path": path, "status": "ok", "kind": "script"}
    data, problem = read_bytes(path)
    if data is None:
        info.update(cast(ScriptFile, problem))
        return info
    if not is_python_source(path, data):
        info.update({"status": "not-python", "error": NOT_PYTHON})
        return info
    text, encoding, problem = decode_source(data)
    if text is None:
        info.update(cast(ScriptFile, problem))
        return info
    info["encoding"] = encoding
    info["lines"] = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
    tree = _parse(text, path, info, shared)
    if tree is None:
        return info
    opencv = begin(tree, path, text)
    info.update(cast(ScriptFile, analyse_source(tree, text, path=path, project=project, shared=shared,
                                                main_guard=main_guard)))
    if shared is not None:
        shared.keep_recent(path, text, tree, info["lines"])
    _add_opencv(info, finish(opencv, path, info.get("modules_followed", []), opencv_quiet))
    return info


def _add_opencv(info: ScriptFile, opencv: ScriptOpenCV | None, place: Callable[[int], tuple[int, int]] | None = None) -> None:
    if opencv is None:
        return
    if place is not None:
        for where in [*opencv["imports"], *opencv["set_num_threads_calls"]]:
            if where["path"] == info["path"]:
                where["cell"], where["line"] = place(where["line"])
    info["opencv"] = opencv


def analyse_notebook(path: str, project: bool = True, shared: SharedModules | None = None,
                     opencv_quiet: set[str] | None = None) -> ScriptFile:
    """The facts for one notebook: its code cells walked as one `__main__` that spawn does not re-run."""
    from envdoctor.analysis.spawn import analyse_source
    from envdoctor.analysis.spawn.notebook import read_notebook

    text, encoding, problem = read_script(path)
    info: ScriptFile = {"path": path, "status": "ok", "kind": "notebook"}
    if text is None:
        info.update(cast(ScriptFile, problem))
        return info
    try:
        notebook = read_notebook(text)
    except ValueError as exc:
        info.update({"status": "unparsable", "error": str(exc), "line": 1, "column": 1})
        return info
    info["encoding"] = encoding
    info["lines"] = len(notebook.origin)
    info["skipped_cells"] = [dict(c) for c in notebook.skipped]
    tree = _parse(notebook.text, path, info)
    if tree is None:
        return info
    opencv = begin(tree, path, notebook.text)
    found = analyse_source(tree, notebook.text, path=path, project=project, reruns=False, shared=shared)
    for key in ("worker_starts", "start_method_calls", "cuda_inits"):
        for event in found[key]:
            _place_in_cells(event, path, notebook.place)
    info.update(cast(ScriptFile, found))
    _add_opencv(info, finish(opencv, path, info.get("modules_followed", []), opencv_quiet), notebook.place)
    return info


def _place_in_cells(event: dict[str, Any], path: str, place: Callable[[int], tuple[int, int]]) -> None:
    """Lines of the joined notebook source become (cell, line in cell)."""
    built = event.get("constructed_at")
    if isinstance(built, dict) and built.get("path") == path and isinstance(event.get("starts"), str):
        cell, line = place(built["line"])
        event["starts"] = event["starts"].replace(f"built at line {built['line']}", f"built at cell {cell}, line {line}")
    for where in [event, event.get("entry"), event.get("constructed_at"), *event.get("via", [])]:
        if isinstance(where, dict) and where.get("path") == path and isinstance(where.get("line"), int):
            where["cell"], where["line"] = place(where["line"])
    for obj in event.get("main_objects", []):
        obj["cell"], obj["line"] = place(obj["line"])


def gather_scripts(facts: FactsReader) -> ScriptsFacts | None:
    """The scripts section: one entry per script, or None when no scripts were given."""
    scripts = tuple(facts.config.scripts or ())
    if not scripts:
        return None
    files: list[ScriptFile] = []
    # The code under a script's closing `if __name__ == "__main__":` is most of the walk on a framework's
    # examples, and starts nothing at import time: walked only when a rule of the check reads it.
    main_guard = reads_main_guard(facts.config.select, facts.config.ignore)
    # A package several scripts import is read and walked once; the libraries the scripts use are read
    # from the target's own import path (never imported), for the DataLoader classes they define.
    shared = SharedModules(library_path=_target_path(facts))
    opencv_quiet: set[str] = set()
    with _settled_heap() as settle:
        shared.freeze = True
        for path, exists in expand_paths(scripts):
            if not exists:
                files.append({"path": path, "status": "unreadable", "error": "no such file or directory"})
                continue
            try:
                files.append(analyse_script(path, shared=shared, main_guard=main_guard, opencv_quiet=opencv_quiet))
            except Exception as exc:  # one file must never blind the others: it becomes SPW004 for itself
                files.append({"path": path, "status": "unparsable", "line": 1, "column": 1,
                              "error": f"envdoctor could not analyse it: {type(exc).__name__}: {exc}"})
            settle()
    notebooks = [info for info in files if info.get("kind") == "notebook" and info["status"] == "ok"]
    target = notebook_target(facts["target"]) if notebooks else None
    for info in notebooks:
        text = read_script(info["path"])[0]
        info["kernel"] = notebook_kernel(text, os.environ, [target["prefix"]]) if text and target else None
    opencv = None
    if any(info.get("opencv", {}).get("imports") for info in files):
        opencv = target_opencv(_target_interpreter(facts))
    return {"given": list(scripts), "files": files, "notebook_target": target, "opencv_target": opencv}


def _target_interpreter(facts: FactsReader) -> str | None:
    try:
        interpreter = facts["target"].get("interpreter") or facts["target"].get("executable")
    except Exception:  # a failed target probe: its own error says why
        return None
    return str(interpreter) if interpreter else None


def _target_path(facts: FactsReader) -> list[str] | None:
    """The target interpreter's sys.path, or None (this interpreter's) when it could not be asked."""
    try:
        path = facts["target"].get("sys_path")
    except Exception:  # a failed target probe: its own error says why; the catalog's table still applies
        return None
    return [p for p in path if isinstance(p, str)] if isinstance(path, list) else None


#: Allocations between two collections of the youngest generation while scripts are walked (CPython's default: 700).
YOUNG_THRESHOLD = 50_000


@contextmanager
def _settled_heap() -> Iterator[Callable[[], None]]:
    """Keep the garbage collector off what earlier scripts left behind (the shared modules' trees).

    Syntax trees are millions of small objects without cycles; kept for later
    scripts, each full collection would walk all of them again, which made
    parsing a large repository 2-3 times slower than `ast.parse` alone. After
    each script its garbage is collected once, and what survives is frozen
    (left out of later collections) until the check ends. What the process
    already held before the check is frozen first: in a training process (or a
    test run) that has imported torch, one full collection of that heap takes
    about 0.3 s, and it is not this check's garbage to collect.
    """
    frozen = gc.isenabled()
    threshold = gc.get_threshold()
    if frozen:
        gc.freeze()
        # The walk allocates millions of short-lived values and frees nearly all of them by reference
        # counting; the young-generation collections 700 allocations trigger found next to nothing and
        # cost NeMo's tree 0.5 s. settle() collects after each script whatever the threshold.
        gc.set_threshold(max(threshold[0], YOUNG_THRESHOLD), *threshold[1:])

    def settle() -> None:
        if frozen:
            gc.collect()
            gc.freeze()

    try:
        yield settle
    finally:
        if frozen:
            gc.set_threshold(*threshold)
            gc.unfreeze()
