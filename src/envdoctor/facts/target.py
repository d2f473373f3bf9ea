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
import re
import site
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from envdoctor.errors import TargetError
from envdoctor.facts.sitepath import PthFile, expand_site_dirs, import_path, user_site_enabled
from envdoctor.process import quiet_python_env, run_bounded

if TYPE_CHECKING:  # pragma: no cover
    from envdoctor.config import FactsReader

INTERPRETER_TIMEOUT_S = 20.0

# Printed by the target interpreter about itself, started with `-I -S`: site is
# off, so none of the environment's `.pth` files or sitecustomize run. The site
# folders come from the `site` module's own getsitepackages(), which only
# computes paths (distributions patch it: Debian's dist-packages) and is called
# here with the prefixes site.main() would use; what site.main() would then
# add is worked out from files by envdoctor.facts.sitepath. Standard library
# only: it must run on any Python the target may have.
_SELF_REPORT = r"""
import json, os, site, sys, sysconfig
def _venv():
    exe_dir = os.path.dirname(os.path.abspath(sys.executable))
    for folder in (exe_dir, os.path.dirname(exe_dir)):
        conf = os.path.join(folder, "pyvenv.cfg")
        if os.path.isfile(conf):
            system_site = True
            try:
                with open(conf, "rb") as handle:
                    text = handle.read(65536).decode("utf-8", "replace")
            except OSError:
                text = ""
            for line in text.splitlines():
                key, sep, value = line.partition("=")
                if sep and key.strip().lower() == "include-system-site-packages":
                    system_site = value.strip().lower() == "true"
            return os.path.dirname(exe_dir), system_site
    return None, None
def _sites(prefixes):
    try:
        return list(site.getsitepackages(prefixes))
    except Exception:
        return []
venv_prefix, system_site = _venv()
base_prefix, base_exec_prefix = sys.prefix, sys.exec_prefix
if venv_prefix:
    sys.prefix = sys.exec_prefix = venv_prefix  # what site.venv() would set
    venv_sites = _sites([venv_prefix])
    base_sites = _sites([base_prefix, base_exec_prefix]) if system_site else []
else:
    venv_sites, base_sites = [], _sites([sys.prefix, sys.exec_prefix])
try:
    user_site = site.getusersitepackages()
except Exception:
    user_site = None
paths = sysconfig.get_paths()
print(json.dumps({
    "python": "%d.%d.%d" % sys.version_info[:3],
    "implementation": sys.implementation.name,
    "executable": sys.executable,
    "sys_prefix": sys.prefix,
    "base_prefix": base_prefix,
    "stdlib_path": [os.path.abspath(p) for p in sys.path if p],
    "venv_sites": venv_sites,
    "base_sites": base_sites,
    "venv_system_site": system_site,
    "purelib": paths.get("purelib"),
    "user_site": user_site,
    "platform": sys.platform,
    "machine": __import__("platform").machine(),
    "stdlib": sorted({paths.get("stdlib") or "", paths.get("platstdlib") or ""} - {""}),
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

#: The self-report's fields and the types each must have (a hostile or broken
#: interpreter may print anything; a wrong type is a PKG009, not a crash).
_STR, _OPT_STR, _STRS, _OPT_BOOL = "str", "str|None", "list[str]", "bool|None"
SELF_REPORT_FIELDS: dict[str, str] = {
    "python": _STR, "implementation": _STR, "executable": _STR, "sys_prefix": _STR, "base_prefix": _STR,
    "stdlib_path": _STRS, "venv_sites": _STRS, "base_sites": _STRS, "venv_system_site": _OPT_BOOL,
    "purelib": _OPT_STR, "user_site": _OPT_STR, "platform": _STR, "machine": _STR, "stdlib": _STRS,
}


class TargetFacts(TypedDict, total=False):
    """The `target` facts section (what `gather_target` returns; the report's facts.target)."""

    prefix: str
    #: conda, pixi, venv or system
    kind: str
    name: str | None
    is_current: bool
    platform: str
    interpreter: str | None
    interpreter_error: str
    executable: str | None
    python: str | None
    implementation: str
    sys_prefix: str
    base_prefix: str
    #: sys.path of a run started here, `.pth` entries included (read, not run)
    sys_path: list[str]
    #: the site folders in the order `site` adds them
    site_packages: list[str]
    purelib: str | None
    user_site: str | None
    user_site_enabled: bool
    machine: str
    stdlib: list[str]
    cwd: str
    pythonpath: list[str]
    markers: dict[str, str]
    #: pyvenv.cfg's keys (`uv = 0.5.1` marks a uv venv), or None outside a venv
    pyvenv: dict[str, str] | None
    #: the EXTERNALLY-MANAGED marker (PEP 668) of a system interpreter, or None
    externally_managed: str | None
    #: `.pth` files that add paths or hold code, read as data
    pth_files: list[PthFile]


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
    """The prefix's interpreter; one that is there but cannot run (a dangling link) is still returned.

    Starting it then fails with a reason, so the check stops in one line rather
    than report a prefix whose Python is broken as one without Python (a false all-clear).
    """
    candidates = [prefix / c for c in ("bin/python3", "bin/python", "python.exe", "Scripts/python.exe")]
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    return next((path for path in candidates if os.path.lexists(path)), None)


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
    if prefix is not None:
        if not prefix.strip():
            raise TargetError("--prefix is empty: give the environment's folder (or leave --prefix out)")
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
    # On Windows the console script is envdoctor.exe (or envdoctor-script.py beside it).
    if entries and Path(script).name in ("envdoctor", "envdoctor.exe", "envdoctor-script.py") \
            and entries[0] in script_dirs:
        entries[0] = os.getcwd()
    return entries


def _current_self_report() -> dict[str, object]:
    try:
        site_packages = site.getsitepackages()
    except AttributeError:  # pragma: no cover - old virtualenv's site.py
        site_packages = []
    import sysconfig

    user_site = site.getusersitepackages()
    enabled = bool(site.ENABLE_USER_SITE)
    # This process's `.pth` files have run already (it is envdoctor's own interpreter); they are
    # still read as data, so PKG011 sees the same facts here as for any other target.
    sites = ([user_site] if enabled and user_site else []) + site_packages
    version = (sys.version_info[0], sys.version_info[1])
    _, pth_files = expand_site_dirs(sites, [], version)
    return {
        "python": "%d.%d.%d" % sys.version_info[:3],
        "implementation": sys.implementation.name,
        "executable": sys.executable,
        "sys_prefix": sys.prefix,
        "base_prefix": sys.base_prefix,
        "sys_path": _import_path_of_a_run_from_here(),
        "site_packages": site_packages,
        "purelib": sysconfig.get_paths().get("purelib"),
        "user_site": user_site,
        "user_site_enabled": enabled,
        "platform": sys.platform,
        "machine": platform.machine(),
        "stdlib": sorted({sysconfig.get_paths().get("stdlib") or "", sysconfig.get_paths().get("platstdlib") or ""} - {""}),
        "cwd": os.getcwd(),
        "pythonpath": _pythonpath(),
        "markers": current_markers(),
        "pth_files": pth_files,
    }


def _pythonpath() -> list[str]:
    return [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]


def current_markers() -> dict[str, str]:
    """The running interpreter's PEP 508 marker environment (same code the target runs)."""
    scope: dict[str, object] = {}
    exec(_MARKERS, scope)  # one definition for both interpreters, so they cannot drift
    markers = scope["MARKERS"]
    return {str(k): str(v) for k, v in markers.items()} if isinstance(markers, dict) else {}


def _type_error(report: object) -> str | None:
    """Why a self-report does not have the fields and types asked for, or None."""
    if not isinstance(report, dict):
        return f"is a JSON {type(report).__name__}, not an object"
    checks = {"str": lambda v: isinstance(v, str), "str|None": lambda v: v is None or isinstance(v, str),
              "bool|None": lambda v: v is None or isinstance(v, bool),
              "list[str]": lambda v: isinstance(v, list) and all(isinstance(i, str) and "\x00" not in i for i in v)}
    for key, wanted in SELF_REPORT_FIELDS.items():
        if not checks[wanted](report.get(key)):
            return f"field {key!r} is {type(report.get(key)).__name__}, expected {wanted}"
    markers = report.get("markers")
    if not isinstance(markers, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in markers.items()):
        return "field 'markers' is not an object of strings"
    if not re.fullmatch(r"\d+\.\d+\.\d+", report["python"]):
        return f"field 'python' is {report['python'][:40]!r}, not a version"
    return None


def ask_interpreter(interpreter: Path, timeout: float = INTERPRETER_TIMEOUT_S) -> dict[str, object]:
    """The target interpreter's own account of itself (version, site folders …), asked with
    site disabled, so none of its `.pth` files runs; its sys.path is then computed from files."""
    run = run_bounded([str(interpreter), "-I", "-S", "-B", "-c", _MARKERS + _SELF_REPORT], timeout,
                      env=quiet_python_env())
    if not run.ok:
        raise TargetError(f"the interpreter {interpreter} {run.describe_failure()}")
    try:
        report = json.loads(run.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError, RecursionError):
        raise TargetError(f"the interpreter {interpreter} printed no readable self-report") from None
    problem = _type_error(report)
    if problem:
        raise TargetError(f"the self-report of the interpreter {interpreter} {problem}")
    major, minor = (int(part) for part in report["python"].split(".")[:2])
    venv_system_site = report.pop("venv_system_site")
    enabled = user_site_enabled(os.environ, venv_system_site)
    user = report["user_site"]
    sites = [*report.pop("venv_sites"), *([user] if enabled and user else []), *report.pop("base_sites")]
    cwd, pythonpath = os.getcwd(), _pythonpath()
    sys_path, pth_files = import_path(report.pop("stdlib_path"), sites, cwd, pythonpath, (major, minor))
    return {**report, "sys_path": sys_path, "site_packages": sites, "user_site_enabled": enabled,
            "cwd": cwd, "pythonpath": pythonpath, "pth_files": pth_files}


def read_pyvenv(prefix: Path) -> dict[str, str] | None:
    """pyvenv.cfg's keys (read as data, bounded), or None when the prefix is no venv."""
    from envdoctor.facts.readfile import read_bytes

    try:
        text = read_bytes(str(prefix / "pyvenv.cfg"), 1 << 16, head=True).decode("utf-8", errors="replace")
    except OSError:
        return None
    keys: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip():
            keys[key.strip().lower()] = value.strip()
    return keys


def externally_managed(stdlib: list[str], kind: str) -> str | None:
    """The PEP 668 marker that makes pip refuse to install into this interpreter (never in a venv)."""
    if kind not in ("system", "conda"):
        return None
    for folder in stdlib:
        marker = os.path.join(folder, "EXTERNALLY-MANAGED")
        if os.path.isfile(marker):
            return marker
    return None


#: Files that make a folder the root of an operating system's file system (a chroot, a container's rootfs).
_ROOT_MARKS = ("etc/os-release", "usr/lib/os-release", "var/lib/dpkg/status", "etc/passwd")


def enclosing_root(prefix: Path) -> Path | None:
    """The root file system other than / that the prefix lies in (`/srv/chroot` for `/srv/chroot/opt/venv`)."""
    real = Path(os.path.realpath(prefix))
    for folder in [real, *real.parents]:
        if folder == Path(folder.anchor):
            return None
        if (folder / "usr").is_dir() and any((folder / mark).is_file() for mark in _ROOT_MARKS):
            return folder
    return None


def interpreter_outside_root(prefix: Path, interpreter: Path) -> str | None:
    """Why the prefix cannot be inspected from here, when its interpreter resolves outside its root file system.

    A chroot's venv read from the host has `bin/python -> /usr/bin/python3.11`: from the host that is
    the host's interpreter, whose site folders and packages would be reported as the venv's.
    """
    root = enclosing_root(prefix)
    if root is None:
        return None
    real = Path(os.path.realpath(interpreter))
    if real == root or root in real.parents:
        return None
    return (f"the interpreter of {prefix} ({interpreter}) resolves to {real}, outside the root file system "
            f"{root} the environment lies in: its facts would be this machine's, not that environment's; "
            f"check it from inside that root (e.g. `chroot {root} envdoctor check --prefix "
            f"/{Path(os.path.realpath(prefix)).relative_to(root)}`)")


def gather_target(facts: FactsReader) -> TargetFacts:
    config = facts.config
    prefix = resolve_prefix(config.prefix, config.env_name)
    current = Path(sys.prefix).resolve() == prefix.resolve()
    kind = detect_kind(prefix)
    info: dict[str, object] = {
        "prefix": str(prefix),
        "kind": kind,
        "name": prefix.name if kind in ("conda", "pixi") else None,
        "is_current": current,
        "platform": conda_platform(),
        "pyvenv": read_pyvenv(prefix) if kind == "venv" else None,
    }
    if current:
        info.update(_current_self_report())
        info["interpreter"] = sys.executable
    else:
        interpreter = find_interpreter(prefix)
        if interpreter is not None:
            refused = interpreter_outside_root(prefix, interpreter)
            if refused:
                raise TargetError(refused)
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
    stdlib = info.get("stdlib")
    info["externally_managed"] = externally_managed([str(p) for p in stdlib] if isinstance(stdlib, list) else [], kind)
    return info  # type: ignore[return-value]  # built key by key from checked parts; TargetFacts is its shape
