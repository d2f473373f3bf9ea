"""The Lightning PreflightCallback in a real `Trainer.fit` on CPU, with a tiny model built here.

Each test reads what the callback printed and the report it kept: the loader it profiled must be
the trainer's own train DataLoader (its dataset class, length and batch size), profiled once.
"""
from __future__ import annotations

import re

import pytest
from torch.utils.data import DataLoader, Dataset

import envdoctor
import torch
from envdoctor.integrations.node import PreflightWarning

L = pytest.importorskip("lightning.pytorch", reason="the Lightning extra is not installed "
                        "(pip install -e '.[test]')")
from envdoctor.integrations.lightning import PreflightCallback  # noqa: E402  (it imports Lightning: after the skip)

pytestmark = pytest.mark.slow

HEADER = "envdoctor preflight [lightning] on local rank 0: profiled the train loader"


class LightningPairs(Dataset):
    """96 (features, target) pairs; `bad_index` raises KeyError, as a missing record would."""

    def __init__(self, bad_index: int | None = None) -> None:
        self.bad_index = bad_index

    def __len__(self) -> int:
        return 96

    def __getitem__(self, index: int):
        if index == self.bad_index:
            raise KeyError(f"no record {index}")
        x = torch.full((8,), float(index) / 96)
        return x, x.sum(dim=0, keepdim=True)


class TinyRegressor(L.LightningModule):
    def __init__(self, dataset: Dataset, batch_size: int = 6) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)
        self.dataset = dataset
        self.batch_size = batch_size
        self.steps = 0

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.dataset, batch_size=self.batch_size, num_workers=0)

    def training_step(self, batch, batch_idx):
        self.steps += 1
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _trainer(callback: PreflightCallback, **kwargs) -> L.Trainer:
    options = dict(accelerator="cpu", devices=1, max_epochs=2, limit_train_batches=3, logger=False,
                   enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    return L.Trainer(callbacks=[callback], **{**options, **kwargs})


def test_fit_profiles_its_own_train_loader_once(capfd: pytest.CaptureFixture[str]) -> None:
    callback = PreflightCallback(fail_on="error", budget_s=6, select=["DL", "SYS"])
    model = TinyRegressor(LightningPairs(), batch_size=6)
    _trainer(callback).fit(model)
    _trainer(callback, max_epochs=1).fit(model)  # a second fit: the node was already checked

    assert model.steps == 2 * 3 + 3
    loader = callback.report.loader
    assert loader["dataset"] == "DataLoader(LightningPairs, batch_size=6, num_workers=0)"
    assert loader["length"] == 96 and loader["batch_size"] == 6
    assert loader["procs_per_node"] == 1
    assert loader["runs"] and loader["runs"][0]["num_workers"] == 0 and loader["runs"][0]["samples_per_s"] > 0
    assert loader["failure"] is None and callback.report.by_rule("DL006") == []
    err = capfd.readouterr().err
    assert err.count(HEADER) == 1, err
    (line,) = [ln for ln in err.splitlines() if ln.startswith(HEADER)]
    assert "DataLoader(LightningPairs, batch_size=6, num_workers=0), 96 samples; " in line
    node_cpus = callback.report.facts["system"]["cpu"]["usable"]
    assert f"1 training process(es) share this node's {node_cpus} usable CPU(s): {node_cpus} each" in line
    # The profile printed is this loader's: its bottleneck and its measured samples/s by num_workers.
    assert f"  loader: bottleneck {loader['bottleneck']}" in err
    curve = re.search(r"\(samples/s by num_workers ([^)]*)\)", err)
    assert curve, err
    printed = [int(point.split(":")[0]) for point in curve.group(1).split(", ")]
    assert printed == sorted(r["num_workers"] for r in loader["runs"] if r.get("samples_per_s"))


def test_fail_on_stops_fit_before_the_first_step(capfd: pytest.CaptureFixture[str]) -> None:
    callback = PreflightCallback(fail_on="error", budget_s=6, select=["DL"])
    model = TinyRegressor(LightningPairs(bad_index=2), batch_size=4)
    with pytest.raises(envdoctor.PreflightError) as caught:
        _trainer(callback).fit(model)
    assert model.steps == 0
    (dl006,) = caught.value.report.by_rule("DL006")
    assert dl006.evidence["index"] == 2 and dl006.evidence["exception"] == "KeyError"
    assert "DL006 dataset-failure" in str(caught.value)
    assert capfd.readouterr().err.count(HEADER) == 1


def test_below_fail_on_it_warns_and_training_goes_on() -> None:
    """fail_on="never": the finding is a warning, and training starts (and meets the bad record itself)."""
    callback = PreflightCallback(fail_on="never", budget_s=6, select=["DL"])
    model = TinyRegressor(LightningPairs(bad_index=2), batch_size=4)
    with pytest.warns(PreflightWarning, match="DL006 dataset-failure"), pytest.raises(KeyError, match="no record 2"):
        _trainer(callback).fit(model)
    assert callback.report.by_rule("DL006")


def test_ddp_profiles_on_local_rank_0_only_with_its_share_of_the_cpus(capfd: pytest.CaptureFixture[str]) -> None:
    """Two CPU processes under DDP (spawned): one profile, with the node's CPUs shared by two."""
    callback = PreflightCallback(fail_on="error", budget_s=6, select=["DL"])
    model = TinyRegressor(LightningPairs(), batch_size=6)
    _trainer(callback, strategy="ddp_spawn", devices=2, max_epochs=1, limit_train_batches=2).fit(model)
    err = capfd.readouterr().err
    assert err.count(HEADER) == 1, err
    (line,) = [ln for ln in err.splitlines() if ln.startswith(HEADER)]
    assert "LightningPairs, batch_size=6" in line
    shared = re.search(r"2 training process\(es\) share this node's (\d+) usable CPU\(s\): (\d+) each", line)
    assert shared, line
    node, each = int(shared.group(1)), int(shared.group(2))
    assert each == max(1, node // 2)


def test_a_failure_on_rank_0_stops_every_rank(capfd: pytest.CaptureFixture[str]) -> None:
    callback = PreflightCallback(fail_on="error", budget_s=6, select=["DL"])
    model = TinyRegressor(LightningPairs(bad_index=2), batch_size=4)
    with pytest.raises(Exception, match="preflight") as caught:
        _trainer(callback, strategy="ddp_spawn", devices=2, max_epochs=1, limit_train_batches=2).fit(model)
    err = capfd.readouterr().err
    assert err.count(HEADER) == 1, err
    assert "error   DL006 dataset-failure: the dataset raised an exception at index 2" in err
    # torch reports the first rank to fail: rank 0 with the findings, or rank 1 told to stop with it.
    assert re.search(r"envdoctor\.(api\.PreflightError|integrations\.node\.PreflightStopped)", str(caught.value))
