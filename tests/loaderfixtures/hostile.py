"""Datasets that fail the way real ones do, for `--dataset loaderfixtures.hostile:NAME`."""
from __future__ import annotations

import os
import signal
import time

import torch
from torch.utils.data import Dataset, get_worker_info


class _Base(Dataset):
    def __len__(self) -> int:
        return 4096

    def sample(self, index: int):
        return torch.full((8,), float(index))


class RaisesAt7(_Base):
    def __getitem__(self, index: int):
        if index == 7:
            raise ValueError(f"corrupt record {index}")
        return self.sample(index)


class SleepsForever(_Base):
    def __getitem__(self, index: int):
        if index == 3:
            time.sleep(3600)
        return self.sample(index)


class SegfaultsWorker(_Base):
    """Fine in the main process; kills the worker process fetching index 5 (as a native crash would)."""

    def __getitem__(self, index: int):
        if index == 5 and get_worker_info() is not None:
            os.kill(os.getpid(), signal.SIGSEGV)
        return self.sample(index)


class SegfaultsMain(_Base):
    """Kills whatever process fetches index 4, the main process included."""

    def __getitem__(self, index: int):
        if index == 4:
            os.kill(os.getpid(), signal.SIGSEGV)
        return self.sample(index)


class ExitsWorker(_Base):
    def __getitem__(self, index: int):
        if index == 2 and get_worker_info() is not None:
            os._exit(3)
        return self.sample(index)


class Opaque:
    """Not a tensor, number, array, dict or list: default_collate cannot batch it."""

    def __init__(self, index: int) -> None:
        self.index = index


class NonTensors(_Base):
    def __getitem__(self, index: int):
        return Opaque(index)


class LenLies(Dataset):
    def __len__(self) -> int:
        return 1000

    def __getitem__(self, index: int):
        if index >= 10:
            raise IndexError(f"index {index} out of range")
        return torch.zeros(4)


class Allocates20G(_Base):
    def __getitem__(self, index: int):
        return torch.ones(20 * 1024**3, dtype=torch.uint8)


def raises_at_7():
    return RaisesAt7(), {"batch_size": 4}


def sleeps_forever():
    return SleepsForever(), {"batch_size": 4}


def segfaults_worker():
    return SegfaultsWorker(), {"batch_size": 4, "num_workers": 2}


def segfaults_main():
    return SegfaultsMain(), {"batch_size": 4}


def exits_worker():
    return ExitsWorker(), {"batch_size": 4, "num_workers": 1}


def non_tensors():
    return NonTensors(), {"batch_size": 4}


def len_lies():
    return LenLies(), {"batch_size": 4}


def allocates_20g():
    return Allocates20G(), {"batch_size": 1}


def factory_raises():
    raise RuntimeError("cannot reach the data bucket")


class Fine(_Base):
    def __getitem__(self, index: int):
        return self.sample(index)


def bad_kwargs():
    """A typo in the DataLoader settings the factory returns."""
    return Fine(), {"batch_size": 4, "num_wrokers": 2}
