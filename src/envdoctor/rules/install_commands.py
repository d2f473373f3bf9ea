"""The exact install, remove and reinstall commands for the inspected environment.

A fix must name the environment it repairs: `conda install -p /opt/envs/train`
rather than a bare `conda install` that would change whichever env happens to
be active, the target's own interpreter for pip (`/opt/envs/train/bin/python
-m pip`), and pixi's own commands for a pixi environment, whose manifest is
the source of truth.
"""
from __future__ import annotations

import os
import shlex
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any


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


def pixi_manifest(prefix: str) -> tuple[str, str] | None:
    """(workspace folder, environment name) of a `<workspace>/.pixi/envs/<env>` prefix."""
    path = Path(prefix)
    if path.parent.name == "envs" and path.parent.parent.name == ".pixi":
        return str(path.parent.parent.parent), path.name
    return None


def pip(env: Mapping[str, Any], *args: str) -> str:
    """`<target python> -m pip ARGS`: pip of the inspected interpreter, never another one."""
    # Without an interpreter in the prefix, a bare `python` would be whichever one PATH finds, and
    # pip would change that environment: name the prefix's own (absent) one, which fails instead.
    python = env.get("interpreter") or (os.path.join(env["prefix"], "bin", "python") if env.get("prefix") else "python")
    return " ".join([_q(python), "-m", "pip", *(_q(a) for a in args)])


def conda(env: Mapping[str, Any], verb: str, *args: str) -> str:
    """`conda VERB -p PREFIX ARGS`, or the pixi equivalent for a pixi environment."""
    prefix = env.get("prefix") or ""
    if env.get("kind") == "pixi":
        where = pixi_manifest(prefix)
        location = f" --manifest-path {_q(where[0])} -e {_q(where[1])}" if where else ""
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
        args = tuple(plain)
        names = [a.split("=")[0].split("<")[0].split(">")[0] for a in args]
        if verb == "install" and force:
            return f"pixi reinstall{location} {' '.join(names)}"
        if verb == "remove":
            return f"pixi remove{location} {' '.join(names)}"
        specs = list(args)
        return f"pixi add{location} {' '.join(_q(s) for s in specs)}"
    return " ".join(["conda", verb, "-p", _q(prefix), *(_q(a) for a in args)])


def conda_reinstall(env: Mapping[str, Any], records: Iterable[Mapping[str, Any]]) -> str:
    """Force-reinstall conda records at exactly the version they were recorded at."""
    specs = [f"{r['name']}={r['version']}" for r in records]
    return conda(env, "install", "--force-reinstall", *specs)
