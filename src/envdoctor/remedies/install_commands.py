"""The exact commands that repair the inspected environment, as text and as data.

A fix must name the environment it repairs and use the tool that owns the
files: `conda install -p /opt/envs/train` rather than a bare `conda install`
that would change whichever env happens to be active; pixi's own commands for
a pixi environment (its manifest is the source of truth); `uv pip … --python
PREFIX` in a venv uv made (it has no pip); the target's own interpreter for
pip (`/opt/envs/train/bin/python -m pip`), after `ensurepip` where a venv has
no pip; `apt-get` for what dpkg owns. An interpreter marked EXTERNALLY-MANAGED
(PEP 668) never gets a bare `pip install`: a caller must ask for
`--break-system-packages` explicitly, for a copy pip itself put there.

Every fix is a `Fix`: the text people read (`Finding.fix`) and the steps
`envdoctor fix` runs (`Finding.fix_steps`), built from the same commands so
they cannot drift apart. A step is an argv list runnable as it stands, or a
file move inside the prefix; advice that is no command has no steps.
"""
from __future__ import annotations

import os
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envdoctor.model import FixStep


def shell_quote(text: str) -> str:
    """`text` as one shell word, also when it holds a file name that is not UTF-8.

    Such a name arrives with lone surrogates (surrogateescape); plain quoting
    would print characters no terminal can paste back. Those words are
    written in bash's `$'...'` form with the exact bytes as `\\xNN`.
    """
    if not any("\ud800" <= ch <= "\udfff" for ch in text):
        return shlex.quote(text)
    out = []
    for byte in os.fsencode(text):
        char = chr(byte)
        if char in "\\'":
            out.append("\\" + char)
        elif 0x20 <= byte < 0x7F:
            out.append(char)
        else:
            out.append("\\x%02x" % byte)
    return "$'" + "".join(out) + "'"


_q = shell_quote


@dataclass(frozen=True)
class Command:
    """One command of a fix: the tool that owns what it changes, and its argv."""

    tool: str
    argv: tuple[str, ...]

    @property
    def text(self) -> str:
        return " ".join(_q(a) for a in self.argv)

    def step(self) -> FixStep:
        return FixStep.command(self.tool, *self.argv)


@dataclass(frozen=True)
class Move:
    """A file or folder moved aside (never deleted), inside the prefix."""

    source: str
    destination: str

    @property
    def text(self) -> str:
        return f"mv {_q(self.source)} {_q(self.destination)}"

    def step(self) -> FixStep:
        return FixStep.file_move(self.source, self.destination)


@dataclass(frozen=True)
class Fix:
    """A finding's fix: the text, and the same steps as data (none for advice)."""

    text: str
    steps: tuple[FixStep, ...] = ()

    def hit(self) -> dict[str, Any]:
        """Keyword arguments for `Hit`: `fix` and `fix_steps`."""
        return {"fix": self.text, "fix_steps": self.steps}


def fix_of(*parts: Command | Move, note: str = "") -> Fix:
    """The steps run in order, stopping at the first that fails (`&&`), with a comment.

    A command already in the fix is not repeated (two pip steps of a venv without
    pip each start with the same `ensurepip`)."""
    unique: list[Command | Move] = []
    for part in parts:
        if part not in unique:
            unique.append(part)
    parts = tuple(unique)
    text = " && ".join(part.text for part in parts)
    return Fix(text + (f"   # {note}" if note else ""), tuple(part.step() for part in parts))


def advice(text: str) -> Fix:
    """A fix that is no command to run (what to change by hand, or why no command is safe)."""
    return Fix(text)


ASIDE_SUFFIX = ".envdoctor-aside"


def move_aside(path: str) -> Move:
    """Move a metadata folder out of the way beside itself: no longer a distribution, nothing deleted."""
    return Move(path, path + ASIDE_SUFFIX)


def pixi_manifest(prefix: str) -> tuple[str, str] | None:
    """(workspace folder, environment name) of a `<workspace>/.pixi/envs/<env>` prefix."""
    path = Path(prefix)
    if path.parent.name == "envs" and path.parent.parent.name == ".pixi":
        return str(path.parent.parent.parent), path.name
    return None


def _python(env: Mapping[str, Any]) -> str:
    # Without an interpreter in the prefix, a bare `python` would be whichever one PATH finds, and
    # pip would change that environment: name the prefix's own (absent) one, which fails instead.
    return env.get("interpreter") or (os.path.join(env["prefix"], "bin", "python") if env.get("prefix") else "python")


def _installer(env: Mapping[str, Any]) -> Mapping[str, Any]:
    return env.get("installer") or {"externally_managed": None, "uv_venv": None, "has_pip": True}


def externally_managed(env: Mapping[str, Any]) -> bool:
    return bool(_installer(env).get("externally_managed"))


def pip(env: Mapping[str, Any], verb: str, *args: str, break_system: bool = False) -> list[Command] | None:
    """pip VERB ARGS for the inspected interpreter, with the tool that can run it there.

    uv's venvs get `uv pip VERB --python PREFIX` (they have no pip); a venv
    without pip gets `python -m ensurepip` first; an EXTERNALLY-MANAGED
    interpreter gets None (no command) unless `break_system` is asked for,
    for a copy pip itself put there.
    """
    info = _installer(env)
    managed = bool(info.get("externally_managed"))
    if managed and not break_system:
        return None
    extra = ("--break-system-packages",) if managed else ()
    if info.get("uv_venv"):
        uv_args = [a for a in args if not (verb == "uninstall" and a == "-y")]
        uv_args = ["--reinstall" if a == "--force-reinstall" else a for a in uv_args]
        return [Command("uv", ("uv", "pip", verb, "--python", env["prefix"], *extra, *uv_args))]
    python = _python(env)
    steps = [] if info.get("has_pip", True) else [Command("pip", (python, "-m", "ensurepip"))]
    return [*steps, Command("pip", (python, "-m", "pip", verb, *extra, *args))]


def pip_own(env: Mapping[str, Any], verb: str, *args: str) -> list[Command]:
    """pip VERB ARGS for copies pip itself put there: with `--break-system-packages` where PEP 668 applies."""
    commands = pip(env, verb, *args, break_system=True)
    assert commands is not None  # only a refused install into a managed interpreter is None
    return commands


def managed_advice(env: Mapping[str, Any], what: str) -> str:
    """What to say where pip may not install: the OS's package, or a venv."""
    python = _python(env)
    return (f"{python} is externally managed (PEP 668: {_installer(env).get('externally_managed')}), so pip "
            f"must not install into it: {what} with the system package manager, or create a venv "
            f"(`{python} -m venv --system-site-packages ~/venvs/train`) and install it there")


def pip_fix(env: Mapping[str, Any], verb: str, *args: str, what: str = "", note: str = "",
            before: Iterable[Command | Move] = ()) -> Fix:
    """A fix of pip commands (after `before`), or PEP 668 advice where pip may not install."""
    commands = pip(env, verb, *args)
    if commands is None:
        return advice(managed_advice(env, what or f"{verb} {' '.join(a for a in args if not a.startswith('-'))}"))
    return fix_of(*before, *commands, note=note)


def conda(env: Mapping[str, Any], verb: str, *args: str) -> Command:
    """`conda VERB -p PREFIX ARGS`, or the pixi equivalent for a pixi environment."""
    prefix = env.get("prefix") or ""
    if env.get("kind") == "pixi":
        where = pixi_manifest(prefix)
        location = ("--manifest-path", where[0], "-e", where[1]) if where else ()
        force = "--force-reinstall" in args
        # Channels live in the pixi manifest, not on the command line: drop `-c NAME` pairs.
        plain, skip = [], False
        for arg in args:
            if skip:
                skip = False
            elif arg in ("-c", "--channel"):
                skip = True
            elif not arg.startswith("-"):
                plain.append(arg)
        names = [a.split("=")[0].split("<")[0].split(">")[0] for a in plain]
        if verb == "install" and force:
            return Command("pixi", ("pixi", "reinstall", *location, *names))
        if verb == "remove":
            return Command("pixi", ("pixi", "remove", *location, *names))
        return Command("pixi", ("pixi", "add", *location, *plain))
    return Command("conda", ("conda", verb, "-p", prefix, *args))


def conda_reinstall(env: Mapping[str, Any], records: Iterable[Mapping[str, Any]]) -> Command:
    """Force-reinstall conda records at exactly the version they were recorded at."""
    specs = [f"{r['name']}={r['version']}" for r in records]
    return conda(env, "install", "--force-reinstall", *specs)


def apt(*args: str) -> Command:
    """An apt-get command for what dpkg owns (run as root)."""
    return Command("apt", ("apt-get", *args))


def dnf(*args: str) -> Command:
    """A dnf command for what rpm owns (run as root)."""
    return Command("dnf", ("dnf", *args))


def os_reinstall(manager: str, package: str) -> Command:
    """Put an OS package's files back with its own tool: apt for dpkg, dnf for rpm."""
    return dnf("reinstall", "-y", package) if manager == "rpm" else apt("install", "--reinstall", "-y", package)


def os_remove_text(manager: str, package: str) -> str:
    return f"dnf remove {package}" if manager == "rpm" else f"apt-get remove {package}"

