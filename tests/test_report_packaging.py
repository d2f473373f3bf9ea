"""The package people install: a publishable name, its licence, its URLs, and typing information."""
from __future__ import annotations

import re
import sys
import zipfile
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def _normalized(name: str) -> str:
    """PEP 503 normalisation, then PyPI's similarity rule (`-`, `_`, `.` ignored)."""
    return re.sub(r"[-_.]+", "-", name).lower().replace("-", "")


def test_the_distribution_name_does_not_collide_with_env_doctor():
    assert _normalized(PROJECT["name"]) != _normalized("env-doctor")
    assert PROJECT["scripts"] == {"envdoctor": "envdoctor.cli:main"}


def test_licence_file_matches_the_metadata():
    assert PROJECT["license"] == "MIT" and PROJECT["license-files"] == ["LICENSE"]
    text = (REPO / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License") and "THE SOFTWARE IS PROVIDED \"AS IS\"" in text


def test_project_urls_and_typed_marker():
    assert set(PROJECT["urls"]) >= {"Homepage", "Source", "Issues"}
    assert all(url.startswith("https://") for url in PROJECT["urls"].values())
    assert (REPO / "src" / "envdoctor" / "py.typed").is_file()
    assert "Typing :: Typed" in PROJECT["classifiers"]


@pytest.mark.slow
def test_the_wheel_carries_licence_urls_and_py_typed(envdoctor_wheel):
    [wheel] = envdoctor_wheel.glob("envdoctor_pytorch-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "envdoctor/py.typed" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), sorted(names)[-8:]
    assert "Name: envdoctor-pytorch" in metadata and "License-Expression: MIT" in metadata
    assert "Project-URL: Homepage, https://" in metadata
