"""PKG013 notebook-kernel-elsewhere: the interpreter a notebook's kernel runs, against the checked one.

Kernelspecs are written by a real ipykernel (`python -m ipykernel install`, from the test
environment, which has it), into folders the test puts on Jupyter's search path; the
checked environments are real venvs (this one, with ipykernel, and a bare second one
without it). Each case runs the real `envdoctor` on a real notebook file.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from envdoctor.facts.kernels import kernel_dirs, resolve_kernel
from support import findings, json_report, run_envdoctor

pytest.importorskip("ipykernel")


def notebook(path: Path, kernel: str | None) -> Path:
    metadata: dict[str, Any] = {"language_info": {"name": "python"}}
    if kernel:
        metadata["kernelspec"] = {"name": kernel, "display_name": kernel.title(), "language": "python"}
    path.write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": metadata, "cells": [
        {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "id": "a1",
         "source": ["import torch\n", "print(torch.__version__)\n"]}]}))
    return path


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("kernels")
    bare = root / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    shared = root / "shared"
    # A kernel registered from this test environment, as `ipykernel install --name` does it.
    subprocess.run([sys.executable, "-m", "ipykernel", "install", "--prefix", str(shared), "--name", "trainold",
                    "--display-name", "Train (old)"], check=True, capture_output=True)
    return {"root": root, "bare": bare, "jupyter_path": shared / "share" / "jupyter", "user": root / "user"}


def check(world: dict[str, Path], prefix: Path | str, nb: Path) -> dict[str, Any]:
    env = {**os.environ, "JUPYTER_PATH": str(world["jupyter_path"]), "JUPYTER_DATA_DIR": str(world["user"])}
    env.pop("JUPYTER_PREFER_ENV_PATH", None)
    proc = run_envdoctor("report", "--json", "--no-loader", "--select", "PKG013", "--prefix", str(prefix), str(nb),
                         env=env)
    return json_report(proc)


def test_the_kernelspec_is_ipykernels_own(world: dict[str, Path]) -> None:
    spec = json.loads((world["jupyter_path"] / "kernels" / "trainold" / "kernel.json").read_text())
    assert spec["argv"][0] == sys.executable


def test_pkg013_fires_when_the_kernel_runs_another_environments_interpreter(world: dict[str, Path]) -> None:
    nb = notebook(world["root"] / "explore.ipynb", "trainold")
    report = check(world, world["bare"], nb)
    [finding] = findings(report, "PKG013")
    assert finding["evidence"]["kernel"] == "trainold"
    assert finding["evidence"]["kernel_interpreter"] == sys.executable
    assert finding["evidence"]["kernel_spec"] == str(world["jupyter_path"] / "kernels" / "trainold" / "kernel.json")
    assert finding["evidence"]["checked_prefix"] == str(world["bare"])
    assert f"--prefix {Path(sys.executable).parent.parent}" in finding["fix"]
    assert finding["location"]["path"] == str(nb)


def test_pkg013_quiet_when_the_kernel_runs_the_checked_environment(world: dict[str, Path]) -> None:
    nb = notebook(world["root"] / "same.ipynb", "trainold")
    report = check(world, sys.prefix, nb)
    assert findings(report, "PKG013") == []
    [info] = [f for f in report["facts"]["scripts"]["files"] if f["path"] == str(nb)]
    assert info["kernel"]["interpreter"] == sys.executable
    assert report["facts"]["scripts"]["notebook_target"]["has_ipykernel"] is True


def test_pkg013_fires_when_the_environment_has_no_ipykernel_for_the_native_kernel(world: dict[str, Path]) -> None:
    nb = notebook(world["root"] / "native.ipynb", "python3")
    [finding] = findings(check(world, world["bare"], nb), "PKG013")
    assert finding["evidence"]["has_ipykernel"] is False
    assert finding["evidence"]["kernel"] == "python3"
    assert "ipykernel install" in finding["fix"]


def test_pkg013_quiet_for_the_native_kernel_where_ipykernel_is_installed(world: dict[str, Path]) -> None:
    nb = notebook(world["root"] / "native-here.ipynb", "python3")
    assert findings(check(world, sys.prefix, nb), "PKG013") == []


def test_pkg013_fires_for_a_kernel_installed_nowhere(world: dict[str, Path]) -> None:
    nb = notebook(world["root"] / "ghost.ipynb", "ghost")
    [finding] = findings(check(world, sys.prefix, nb), "PKG013")
    assert finding["evidence"]["kernel"] == "ghost"
    assert str(world["jupyter_path"] / "kernels") in finding["evidence"]["searched"]


def test_a_broken_kernelspec_is_a_problem_not_a_traceback(tmp_path: Path) -> None:
    folder = tmp_path / "kernels" / "broken"
    folder.mkdir(parents=True)
    (folder / "kernel.json").write_text("{not json")
    kernel = resolve_kernel("Broken", None, [tmp_path / "kernels"])
    assert kernel["problem"] == "not JSON" and kernel["interpreter"] is None


def test_search_order_follows_jupyter_core(tmp_path: Path) -> None:
    env = {"JUPYTER_PATH": f"/a{os.pathsep}/b", "JUPYTER_DATA_DIR": "/u"}
    assert kernel_dirs(env, ["/env"], platform="linux") == [Path(p) / "kernels" for p in (
        "/a", "/b", "/u", "/env/share/jupyter", "/usr/local/share/jupyter", "/usr/share/jupyter")]
    env["JUPYTER_PREFER_ENV_PATH"] = "1"
    assert kernel_dirs(env, ["/env"], platform="linux")[2] == Path("/env/share/jupyter/kernels")
