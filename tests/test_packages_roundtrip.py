"""Fixes that hold: each offline-runnable PKG fix is run as given on a real environment, then checked again.

A pip venv (made without pip, as many are) and a uv venv (uv venvs have no
pip) are broken for real with local wheels; the steps in each finding's
`fix_steps` are run exactly as `envdoctor fix` would (argv as given, moves
inside the prefix, a step two findings share run once), with pip and uv
pointed at the local wheels through their environment variables. Then the
check runs again: every finding fixed is gone, and no new one appears.
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from condafixtures import module, write_wheel
from envs.fixsteps import offline_env, run_fix_steps
from fixenvs import run_bundled_pip
from support import findings, json_report, run_cli

UV = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
needs_uv = pytest.mark.skipif(not os.path.exists(UV), reason="uv is not installed beside the test interpreter")


def check(prefix: Path, tmp: Path, *args: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONUSERBASE": str(tmp / "no-user-base"), "PYTHONPATH": ""}
    proc = run_cli("report", "--json", "--no-loader", "--select", "PKG", "CHN", "--prefix", str(prefix),
                   *args, env=env, cwd=str(tmp))
    assert proc.returncode in (0, 1), proc.stderr
    return json_report(proc)


def wheels(folder: Path) -> Path:
    write_wheel(folder, "minidep", "1.0", module("minidep", "1.0"))
    write_wheel(folder, "minidep", "2.0", module("minidep", "2.0"))
    write_wheel(folder, "trainkit", "1.0", module("trainkit", "1.0"), requires=["minidep>=2"])
    write_wheel(folder, "dupe", "1.0", module("dupe", "1.0"))
    write_wheel(folder, "dupe", "2.0", module("dupe", "2.0"))
    write_wheel(folder, "brokenpkg", "1.0", module("brokenpkg", "1.0"))
    write_wheel(folder, "opencv-python", "4.9.0.80", module("cv2", "4.9.0.80"))
    write_wheel(folder, "opencv-python-headless", "4.9.0.80", module("cv2", "4.9.0.80"))
    write_wheel(folder, "wantedpkg", "1.0", module("wantedpkg", "1.0"))
    # An editable-style hook its own RECORD lists: code in a .pth that a distribution ships (PKG011 stays quiet).
    write_wheel(folder, "hooked", "1.0", {**module("hooked", "1.0"),
                                          "__editable___hooked_finder.py": b"MAPPING = {'hooked': '/nowhere'}\n",
                                          "__editable__.hooked-1.0.pth": b"import __editable___hooked_finder\n"})
    return folder


def pip_venv(path: Path) -> Path:
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(path)], check=True, timeout=120)
    return path


def by_rule(report: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for finding in report["findings"]:
        out.setdefault(finding["rule"], []).append(finding)
    return out


@pytest.mark.slow
def test_pip_venv_fixes_run_as_given_and_hold(tmp_path: Path, bundled_pip: Path) -> None:
    wheel_dir = wheels(tmp_path / "wheels")
    env = offline_env(wheel_dir)
    venv = pip_venv(tmp_path / "venv")
    # pip from ensurepip's bundled wheel, run by the venv's own interpreter (the venv keeps no pip).
    install = ("install", "--no-index", "--find-links", str(wheel_dir), "--no-cache-dir", "--disable-pip-version-check")
    run_bundled_pip(bundled_pip, venv, *install, "--no-deps", "trainkit==1.0", "minidep==1.0", "dupe==1.0",
                    "brokenpkg==1.0", "hooked==1.0", "opencv-python==4.9.0.80", "opencv-python-headless==4.9.0.80",
                    env=env)
    run_bundled_pip(bundled_pip, venv, *install, "--ignore-installed", "--no-deps", "dupe==2.0", env=env)
    site = next(venv.glob("lib/python3*/site-packages"))
    (site / "brokenpkg-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: brokenpkg\n")
    marker = tmp_path / "pth-ran"
    (site / "zz_hook.pth").write_text(f"import os; open({str(marker)!r}, 'w').write('ran')\n")

    against = tmp_path / "requirements.txt"
    against.write_text("wantedpkg==1.0\n")
    report = check(venv, tmp_path, "--against", str(against))
    assert not marker.exists()  # the .pth was read as data, never run
    rules = by_rule(report)
    assert sorted(rules) == ["PKG002", "PKG003", "PKG004", "PKG007", "PKG009", "PKG011"]
    [clash] = rules["PKG004"]
    assert [s["argv"][3:] for s in clash["fix_steps"] if s["tool"] == "pip"][1:] == [
        ["uninstall", "-y", "opencv-python"], ["install", "--force-reinstall", "--no-deps",
                                               "opencv-python-headless==4.9.0.80"]]
    [drift] = rules["PKG007"]
    assert drift["fix_steps"][-1]["argv"][3:] == ["install", "wantedpkg==1.0"]
    [pth] = rules["PKG011"]
    assert pth["evidence"]["path"] == str(site / "zz_hook.pth")
    assert pth["evidence"]["code_lines"] == [f"import os; open({str(marker)!r}, 'w').write('ran')"]
    assert pth["fix_steps"] == [{"tool": "file", "move": str(site / "zz_hook.pth"),
                                 "to": str(site / "zz_hook.pth.envdoctor-aside")}]
    [dupe] = rules["PKG002"]
    assert dupe["evidence"]["versions"] == ["1.0", "2.0"] and dupe["severity"] == "error"
    python = str(venv / "bin" / "python3")
    assert dupe["fix_steps"] == [
        {"tool": "file", "move": str(site / "dupe-1.0.dist-info"), "to": str(site / "dupe-1.0.dist-info.envdoctor-aside")},
        {"tool": "pip", "argv": [python, "-m", "ensurepip"]},
        {"tool": "pip", "argv": [python, "-m", "pip", "install", "--force-reinstall", "--no-deps", "dupe==2.0"]}]
    [req] = rules["PKG003"]
    assert req["evidence"]["dependency"] == "minidep" and req["evidence"]["installed_version"] == "1.0"
    assert req["fix_steps"][-1] == {"tool": "pip", "argv": [python, "-m", "pip", "install", "minidep>=2"]}
    [broken] = rules["PKG009"]
    assert broken["evidence"]["reason"] == "METADATA has no Version field"
    for finding in report["findings"]:
        assert finding["fix_steps"], finding  # every one of these fixes is runnable here

    ran: set[str] = set()  # a step two findings share runs once, as `envdoctor fix` runs it
    for finding in report["findings"]:
        run_fix_steps(finding["fix_steps"], venv, env, ran=ran)
    again = check(venv, tmp_path, "--against", str(against))
    assert again["findings"] == [], [f["message"] for f in again["findings"]]


@needs_uv
@pytest.mark.slow
@pytest.mark.parametrize("made_by", ["uv venv", "python -m venv --without-pip"])
def test_uv_venv_broken_requirement_printed_fix_runs_as_printed(tmp_path: Path, made_by: str) -> None:
    wheel_dir = wheels(tmp_path / "wheels")
    env = offline_env(wheel_dir, PATH=f"{Path(UV).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    venv = tmp_path / "uvenv"
    base = getattr(sys, "_base_executable", sys.executable)
    if made_by == "uv venv":
        subprocess.run([UV, "venv", str(venv), "--python", base], check=True, env=env, timeout=120,
                       capture_output=True)
    else:  # no `uv = ` in pyvenv.cfg: INSTALLER (uv) and the missing pip say who fills it
        pip_venv(venv)
    subprocess.run([UV, "pip", "install", "--python", str(venv), "--offline", "--find-links", str(wheel_dir),
                    "--no-deps", "trainkit==1.0", "minidep==1.0"], check=True, env=env, timeout=120,
                   capture_output=True)
    assert ("uv = " in (venv / "pyvenv.cfg").read_text()) == (made_by == "uv venv")
    assert not list(venv.glob("lib/python3*/site-packages/pip"))  # uv venvs have no pip

    report = check(venv, tmp_path)
    assert report["facts"]["packages"]["installer"]["uv_venv"]
    [req] = findings(report, "PKG003")
    assert req["fix"] == f"uv pip install --python {venv} 'minidep>=2'"
    assert req["fix_steps"] == [{"tool": "uv", "argv": ["uv", "pip", "install", "--python", str(venv), "minidep>=2"]}]
    assert all("-m pip" not in f["fix"] for f in report["findings"])

    # The printed fix, run as printed (the shell's own word splitting), succeeds.
    proc = subprocess.run(shlex.split(req["fix"]), capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    again = check(venv, tmp_path)
    assert findings(again, "PKG003") == [] and again["findings"] == []
