"""PKG008 without `--deep`: a compiled distribution built for NumPy 1 beside NumPy 2, read from its files.

Real artifacts only: scipy 1.11.1's manylinux wheel (built against NumPy 1.x: its extensions name
only `numpy.core._multiarray_umath`) and numexpr 2.14.2's (built against NumPy 2), installed by pip
beside numpy 2.2.6's wheel, all from wheels already on this machine (the local package store under
/opt; the tests skip where it is absent, nothing is downloaded); and Debian's python3-numexpr
2.8.4-1+b2 recorded in a dpkg database with the control fields of the real .deb
(fixtures/dpkg/python3-numexpr_2.8.4-1+b2.control, `dpkg-deb -f`): it depends on
`python3-numpy-abi9`, which only NumPy 1.x provides. Nothing of the environments is imported.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from condafixtures import module, write_wheel
from envdoctor.config import Config
from envdoctor.engine import run_check
from envdoctor.facts.numpy_build import from_dpkg
from envdoctor.model import Severity
from fixenvs import EXT, make_pip_venv, offline_env, run_ok, tree_digest

pytestmark = pytest.mark.slow

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
CONTROL = FIXTURES / "dpkg" / "python3-numexpr_2.8.4-1+b2.control"
#: Where this machine keeps wheels of the local package index (read, never downloaded from).
WHEEL_STORES = (Path("/opt/pypi/files"), Path("/opt/pypi-more/files"), Path("/opt/wheels"))
TAG = f"cp{sys.version_info[0]}{sys.version_info[1]}"


def local_wheel(prefix: str) -> Path:
    for store in WHEEL_STORES:
        found = sorted(store.glob(f"{prefix}-{TAG}-{TAG}-manylinux*x86_64*.whl")) if store.is_dir() else []
        if found:
            return found[0]
    pytest.skip(f"no local {prefix} wheel for {TAG} under {', '.join(map(str, WHEEL_STORES))}")


def check(prefix: Path, *rules: str, deep: bool = False):  # type: ignore[no-untyped-def]
    return run_check(Config(prefix=str(prefix), no_loader=True, deep=deep, select=rules))


@pytest.fixture(scope="module")
def real_venvs(tmp_path_factory: pytest.TempPathFactory, pip_venv_template: Path) -> tuple[Path, Path]:
    if sys.platform != "linux":
        pytest.skip("manylinux wheels")
    numpy, scipy, numexpr = (local_wheel("numpy-2.2.6"), local_wheel("scipy-1.11.1"),
                             local_wheel("numexpr-2.14.2"))
    root = tmp_path_factory.mktemp("numpy_builds")
    env = offline_env(root / "wheels", root / "cache")
    built = []
    for name, wheels in (("fires", [numpy, scipy, numexpr]), ("quiet", [numpy, numexpr])):
        venv = make_pip_venv(pip_venv_template, root / name)
        run_ok([str(venv / "bin" / "python"), "-m", "pip", "install", "--no-compile", "--no-deps",
                *map(str, wheels)], env)
        built.append(venv)
    return built[0], built[1]


def test_pkg008_names_a_real_numpy1_wheel_beside_numpy2_without_deep(real_venvs: tuple[Path, Path]) -> None:
    fires, _ = real_venvs
    pristine = tree_digest(fires)
    report = check(fires, "PKG008")
    [finding] = report.by_rule("PKG008")
    ev = finding.evidence
    assert finding.severity == Severity.ERROR
    assert (ev["package"], ev["version"], ev["built_for_numpy"], ev["source"]) == ("scipy", "1.11.1", 1, "extension")
    assert ev["detail"].startswith("scipy/") and ev["detail"].endswith(".so") and ev["static"] is True
    assert (ev["numpy_version"], ev["numpy_owner"], ev["owner"]) == ("2.2.6", "pip", "pip")
    assert "scipy 1.11.1 (from pip) was built against NumPy 1.x" in finding.message
    assert "pip install --upgrade scipy" in finding.fix and "numpy<2" in finding.fix
    builds = {d["key"]: d.get("numpy_build") for d in report.facts["packages"]["distributions"]}
    assert builds["numexpr"] is not None and builds["numexpr"]["major"] == 2  # read, and a NumPy 2 build: quiet
    assert builds["numexpr"]["source"] == "extension"
    assert not (report.facts.get("imports") or {}).get("ran")  # nothing of the environment was imported
    assert tree_digest(fires) == pristine


def test_pkg008_is_quiet_for_a_real_numpy2_build_beside_numpy2(real_venvs: tuple[Path, Path]) -> None:
    _, quiet = real_venvs
    report = check(quiet, "PKG008")
    assert report.by_rule("PKG008") == []
    [numexpr] = [d for d in report.facts["packages"]["distributions"] if d["key"] == "numexpr"]
    assert numexpr["numpy_build"]["major"] == 2


def test_the_real_debian_control_fields_tell_the_numpy_major() -> None:
    control = CONTROL.read_text()
    depends = next(line for line in control.splitlines() if line.startswith("Depends:"))
    assert from_dpkg(depends) == {"major": 1, "source": "dpkg", "detail": "python3-numpy-abi9"}
    # Debian's NumPy 2 packages provide python3-numpy2-abi0; a package without either says nothing.
    assert from_dpkg("python3-numpy2-abi0, python3-numpy (>= 1:2.2.4)")["major"] == 2  # type: ignore[index]
    assert from_dpkg("python3-numpy (>= 1:1.22.0), libc6 (>= 2.35)") is None


def _debian_root(tmp_path: Path, with_pip_numpy: bool):  # type: ignore[no-untyped-def]
    """A Debian root: dpkg's numpy 1.24.2 and python3-numexpr (status stanza = the real .deb's control
    fields), and, when asked, pip's numpy 2.2.6 in /usr/local in front of them."""
    from envs.systemroot import SystemRoot

    root = SystemRoot(tmp_path / "root")
    root.apt_install("python3-numpy", "numpy", "1.24.2", {"numpy/__init__.py": b'__version__ = "1.24.2"\n'})
    # No marker in this stand-in extension: the Debian package's Depends is what tells its build here.
    root.apt_install("python3-numexpr", "numexpr", "2.8.4", {
        "numexpr/__init__.py": b"import numpy\n", f"numexpr/interpreter{EXT}": b"\x7fELF numexpr"})
    # Debian's dist-info says what the real one says about numpy (numexpr-2.8.4.dist-info/METADATA).
    metadata = root.dist_packages / "numexpr-2.8.4.dist-info" / "METADATA"
    metadata.write_text(metadata.read_text().replace("Version: 2.8.4\n", "Version: 2.8.4\nRequires-Dist: numpy (>=1.13.3)\n"))
    status = root.dpkg / "status"
    stanzas = [s for s in status.read_text().split("\n\n") if s.strip() and "Package: python3-numexpr\n" not in s]
    stanzas.append("Package: python3-numexpr\nStatus: install ok installed\n"
                   + CONTROL.read_text().split("\n", 1)[1].rstrip("\n"))
    status.write_text("\n\n".join(stanzas) + "\n\n")
    if with_pip_numpy:
        wheel = write_wheel(tmp_path / "wheels", "numpy", "2.2.6", module("numpy", "2.2.6"))
        root.pip("install", "--break-system-packages", "--ignore-installed", "--no-index", "--no-compile", str(wheel))
    return root


@pytest.mark.skipif(__import__("envs.systemroot", fromlist=["x"]).system_python_version() is None,
                    reason="needs the machine's Debian python3 with python3-pip")
def test_pkg008_names_dpkgs_numexpr_under_pips_numpy2_without_deep(tmp_path: Path) -> None:
    root = _debian_root(tmp_path, with_pip_numpy=True)
    report = check(root.usr, "PKG008")
    [finding] = report.by_rule("PKG008")
    ev = finding.evidence
    assert (ev["package"], ev["version"], ev["source"], ev["detail"]) == ("numexpr", "2.8.4", "dpkg",
                                                                          "python3-numpy-abi9")
    assert ev["owner"] == "Debian's python3-numexpr (dpkg)" and (ev["numpy_version"], ev["numpy_owner"]) == \
        ("2.2.6", "pip")
    assert "-m pip uninstall --break-system-packages -y numpy" in finding.fix
    assert not (report.facts.get("imports") or {}).get("ran")


@pytest.mark.skipif(__import__("envs.systemroot", fromlist=["x"]).system_python_version() is None,
                    reason="needs the machine's Debian python3 with python3-pip")
def test_pkg008_is_quiet_for_dpkgs_numexpr_with_dpkgs_numpy1(tmp_path: Path) -> None:
    root = _debian_root(tmp_path, with_pip_numpy=False)
    report = check(root.usr, "PKG008")
    assert report.by_rule("PKG008") == []
    [numexpr] = [d for d in report.facts["packages"]["distributions"] if d["key"] == "numexpr"]
    assert numexpr["numpy_build"] == {"major": 1, "source": "dpkg", "detail": "python3-numpy-abi9"}
