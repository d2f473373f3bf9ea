"""The wheel carries the catalog and the schema, and works from them alone."""
from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def wheel(envdoctor_wheel: Path) -> Path:
    [built] = envdoctor_wheel.glob("envdoctor*.whl")
    return built


@pytest.mark.slow
def test_wheel_ships_catalog_schema_and_probes(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "envdoctor/_catalog/SYS.toml" in names
    assert "envdoctor/report/schema.json" in names
    # What runs inside the target, started by path, with the knee both sides import.
    assert {"envdoctor/inside/loader_runner.py", "envdoctor/inside/torch_probe.py", "envdoctor/inside/loader_knee.py"} <= names
    assert not any(name.startswith("torch") for name in names)
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("METADATA"))).decode()
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:") and "extra ==" not in line]
    assert not any("torch" in line for line in requires), requires


@pytest.mark.slow
def test_installed_wheel_lists_and_explains_from_the_shipped_catalog(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target",
                    str(target), str(wheel)], check=True, capture_output=True)
    env = dict(os.environ, PYTHONPATH=str(target), NO_COLOR="1")
    where = subprocess.run([sys.executable, "-c", "from envdoctor.catalog import catalog_dir; print(catalog_dir())"],
                           env=env, capture_output=True, text=True, check=True, cwd=tmp_path).stdout.strip()
    assert where == str(target / "envdoctor" / "_catalog")
    rules = subprocess.run([sys.executable, "-m", "envdoctor", "rules"], env=env, capture_output=True,
                           text=True, check=True, cwd=tmp_path).stdout
    for rule_id in ("SYS001", "SYS002", "SYS003", "SYS006"):
        assert f"\n{rule_id}  " in "\n" + rules
    explain = subprocess.run([sys.executable, "-m", "envdoctor", "explain", "SYS002"], env=env,
                             capture_output=True, text=True, check=True, cwd=tmp_path).stdout
    for heading in ("What it checks", "Why it matters", "Example", "Fix"):
        assert heading in explain
