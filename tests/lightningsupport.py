"""The tiny Lightning model, data and trainer of tests/test_integrations_lightning.py, and the callback under test.

A module of their own, imported by that test module's fixture when a test runs: a module-level
`import lightning` would cost every pytest-xdist worker about 3 CPU-s at collection, whether or not
it runs these tests. ddp_spawn's ranks find the classes here by name when they unpickle the model.
"""
from __future__ import annotations

from typing import Any

import lightning.pytorch as L
from torch.utils.data import DataLoader, Dataset

import torch
from envdoctor.integrations.lightning import PreflightCallback

__all__ = ["LightningPairs", "PreflightCallback", "TinyRegressor", "trainer"]


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


def trainer(callback: PreflightCallback, **kwargs: Any) -> L.Trainer:
    """A CPU Trainer with `callback`, nothing written, nothing shown: 2 epochs of 3 batches unless `kwargs` say."""
    options = dict(accelerator="cpu", devices=1, max_epochs=2, limit_train_batches=3, logger=False,
                   enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    return L.Trainer(callbacks=[callback], **{**options, **kwargs})
