"""What an MCP tool call may ask for: every argument checked as data, every path kept inside the roots.

An agent's arguments may come from a hostile prompt (an issue, a README, a web
page it read), so nothing in them reaches `envdoctor`'s command line until it
has been checked here, by type and by shape, before any process starts:

* text has no NUL or other control character and is at most `MAX_CHARS` long;
  a list has at most `MAX_ITEMS` items;
* a rule id looks like one (`SYS001`, `SPW`, `shm-too-small`), a dataset like
  `MODULE:CALLABLE`, and its MODULE is a file (or regular package) inside the
  roots, not the standard library nor anything installed (`dataset_root`);
* a path is resolved (relative to the first root, through
  every symbolic link) and must lie inside one of the roots: the folders the
  MCP client declared (`roots/list`), else the `--root` folders the server was
  started with, else its working directory.

The server then passes options as `--flag=VALUE` and every positional after
`--`, so no value can be read as an option. A problem is an `ArgumentProblem`
whose message names the argument; the server answers it as a tool error.
"""
from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

#: The longest text argument: PATH_MAX on Linux; no rule id, dataset or path needs more.
MAX_CHARS = 4096
#: The most items a list argument may have.
MAX_ITEMS = 256
#: The longest time budget a call may ask for, in seconds.
MAX_SECONDS = 3600.0

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
#: An id (SYS001), a family (SPW) or a name (shm-too-small): never an option, never a path.
_RULE = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")
#: MODULE:CALLABLE, dotted on both sides, as `--dataset` takes it.
_DATASET = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


class ArgumentProblem(ValueError):
    """A tool argument that is refused; the message names the argument and says what was expected."""


def text(name: str, value: object) -> str:
    """`value` as a string argument: no NUL or control character, not empty, at most MAX_CHARS long."""
    if not isinstance(value, str):
        raise ArgumentProblem(f"argument {name} must be a string, not {type(value).__name__}")
    if "\x00" in value:
        raise ArgumentProblem(f"argument {name} contains a NUL byte; refused")
    if len(value) > MAX_CHARS:
        raise ArgumentProblem(f"argument {name} is {len(value)} characters long; at most {MAX_CHARS} are accepted")
    if _CONTROL.search(value):
        raise ArgumentProblem(f"argument {name} contains a control character; refused")
    if not value.strip():
        raise ArgumentProblem(f"argument {name} is empty")
    return value


def items(name: str, values: Sequence[Any] | None) -> list[Any]:
    """A list argument (None is an empty list), at most MAX_ITEMS long."""
    if values is None:
        return []
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise ArgumentProblem(f"argument {name} must be a list")
    if len(values) > MAX_ITEMS:
        raise ArgumentProblem(f"argument {name} has {len(values)} items; at most {MAX_ITEMS} are accepted")
    return list(values)


def rule_ids(name: str, values: Sequence[Any] | None) -> list[str]:
    """Rule ids, families or names, each one word (SYS001, SPW, shm-too-small)."""
    checked = []
    for index, value in enumerate(items(name, values)):
        where = f"{name}[{index}]"
        checked.append(rule_id(where, value))
    return checked


def rule_id(name: str, value: object) -> str:
    """One rule id, family or name."""
    value = text(name, value)
    if not _RULE.fullmatch(value):
        raise ArgumentProblem(f"argument {name} is not a rule id, family or name (e.g. SYS001, SPW, "
                              f"shm-too-small): {value[:80]!r}")
    return value


def dataset_spec(name: str, value: object) -> str:
    """MODULE:CALLABLE (dotted names on both sides), as `--dataset` takes it."""
    value = text(name, value)
    if not _DATASET.fullmatch(value):
        raise ArgumentProblem(f"argument {name} must be MODULE:CALLABLE (e.g. train:make_dataset), "
                              f"not {value[:80]!r}")
    return value


def dataset_root(roots: Roots, name: str, spec: str) -> str:
    """The root folder that holds MODULE of `spec` (MODULE:CALLABLE): where the smoke test then runs.

    The test imports MODULE with that folder first on its import path, so MODULE must be found there,
    as a file or a regular package (every package on the way with its `__init__.py`, each file resolved
    inside the roots: a link to code elsewhere is refused), and must not be a module the interpreter
    finds before the folder or has already imported: the standard library (`antigravity`, `os`), or a
    package installed in this environment.
    """
    module = spec.partition(":")[0]
    parts = module.split(".")
    stdlib = set(getattr(sys, "stdlib_module_names", ())) | set(sys.builtin_module_names)
    if parts[0] in stdlib:
        raise ArgumentProblem(f"argument {name}: {parts[0]!r} is a module of the standard library, not a file "
                              "of the project; give a module inside the roots")
    for folder in roots.folders:
        files = _module_files(folder, parts)
        if files is None:
            continue
        for path in files:
            roots.path(name, str(path))  # a link out of the roots is refused here, naming the argument
        installed = _installed_elsewhere(parts[0], roots)
        if installed is not None:
            raise ArgumentProblem(f"argument {name}: {parts[0]!r} is also installed at {installed[:200]}, which "
                                  "the smoke test could import instead of the project's; refused")
        return str(folder)
    raise ArgumentProblem(f"argument {name}: no module {module!r} inside the folders this server may read: "
                          f"{roots.describe()}; the dataset code must be a file of the project; refused")


def _module_files(folder: Path, parts: Sequence[str]) -> list[Path] | None:
    """The files importing `parts` from `folder` runs (each package's __init__.py, then the module), or None."""
    files = []
    for depth in range(1, len(parts)):
        init = folder.joinpath(*parts[:depth], "__init__.py")
        if not init.is_file():
            return None
        files.append(init)
    package = folder.joinpath(*parts, "__init__.py")
    single = folder.joinpath(*parts[:-1], parts[-1] + ".py")
    if package.is_file():
        return [*files, package]
    if single.is_file():
        return [*files, single]
    return None


def _installed_elsewhere(top: str, roots: Roots) -> str | None:
    """Where this environment's import path (outside the roots) holds `top`, if it does."""
    from importlib.machinery import PathFinder

    outside = []
    for entry in sys.path:
        real = Path(os.path.realpath(entry or "."))
        if not any(real == folder or folder in real.parents for folder in roots.folders):
            outside.append(entry)
    found = PathFinder.find_spec(top, outside)
    if found is None:
        return None
    return str(found.origin or next(iter(found.submodule_search_locations or []), top))


def seconds(name: str, value: object) -> float | None:
    """A positive, finite number of seconds, at most MAX_SECONDS (None stays None)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ArgumentProblem(f"argument {name} must be a number of seconds")
    if not 0 < value <= MAX_SECONDS:
        raise ArgumentProblem(f"argument {name} must be more than 0 and at most {MAX_SECONDS:.0f} seconds, "
                              f"not {value}")
    return float(value)


class Roots:
    """The folders a call's paths must resolve into (symbolic links followed), and where they come from."""

    def __init__(self, folders: Iterable[Path], source: str) -> None:
        self.folders = tuple(dict.fromkeys(Path(os.path.realpath(f)) for f in folders))
        self.source = source

    @classmethod
    def from_client(cls, uris: Iterable[str], fallback: Roots) -> Roots:
        """The client's `file://` roots; `fallback` (the server's) when it declared none usable."""
        folders = [path for uri in uris if (path := _file_uri_path(uri)) is not None]
        return cls(folders, "the roots the MCP client declared") if folders else fallback

    def describe(self) -> str:
        return f"{', '.join(str(f) for f in self.folders)} ({self.source})"

    def path(self, name: str, value: object) -> str:
        """`value` resolved to a real path inside one of the roots, or an ArgumentProblem naming `name`."""
        value = text(name, value)
        # Relative to the first root (the project), as an agent working in it means it.
        real = Path(os.path.realpath(os.path.join(self.folders[0], value)))
        for folder in self.folders:
            if real == folder or folder in real.parents:
                return str(real)
        raise ArgumentProblem(f"argument {name}: {value[:200]!r} resolves to {str(real)[:200]}, outside the "
                              f"folders this server may read: {self.describe()}; refused")

    def paths(self, name: str, values: Sequence[Any] | None) -> list[str]:
        return [self.path(f"{name}[{index}]", value) for index, value in enumerate(items(name, values))]


def _file_uri_path(uri: str) -> Path | None:
    """The folder a `file://` root names; None for any other scheme, a remote host or a relative path."""
    try:
        parsed = urlparse(str(uri))
    except ValueError:
        return None
    if parsed.scheme != "file" or parsed.netloc not in ("", "localhost"):
        return None
    path = unquote(parsed.path)
    if "\x00" in path or not os.path.isabs(path):
        return None
    return Path(path)


def server_roots(given: Sequence[str]) -> Roots:
    """The `--root` folders, else the working directory; each must be an existing folder."""
    if not given:
        return Roots([Path.cwd()], "the server's working directory")
    for folder in given:
        if not os.path.isdir(folder):
            raise ArgumentProblem(f"--root {folder}: not a folder")
    return Roots([Path(f) for f in given], "the --root folders the server was started with")
