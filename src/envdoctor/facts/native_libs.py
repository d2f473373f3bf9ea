"""Native library facts: CUDA libraries that another folder would load before the ones torch ships.

torch's CUDA libraries (cuDNN, cuBLAS, NCCL, cudart …) come beside it: the `nvidia-*` wheels'
`site-packages/nvidia/<lib>/lib/` folders (found through torch's RUNPATH), or a conda
environment's `lib/`. The dynamic loader searches `LD_LIBRARY_PATH` before a library's
RUNPATH, so a folder there holding a library of the same file name (the same soname, say
`libcudnn.so.9`) wins — another cuDNN minor version, a cluster module's NCCL — and torch fails
at import with undefined symbols or at run time with "cuDNN version incompatibility".
`LD_PRELOAD` loads before everything.

Read statically: folder listings and file names only, nothing is loaded.
"""
from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TypedDict

#: The CUDA runtime libraries torch links, by the stem of their file name.
_CUDA_LIBRARY = re.compile(
    r"^(?P<stem>lib(?:cudnn(?:_[a-z_]+)?|cublas(?:Lt)?|nccl|cudart|cufft(?:w)?|curand|cusolver(?:Mg)?"
    r"|cusparse(?:Lt)?|nvrtc(?:-builtins)?|nvJitLink|cupti|nvToolsExt|cufile))\.so(?P<version>(?:\.\d+)*)$")
#: How many entries of one folder are looked at: a huge folder on LD_LIBRARY_PATH stays cheap.
MAX_ENTRIES = 5000


class CudaLibrary(TypedDict):
    #: The file name the loader asks for (e.g. libcudnn.so.9), and the folder that holds it.
    name: str
    folder: str
    #: How the loader reaches it: "LD_PRELOAD", "LD_LIBRARY_PATH", or "shipped" (the target's own).
    via: str
    #: The real file it resolves to (its name often carries the full version, libcudnn.so.9.1.0);
    #: None when it dangles. Two entries that resolve to one file are one library.
    resolves_to: str | None


class NativeLibsFacts(TypedDict):
    ld_library_path: list[str]
    ld_preload: list[str]
    #: CUDA libraries in LD_PRELOAD and LD_LIBRARY_PATH folders, in the order the loader searches them.
    on_library_path: list[CudaLibrary]
    #: CUDA libraries the target environment ships for torch (nvidia-* wheels, a conda lib/).
    shipped: list[CudaLibrary]


def cuda_library(name: str) -> bool:
    """Whether a file name is one of the CUDA libraries torch loads (a versioned soname, or the bare .so)."""
    return _CUDA_LIBRARY.match(name) is not None


def _resolved(path: Path) -> str | None:
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError):  # a dangling link or a symlink loop
        return None
    return str(real)


def libraries_in(folder: Path, via: str) -> list[CudaLibrary]:
    """The CUDA libraries one folder holds, by name; an unreadable or missing folder holds none."""
    found: list[CudaLibrary] = []
    try:
        with os.scandir(folder) as entries:
            for count, entry in enumerate(entries):
                if count >= MAX_ENTRIES:
                    break
                if cuda_library(entry.name):
                    found.append({"name": entry.name, "folder": str(folder), "via": via,
                                  "resolves_to": _resolved(folder / entry.name)})
    except OSError:
        return []
    return sorted(found, key=lambda lib: lib["name"])


def split_path_list(value: str | None) -> list[str]:
    """A colon-separated search path; an empty entry means the current folder to ld.so, kept as '.'."""
    if not value:
        return []
    return [entry or "." for entry in value.split(":")]


def shipped_folders(prefix: str, site_packages: Iterable[str], conda: bool) -> list[Path]:
    """Where the target keeps torch's CUDA libraries: each site folder's nvidia/*/lib, a conda prefix's lib/."""
    folders: list[Path] = []
    for site in site_packages:
        nvidia = Path(site) / "nvidia"
        try:
            folders += sorted(child / "lib" for child in nvidia.iterdir() if (child / "lib").is_dir())
        except OSError:
            pass
        folders.append(Path(site) / "torch" / "lib")
    if conda:
        folders.append(Path(prefix) / "lib")
    return folders


def read_native_libs(environ: Mapping[str, str], prefix: str, site_packages: Iterable[str],
                     conda: bool) -> NativeLibsFacts:
    ld_path = split_path_list(environ.get("LD_LIBRARY_PATH"))
    preload = [entry for entry in re.split(r"[:\s]+", environ.get("LD_PRELOAD", "")) if entry]
    on_path: list[CudaLibrary] = []
    for entry in preload:  # loaded before anything else
        name = os.path.basename(entry)
        if cuda_library(name):
            on_path.append({"name": name, "folder": os.path.dirname(entry) or ".", "via": "LD_PRELOAD",
                            "resolves_to": _resolved(Path(entry))})
    for entry in dict.fromkeys(ld_path):
        on_path += libraries_in(Path(entry), "LD_LIBRARY_PATH")
    shipped: list[CudaLibrary] = []
    for folder in shipped_folders(prefix, site_packages, conda):
        shipped += libraries_in(folder, "shipped")
    return {"ld_library_path": ld_path, "ld_preload": preload, "on_library_path": on_path, "shipped": shipped}


def read_target_native_libs(target: Mapping[str, object] | None) -> NativeLibsFacts | None:
    """The facts for the target environment; None off Linux, where LD_LIBRARY_PATH does not apply."""
    if not sys.platform.startswith("linux") or not target:
        return None
    site = target.get("site_packages") or []
    return read_native_libs(os.environ, str(target.get("prefix") or ""),
                            [str(s) for s in site] if isinstance(site, list) else [],
                            target.get("kind") == "conda")
