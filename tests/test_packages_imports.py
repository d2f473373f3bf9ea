"""PKG012 import-fails on real venvs built here, and PKG003 turned error under a compiled numpy dependant.

Built by fixtures/fixenvs.py (numpy_abi_venvs): `oldext` is an extension-like distribution (its
RECORD lists a compiled module) whose import raises exactly what pandas 2.1.4, built for NumPy 1.x,
raises under NumPy 2: "numpy.dtype size changed, may indicate binary incompatibility". `goodext`
ships a compiled module too and imports fine: it stays quiet. Nothing is downloaded, and the deep
check leaves the environment byte for byte as it was.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from condafixtures import module, write_wheel
from envdoctor.config import Config
from envdoctor.engine import run_check
from envdoctor.model import Severity
from fixenvs import DTYPE_SIZE, EXT, numpy_abi_venvs, tree_digest

pytestmark = pytest.mark.slow



@pytest.fixture(scope="module")
def venvs(tmp_path_factory: pytest.TempPathFactory, pip_venv_template: Path) -> tuple[Path, Path]:
    return numpy_abi_venvs(tmp_path_factory.mktemp("imports"), pip_venv_template)


def deep_check(prefix: Path, *rules: str, deep: bool = True):  # type: ignore[no-untyped-def]
    return run_check(Config(prefix=str(prefix), no_loader=True, deep=deep, select=rules))


def test_pkg012_names_the_numpy_abi_break_and_its_culprit(venvs: tuple[Path, Path]) -> None:
    broken, _ = venvs
    pristine = tree_digest(broken)
    report = deep_check(broken, "PKG012")
    [finding] = report.by_rule("PKG012")
    assert finding.severity == Severity.ERROR
    ev = finding.evidence
    assert (ev["package"], ev["version"], ev["module"], ev["kind"]) == ("oldext", "2.1.4", "oldext", "numpy-abi")
    assert DTYPE_SIZE in ev["error"] and ev["numpy_version"] == "2.2.6" and ev["owner"] == "pip"
    assert "numpy-abi" in finding.message and "numpy 2.2.6" in finding.message
    assert "pip install --upgrade oldext" in finding.fix and 'numpy<2' in finding.fix
    trials = {t["distribution"]: t["result"] for t in report.facts["imports"]["trials"]}
    assert trials == {"goodext": "passed", "oldext": "failed"}  # numpy itself ships nothing compiled here
    assert tree_digest(broken) == pristine  # imported, and nothing written (no bytecode, no files)


def test_pkg012_is_quiet_on_a_healthy_venv_and_without_deep(venvs: tuple[Path, Path]) -> None:
    broken, healthy = venvs
    report = deep_check(healthy, "PKG012")
    assert report.by_rule("PKG012") == []
    assert [t["result"] for t in report.facts["imports"]["trials"]] == ["passed"]
    shallow = deep_check(broken, "PKG012", deep=False)
    assert shallow.by_rule("PKG012") == [] and shallow.facts["imports"]["ran"] is False


def test_pkg003_on_numpys_major_under_a_compiled_dependant_is_an_error(venvs: tuple[Path, Path]) -> None:
    broken, _ = venvs
    [finding] = deep_check(broken, "PKG003", deep=False).by_rule("PKG003")
    assert finding.evidence["package"] == "oldext" and finding.evidence["compiled_dependant"] is True
    assert finding.severity == Severity.ERROR


def test_classify_reads_the_kind_and_what_is_named() -> None:
    from envdoctor.rules.packages.imports import classify

    assert classify("ImportError: A module that was compiled using NumPy 1.x cannot be run in\nNumPy 2.2.6 as it "
                    "may crash.") == ("numpy-abi", None)
    assert classify("ImportError: libcudart.so.12: cannot open shared object file: No such file or directory") == \
        ("missing-shared-library", "libcudart.so.12")
    assert classify("ImportError: /x/_C.so: undefined symbol: iJIT_NotifyEvent") == ("undefined-symbol",
                                                                                     "iJIT_NotifyEvent")
    assert classify("RuntimeError: something else") == ("other", None)


@pytest.mark.skipif(__import__("envs.systemroot", fromlist=["x"]).system_python_version() is None,
                    reason="needs the machine's Debian python3 with python3-pip")
def test_pkg012_in_a_debian_root_blames_pips_numpy_over_dpkgs_extension(tmp_path: Path) -> None:
    """Debian's python3-numexpr (an egg-info: no RECORD, its extension found on disk) under pip's NumPy 2 in
    /usr/local: the fix is to take pip's numpy away, not to pip-install over Debian's package."""
    from envs.systemroot import SystemRoot

    root = SystemRoot(tmp_path / "root")
    root.apt_install("python3-numpy", "numpy", "1.24.2", {"numpy/__init__.py": b'__version__ = "1.24.2"\n'})
    message = "A module that was compiled using NumPy 1.x cannot be run in NumPy 2.2.6 as it may crash."
    root.apt_install("python3-numexpr", "numexpr", "2.8.4", {
        "numexpr/__init__.py": f"import numpy\nraise ImportError({message!r})\n".encode(),
        f"numexpr/interpreter{EXT}": b"\x7fELF built against Debian's NumPy 1.24"}, egg_info=True)
    wheel = write_wheel(tmp_path / "wheels", "numpy", "2.2.6", module("numpy", "2.2.6"))
    root.pip("install", "--break-system-packages", "--ignore-installed", "--no-index", "--no-compile", str(wheel))
    report = deep_check(root.usr, "PKG012")
    [finding] = report.by_rule("PKG012")
    ev = finding.evidence
    assert (ev["package"], ev["kind"], ev["numpy_version"], ev["numpy_owner"]) == ("numexpr", "numpy-abi", "2.2.6",
                                                                                   "pip")
    assert ev["owner"] == "Debian's python3-numexpr (dpkg)" and "-m pip uninstall --break-system-packages -y numpy" in finding.fix


def test_pkg012_classifies_real_native_load_failures(tmp_path: Path, pip_venv_template: Path) -> None:
    """Real compiled extensions (built here with the C compiler): an undefined symbol and a missing library."""
    from fixenvs import make_pip_venv, native_breakage_wheels, offline_env, run_ok

    wheels = tmp_path / "wheels"
    built = native_breakage_wheels(wheels, tmp_path / "build")
    if built is None:
        pytest.skip("needs a C compiler and this interpreter's Python.h")
    env = offline_env(wheels, tmp_path / "cache")
    venv = make_pip_venv(pip_venv_template, tmp_path / "venv")
    run_ok([str(venv / "bin" / "python"), "-m", "pip", "install", "--no-compile", *map(str, built)], env)
    found = {f.evidence["package"]: f for f in deep_check(venv, "PKG012").by_rule("PKG012")}
    assert sorted(found) == ["libext", "symext"]
    assert (found["symext"].evidence["kind"], found["symext"].evidence["named"]) == \
        ("undefined-symbol", "envdoctor_missing_symbol")
    assert (found["libext"].evidence["kind"], found["libext"].evidence["named"]) == \
        ("missing-shared-library", "libgone.so")
    assert "reinstall" in found["libext"].fix


def test_pkg012_imports_a_manylinux_wheels_modules_not_its_libs_folder(tmp_path: Path,
                                                                      pip_venv_template: Path) -> None:
    """The real numpy manylinux wheel this suite runs on, as pip installed it (its package, its RECORD and the
    `numpy.libs` folder of vendored shared libraries auditwheel puts beside it), copied into a fresh venv:
    `--deep` imports `numpy` and stays quiet; `numpy.libs` is no module and is never imported."""
    import importlib.metadata
    import shutil

    from fixenvs import make_pip_venv

    dist = importlib.metadata.distribution("numpy")
    site = Path(str(dist.locate_file("")))
    libs = site / "numpy.libs"
    if not libs.is_dir():
        pytest.skip("numpy here is not installed from a manylinux wheel (no numpy.libs beside it)")
    venv = make_pip_venv(pip_venv_template, tmp_path / "venv")
    [target_site] = (venv / "lib").glob("python3.*/site-packages")
    meta = Path(str(dist._path))  # type: ignore[attr-defined]
    for folder in (site / "numpy", libs, meta):
        shutil.copytree(folder, target_site / folder.name, symlinks=True,
                        ignore=shutil.ignore_patterns("__pycache__"))
    assert "numpy.libs/" in (meta / "RECORD").read_text()  # what made `import numpy.libs` happen
    report = deep_check(venv, "PKG012")
    assert report.by_rule("PKG012") == []
    [trial] = [t for t in report.facts["imports"]["trials"] if t["distribution"] == "numpy"]
    assert (trial["result"], trial["modules"]) == ("passed", ["numpy"])
    assert "numpy.libs" in next(d for d in report.facts["packages"]["distributions"]
                                if d["key"] == "numpy")["import_names"]  # listed, yet only `numpy` imported


def test_importable_names_are_identifiers_only() -> None:
    from envdoctor.facts.imports import importable_names

    assert importable_names(["numpy", "numpy.libs", "scipy.libs", "_cffi_backend", "foo-data"]) == \
        ["numpy", "_cffi_backend"]
