"""What the framework callbacks share: one preflight per node, the node's CPUs shared, and the extras.

The framework tests themselves are in test_integrations_lightning.py and
test_integrations_transformers.py; these need neither framework.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from torch.utils.data import DataLoader, Dataset

import torch
from envdoctor.integrations.node import NodePreflight, first_dataloader

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


class Squares(Dataset):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.full((4,), float(index * index))


def test_only_local_rank_0_runs_and_only_once(capfd: pytest.CaptureFixture[str]) -> None:
    node = NodePreflight(budget_s=5)
    assert node.run(DataLoader(Squares(), batch_size=8), framework="test", local_rank=1, procs_per_node=2) is None
    assert node.done and node.report is None
    # Already done in this process: a later hook (a second fit) does not run it again.
    assert node.run(DataLoader(Squares(), batch_size=8), framework="test", local_rank=0, procs_per_node=2) is None
    assert node.report is None
    assert "envdoctor preflight" not in capfd.readouterr().err


def test_the_first_dataloader_is_found_in_what_a_trainer_holds() -> None:
    first, second = DataLoader(Squares(), batch_size=2), DataLoader(Squares(), batch_size=3)
    assert first_dataloader(first) is first
    assert first_dataloader({"a": first, "b": second}) is first
    assert first_dataloader([[], (None, second)]) is second
    assert first_dataloader(range(3)) is None and first_dataloader(None) is None


@pytest.mark.parametrize("bad", [{"fail_on": "fatal"}, {"budget_s": 0}])
def test_bad_settings_are_refused_when_the_callback_is_made(bad: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        NodePreflight(**bad)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::envdoctor.integrations.node.PreflightWarning")  # a busy machine may slow getitem
def test_the_node_cpus_are_shared_by_its_processes(capfd: pytest.CaptureFixture[str]) -> None:
    node = NodePreflight(budget_s=6, select=("DL",))
    report = node.run(DataLoader(Squares(), batch_size=8), framework="test", local_rank=0, procs_per_node=2)
    assert report is node.report and report is not None
    node_cpus = report.facts["system"]["cpu"]["usable"]
    assert report.loader["procs_per_node"] == 2
    assert report.loader["usable_cpus"] == max(1, node_cpus // 2)
    line = capfd.readouterr().err.splitlines()[0]
    assert line == ("envdoctor preflight [test] on local rank 0: profiled the train loader DataLoader(Squares, "
                    "batch_size=8, num_workers=0), 64 samples; 2 training process(es) share this node's "
                    f"{node_cpus} usable CPU(s): {max(1, node_cpus // 2)} each")


def test_importing_envdoctor_and_the_shared_part_imports_no_framework() -> None:
    code = ("import sys, envdoctor, envdoctor.integrations, envdoctor.integrations.node, envdoctor.integrations.mcp; "
            "print(sorted(m for m in ('lightning', 'pytorch_lightning', 'transformers', 'mcp', 'torch') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_framework_extras_are_exact_pins_without_torch() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    framework = extras["lightning"] + extras["transformers"] + extras["mcp"]
    assert all("==" in spec and not spec.startswith("torch") for spec in framework), framework
    # The test extras carry the same pins, so CI tests what users install.
    assert sorted(extras["integration-test"]) == sorted(framework)
    assert set(framework) <= set(extras["test"])
