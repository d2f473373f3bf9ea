"""Which environment is inspected: its prefix, kind, interpreter and import path.

The kind is read from the files in the prefix, not from environment variables
alone: `conda-meta/` makes a conda prefix (a pixi one when pixi's own marker is
there or the prefix sits in a `.pixi/envs` folder), `pyvenv.cfg` a venv, and
anything else is a system interpreter.

For the running interpreter everything is read from `sys`; for another prefix
its own interpreter is asked, once, in a bounded subprocess that writes no
bytecode and imports nothing but the standard library.
"""
from __future__ import annotations

import json
import os
import platform
import site
import sys
from pathlib import Path
from typing import Any, TypedDict

from envdoctor.process import quiet_python_env, run_bounded

INTERPRETER_TIMEOUT_S = 20.0

# Printed by the target interpreter about itself. Standard library only: it
# must run on any Python the target may have, and import nothing it inspects.
_SELF_REPORT = r"""
import json, os, site, sys, sysconfig
try:
    user_site = site.getusersitepackages()
except Exception:
    user_site = None
try:
    site_packages = site.getsitepackages()
except Exception:
    site_packages = []
print(json.dumps({
    "python": "%d.%d.%d" % sys.version_info[:3],
    "implementation": sys.implementation.name,
    "executable": sys.executable,
    "sys_prefix": sys.prefix,
    "base_prefix": getattr(sys, "base_prefix", sys.prefix),
    "sys_path": [os.path.abspath(p) if p else os.getcwd() for p in sys.path],
    "site_packages": site_packages,
    "purelib": sysconfig.get_paths().get("purelib"),
    "user_site": user_site,
    "user_site_enabled": bool(site.ENABLE_USER_SITE),
    "platform": sys.platform,
    "machine": __import__("platform").machine(),
    "stdlib": sorted({sysconfig.get_paths().get("stdlib") or "", sysconfig.get_paths().get("platstdlib") or ""} - {""}),
    "cwd": os.getcwd(),
    "pythonpath": [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p],
    "markers": MARKERS,
}))
"""

# The PEP 508 marker environment, computed the way packaging.markers does, so
# requirements are judged for the target interpreter rather than envdoctor's.
_MARKERS = r"""
import os, platform, sys
def _impl_version():
    info = sys.implementation.version
    version = "%d.%d.%d" % (info.major, info.minor, info.micro)
    if info.releaselevel != "final":
        version += info.releaselevel[0] + str(info.serial)
    return version
MARKERS = {
    "implementation_name": sys.implementation.name,
    "implementation_version": _impl_version(),
    "os_name": os.name,
    "platform_machine": platform.machine(),
    "platform_release": platform.release(),
    "platform_system": platform.system(),
    "platform_version": platform.version(),
    "python_full_version": platform.python_version(),
    "platform_python_implementation": platform.python_implementation(),
    "python_version": ".".join(platform.python_version_tuple()[:2]),
    "sys_platform": sys.platform,
}
"""


class TargetFacts(TypedDict, total=False):
    """The `target` facts section (what `gather_target` returns; the report's facts.target)."""

    base_prefix: Any
    cwd: Any
    executable: Any
    implementation: Any
    interpreter: Any
    interpreter_error: Any
    is_current: Any
    kind: Any
    machine: Any
    markers: Any
    name: Any
    platform: Any
    prefix: Any
    purelib: Any
    python: Any
    pythonpath: Any
    site_packages: Any
    stdlib: Any
    sys_path: Any
    sys_prefix: Any
    user_site: Any
    user_site_enabled: Any


class TargetError(Exception):
    """The environment asked for cannot be found or used."""


def conda_platform(system: str | None = None, machine: str | None = None) -> str:
    """The conda subdir name for this machine: linux-64, osx-arm64, win-64 …"""
    system = (system or sys.platform).lower()
    machine = (machine or platform.machine()).lower()
    os_name = {"linux": "linux", "darwin": "osx", "win32": "win"}.get(system, system)
    arch = {"x86_64": "64", "amd64": "64", "aarch64": "aarch64", "arm64": "arm64",
            "ppc64le": "ppc64le", "i686": "32", "x86": "32"}.get(machine, machine)
    if os_name == "linux" and arch == "arm64":
        arch = "aarch64"
    return f"{os_name}-{arch}"


def detect_kind(prefix: Path) -> str:
    """conda, pixi, venv or system, from the files in the prefix."""
    if (prefix / "conda-meta").is_dir():
        if (prefix / "conda-meta" / "pixi").exists() or (
            prefix.parent.name == "envs" and prefix.parent.parent.name == ".pixi"
        ):
            return "pixi"
        return "conda"
    if (prefix / "pyvenv.cfg").is_file():
        return "venv"
    return "system"


def find_interpreter(prefix: Path) -> Path | None:
    for candidate in ("bin/python3", "bin/python", "python.exe", "Scripts/python.exe"):
        path = prefix / candidate
        if path.is_file() and os.access(path, os.X_OK):
            return path
    return None


def _envs_dirs() -> list[Path]:
    home = Path.home()
    dirs: list[Path] = []
    for var in ("CONDA_ENVS_PATH", "CONDA_ENVS_DIRS"):
        dirs += [Path(p) for p in os.environ.get(var, "").split(os.pathsep) if p]
    for var in ("CONDA_ROOT", "MAMBA_ROOT_PREFIX", "CONDA_PREFIX"):
        root = os.environ.get(var)
        if root:
            root_path = Path(root)
            dirs.append(root_path / "envs")
            if root_path.parent.name == "envs":
                dirs.append(root_path.parent)
    if os.environ.get("CONDA_EXE"):
        dirs.append(Path(os.environ["CONDA_EXE"]).resolve().parent.parent / "envs")
    for base in ("miniconda3", "anaconda3", "miniforge3", "mambaforge", "micromamba", ".conda"):
        dirs.append(home / base / "envs")
    dirs += [Path("/opt/conda/envs"), Path("/opt/miniconda3/envs"), Path("/opt/miniforge3/envs")]
    return list(dict.fromkeys(dirs))


def find_named_env(name: str, environments_txt: Path | None = None) -> Path:
    """A conda env by name: the usual envs folders, then ~/.conda/environments.txt."""
    for folder in _envs_dirs():
        candidate = folder / name
        if (candidate / "conda-meta").is_dir():
            return candidate
    listing = environments_txt or Path.home() / ".conda" / "environments.txt"
    try:
        lines = listing.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        lines = []
    for line in lines:
        path = Path(line.strip())
        if line.strip() and path.name == name and (path / "conda-meta").is_dir():
            return path
        if name == "base" and line.strip() and not path.parent.name == "envs" and (path / "conda-meta").is_dir():
            return path
    raise TargetError(f"no conda environment named {name!r} (looked in the envs folders and {listing})")


def resolve_prefix(prefix: str | None, env_name: str | None) -> Path:
    """The prefix to inspect: --prefix, -n NAME, or the running interpreter's."""
    if prefix and env_name:
        raise TargetError("give either --prefix or -n/--name, not both")
    if env_name:
        return find_named_env(env_name)
    if prefix:
        path = Path(prefix).expanduser()
        if not path.exists():
            raise TargetError(f"no environment at {prefix}: the folder does not exist")
        if not path.is_dir():
            raise TargetError(f"{prefix} is not a folder (give the environment's prefix)")
        return path.resolve()
    return Path(sys.prefix)


def _import_path_of_a_run_from_here() -> list[str]:
    """sys.path as a training run started in this directory would have it.

    Run as the `envdoctor` console script, sys.path[0] is that script's bin
    folder; `python train.py` or `python -m` from the same place would have
    the working directory there instead, and that is where a folder named
    like an installed package hides it (PKG006). Under `python -m envdoctor`
    and preflight() sys.path[0] is already the caller's.
    """
    entries = [os.path.abspath(p) if p else os.getcwd() for p in sys.path]
    script = sys.argv[0] if sys.argv else ""
    # Python resolves a symlinked script before taking its folder (/usr/local/bin/envdoctor -> venv/bin).
    script_dirs = {os.path.abspath(os.path.dirname(script)), os.path.dirname(os.path.realpath(script))}
    if entries and Path(script).name == "envdoctor" and entries[0] in script_dirs:
        entries[0] = os.getcwd()
    return entries


def _current_self_report() -> dict[str, Any]:
    try:
        site_packages = site.getsitepackages()
    except AttributeError:  # pragma: no cover - old virtualenv's site.py
        site_packages = []
    import sysconfig

    return {
        "python": "%d.%d.%d" % sys.version_info[:3],
        "implementation": sys.implementation.name,
        "executable": sys.executable,
        "sys_prefix": sys.prefix,
        "base_prefix": sys.base_prefix,
        "sys_path": _import_path_of_a_run_from_here(),
        "site_packages": site_packages,
        "purelib": sysconfig.get_paths().get("purelib"),
        "user_site": site.getusersitepackages(),
        "user_site_enabled": bool(site.ENABLE_USER_SITE),
        "platform": sys.platform,
        "machine": platform.machine(),
        "stdlib": sorted({sysconfig.get_paths().get("stdlib") or "", sysconfig.get_paths().get("platstdlib") or ""} - {""}),
        "cwd": os.getcwd(),
        "pythonpath": [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p],
        "markers": current_markers(),
    }


def current_markers() -> dict[str, str]:
    """The running interpreter's PEP 508 marker environment (same code the target runs)."""
    scope: dict[str, Any] = {}
    exec(_MARKERS, scope)  # one definition for both interpreters, so they cannot drift
    return dict(scope["MARKERS"])


def ask_interpreter(interpreter: Path, timeout: float = INTERPRETER_TIMEOUT_S) -> dict[str, Any]:
    """The target interpreter's own account of itself (version, sys.path …)."""
    run = run_bounded([str(interpreter), "-B", "-c", _MARKERS + _SELF_REPORT], timeout, env=quiet_python_env())
    if not run.ok:
        raise TargetError(f"the interpreter {interpreter} {run.describe_failure()}")
    try:
        return json.loads(run.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise TargetError(f"the interpreter {interpreter} printed no readable self-report") from None


def gather_target(facts: Any) -> dict[str, Any]:
    config = facts.config
    prefix = resolve_prefix(config.prefix, config.env_name)
    current = Path(sys.prefix).resolve() == prefix.resolve()
    kind = detect_kind(prefix)
    info: dict[str, Any] = {
        "prefix": str(prefix),
        "kind": kind,
        "name": prefix.name if kind in ("conda", "pixi") else None,
        "is_current": current,
        "platform": conda_platform(),
    }
    if current:
        info.update(_current_self_report())
        info["interpreter"] = sys.executable
    else:
        interpreter = find_interpreter(prefix)
        info["interpreter"] = str(interpreter) if interpreter else None
        if interpreter is None:
            info["python"] = None
            info["interpreter_error"] = "no Python interpreter in this prefix"
        else:
            try:
                info.update(ask_interpreter(interpreter))
            except TargetError as exc:
                info["python"] = None
                info["interpreter_error"] = str(exc)
        info["executable"] = info.get("executable") or info["interpreter"]
    return info
