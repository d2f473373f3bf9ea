"""The fix's file verification on a site folder laid out by hand: who owns each file under a package.

A fixed distribution's files must each belong to exactly one installed list; a file only a removed
version listed (read from the before-state the journal kept) is left-over code, taken away for PKG002
and a problem otherwise; a file nobody lists that the fix did not touch is not the fix's business.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from envdoctor.fix.journal import Journal
from envdoctor.fix.state import load_listing, take_before
from envdoctor.fix.verify import check_files


def dist_info(site: Path, name: str, version: str, files: list[str]) -> None:
    folder = site / f"{name}-{version}.dist-info"
    folder.mkdir()
    (folder / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (folder / "RECORD").write_text("".join(f"{f},,\n" for f in [*files, f"{folder.name}/RECORD"]))


@pytest.fixture()
def upgraded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Journal, dict]:
    """a 0.9 (pkg/__init__.py, pkg/old.py) and a stray cache file, kept; then a 1.0 replaces it, and b lists pkg/a.py."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    site = tmp_path / "site-packages"
    (site / "pkg").mkdir(parents=True)
    for rel in ("pkg/__init__.py", "pkg/old.py", "pkg/cache.dat"):
        (site / rel).write_text(f"# {rel}\n")
    dist_info(site, "a", "0.9", ["pkg/__init__.py", "pkg/old.py"])
    journal = Journal.create({"prefix": str(tmp_path), "kind": "venv"})
    before = load_listing(journal, take_before(journal, [str(site)])["listing"])
    shutil.rmtree(site / "a-0.9.dist-info")
    (site / "pkg" / "a.py").write_text("# 1.0\n")
    (site / "pkg" / "new.py").write_text("# nobody's\n")
    dist_info(site, "a", "1.0", ["pkg/__init__.py", "pkg/a.py"])
    dist_info(site, "b", "1.0", ["pkg/a.py"])
    return site, journal, before


def test_a_file_in_two_lists_a_removed_versions_file_and_a_new_stray_are_problems(upgraded: tuple) -> None:
    site, journal, before = upgraded
    result, modules = check_files({"a"}, [str(site)], {}, before, journal, clean=False)
    assert modules == {"pkg"} and result.removed == []
    assert sorted(result.problems) == sorted([
        f"{site}/pkg/a.py is listed by 2 installed distributions (a-1.0.dist-info, b-1.0.dist-info)",
        f"{site}/pkg/new.py belongs to no installed distribution",
        f"{site}/pkg/old.py is a file of the removed a-0.9.dist-info, and `import` still finds it"])
    assert (site / "pkg" / "old.py").exists()  # reported, not touched


def test_for_pkg002_the_removed_versions_files_go_into_the_journal(upgraded: tuple) -> None:
    site, journal, before = upgraded
    result, _ = check_files({"a"}, [str(site)], {}, before, journal, clean=True)
    assert result.removed == [f"{site}/pkg/old.py"] and not (site / "pkg" / "old.py").exists()
    assert [p.read_text() for p in (journal.path / "leftovers").iterdir()] == ["# pkg/old.py\n"]
    assert (site / "pkg" / "cache.dat").exists()  # nobody's before the fix either: left alone, not a problem


def test_every_file_only_the_removed_version_lists_goes_bytecode_and_vendored_libraries_included(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What pip's `--ignore-installed` of NumPy 2 over 1.26.4 leaves (measured on the real wheels: 382 files only
    1.26.4's RECORD lists, 140 of them `__pycache__/*.pyc` and `numpy.libs/` libraries): a subpackage gone in the
    new version (its .py and its bytecode), a vendored library folder that is no import name, a loose module.
    All of them go into the journal; bytecode nobody lists (written on import since) is no problem."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    site = tmp_path / "site-packages"
    old_files = ["pkg/__init__.py", "pkg/array_api/__init__.py", "pkg/array_api/__pycache__/__init__.cpython-311.pyc",
                 "pkg/core/fromnumeric.py", "pkg.libs/libgfortran-old.so", "pkg_helper.py"]
    for rel in old_files:
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(f"# 0.9 {rel}\n")
    dist_info(site, "pkg", "0.9", old_files)
    journal = Journal.create({"prefix": str(tmp_path), "kind": "venv"})
    before = load_listing(journal, take_before(journal, [str(site)])["listing"])
    shutil.rmtree(site / "pkg-0.9.dist-info")  # what `--force-reinstall` of 1.0 leaves: only 1.0 is installed
    (site / "pkg" / "__init__.py").write_text("# 1.0\n")
    (site / "pkg" / "__pycache__").mkdir()
    (site / "pkg" / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(b"written on import")
    (site / "pkg.libs" / "libgfortran-new.so").write_text("# 1.0\n")
    dist_info(site, "pkg", "1.0", ["pkg/__init__.py", "pkg.libs/libgfortran-new.so"])
    result, modules = check_files({"pkg"}, [str(site)], {}, before, journal, clean=True)
    assert result.problems == [] and modules == {"pkg"}
    assert sorted(result.removed) == sorted(str(site / r) for r in old_files[1:])
    assert not (site / "pkg" / "array_api").exists() and not (site / "pkg_helper.py").exists()
    assert (site / "pkg" / "__pycache__" / "__init__.cpython-311.pyc").exists()  # nobody's: not the fix's to take
    assert len(list((journal.path / "leftovers").iterdir())) == len(old_files) - 1
