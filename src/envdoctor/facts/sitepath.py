"""The import path a training run would get, worked out without running `site`.

The target's interpreter is asked about itself with site disabled (`-I -S`),
so no `.pth` file, `sitecustomize` or `usercustomize` of the inspected
environment runs. What `site.main()` would have added is computed here, the
way it does it: the user site (when enabled), then each site directory that
exists, each followed by the folders its `.pth` files name. `.pth` files are
read as data; a line that `site` would execute (`import …`) is recorded, never
run (PKG011 judges it).
"""
from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TypedDict

#: The most `.pth` files read per site directory, and bytes read per file.
MAX_PTH_FILES = 500
MAX_PTH_BYTES = 1 << 20
#: How many code lines of one `.pth` file the facts keep (the count is exact), and their length.
KEEP_CODE_LINES = 5
KEEP_LINE_CHARS = 300


class PthFile(TypedDict):
    """One `.pth` file in a site directory, as `site` would read it."""

    path: str
    site_dir: str
    #: Lines `site` would exec (they start with `import`), cut to KEEP_CODE_LINES.
    code_lines: list[str]
    code_line_count: int
    #: Folders the file adds to sys.path (those that exist).
    paths: list[str]


def _read_small(path: str, limit: int) -> bytes | None:
    from envdoctor.facts.readfile import read_bytes

    try:
        return read_bytes(path, limit, head=True)
    except OSError:
        return None


def read_pth(site_dir: str, name: str) -> PthFile | None:
    """The code lines and path entries of one `.pth`, by `site.addpackage`'s reading rules."""
    path = os.path.join(site_dir, name)
    data = _read_small(path, MAX_PTH_BYTES)
    if data is None:
        return None
    text = data.decode("utf-8-sig", errors="replace")
    code: list[str] = []
    paths: list[str] = []
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        if line.startswith(("import ", "import\t")):
            code.append(line[:KEEP_LINE_CHARS])
            continue
        if "\x00" in line:
            continue
        entry = os.path.abspath(os.path.join(site_dir, line.rstrip()))
        if os.path.exists(entry):
            paths.append(entry)
    return {"path": path, "site_dir": site_dir, "code_lines": code[:KEEP_CODE_LINES],
            "code_line_count": len(code), "paths": paths}


def pth_names(site_dir: str, version: tuple[int, int]) -> list[str]:
    """The `.pth` files of a folder in the order `site` reads them (hidden ones skipped from 3.13)."""
    try:
        names = os.listdir(site_dir)
    except OSError:
        return []
    hidden_skipped = version >= (3, 13)
    return sorted(n for n in names if n.endswith(".pth") and not (hidden_skipped and n.startswith(".")))[:MAX_PTH_FILES]


def expand_site_dirs(site_dirs: Iterable[str], known: Iterable[str],
                     version: tuple[int, int]) -> tuple[list[str], list[PthFile]]:
    """The entries `site.addsitedir` would append for each folder, and the `.pth` files it met."""
    seen = {os.path.normcase(os.path.abspath(p)) for p in known}
    added: list[str] = []
    pth_files: list[PthFile] = []
    for site_dir in site_dirs:
        site_dir = os.path.abspath(site_dir)
        if os.path.normcase(site_dir) in seen or not os.path.isdir(site_dir):
            continue
        seen.add(os.path.normcase(site_dir))
        added.append(site_dir)
        for name in pth_names(site_dir, version):
            pth = read_pth(site_dir, name)
            if pth is None:
                continue
            if pth["code_line_count"] or pth["paths"]:
                pth_files.append(pth)
            for entry in pth["paths"]:
                if os.path.normcase(entry) not in seen:
                    seen.add(os.path.normcase(entry))
                    added.append(entry)
    return added, pth_files


def user_site_enabled(environ: dict[str, str] | os._Environ[str], venv_system_site: bool | None) -> bool:
    """Would `site` add the user site? Not with PYTHONNOUSERSITE, nor in a venv without system site-packages."""
    if environ.get("PYTHONNOUSERSITE"):
        return False
    return venv_system_site is not False


def import_path(stdlib_path: list[str], sites: list[str], cwd: str, pythonpath: list[str],
                version: tuple[int, int]) -> tuple[list[str], list[PthFile]]:
    """sys.path of `python train.py` started in `cwd`: the script folder, PYTHONPATH, the
    standard library, then the site folders in `site`'s order with their `.pth` entries."""
    head = [cwd, *pythonpath, *stdlib_path]
    added, pth_files = expand_site_dirs(sites, head, version)
    return [*head, *added], pth_files
