"""Which NumPy major a compiled distribution was built against, read from its files (nothing is imported).

Two witnesses, in this order:

* an OS package's own dependencies: Debian's packages built for NumPy 1 depend on the
  virtual package `python3-numpy-abi9` (NumPy 1.x provides it), those built for NumPy 2 on
  `python3-numpy2-abiN` (read from the dpkg database's `status`);
* the extension modules themselves: NumPy's headers compile the module that `import_array()`
  imports into every extension. NumPy 1.x headers name only `numpy.core._multiarray_umath`;
  NumPy 2 headers try `numpy._core._multiarray_umath` first (and keep the old name as a
  fallback). An extension holding the old name without the new one was built against NumPy
  1.x and does not load under NumPy 2 (checked on real wheels: scipy 1.11.1 and Debian's
  python3-numexpr 2.8.4 hold only the old name; scipy 1.13.1, numexpr 2.14.2, pandas 2.3.3,
  h5py 3.14 both).
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import TypedDict

from envdoctor.facts.readfile import read_bytes

NUMPY2_MARK = b"numpy._core._multiarray_umath\x00"
NUMPY1_MARK = b"numpy.core._multiarray_umath\x00"
#: How much of one extension module is read (its string table is seldom past this).
MAX_EXTENSION_BYTES = 32 << 20
#: Extension modules read per distribution, and bytes read across all distributions of one run.
MAX_EXTENSIONS = 48
MAX_TOTAL_BYTES = 256 << 20
#: The most of a dpkg `status` file that is read.
MAX_STATUS_BYTES = 64 << 20
MAX_RECORD_BYTES = 32 << 20
_EXTENSION_ENDINGS = (".so", ".pyd")
#: `python3-numpy-abi9` (NumPy 1.x) and `python3-numpy2-abi0` (NumPy 2.x) in a Depends field.
_DPKG_ABI = re.compile(r"\bpython3-numpy(?P<two>2)?-abi\d+\b")


class NumpyBuild(TypedDict):
    """The NumPy major a distribution's extensions were built against, and what says so."""

    major: int
    #: "dpkg" (the OS package's Depends) or "extension" (the strings NumPy's headers compiled in)
    source: str
    #: the Depends entry, or the extension module's path relative to its site folder
    detail: str


class _Budget:
    def __init__(self) -> None:
        self.left = MAX_TOTAL_BYTES


def read_dpkg_depends(admin: str) -> dict[str, str]:
    """Package -> its Depends field, from `<admin>/status` (empty when it cannot be read)."""
    try:
        text = read_bytes(os.path.join(admin, "status"), MAX_STATUS_BYTES, head=True).decode("utf-8", "replace")
    except OSError:
        return {}
    depends: dict[str, str] = {}
    for stanza in text.split("\n\n"):
        package = value = None
        for line in stanza.splitlines():
            if line.startswith("Package:"):
                package = line.partition(":")[2].strip()
            elif line.startswith("Depends:"):
                value = line.partition(":")[2].strip()
        if package and value:
            depends[package] = value
    return depends


def from_dpkg(depends: str) -> NumpyBuild | None:
    match = _DPKG_ABI.search(depends)
    if match is None:
        return None
    return {"major": 2 if match["two"] else 1, "source": "dpkg", "detail": match.group(0)}


def _extension_paths(dist_path: str, import_names: list[str]) -> list[str]:
    """Site-relative paths of the distribution's extension modules (RECORD, else its packages on disk)."""
    site = os.path.dirname(dist_path)
    try:
        record = read_bytes(os.path.join(dist_path, "RECORD"), MAX_RECORD_BYTES).decode("utf-8", "replace")
    except OSError:
        record = None
    found: list[str] = []
    if record is not None:
        for line in record.splitlines():
            rel = line.split(",", 1)[0].strip().strip('"')
            first = rel.split("/", 1)[0]
            if rel.endswith(_EXTENSION_ENDINGS) and not rel.startswith(("/", "..")) and not first.endswith(".libs"):
                found.append(rel)
        return found[:MAX_EXTENSIONS]
    for name in import_names:
        if not name.isidentifier():
            continue
        for folder, dirs, files in os.walk(os.path.join(site, name)):
            dirs.sort()
            found += [os.path.relpath(os.path.join(folder, f), site) for f in sorted(files)
                      if f.endswith(_EXTENSION_ENDINGS)]
            if len(found) >= MAX_EXTENSIONS:
                return found[:MAX_EXTENSIONS]
    return found


def from_extensions(dist_path: str, import_names: list[str], budget: _Budget) -> NumpyBuild | None:
    """The first extension module that names NumPy's C API module tells the build's major."""
    site = os.path.dirname(dist_path)
    sized = []
    for rel in _extension_paths(dist_path, import_names):
        try:
            sized.append((os.stat(os.path.join(site, rel)).st_size, rel))
        except OSError:
            continue
    # The smallest first: a module that calls import_array() is decisive, and small ones cost least to read.
    for _size, rel in sorted(sized):
        if budget.left <= 0:
            return None
        try:
            data = read_bytes(os.path.join(site, rel), min(MAX_EXTENSION_BYTES, budget.left), head=True)
        except OSError:
            continue
        budget.left -= len(data)
        if NUMPY2_MARK in data:
            return {"major": 2, "source": "extension", "detail": rel}
        if NUMPY1_MARK in data:
            return {"major": 1, "source": "extension", "detail": rel}
    return None


def numpy_builds(dists: Iterable[Mapping[str, object]], depends: dict[str, str]) -> dict[str, NumpyBuild]:
    """Distribution path -> its NumPy build, for the compiled dependants of numpy among `dists`."""
    budget = _Budget()
    builds: dict[str, NumpyBuild] = {}
    for dist in dists:
        owner = dist.get("owner")
        package = owner.get("package") if isinstance(owner, dict) and owner.get("tool") == "dpkg" else None
        build = from_dpkg(depends[package]) if isinstance(package, str) and package in depends else None
        if build is None:
            names = dist.get("import_names")
            build = from_extensions(str(dist["path"]), names if isinstance(names, list) else [], budget)
        if build is not None:
            builds[str(dist["path"])] = build
    return builds
