"""Distro Python and NVIDIA-container layouts: owners, the imported copy, PEP 668, fixes that hold.

The machine's own Debian python is only read (`--prefix /usr`). Everything
that changes is a system root built by fixtures/envs/systemroot.py: Debian's
interpreter binary over a real dpkg database written by the test, with pip's
packages layered into `usr/local/lib/python3.X/dist-packages` by that
interpreter's real pip, as NVIDIA's PyTorch containers have them.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from condafixtures import module, write_wheel
from envs.fixsteps import offline_env, run_fix_steps
from envs.systemroot import SystemRoot, system_python_version
from support import findings, json_report, run_cli, run_envdoctor

needs_debian = pytest.mark.skipif(system_python_version() is None or not Path("/var/lib/dpkg/info").is_dir(),
                                  reason="needs Debian's python3 with python3-pip and a dpkg database")


def check(prefix: Path, tmp: Path, *args: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONUSERBASE": str(tmp / "no-user-base"), "PYTHONPATH": ""}
    proc = run_cli("report", "--json", "--no-loader", "--select", "PKG", "CHN", "--prefix", str(prefix),
                   *args, env=env, cwd=str(tmp))
    assert proc.returncode in (0, 1), proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    return json_report(proc)


def dpkg_owned(info_dir: Path, root: str = "/") -> set[str]:
    """Every path dpkg's file lists name (read here independently of envdoctor)."""
    owned = set()
    for listing in info_dir.glob("*.list"):
        for line in listing.read_text(errors="replace").splitlines():
            if line.strip() and line != "/.":
                owned.add(os.path.normpath(os.path.join(root, line.lstrip("/"))))
    return owned


def assert_fixes_respect_dpkg(report: dict[str, Any], owned: set[str]) -> None:
    """No step moves a dpkg-owned path, no text `rm -rf`s, no bare pip install into the interpreter."""
    for finding in report["findings"]:
        assert "rm -rf" not in finding["fix"], finding
        for step in finding["fix_steps"]:
            if "move" in step:
                assert os.path.normpath(step["move"]) not in owned, finding
            elif step["tool"] == "pip" and "install" in step["argv"]:
                assert "--break-system-packages" in step["argv"], finding


def _tree_state(*folders: Path) -> dict[str, float]:
    state = {}
    for folder in folders:
        if folder.is_dir():
            for entry in os.scandir(folder):
                state[entry.path] = entry.stat(follow_symlinks=False).st_mtime
    return state


@needs_debian
def test_stock_debian_python_is_read_not_misjudged(tmp_path: Path) -> None:
    version = system_python_version()
    folders = (Path("/usr/lib/python3/dist-packages"), Path(f"/usr/local/lib/python{version}/dist-packages"))
    before = _tree_state(*folders)
    report = check(Path("/usr"), tmp_path)
    assert _tree_state(*folders) == before  # read, never changed
    assert not [f for f in report["findings"] if f["rule"] in ("PKG001", "PKG002") and f["severity"] == "error"]
    assert_fixes_respect_dpkg(report, dpkg_owned(Path("/var/lib/dpkg/info")))
    packages = report["facts"]["packages"]
    assert packages["installer"]["externally_managed"] == f"/usr/lib/python{version}/EXTERNALLY-MANAGED"
    assert packages["os_database"] == "/var/lib/dpkg"
    by_key: dict[str, list[dict[str, Any]]] = {}
    for dist in packages["distributions"]:
        by_key.setdefault(dist["key"], []).append(dist)
    pip_dist = by_key["pip"][0]
    assert pip_dist["owner"] == {"tool": "dpkg", "package": "python3-pip", "source": "dpkg", "editable": False}
    # Debian's one-package pairs (python3-cryptography ships a .dist-info and an .egg-info) are no PKG002.
    pairs = [k for k, ds in by_key.items() if len(ds) > 1 and len({(d["owner"]["tool"], d["owner"]["package"])
                                                                   for d in ds}) == 1]
    reported = {f["evidence"]["package"].lower() for f in findings(report, "PKG002")}
    assert not reported & set(pairs)
    # A dependency missing in an externally managed interpreter gets advice, never a pip command.
    for finding in findings(report, "PKG003"):
        if finding["evidence"]["dependency_owner"] is None:
            assert finding["fix_steps"] == [] and "externally managed (PEP 668" in finding["fix"]


def _apt_root(where: Path) -> SystemRoot:
    """A system root with apt's PyYAML 6.0 and python3-cryptography (a .dist-info and an .egg-info)."""
    root = SystemRoot(where)
    root.apt_install("python3-yaml", "PyYAML", "6.0", {"yaml/__init__.py": b'__version__ = "6.0"\n'})
    root.apt_install("python3-cryptography", "cryptography", "38.0.4",
                     {"cryptography/__init__.py": b'__version__ = "38.0.4"\n'}, egg_info=True)
    return root


@pytest.fixture
def system_root(tmp_path: Path) -> SystemRoot:
    return _apt_root(tmp_path / "root")


def _layer_pip_yaml(root: SystemRoot, wheels: Path, *extra: str) -> None:
    """pip's PyYAML 6.0.2 into usr/local over apt's 6.0. Debian's pip leaves a copy under the literal
    /usr/lib/python3/dist-packages alone by itself; this root lives elsewhere, so --ignore-installed
    gives the same result (pip's copy beside apt's, apt's untouched)."""
    write_wheel(wheels, "PyYAML", "6.0.2", {**module("yaml", "6.0.2")})
    root.pip("install", "--break-system-packages", "--ignore-installed", "--no-index", "--find-links", str(wheels),
             "PyYAML==6.0.2", *extra)


@pytest.fixture(scope="module")
def layered_template(tmp_path_factory: pytest.TempPathFactory) -> tuple[SystemRoot, Path]:
    """The system root with pip's PyYAML over apt's, and its wheels folder, built once for the tests that start
    from it (each changes a copy: `layered_root`); building it is a real pip install, most of such a test's CPU."""
    folder = tmp_path_factory.mktemp("layered")
    root = _apt_root(folder / "root")
    wheels = folder / "wheels"
    _layer_pip_yaml(root, wheels)
    return root, wheels


@pytest.fixture
def layered_root(layered_template: tuple[SystemRoot, Path], tmp_path: Path) -> tuple[SystemRoot, Path]:
    """A copy of the layered system root of this test's own, and the (shared, only read) wheels folder."""
    template, wheels = layered_template
    return template.copy_to(tmp_path / "root"), wheels


@needs_debian
def test_pip_copy_over_dpkg_copy_names_both_owners_and_the_imported_one(layered_root: tuple[SystemRoot, Path],
                                                                       tmp_path: Path) -> None:
    system_root, wheels = layered_root
    report = check(system_root.usr, tmp_path)
    [finding] = findings(report, "PKG002")  # cryptography's dist-info + egg-info pair from one .deb is not one
    local, dist = system_root.local_dist_packages, system_root.dist_packages
    assert finding["severity"] == "warning"  # whole copies, and nothing requires what 6.0.2 breaks
    assert finding["message"] == (
        f"PyYAML is installed 2 times in the environment (6.0.2 from pip in {local}, 6.0 from Debian's "
        f"python3-yaml (dpkg) in {dist}): `import yaml` loads 6.0.2 from {local}")
    evidence = finding["evidence"]
    assert evidence["versions"] == ["6.0.2", "6.0"]
    assert evidence["owners"] == [{"tool": "pip", "package": None, "source": "INSTALLER", "editable": False},
                                  {"tool": "dpkg", "package": "python3-yaml", "source": "dpkg", "editable": False}]
    assert evidence["imported"] == {"version": "6.0.2", "path": str(local / "PyYAML-6.0.2.dist-info"),
                                    "site_dir": str(local), "import_name": "yaml"}
    python = str(system_root.python)
    assert finding["fix_steps"] == [{"tool": "pip", "argv": [python, "-m", "pip", "uninstall",
                                                              "--break-system-packages", "-y", "PyYAML"]}]
    owned = dpkg_owned(system_root.dpkg / "info", str(system_root.root))
    assert_fixes_respect_dpkg(report, owned)

    # The fix, run as given, removes pip's copy only; dpkg's files are all still there; nothing new appears.
    run_fix_steps(finding["fix_steps"], system_root.usr, offline_env(wheels))
    assert all(os.path.lexists(path) for path in owned)
    again = check(system_root.usr, tmp_path)
    assert findings(again, "PKG002") == []
    before = {(f["rule"], f["message"]) for f in report["findings"] if f["rule"] != "PKG002"}
    assert {(f["rule"], f["message"]) for f in again["findings"]} <= before


@needs_debian
def test_pip_copy_that_dependants_need_is_not_removed(system_root: SystemRoot, tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    # An apt package that wants the old API, and a pip package that needs the new one.
    system_root.apt_install("python3-yamltool", "yamltool", "1.0", {"yamltool.py": b""})
    meta = next(system_root.dist_packages.glob("yamltool-1.0.dist-info")) / "METADATA"
    meta.write_text("Metadata-Version: 2.1\nName: yamltool\nVersion: 1.0\nRequires-Dist: PyYAML<6.0.1\n\n")
    write_wheel(wheels, "trainkit", "1.0", module("trainkit", "1.0"), requires=["PyYAML>=6.0.1"])
    _layer_pip_yaml(system_root, wheels, "trainkit==1.0")
    report = check(system_root.usr, tmp_path)
    [finding] = findings(report, "PKG002")
    assert finding["severity"] == "error"  # what `import yaml` loads breaks an installed package
    assert finding["evidence"]["breaks"] == ["yamltool 1.0 requires PyYAML<6.0.1"]
    # Removing pip's copy would break trainkit: no step, and advice that names why and apt's own tool.
    assert finding["fix_steps"] == []
    assert "without it trainkit 1.0 requires PyYAML>=6.0.1" in finding["fix"]
    assert "apt-get remove python3-yaml" in finding["fix"]
    assert_fixes_respect_dpkg(report, dpkg_owned(system_root.dpkg / "info", str(system_root.root)))


@needs_debian
def test_missing_dependency_in_the_externally_managed_interpreter(system_root: SystemRoot, tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    write_wheel(wheels, "trainkit", "1.0", module("trainkit", "1.0"), requires=["absentdep>=1"])
    system_root.pip("install", "--break-system-packages", "--no-deps", "--no-index", "--find-links", str(wheels),
                    "trainkit==1.0")
    system_root.apt_install("python3-gi", "PyGObject", "3.42.2", {"gi/__init__.py": b""})
    meta = next(system_root.dist_packages.glob("PyGObject-3.42.2.dist-info")) / "METADATA"
    meta.write_text("Metadata-Version: 2.1\nName: PyGObject\nVersion: 3.42.2\nRequires-Dist: pycairo>=1.16.0\n\n")
    report = check(system_root.usr, tmp_path)
    by_package = {f["evidence"]["package"]: f for f in findings(report, "PKG003")}
    python = str(system_root.python)
    # pip put trainkit there, so pip may add its dependency, saying so explicitly.
    assert by_package["trainkit"]["fix_steps"] == [
        {"tool": "pip", "argv": [python, "-m", "pip", "install", "--break-system-packages", "absentdep>=1"]}]
    # dpkg's PyGObject: never a pip install into the externally managed interpreter.
    gi = by_package["PyGObject"]
    assert gi["fix_steps"] == [] and gi["evidence"]["owner"] == "Debian's python3-gi (dpkg)"
    assert "is externally managed (PEP 668" in gi["fix"] and "venv" in gi["fix"]


@needs_debian
def test_one_package_pair_is_quiet_and_the_dpkg_root_follows_the_prefix(system_root: SystemRoot,
                                                                      tmp_path: Path) -> None:
    report = check(system_root.usr, tmp_path)
    assert findings(report, "PKG002") == []
    packages = report["facts"]["packages"]
    assert packages["os_database"] == str(system_root.dpkg)
    crypto = [d for d in packages["distributions"] if d["key"] == "cryptography"]
    assert [d["owner"]["package"] for d in crypto] == ["python3-cryptography"] * 2


@needs_debian
def test_envdoctor_fix_runs_the_pkg002_steps_and_keeps_dpkg_files(layered_root: tuple[SystemRoot, Path],
                                                                  tmp_path: Path) -> None:
    system_root, wheels = layered_root
    owned = dpkg_owned(system_root.dpkg / "info", str(system_root.root))
    env = offline_env(wheels, XDG_CACHE_HOME=str(tmp_path / "cache"), PYTHONUSERBASE=str(tmp_path / "no-user-base"),
                      PATH=os.environ.get("PATH", ""))
    proc = run_envdoctor("fix", "--yes", "--prefix", str(system_root.usr), "--select", "PKG002", env=env,
                         cwd=str(tmp_path), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert all(os.path.lexists(path) for path in owned)
    assert not list(system_root.local_dist_packages.glob("PyYAML-*.dist-info"))
    assert findings(check(system_root.usr, tmp_path), "PKG002") == []
