"""Conda-owned steps: no conda can be installed here, so they are tested up to the exact commands.

The prefixes are real (py-rattler installs them from the local channel); a
conda step is undone like every other one, from the before-state of the whole
prefix (conda-meta included) that the journal keeps.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from condafixtures import PY_FULL, PYTORCH, World
from fixenvs import tree_digest
from support import run_cli

pytestmark = pytest.mark.slow


BASE = [f"python =={PY_FULL}", "pip >=1", "numpy ==1.26.4"]


def fake_tool(folder: Path, name: str) -> Path:
    """An executable named like the tool, so the plan finds it on PATH; dry runs never start it."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\necho 'a dry run must not start me' >&2\nexit 99\n")
    path.chmod(0o755)
    return path


def dry_run(prefix: Path, tmp_path: Path, path_dirs: list[Path], *rules: str) -> tuple[int, dict[str, Any]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CONDA_", "MAMBA_", "PIXI_"))}
    env.update(PATH=os.pathsep.join(str(p) for p in path_dirs), XDG_CACHE_HOME=str(tmp_path / "cache"),
               PYTHONUSERBASE=str(tmp_path / "no-user-base"))
    # A dry run reads no answer and changes nothing: the command runs in this process (support.run_cli).
    proc = run_cli("fix", "--dry-run", "--format", "json", "--prefix", str(prefix), "--select", *rules, env=env)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_pip_over_conda_pkg001_plans_pip_uninstall_then_conda_reinstall(conda_world: World, tmp_path: Path) -> None:
    def build(p: Path) -> None:
        conda_world.make_prefix(p, BASE)
        conda_world.pip(p, "install", str(conda_world.wheel("numpy", "2.1.3")))
    prefix = conda_world.scenario("fix-pip-over-conda", build)
    before = tree_digest(prefix)
    conda = fake_tool(tmp_path / "tools", "conda")
    code, plan = dry_run(prefix, tmp_path, [tmp_path / "tools"], "PKG001")
    assert code == 0, plan
    steps = plan["plan"]["steps"]
    assert [(s["rule"], s["tool"], s["action"]) for s in steps] == [("PKG001", "pip", "run"), ("PKG001", "conda", "run")]
    assert steps[0]["run_argv"] == [str(prefix / "bin" / "python3"), "-m", "pip", "uninstall", "-y", "numpy"]
    assert steps[1]["run_argv"] == [str(conda), "install", "-p", str(prefix), "--force-reinstall", "numpy=1.26.4"]

    # Without conda anywhere, neither runs: the uninstall alone would leave no numpy at all.
    code, plan = dry_run(prefix, tmp_path, [tmp_path / "empty"], "PKG001")
    assert code == 2 and plan["message"].startswith("nothing could run")
    assert [s["reason"] for s in plan["plan"]["steps"]] == ["another step of this fix cannot run (step 2)",
                                                            "conda is not on PATH or in the prefix"]
    assert tree_digest(prefix) == before
    assert not (tmp_path / "cache" / "envdoctor" / "journal").exists()


def test_retired_pytorch_channel_chn002_plans_exact_conda_commands(conda_world: World, tmp_path: Path) -> None:
    prefix = conda_world.scenario("fix-pytorch-channel", lambda p: conda_world.make_prefix(
        p, BASE + ["pytorch >=1"], channels={"pytorch": PYTORCH}))
    conda = fake_tool(tmp_path / "tools", "conda")
    code, plan = dry_run(prefix, tmp_path, [tmp_path / "tools"], "CHN002")
    assert code == 0, plan
    assert [s["run_argv"] for s in plan["plan"]["steps"]] == [
        [str(conda), "remove", "-p", str(prefix), "pytorch"],
        [str(conda), "install", "-p", str(prefix), "--override-channels", "-c", "conda-forge", "pytorch"],
    ]
