"""Notebook kernels: which interpreter will run a notebook, read as Jupyter would find it.

A notebook names its kernel in `metadata.kernelspec.name`. Jupyter resolves that name to a
`kernels/<name>/kernel.json` on its data path — `JUPYTER_PATH`, then the user's data folder,
then the environment's `share/jupyter`, then the system's — and starts the `argv` written
there; `argv[0]` is the interpreter (an `ipykernel install --name X` writes its own
`sys.executable`). The name `python3` with no kernel.json of its own is ipykernel's native
kernel: the interpreter Jupyter itself runs in. When that interpreter is not the checked
environment's, `import torch` fails or `torch.cuda.is_available()` is False only in the
notebook.

Read without jupyter_client (envdoctor must not depend on it); the search path follows
jupyter_core's `jupyter_path()` on each platform. Nothing is started.
"""
from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TypedDict

#: ipykernel's native kernel: without a kernel.json of its own, Jupyter's own interpreter runs it.
NATIVE_KERNEL = "python3"
#: A kernel.json larger than this is not one (they are a few hundred bytes).
MAX_SPEC_BYTES = 1 << 16


class NotebookKernel(TypedDict):
    """The kernel a notebook asks for and what it resolves to."""

    #: metadata.kernelspec.name (None when the notebook names none), and its display name.
    name: str | None
    display_name: str | None
    #: The kernel.json found for the name, first on the search path; None when none is.
    spec: str | None
    #: The kernel's interpreter (argv[0] of kernel.json), None when there is no spec or it names none,
    #: and the real folder it lies in (None for a bare name such as `python`, found on PATH at start).
    interpreter: str | None
    interpreter_dir: str | None
    #: The folders searched, in Jupyter's order.
    searched: list[str]
    #: Why the spec could not be used, when it could not (unreadable, not JSON, no argv).
    problem: str | None


def user_data_dir(environ: Mapping[str, str], home: Path, platform: str) -> Path:
    """jupyter_core's jupyter_data_dir(): JUPYTER_DATA_DIR, else the platform's user folder."""
    if environ.get("JUPYTER_DATA_DIR"):
        return Path(environ["JUPYTER_DATA_DIR"])
    if platform == "darwin":
        return home / "Library" / "Jupyter"
    if platform == "win32":
        return Path(environ.get("APPDATA") or home / "AppData" / "Roaming") / "jupyter"
    return Path(environ.get("XDG_DATA_HOME") or home / ".local" / "share") / "jupyter"


def system_dirs(environ: Mapping[str, str], platform: str) -> list[Path]:
    if platform == "win32":
        return [Path(environ.get("PROGRAMDATA") or r"C:\ProgramData") / "jupyter"]
    return [Path("/usr/local/share/jupyter"), Path("/usr/share/jupyter")]


def kernel_dirs(environ: Mapping[str, str], env_prefixes: Iterable[str], home: Path | None = None,
                platform: str | None = None) -> list[Path]:
    """The `kernels` folders in jupyter_core's order: JUPYTER_PATH, user, the environment's, system.

    JUPYTER_PREFER_ENV_PATH (set, and not 0/false/no/off) puts the environment's before the user's.
    """
    platform = platform or sys.platform
    home = home or Path(os.path.expanduser("~"))
    first = [Path(p) for p in environ.get("JUPYTER_PATH", "").split(os.pathsep) if p]
    user = [user_data_dir(environ, home, platform)]
    env = [Path(prefix) / "share" / "jupyter" for prefix in env_prefixes]
    prefer_env = environ.get("JUPYTER_PREFER_ENV_PATH", "").lower() not in ("", "0", "false", "no", "off")
    ordered = first + (env + user if prefer_env else user + env) + system_dirs(environ, platform)
    return [folder / "kernels" for folder in dict.fromkeys(ordered)]


def kernelspec_of(document: object) -> tuple[str | None, str | None]:
    """(name, display_name) of a notebook document's metadata.kernelspec."""
    metadata = document.get("metadata") if isinstance(document, dict) else None
    spec = metadata.get("kernelspec") if isinstance(metadata, dict) else None
    if not isinstance(spec, dict):
        return None, None
    name, display = spec.get("name"), spec.get("display_name")
    return (name if isinstance(name, str) else None), (display if isinstance(display, str) else None)


def _read_spec(path: Path) -> tuple[str | None, str | None]:
    """(interpreter, problem) of one kernel.json."""
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_SPEC_BYTES + 1)
    except OSError as exc:
        return None, f"unreadable: {exc.strerror or exc}"
    if len(data) > MAX_SPEC_BYTES:
        return None, "larger than a kernel.json can be"
    try:
        spec = json.loads(data.decode("utf-8", errors="replace"))
    except (ValueError, RecursionError):
        return None, "not JSON"
    argv = spec.get("argv") if isinstance(spec, dict) else None
    if not isinstance(argv, list) or not argv or not isinstance(argv[0], str):
        return None, "no argv"
    return argv[0], None


def resolve_kernel(name: str | None, display_name: str | None, folders: list[Path]) -> NotebookKernel:
    """The kernel.json Jupyter would use for `name` (kernel names are case-insensitive: lowercased)."""
    kernel: NotebookKernel = {"name": name, "display_name": display_name, "spec": None, "interpreter": None,
                              "interpreter_dir": None, "searched": [str(f) for f in folders], "problem": None}
    if not name:
        return kernel
    for folder in folders:
        spec = folder / name.lower() / "kernel.json"
        if spec.is_file():
            kernel["spec"] = str(spec)
            kernel["interpreter"], kernel["problem"] = _read_spec(spec)
            kernel["interpreter_dir"] = interpreter_dir(kernel["interpreter"])
            break
    return kernel


def notebook_kernel(text: str, environ: Mapping[str, str], env_prefixes: Iterable[str]) -> NotebookKernel | None:
    """The kernel of a notebook's text; None when the text is not a JSON notebook."""
    try:
        document = json.loads(text)
    except (ValueError, RecursionError):
        return None
    name, display = kernelspec_of(document)
    return resolve_kernel(name, display, kernel_dirs(environ, env_prefixes))


class NotebookTarget(TypedDict):
    """The checked environment as a notebook's kernel must match it."""

    prefix: str
    interpreter: str | None
    #: Where its interpreters live (bin/, or the prefix and Scripts/ on Windows).
    bin_dirs: list[str]
    #: An `ipykernel` package in one of its site folders: without it no kernel can run there.
    has_ipykernel: bool


def notebook_target(target: Mapping[str, object]) -> NotebookTarget:
    prefix = str(target.get("prefix") or "")
    interpreter = target.get("interpreter") or target.get("executable")
    sites = target.get("site_packages")
    site_list = [str(s) for s in sites] if isinstance(sites, list) else []
    bins = [os.path.join(prefix, "Scripts"), prefix] if sys.platform == "win32" else [os.path.join(prefix, "bin")]
    return {"prefix": prefix, "interpreter": str(interpreter) if interpreter else None,
            "bin_dirs": [_real(b) for b in bins],
            "has_ipykernel": any(os.path.isfile(os.path.join(s, "ipykernel", "__init__.py")) for s in site_list)}


def _real(path: str) -> str:
    return os.path.realpath(path) if path else path


def interpreter_dir(interpreter: str | None) -> str | None:
    """The real folder of a kernel's interpreter: a venv's python links out of the venv, its folder does not."""
    if not interpreter or not os.path.isabs(interpreter):
        return None
    return _real(os.path.dirname(interpreter))
