"""GPU005 foreign-cuda-libraries: a CUDA library of torch's that LD_LIBRARY_PATH or LD_PRELOAD loads first.

Real shared libraries are built here with the C compiler under the file names torch's
CUDA wheels ship (libcudnn.so.9, libnccl.so.2), placed where those wheels put them in a
real venv (site-packages/nvidia/<lib>/lib/), and a real `envdoctor` process inspects that
venv with a folder of other builds on LD_LIBRARY_PATH. The dynamic loader's own choice is
checked too: with the folder on LD_LIBRARY_PATH, `ctypes` loads the foreign copy first.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support import findings, json_report, run_envdoctor

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or shutil.which("cc") is None,
                                reason="needs Linux and a C compiler")


def build_library(path: Path, soname: str, version: int) -> Path:
    """A real ELF shared library with that soname, whose `which_build()` returns `version`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    source = path.parent / f"{path.name}.c"
    source.write_text(f"int which_build(void) {{ return {version}; }}\n")
    subprocess.run(["cc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(path), str(source)], check=True)
    source.unlink()
    return path


def make_venv(root: Path) -> Path:
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    build_library(site / "nvidia" / "cudnn" / "lib" / "libcudnn.so.9", "libcudnn.so.9", 9)
    build_library(site / "nvidia" / "nccl" / "lib" / "libnccl.so.2", "libnccl.so.2", 2)
    return venv


def run_against(venv: Path, ld_library_path: str | None, preload: str | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}
    if ld_library_path is not None:
        env["LD_LIBRARY_PATH"] = ld_library_path
    if preload is not None:
        env["LD_PRELOAD"] = preload
    proc = run_envdoctor("report", "--json", "--no-loader", "--prefix", str(venv), "--select", "GPU005", env=env)
    return json_report(proc)


def test_gpu005_fires_for_a_cudnn_of_another_build_on_ld_library_path(tmp_path: Path) -> None:
    venv = make_venv(tmp_path)
    module = tmp_path / "modules" / "cudnn-8.9" / "lib"
    foreign = build_library(module / "libcudnn.so.9.0.0", "libcudnn.so.9", 8)
    (module / "libcudnn.so.9").symlink_to("libcudnn.so.9.0.0")
    build_library(module / "libcudnn.so.8", "libcudnn.so.8", 8)  # another soname: torch never asks for it
    # The loader itself takes the foreign copy for the name torch asks for:
    probe = subprocess.run([sys.executable, "-c", "import ctypes; print(ctypes.CDLL('libcudnn.so.9').which_build())"],
                           env={**os.environ, "LD_LIBRARY_PATH": str(module)}, capture_output=True, text=True)
    assert probe.stdout.strip() == "8"
    report = run_against(venv, f"/nonexistent:{module}")
    [finding] = findings(report, "GPU005")
    [lib] = finding["evidence"]["libraries"]
    assert lib["name"] == "libcudnn.so.9" and lib["via"] == "LD_LIBRARY_PATH"
    assert lib["loaded_from"] == str(module)
    assert lib["resolves_to"] == str(foreign)
    assert lib["torch_ships"].endswith("nvidia/cudnn/lib/libcudnn.so.9")
    assert finding["evidence"]["ld_library_path"] == ["/nonexistent", str(module)]
    assert str(module) in finding["fix"]


def test_gpu005_fires_for_a_preloaded_nccl(tmp_path: Path) -> None:
    venv = make_venv(tmp_path)
    nccl = build_library(tmp_path / "opt" / "libnccl.so.2", "libnccl.so.2", 3)
    ctypes.CDLL(str(nccl))  # a real library the loader accepts
    [finding] = findings(run_against(venv, None, preload=str(nccl)), "GPU005")
    [lib] = finding["evidence"]["libraries"]
    assert lib["via"] == "LD_PRELOAD" and lib["name"] == "libnccl.so.2"
    assert "LD_PRELOAD" in finding["fix"]


def test_gpu005_quiet_when_ld_library_path_points_at_torchs_own_folders(tmp_path: Path) -> None:
    venv = make_venv(tmp_path)
    site = next((venv / "lib").glob("python*/site-packages"))
    own = site / "nvidia" / "cudnn" / "lib"
    alias = tmp_path / "alias"
    alias.symlink_to(own)  # the same files by another path
    other = tmp_path / "other"
    build_library(other / "libcudnn.so.8", "libcudnn.so.8", 8)
    report = run_against(venv, f"{own}:{alias}:{other}")
    assert findings(report, "GPU005") == []
    native = report["facts"]["gpu"]["native_libraries"]
    assert {lib["name"] for lib in native["shipped"]} == {"libcudnn.so.9", "libnccl.so.2"}


def test_gpu005_quiet_without_ld_library_path(tmp_path: Path) -> None:
    assert findings(run_against(make_venv(tmp_path), None), "GPU005") == []
