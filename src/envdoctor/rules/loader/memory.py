"""DL010 worker-memory-growth: each worker's private memory, measured against the samples it produced,
projected to the end of an epoch and across persistent epochs.

Two measurements, one judgement (`envdoctor.judge.memory`): the smoke test
reads its own workers' USS against the samples each delivered
(inside/loader_memory.py), and `envdoctor run` reads the user's own workers
from outside against the samples the loader yielded (envdoctor.loop); the
walk before the workers start (inside/loader_hazards.py, in the user's
process too under `run`) names the large containers of Python objects the
dataset holds. A finding per measurement whose projection does not fit.
"""
from __future__ import annotations

from collections.abc import Iterator

from envdoctor.facts import Facts
from envdoctor.judge.memory import MemoryJudgement, memory_judgements
from envdoctor.rules import Hit
from envdoctor.units import human_bytes


def _where(j: MemoryJudgement) -> str:
    m = j.measured
    if m.measured_in != "run":
        return "each DataLoader worker's private memory"
    rank = f", rank {m.rank}" if m.rank is not None else ""
    return f"in your own loop (process {m.pid}{rank}), each DataLoader worker's private memory"


def _hit(j: MemoryJudgement) -> Hit:
    p, largest = j.projection, j.container
    holder = (f"; `{largest['path']}` holds them: a {largest['type']} of {largest['length']:,} items, about "
              f"{human_bytes(largest['approx_bytes'])}" if largest else "")
    return Hit(
        message=(f"{_where(j)} grows {j.slope:,.0f} bytes per sample it produces "
                 f"(measured over {j.samples:,} samples a worker, ±{j.stderr:,.0f}); at {p.nw} workers an epoch of "
                 f"{p.length:,} samples is {p.per_worker_samples:,.0f} a worker, so each grows by about "
                 f"{human_bytes(p.growth)}" + (" (capped at the Python objects' size: a random order reaches "
                                              "every page early)" if p.capped else "")
                 + f": {j.verdict}{holder}"),
        evidence={"measured_in": j.measured.measured_in, "pid": j.measured.pid, "rank": j.measured.rank,
                  "bytes_per_sample": j.slope, "stderr_bytes_per_sample": j.stderr, "measured_samples": j.samples,
                  "num_workers": p.nw, "workers_from": p.workers_from, "dataset_length": p.length,
                  "samples_per_worker_epoch": round(p.per_worker_samples),
                  "observed_growth_bytes": j.observed, "projected_growth_per_worker_bytes": int(p.growth),
                  "projected_epoch_bytes": int(p.one_epoch),
                  "capped": p.capped, "recurring": p.recurring, "persistent_workers": p.persistent,
                  "epochs_until_full": p.epochs_left if p.recurring and p.persistent else None,
                  "available_bytes": p.available, "python_bytes": p.python_bytes,
                  "python_share": round(p.share, 3) if p.share is not None else None,
                  "container": dict(largest) if largest else None,
                  "start_method": j.measured.memory.get("start_method"),
                  "shuffled": bool(j.measured.memory.get("shuffled"))},
        fix=("hold the records as NumPy arrays of fixed-width values (np.array(paths, dtype='S…'), an int array "
             "of labels), an Arrow table or tensors instead of lists or dicts of Python objects"
             + (f" (`{largest['path']}`)" if largest else "")
             + "; or keep only what locates a sample and read it per item in __getitem__; until then use fewer "
             "workers" + (", and drop persistent_workers or find the cache that grows" if p.recurring else "")),
        severity=j.severity,
    )


def find_worker_memory_growth(facts: Facts) -> Iterator[Hit]:
    """DL010: worker memory grows with the samples produced, and the projection does not fit."""
    for judgement in memory_judgements(facts):
        yield _hit(judgement)


RULES = {"DL010": find_worker_memory_growth}
