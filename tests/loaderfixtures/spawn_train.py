"""A training script as the README shows it, run as `python spawn_train.py`: spawn workers, a
sampler, a custom collate_fn, and `envdoctor.preflight(loader=...)` before the first epoch.

It prints one JSON line: what preflight found and measured.
"""
from __future__ import annotations

import json
import multiprocessing
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset, WeightedRandomSampler

import envdoctor


class Frames(Dataset):
    """A read that waits 4 ms a sample: workers help."""

    def __len__(self) -> int:
        return 4000

    def __getitem__(self, index: int):
        time.sleep(0.004)
        return {"image": torch.rand(3, 16, 16), "label": index % 10}


def stack_frames(batch):
    return torch.stack([b["image"] for b in batch]), torch.tensor([b["label"] for b in batch])


def main() -> None:
    multiprocessing.set_start_method("spawn")
    dataset = Frames()
    sampler = WeightedRandomSampler(torch.ones(len(dataset)), num_samples=len(dataset))
    loader = DataLoader(dataset, batch_size=32, num_workers=4, sampler=sampler, collate_fn=stack_frames)
    budget = float(sys.argv[1]) if len(sys.argv) > 1 else 12.0
    start = time.monotonic()
    outcome: dict = {}
    try:
        report = envdoctor.preflight(loader=loader, fail_on="error", budget_s=budget, select=["DL", "SPW003"])
    except envdoctor.PreflightError as error:
        report = error.report
        outcome["raised"] = True
    outcome.update(seconds=round(time.monotonic() - start, 2),
                   findings=[{"rule": f.rule, "message": f.message} for f in report.findings],
                   runs=[{k: r.get(k) for k in ("num_workers", "samples_per_s", "first_batch_s")}
                         for r in report.loader["runs"]],
                   skipped=report.loader["skipped"], start_method=report.loader.get("start_method"),
                   failure=report.loader.get("failure"))
    print(json.dumps(outcome))


if __name__ == "__main__":
    main()
