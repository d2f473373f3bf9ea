"""DL010 worker-memory-growth: each worker's private memory, measured against the samples it produced,
projected to the end of an epoch and across persistent epochs.

The smoke test (inside/loader_memory.py) reads every worker's USS against the
samples it delivered and fits the slope after a warm-up; the walk before the
workers start (inside/loader_hazards.py) names the large containers of Python
objects the dataset holds. Under fork every read of such an object writes its
reference count, so a worker copies each page of them it touches: growth
that ends once a worker holds its own copy of them all (a random sampler gets
there early, so its projection is capped at their size), but that N workers
reach N times. Growth well past what copy-on-read can copy is something else
(a cache, a leak): with persistent_workers it goes on every epoch.
"""
from __future__ import annotations

from collections.abc import Iterator
from statistics import median
from typing import NamedTuple

from envdoctor.facts import Facts
from envdoctor.facts.loader import ContainerFacts, LoaderFacts, MemoryGrowthFacts
from envdoctor.model import Severity
from envdoctor.rules import Hit
from envdoctor.units import human_bytes

#: A worker's growth over one epoch this large, and at least this share of the dataset's Python objects,
#: is a warning even where memory suffices: N workers each come to hold a copy.
MIN_GROWTH_BYTES = 32 * 1024**2
PYTHON_SHARE = 0.25
#: Growth counts only when the slope is this many standard errors above zero and the measured workers grew
#: by this much between the warm-up and the last reading (smaller is allocator noise).
SIGNIFICANCE = 3.0
MIN_OBSERVED_BYTES = 256 * 1024
#: Growth above this multiple of the Python objects' size is not copy-on-read: it recurs each epoch.
BEYOND_COPY = 1.5
#: With persistent_workers, recurring growth that fills memory within this many epochs is a warning.
EPOCHS_HORIZON = 50


def _slope(memory: MemoryGrowthFacts) -> tuple[float, float, int] | None:
    """(bytes a sample, its standard error, samples a worker delivered) across the measured workers."""
    fitted = [w for w in memory.get("workers", []) if w.get("bytes_per_sample") is not None]
    if not fitted:
        return None
    slope = median(float(w["bytes_per_sample"] or 0.0) for w in fitted)
    stderr = max(float(w.get("stderr_bytes_per_sample") or 0.0) for w in fitted)
    samples = int(median(w.get("samples", 0) for w in fitted))
    return slope, stderr, samples


def _observed_growth(memory: MemoryGrowthFacts) -> int:
    grown = [w.get("uss_end_bytes", 0) - w.get("uss_start_bytes", 0) for w in memory.get("workers", [])]
    return int(median(grown)) if grown else 0


def _largest(section: LoaderFacts) -> ContainerFacts | None:
    containers = (section.get("hazards") or {}).get("containers") or []
    return containers[0] if containers else None


def _worker_count(section: LoaderFacts, memory: MemoryGrowthFacts) -> tuple[int, str]:
    current = (section.get("current") or {}).get("num_workers") or 0
    if current > 0:
        return int(current), "your num_workers"
    return int(memory.get("num_workers") or 2), "the measured num_workers (yours is 0)"


class _Projection(NamedTuple):
    """One epoch's worker memory, projected from the measured growth."""

    nw: int
    workers_from: str
    length: int
    per_worker_samples: float
    python_bytes: int
    capped: bool
    growth: float
    recurring: bool
    persistent: bool
    available: int
    one_epoch: float
    epochs_left: int
    share: float | None


def _project(facts: Facts, section: LoaderFacts, memory: MemoryGrowthFacts, slope: float, observed: int) -> _Projection:
    """Each worker's growth over an epoch (capped at the Python objects' size when a random order reaches them all
    early), whether it recurs, and what it leaves of the memory available."""
    nw, workers_from = _worker_count(section, memory)
    length = int(section.get("length") or 0)
    per_worker_samples = length / nw
    linear = slope * per_worker_samples
    python_bytes = int((section.get("hazards") or {}).get("python_bytes") or 0)
    capped = bool(memory.get("shuffled")) and python_bytes > 0 and linear > python_bytes
    growth = max(float(python_bytes) if capped else linear, float(observed))
    start = max(int(w.get("uss_start_bytes", 0)) for w in memory.get("workers", [])) if memory.get("workers") else 0
    available = int(facts["system"]["memory"]["effective_available"])
    return _Projection(
        nw=nw, workers_from=workers_from, length=length, per_worker_samples=per_worker_samples,
        python_bytes=python_bytes, capped=capped, growth=growth,
        recurring=python_bytes == 0 or growth > BEYOND_COPY * python_bytes,
        persistent=bool((section.get("current") or {}).get("persistent_workers")),
        available=available, one_epoch=nw * (start + growth),
        epochs_left=int((available - nw * start) // max(1.0, nw * growth)) if available > nw * start else 0,
        share=growth / python_bytes if python_bytes else None)


def _verdict(p: _Projection) -> tuple[Severity | None, str] | None:
    """What the projected growth does (an epoch over the memory, a recurring fill, a private copy), or None."""
    if p.one_epoch > p.available:
        return Severity.ERROR, (f"{p.nw} workers reach about {human_bytes(p.one_epoch)} within one epoch, above the "
                                f"{human_bytes(p.available)} available")
    if p.persistent and p.recurring and p.epochs_left <= EPOCHS_HORIZON:
        return None, (f"with persistent_workers the growth recurs every epoch: {p.nw} workers fill the "
                      f"{human_bytes(p.available)} available after about {p.epochs_left} epoch(s)")
    if p.share is not None and p.share >= PYTHON_SHARE and p.growth >= MIN_GROWTH_BYTES and not p.recurring:
        return None, (f"each worker ends the epoch holding its own copy of {p.share:.0%} of the dataset's Python "
                      f"objects: {p.nw} workers × {human_bytes(p.growth)}")
    return None


def find_worker_memory_growth(facts: Facts) -> Iterator[Hit]:
    """DL010: worker memory grows with the samples produced, and the projection does not fit."""
    section = facts["loader"]
    if not section or not section.get("memory") or not section.get("length"):
        return
    if section.get("source", {"kind": ""})["kind"] == "synthetic":
        return
    memory = section["memory"]
    fitted = _slope(memory)
    if fitted is None:
        return
    slope, stderr, measured = fitted
    observed = _observed_growth(memory)
    # A random order can copy nearly everything within the measurement: then the slope flattens (and its
    # error grows) while what the workers already copied says enough.
    if not (slope > SIGNIFICANCE * stderr and observed >= MIN_OBSERVED_BYTES) and observed < MIN_GROWTH_BYTES:
        return
    p = _project(facts, section, memory, slope, observed)
    said = _verdict(p)
    if said is None:
        return
    severity, verdict = said
    nw, workers_from, length, per_worker_samples = p.nw, p.workers_from, p.length, p.per_worker_samples
    capped, growth, recurring, persistent = p.capped, p.growth, p.recurring, p.persistent
    one_epoch, epochs_left, available, python_bytes, share = (p.one_epoch, p.epochs_left, p.available,
                                                              p.python_bytes, p.share)
    largest = _largest(section)
    holder = (f"; `{largest['path']}` holds them: a {largest['type']} of {largest['length']:,} items, about "
              f"{human_bytes(largest['approx_bytes'])}" if largest else "")
    yield Hit(
        message=(f"each DataLoader worker's private memory grows {slope:,.0f} bytes per sample it produces "
                 f"(measured over {measured:,} samples a worker, ±{stderr:,.0f}); at {nw} workers an epoch of "
                 f"{length:,} samples is {per_worker_samples:,.0f} a worker, so each grows by about "
                 f"{human_bytes(growth)}" + (" (capped at the Python objects' size: a random order reaches "
                                            "every page early)" if capped else "")
                 + f": {verdict}{holder}"),
        evidence={"bytes_per_sample": slope, "stderr_bytes_per_sample": stderr, "measured_samples": measured,
                  "num_workers": nw, "workers_from": workers_from, "dataset_length": length,
                  "samples_per_worker_epoch": round(per_worker_samples),
                  "observed_growth_bytes": observed, "projected_growth_per_worker_bytes": int(growth),
                  "projected_epoch_bytes": int(one_epoch),
                  "capped": capped, "recurring": recurring, "persistent_workers": persistent,
                  "epochs_until_full": epochs_left if recurring and persistent else None,
                  "available_bytes": available, "python_bytes": python_bytes,
                  "python_share": round(share, 3) if share is not None else None,
                  "container": dict(largest) if largest else None,
                  "start_method": memory.get("start_method"), "shuffled": bool(memory.get("shuffled"))},
        fix=("hold the records as NumPy arrays of fixed-width values (np.array(paths, dtype='S…'), an int array "
             "of labels), an Arrow table or tensors instead of lists or dicts of Python objects"
             + (f" (`{largest['path']}`)" if largest else "")
             + "; or keep only what locates a sample and read it per item in __getitem__; until then use fewer "
             "workers" + (", and drop persistent_workers or find the cache that grows" if recurring else "")),
        severity=severity,
    )


RULES = {"DL010": find_worker_memory_growth}
