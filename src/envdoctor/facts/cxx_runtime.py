"""The C++ runtimes an import failure names: which libstdc++ was loaded, and which the environment holds.

`ImportError: /usr/lib/x86_64-linux-gnu/libstdc++.so.6: version `GLIBCXX_3.4.30' not found
(required by …/libtorch_python.so)` means the dynamic loader took a libstdc++ older than the one
the extension was built with — usually the system's, found before the environment's own (a
conda `lib/`), or the only one there is. Each runtime is read as a file: the symbol versions it
defines are strings in its dynamic string table (`GLIBCXX_3.4.32`, `CXXABI_1.3.15`), and the
newest of each family is what it can satisfy. Nothing is loaded.
"""
from __future__ import annotations

import glob
import os
import re
from collections.abc import Iterable
from typing import TypedDict

#: What the loader says when a runtime lacks a symbol version (the path, the version).
NOT_FOUND = re.compile(r"(?P<path>/\S*lib(?:stdc\+\+|gcc_s)\.so[.\d]*): version `(?P<version>(?:GLIBCXX|CXXABI|GCC)_[\d.]+)' "
                       r"not found")
_VERSION = re.compile(rb"\b(GLIBCXX|CXXABI)_(\d+(?:\.\d+)+)\b")
#: A libstdc++ is a few MiB; past this the file is not one.
MAX_BYTES = 32 << 20


class CxxRuntime(TypedDict):
    path: str
    #: "loaded" (named by an error) or "environment" (found in the environment's own library folders).
    role: str
    #: The newest GLIBCXX_ and CXXABI_ versions it defines (None when it could not be read).
    newest_glibcxx: str | None
    newest_cxxabi: str | None
    error: str | None


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def newest_versions(data: bytes) -> tuple[str | None, str | None]:
    best: dict[bytes, str] = {}
    for family, version in set(_VERSION.findall(data)):
        text = version.decode()
        if family not in best or _key(text) > _key(best[family]):
            best[family] = text
    glibcxx, cxxabi = best.get(b"GLIBCXX"), best.get(b"CXXABI")
    return (f"GLIBCXX_{glibcxx}" if glibcxx else None), (f"CXXABI_{cxxabi}" if cxxabi else None)


def read_runtime(path: str, role: str) -> CxxRuntime:
    runtime: CxxRuntime = {"path": path, "role": role, "newest_glibcxx": None, "newest_cxxabi": None, "error": None}
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_BYTES)
    except OSError as exc:
        runtime["error"] = exc.strerror or str(exc)
        return runtime
    runtime["newest_glibcxx"], runtime["newest_cxxabi"] = newest_versions(data)
    return runtime


def wanted(errors: Iterable[str]) -> list[tuple[str, str]]:
    """(loaded path, version) for each 'version … not found' that names a C++ runtime."""
    return list(dict.fromkeys((m["path"], m["version"]) for text in errors for m in NOT_FOUND.finditer(text)))


def environment_runtimes(prefix: str) -> list[str]:
    """libstdc++ files an environment holds for itself: a conda prefix's lib/ (and lib64/)."""
    found: dict[str, str] = {}  # real file -> the first name (the soname link sorts first)
    for folder in ("lib", "lib64"):
        for path in sorted(glob.glob(os.path.join(glob.escape(prefix), folder, "libstdc++.so.6*"))):
            if not path.endswith(".py"):  # gdb's pretty-printer script sits beside conda's runtime
                found.setdefault(os.path.realpath(path), path)
    return list(found.values())


def read_cxx_runtimes(errors: Iterable[str], prefix: str) -> list[CxxRuntime]:
    """The runtimes named by the errors and those of the environment; none when no error names one."""
    named = wanted(errors)
    if not named:
        return []
    loaded = [read_runtime(path, "loaded") for path in dict.fromkeys(path for path, _ in named)]
    own = [read_runtime(path, "environment") for path in environment_runtimes(prefix)
           if os.path.realpath(path) not in {os.path.realpath(r["path"]) for r in loaded}]
    return loaded + own
