"""Loaders known by what they are: a library's DataLoader subclasses and loader-returning methods.

fixtures/spawn_libraries/site/graphkit is a small library whose loader class is
two steps below torch.utils.data.DataLoader and whose `Walker.loader()` returns
one. Each script under fixtures/spawn_libraries/scripts says what the guard
must find with the library installed in the target environment
(`# expect-installed:`, its source read statically) and without it
(`# expect-alone:`, the catalog's table and the behaviour: a call given
num_workers= whose result is iterated). The slow test runs every script for
real with spawn forced and the library on its path: a script that fails dies at
the line the finding points to, a quiet one runs to the end.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envdoctor.analysis.spawn.libraries import LibraryLoaders, loader_table
from envdoctor.config import Config
from envdoctor.engine import run_check
from test_spawn_ground_truth import BOOTSTRAP, run_with_start_method, script_lines_in_tracebacks

pytestmark = [pytest.mark.standalone]

HERE = Path(__file__).resolve().parent.parent / "fixtures" / "spawn_libraries"
SITE = HERE / "site"
SCRIPTS = sorted((HERE / "scripts").glob("*.py"))
IDS = [p.stem for p in SCRIPTS]


def wanted(script: Path, path: str) -> list[int]:
    """The SPW001 lines the header asks for on one path (`installed` or `alone`)."""
    match = re.search(rf"^#\s*expect-{path}:\s*(.+)$", script.read_text(encoding="utf-8"), re.MULTILINE)
    assert match, f"{script.name} has no expect-{path} header"
    spec = match.group(1).strip()
    return [] if spec == "nothing" else sorted(int(t.split("@")[1]) for t in spec.split())


@pytest.fixture(scope="module")
def target_with_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv (no pip, so it takes a second) with graphkit installed into its site-packages."""
    venv = tmp_path_factory.mktemp("target") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True, timeout=60).stdout.strip()
    shutil.copytree(SITE / "graphkit", Path(site) / "graphkit")
    return venv


def spw001_lines(script: Path, prefix: Path | None) -> list[int]:
    report = run_check(Config(scripts=(str(script),), select=("SPW001",), no_loader=True,
                              prefix=str(prefix) if prefix else None))
    assert report.errors == [], report.errors
    return sorted(f.location.line for f in report.by_rule("SPW001"))


@pytest.mark.skipif(sys.platform == "win32", reason="the venv layout the fixture builds is POSIX")
@pytest.mark.parametrize("script", SCRIPTS, ids=IDS)
def test_with_the_library_installed_in_the_target_its_source_decides(script: Path, target_with_library: Path):
    assert spw001_lines(script, target_with_library) == wanted(script, "installed")


@pytest.mark.parametrize("script", SCRIPTS, ids=IDS)
def test_without_the_library_the_behaviour_decides(script: Path):
    assert spw001_lines(script, None) == wanted(script, "alone")


def test_the_reader_follows_bases_and_returns_and_never_imports():
    reader = LibraryLoaders([str(SITE)])
    assert reader.is_loader_class("graphkit.SubgraphLoader")  # re-exported, two bases below DataLoader
    assert reader.is_loader_class("graphkit.base.NodeLoaderBase")
    assert not reader.is_loader_class("graphkit.Walker")
    assert reader.returns_loader("graphkit.Walker.loader")
    assert not reader.returns_loader("graphkit.preprocess")
    # A data module's hook returns what another method of its class builds.
    assert reader.returns_loader("graphkit.GraphDataModule.train_dataloader")
    assert not reader.returns_loader("graphkit.GraphDataModule.describe")
    assert not reader.is_loader_class("graphkit.NoSuchThing")
    assert "graphkit" not in sys.modules
    assert reader.files_read <= 6


def test_the_shipped_table_names_the_graph_libraries_loaders():
    table = loader_table()
    for name in ("NeighborLoader", "LinkNeighborLoader", "HGTLoader", "ClusterLoader", "RandomNodeLoader",
                 "ShaDowKHopSampler", "GraphSAINTRandomWalkSampler", "NeighborSampler"):
        assert f"torch_geometric.loader.{name}" in table.classes
    assert "torch_geometric.nn.Node2Vec.loader" in table.returns_loader
    assert "torch_geometric.nn.MetaPath2Vec.loader" in table.returns_loader
    assert "dgl.dataloading.GraphDataLoader" in table.classes


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS, ids=IDS)
def test_spawn_really_fails_where_the_installed_finding_points(script: Path, tmp_path: Path):
    outcome, output = run_with_start_method(script, "spawn", tmp_path, extra_path=(SITE,))
    header = re.search(r"^#\s*ground-truth:\s*(fails|runs)", script.read_text(encoding="utf-8"), re.MULTILINE)
    assert header and outcome == header.group(1), output[-3000:]
    lines = wanted(script, "installed")
    assert bool(lines) == (outcome == "fails")
    if lines:
        assert BOOTSTRAP in output
        assert lines[0] in script_lines_in_tracebacks(output, script), output[-3000:]
