"""Where CI formats put findings: paths relative to the repository, and a file for the environment.

GitHub (annotations and code scanning) shows a finding only on a file of the
repository, by a path relative to its root — whatever folder the job ran in.
Most envdoctor findings are about the environment, not a file; they are
anchored on the file that describes the environment: the `--against` file,
else the repository's pyproject.toml, else the first script checked.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from envdoctor.model import Finding


def repository_root(start: Path | None = None) -> Path:
    """The git work tree holding `start` (the working directory), else `start` itself."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / ".git").exists():  # a folder, or a file in a worktree or submodule
            return folder
    return here


def relative_path(path: str, root: Path, cwd: Path | None = None) -> str | None:
    """`path` (absolute, or relative to `cwd`) as a POSIX path relative to `root`; None when outside it."""
    base = (cwd or Path.cwd()).resolve()
    candidate = Path(path)
    absolute = Path(os.path.normpath(candidate if candidate.is_absolute() else base / candidate))
    try:
        relative = absolute.relative_to(root)
    except ValueError:
        try:  # the root itself may be reached through a symbolic link
            relative = absolute.resolve().relative_to(root)
        except (ValueError, OSError):
            return None
    posix = PurePosixPath(*relative.parts).as_posix()
    return None if posix in ("", ".") else posix


@dataclass(frozen=True)
class Anchor:
    """The file an environment finding is shown on, relative to the repository root."""

    path: str
    line: int = 1


def environment_anchor(findings: Sequence[Finding], root: Path, against: str | None = None,
                       scripts: Sequence[str] = ()) -> Anchor | None:
    """The file environment findings go on: --against, else pyproject.toml, else the first script."""
    if against:
        where = relative_path(against, root)
        if where is not None:
            return Anchor(where)
    for folder in (Path.cwd().resolve(), root):
        if (folder / "pyproject.toml").is_file():
            where = relative_path(str(folder / "pyproject.toml"), root)
            if where is not None:
                return Anchor(where)
    candidates = [f.location.path for f in findings if f.location is not None] + list(scripts)
    for path in candidates:
        if Path(path).is_file():
            where = relative_path(path, root)
            if where is not None:
                return Anchor(where)
    return None
