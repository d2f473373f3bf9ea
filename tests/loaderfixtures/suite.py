"""Datasets with a known bottleneck, each built for real, for `--dataset loaderfixtures.suite:NAME`.

Each factory returns (Dataset, DataLoader kwargs). The effects are made large
on purpose (sleeps of many milliseconds, samples a thousand times cheaper than
a handover) so the classification holds on a busy 2-core machine.
"""
from __future__ import annotations

import os
import time

import torch
from torch.utils.data import Dataset, default_collate


class CpuBound(Dataset):
    """A pure-Python transform (the GIL keeps it on one core): about 3 ms of CPU a sample."""

    def __len__(self) -> int:
        return 100_000

    def __getitem__(self, index: int):
        acc = 0
        for k in range(12_000):
            acc = (acc * 31 + k * index) % 1_000_003
        return torch.tensor([acc, index], dtype=torch.float32)


class RemoteRead(Dataset):
    """A network read: 15 ms of waiting a sample, next to no CPU."""

    def __len__(self) -> int:
        return 100_000

    def __getitem__(self, index: int):
        time.sleep(0.015)
        return torch.full((16,), float(index))


class SlowWorkerStart(Dataset):
    """Opens its "database" lazily once per process, which takes a second; the database then serves
    two readers at a time (a semaphore shared with forked workers), 2 ms a sample."""

    def __init__(self) -> None:
        import multiprocessing

        self.opened_in = None
        self.readers = multiprocessing.get_context("fork").BoundedSemaphore(2)

    def __len__(self) -> int:
        return 96

    def __getitem__(self, index: int):
        if self.opened_in != os.getpid():
            time.sleep(1.0)
            self.opened_in = os.getpid()
        with self.readers:
            time.sleep(0.002)
        return torch.full((16,), float(index))


class TinySamples(Dataset):
    """Samples that cost nothing to make: moving them between processes is all the work."""

    def __len__(self) -> int:
        return 10_000_000

    def __getitem__(self, index: int):
        return index


class LargeSamples(Dataset):
    """2 MiB float32 samples fetched from a slow store (10 ms each): 16 MiB batches, which fill a
    small /dev/shm, and a loader that gains from many waiting workers."""

    def __len__(self) -> int:
        return 100_000

    def __getitem__(self, index: int):
        time.sleep(0.010)
        return torch.full((512, 1024), float(index % 7))


def cpu_bound():
    return CpuBound(), {"batch_size": 16}


def remote_read():
    return RemoteRead(), {"batch_size": 8}


def slow_worker_start():
    return SlowWorkerStart(), {"batch_size": 8, "num_workers": 2}


def tiny_samples():
    return TinySamples(), {"batch_size": 1, "num_workers": 4}


def large_samples():
    return LargeSamples(), {"batch_size": 8, "num_workers": 2}


def lambda_collate_spawn():
    return RemoteRead(), {"batch_size": 8, "multiprocessing_context": "spawn",
                          "collate_fn": lambda batch: default_collate(batch)}


def dataset_only():
    """A Dataset without DataLoader settings (the batch size is then assumed)."""
    return RemoteRead()


def remote_read_spawn():
    """The remote read under spawn: workers import torch before their first batch."""
    return RemoteRead(), {"batch_size": 8, "multiprocessing_context": "spawn"}


class Stream(torch.utils.data.IterableDataset):
    """An iterable dataset (no length, no indices): a stream of records, 1 ms each."""

    def __iter__(self):
        for index in range(1_000_000):
            time.sleep(0.001)
            yield torch.full((8,), float(index))


def stream():
    return Stream(), {"batch_size": 16}
