"""PKG006 on real import paths: editable installs, and the working directory under the console script.

Editable installs: the project's own source is no shadow of itself.

`pip install -e .` and then training started from the project folder (or
with its src/ on PYTHONPATH) puts the same files on sys.path twice. The
states are real: a venv, and pip itself doing the editable install through
a tiny in-tree PEP 660 build backend (no build requirements, so no network
and no setuptools needed), in both layouts pip front-ends produce: a `.pth`
naming the source folder (hatchling, setuptools' src layout) and a
setuptools-style finder module with a MAPPING (setuptools' flat layout).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fixenvs import run_bundled_pip
from support import findings, json_report, run_cli

pytestmark = pytest.mark.slow

# A PEP 660 backend: the editable wheel holds only the dist-info and the hook
# file(s) that point back at the source, exactly as real backends do.
BACKEND = r'''
import base64, hashlib, os, zipfile

NAME, VERSION = "proj", "0.1"
DIST = f"{NAME}-{VERSION}.dist-info"
HERE = os.path.dirname(os.path.abspath(__file__))


def _hash(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _hooks():
    if os.environ.get("PROJ_STYLE") == "finder":
        mapping = {NAME: os.path.join(HERE, NAME)}
        finder = f"__editable___{NAME}_{VERSION.replace('.', '_')}_finder"
        return {f"{finder}.py": f"MAPPING: dict[str, str] = {mapping!r}\n".encode(),
                f"__editable__.{NAME}-{VERSION}.pth": f"import {finder}\n".encode()}
    return {f"__editable__.{NAME}-{VERSION}.pth": (os.path.join(HERE, "src") + "\n").encode()}


def _wheel(directory, files):
    files = {**files,
             f"{DIST}/METADATA": f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {VERSION}\n".encode(),
             f"{DIST}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
             f"{DIST}/top_level.txt": f"{NAME}\n".encode()}
    record = "".join(f"{path},{_hash(data)},{len(data)}\n" for path, data in files.items()) + f"{DIST}/RECORD,,\n"
    name = f"{NAME}-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(directory, name), "w") as zf:
        for path, data in {**files, f"{DIST}/RECORD": record.encode()}.items():
            zf.writestr(path, data)
    return name


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory, _hooks())


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory, {f"{NAME}/__init__.py": b""})
'''


def make_project(root: Path, layout: str) -> Path:
    root.mkdir()
    (root / "backend.py").write_text(BACKEND)
    (root / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n')
    package = root / ("src/proj" if layout == "src" else "proj")
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('__version__ = "0.1"\n')
    return root


def venv_with_editable(tmp: Path, project: Path, style: str, pip: Path) -> Path:
    """A venv made --without-pip; ensurepip's pip (bundled_pip), run by its interpreter, does the editable install."""
    venv = tmp / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    run_bundled_pip(pip, venv, "install", "--no-index", "--no-deps", "--no-cache-dir", "--disable-pip-version-check",
                    "-e", str(project), env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PROJ_STYLE": style})
    return venv


def pkg006(venv: Path, tmp: Path, cwd: Path, pythonpath: str = "") -> tuple[list[dict[str, Any]], dict[str, Any]]:
    env = {**os.environ, "PYTHONUSERBASE": str(tmp / "no-user-base")}
    # The test run's own PYTHONPATH (envdoctor's import path, in some runs) stays behind the one asked for.
    own = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, own) if p)
    proc = run_cli("report", "--json", "--no-loader", "--select", "PKG006", "--prefix", str(venv),
                   env=env, cwd=str(cwd))
    assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stderr
    report = json_report(proc)
    [dist] = [d for d in report["facts"]["packages"]["distributions"] if d["name"] == "proj"]
    return findings(report, "PKG006"), dist


def test_flat_layout_project_as_working_directory_is_no_shadow(tmp_path: Path, bundled_pip: Path) -> None:
    project = make_project(tmp_path / "project", "flat")
    venv = venv_with_editable(tmp_path, project, "finder", bundled_pip)
    hits, dist = pkg006(venv, tmp_path, cwd=project)
    assert hits == []
    assert dist["direct_url"]["editable"] is True
    assert dist["editable_paths"] == [os.path.realpath(project / "proj")]
    # A stale copy somewhere else on the path is still a shadow.
    stale = tmp_path / "stale" / "proj"
    stale.mkdir(parents=True)
    (stale / "__init__.py").write_text("")
    hits, _ = pkg006(venv, tmp_path, cwd=project, pythonpath=str(stale.parent))
    assert [(h["evidence"]["shadow_location"], h["evidence"]["shadow_path"]) for h in hits] == \
        [("pythonpath", str(stale))]


def test_src_layout_on_pythonpath_and_as_working_directory_is_no_shadow(tmp_path: Path, bundled_pip: Path) -> None:
    project = make_project(tmp_path / "project", "src")
    venv = venv_with_editable(tmp_path, project, "pth", bundled_pip)
    hits, dist = pkg006(venv, tmp_path, cwd=tmp_path, pythonpath=str(project / "src"))
    assert hits == []
    assert dist["editable_paths"] == [os.path.realpath(project / "src")]
    hits, _ = pkg006(venv, tmp_path, cwd=project / "src")
    assert hits == []


@pytest.mark.parametrize("shadow, linked", [("packaging", False), ("packaging.py", False), ("packaging", True)])
def test_console_script_checks_the_working_directory_like_python_m(tmp_path: Path, shadow: str, linked: bool) -> None:
    # `envdoctor check` in the training env, run from a folder holding a package named like an
    # installed one: sys.path[0] of the console script is its bin folder, but `python train.py`
    # from here imports the folder's copy. packaging is a dependency of envdoctor: always installed.
    script = tmp_path / "bin" / "envdoctor"
    script.parent.mkdir()
    script.write_text(f"#!{sys.executable}\nimport sys\nfrom envdoctor.cli import main\nsys.exit(main())\n")
    script.chmod(0o755)
    if linked:  # /usr/local/bin/envdoctor -> venv/bin/envdoctor: Python takes the resolved folder
        (tmp_path / "links").mkdir()
        (tmp_path / "links" / "envdoctor").symlink_to(script)
        script = tmp_path / "links" / "envdoctor"
    workdir = tmp_path / "project"
    workdir.mkdir()
    if shadow.endswith(".py"):
        (workdir / shadow).write_text("")
    else:
        (workdir / shadow).mkdir()
        (workdir / shadow / "__init__.py").write_text("")
    env = {**os.environ, "PYTHONUSERBASE": str(tmp_path / "no-user-base"), "NO_COLOR": "1"}
    proc = subprocess.run([str(script), "report", "--json", "--no-loader", "--select", "PKG006"],
                          capture_output=True, text=True, env=env, cwd=str(workdir), timeout=240)
    assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stderr
    report = json_report(proc)
    assert report["target"]["sys_path"][0] == str(workdir)
    hits = [h for h in findings(report, "PKG006") if h["evidence"]["import_name"] == "packaging"]
    assert [(h["evidence"]["shadow_location"], h["evidence"]["shadow_path"]) for h in hits] == \
        [("cwd", str(workdir / shadow))]  # the file that hides it, for the fix to rename
