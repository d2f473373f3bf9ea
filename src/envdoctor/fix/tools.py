"""Who may run a fix step: the owning tool, found for real, aimed at the target only.

A step names its tool (pip, uv, conda, …) and carries an argv. Before it may
run, the tool must exist (on PATH, or in the prefix), the command must name
the target environment explicitly (`-p PREFIX`, `--python PREFIX/bin/python`,
the prefix's own interpreter for pip), every path it writes must lie inside
the target once symlinks are resolved, and an interpreter marked
EXTERNALLY-MANAGED (PEP 668) is only touched with `--break-system-packages`
in the argv. Anything else is refused with the reason; nothing is improvised
(no `sudo`, no other pip, no rewriting of the command).
"""
from __future__ import annotations

import glob
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from envdoctor.model import FixStep

#: Executable names each command tool may be started as.
EXECUTABLES: dict[str, tuple[str, ...]] = {
    "uv": ("uv",),
    "conda": ("conda",),
    "mamba": ("mamba",),
    "micromamba": ("micromamba",),
    "pixi": ("pixi",),
    "apt": ("apt-get", "apt"),
    "dnf": ("dnf",),
}
#: Environment variables conda-like tools set to their own executable.
_EXE_VARIABLES = {"conda": "CONDA_EXE", "mamba": "MAMBA_EXE", "micromamba": "MAMBA_EXE"}
#: Options of pip / uv pip that choose where files are written.
_WRITE_LOCATION_OPTIONS = ("--target", "-t", "--prefix", "--root")
#: pip and uv verbs that change an environment (PEP 668 applies to them).
CHANGING_VERBS = ("install", "uninstall", "sync")


class Refused(Exception):
    """A step that must not run here; the message says why, in one line."""


@dataclass(frozen=True)
class Target:
    """The environment a fix may change, as the fresh check saw it."""

    prefix: Path  # resolved
    kind: str  # conda, pixi, venv, system
    interpreter: str | None
    stdlib: tuple[str, ...] = ()

    @classmethod
    def from_report_target(cls, target: Mapping[str, object]) -> Target:
        prefix = Path(os.path.realpath(str(target.get("prefix") or "/")))
        return cls(prefix=prefix, kind=str(target.get("kind") or "system"),
                   interpreter=str(interpreter) if (interpreter := target.get("interpreter")) else None,
                   stdlib=tuple(str(p) for p in stdlib) if isinstance(stdlib := target.get("stdlib"), list) else ())

    def contains(self, path: str | os.PathLike[str]) -> bool:
        """Whether `path` lies inside the prefix once every symlink is resolved."""
        real = Path(os.path.realpath(path))
        return real == self.prefix or self.prefix in real.parents

    def contains_entry(self, path: str | os.PathLike[str]) -> bool:
        """Whether the directory entry `path` (itself perhaps a symlink) sits inside the prefix."""
        entry = Path(os.path.abspath(path))
        return entry != self.prefix and self.contains(entry.parent)

    @property
    def externally_managed(self) -> bool:
        """PEP 668: a marker beside the stdlib of a non-venv interpreter."""
        if self.kind == "venv":
            return False
        folders = list(self.stdlib) or glob.glob(str(self.prefix / "lib" / "python3*"))
        return any(os.path.isfile(os.path.join(folder, "EXTERNALLY-MANAGED")) for folder in folders)


def _option_values(argv: Sequence[str], names: Sequence[str]) -> list[str]:
    """Values given to any of `names` as `--opt VALUE` or `--opt=VALUE`."""
    values = []
    for i, arg in enumerate(argv):
        for name in names:
            if arg == name and i + 1 < len(argv):
                values.append(argv[i + 1])
            elif arg.startswith(name + "=") and name.startswith("--"):
                values.append(arg[len(name) + 1:])
    return values


def find_executable(tool: str, name: str, target: Target, environ: Mapping[str, str]) -> str | None:
    """The tool's executable: PATH first, then the tool's own variable, then the prefix."""
    if os.sep in name:
        return name if os.access(name, os.X_OK) and os.path.isfile(name) else None
    found = shutil.which(name, path=environ.get("PATH", os.defpath))
    if found:
        return found
    candidates = []
    if tool in _EXE_VARIABLES and environ.get(_EXE_VARIABLES[tool]):
        candidates.append(environ[_EXE_VARIABLES[tool]])
    candidates += command_paths(target.prefix, name)
    if target.prefix.parent.name == "envs":  # <base>/envs/<name>: the base holds conda itself
        candidates += command_paths(target.prefix.parent.parent, name)
    for candidate in candidates:
        if os.path.basename(candidate) in (name, f"{name}.exe", f"{name}.bat") and os.path.isfile(candidate) \
                and os.access(candidate, os.X_OK):
            return candidate
    return None


def command_paths(prefix: Path, name: str) -> list[str]:
    """Where a prefix keeps the command `name`: bin/ on POSIX; on Windows Scripts\\ (venv, pip's entry
    points), Library\\bin\\ and condabin\\ (conda), as .exe or .bat."""
    if sys.platform != "win32":
        return [str(prefix / "bin" / name)]
    folders = (prefix / "Scripts", prefix / "Library" / "bin", prefix / "condabin", prefix)
    return [str(folder / (name + suffix)) for folder in folders for suffix in (".exe", ".bat")]


def authorize(step: FixStep, target: Target, environ: Mapping[str, str] | None = None,
              pip_coming: bool = False) -> tuple[str, ...]:
    """The argv to run for a command step (argv[0] made absolute), or raise Refused.

    `pip_coming`: an earlier step of the same fix runs `python -m ensurepip`, so
    a missing pip is no reason to refuse a pip step planned after it.
    """
    environ = os.environ if environ is None else environ
    if not step.argv:
        raise Refused("a file move is not a command")
    argv = step.argv
    if step.tool in ("pip", "uv") and package_arguments(step.tool, argv)[0] in CHANGING_VERBS and target.externally_managed \
            and "--break-system-packages" not in argv:
        raise Refused(f"the interpreter of {target.prefix} is EXTERNALLY-MANAGED (PEP 668) and the step has no "
                      "--break-system-packages; use the system package manager, or a venv")
    if step.tool == "pip":
        resolved = _authorize_pip(argv, target, pip_coming)
    else:
        resolved = _authorize_tool(step.tool, argv, target, environ)
    for value in _option_values(argv, _WRITE_LOCATION_OPTIONS):
        if not target.contains(value):
            raise Refused(f"it writes to {value}, outside the prefix {target.prefix}")
    return resolved


#: Options of pip / uv pip that take a value (their value is no package name).
_VALUE_OPTIONS = frozenset((
    "-r", "--requirement", "-c", "--constraint", "-e", "--editable", "-i", "--index-url", "--extra-index-url",
    "-f", "--find-links", "--python", "-p", "--target", "-t", "--prefix", "--root", "--platform",
    "--python-version", "--implementation", "--abi", "--progress-bar", "--src", "--upgrade-strategy",
    "--config-settings", "-C", "--global-option", "--no-binary", "--only-binary", "--cache-dir", "--log",
    "--timeout", "--retries", "--trusted-host", "--cert", "--client-cert", "--proxy", "--exists-action",
    "--report", "--index-strategy", "--extra", "--group", "--keyring-provider",
))


def package_arguments(tool: str, argv: Sequence[str]) -> tuple[str | None, list[str]]:
    """(verb, the package arguments) of a pip (`python -m pip VERB …`) or uv (`uv pip VERB …`) command."""
    rest = list(argv[3:] if tool == "pip" else argv[1:])
    if tool == "uv":
        if rest[:1] != ["pip"]:
            return None, []
        rest = rest[1:]
    verb, args, skip = None, [], False
    for arg in rest:
        if skip:
            skip = False
        elif arg in _VALUE_OPTIONS:
            skip = True
        elif arg.startswith("-"):
            continue
        elif verb is None:
            verb = arg
        else:
            args.append(arg)
    return verb, args


def _authorize_pip(argv: Sequence[str], target: Target, pip_coming: bool) -> tuple[str, ...]:
    python = argv[0]
    ensurepip = list(argv[1:3]) == ["-m", "ensurepip"]
    if not ensurepip and (list(argv[1:3]) != ["-m", "pip"] or len(argv) < 4):
        raise Refused("a pip step must be `<the prefix's python> -m pip VERB …` or `… -m ensurepip`")
    if not os.path.isabs(python):
        raise Refused(f"`{python}` is not a path: only the prefix's own interpreter may run pip")
    if not target.contains_entry(python):
        raise Refused(f"{python} is not an interpreter of the prefix {target.prefix}")
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        raise Refused(f"{python} does not exist or cannot run")
    if not ensurepip and not pip_coming and not _has_pip(python):
        raise Refused(f"pip is not installed for {python} (a uv venv has none: the fix should use uv)")
    return tuple(argv)


def _has_pip(python: str) -> bool:
    """Whether the interpreter can import its own pip (isolated: no user site, no PYTHONPATH)."""
    from envdoctor.process import quiet_python_env, run_bounded

    code = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('pip') else 3)"
    return run_bounded([python, "-I", "-B", "-c", code], 30.0, env=quiet_python_env()).ok


def _authorize_tool(tool: str, argv: Sequence[str], target: Target, environ: Mapping[str, str]) -> tuple[str, ...]:
    names = EXECUTABLES.get(tool)
    if names is None:
        raise Refused(f"no command runs for the tool {tool!r}")
    if os.path.basename(argv[0]) not in names:
        raise Refused(f"the command starts with {argv[0]!r}, not {tool}")
    executable = find_executable(tool, argv[0], target, environ)
    if executable is None:
        raise Refused(f"{argv[0]} is not on PATH or in the prefix")
    if tool == "uv":
        _require_uv_target(argv, target)
    elif tool in ("conda", "mamba", "micromamba"):
        prefixes = _option_values(argv, ("-p", "--prefix"))
        if not prefixes or any(Path(os.path.realpath(p)) != target.prefix for p in prefixes):
            raise Refused(f"the command does not name the prefix {target.prefix} with -p")
    elif tool == "pixi":
        manifests = _option_values(argv, ("--manifest-path",))
        workspace = target.prefix.parent.parent.parent
        if not manifests or any(Path(os.path.realpath(m)).parent != workspace and Path(os.path.realpath(m)) != workspace
                                for m in manifests):
            raise Refused(f"the command does not name the pixi workspace {workspace} with --manifest-path")
    elif tool in ("apt", "dnf"):
        if target.kind != "system" or str(target.prefix) not in ("/usr", "/usr/local", "/"):
            raise Refused(f"{tool} installs into the system, not into {target.prefix}")
        if sys.platform == "win32" or os.geteuid() != 0:
            raise Refused(f"{tool} needs root: run `{' '.join(argv)}` yourself")
    return (executable, *argv[1:])


def _require_uv_target(argv: Sequence[str], target: Target) -> None:
    pythons = _option_values(argv, ("--python", "-p"))
    if not pythons:
        raise Refused("the uv command does not name the target's interpreter with --python")
    for python in pythons:
        inside = target.contains(python) if os.path.isdir(python) else target.contains_entry(python)
        if not inside:
            raise Refused(f"--python {python} is not the prefix {target.prefix}")


def authorize_move(step: FixStep, target: Target) -> tuple[str, str]:
    """(source, destination) of a file-move step, both inside the prefix, or raise Refused."""
    assert step.move is not None and step.to is not None
    source, destination = os.path.abspath(step.move), os.path.abspath(step.to)
    if not target.contains_entry(source):
        raise Refused(f"{step.move} is outside the prefix {target.prefix}")
    if not os.path.lexists(source):
        raise Refused(f"{step.move} does not exist")
    if not target.contains_entry(destination):
        raise Refused(f"{step.to} is outside the prefix {target.prefix}")
    if os.path.lexists(destination):
        raise Refused(f"{step.to} already exists")
    if not os.path.isdir(os.path.dirname(destination)):
        raise Refused(f"the folder of {step.to} does not exist")
    return source, destination
