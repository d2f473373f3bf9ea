"""The memory judgement (DL010): does a worker's measured growth, projected to an epoch, still fit?

Two measurements feed it, the same way (`envdoctor.inside.loader_growth`): the
smoke test reads its own workers' private memory against the samples each
produced (`facts["loader"]["memory"]`), and `envdoctor run` reads the user's
own workers from outside against the samples the loader yielded
(`facts["loop"]["loaders"][i]["memory"]`). Each is judged here once per check
(`memory_judgements`, kept on `Facts.judgements`): the slope after warm-up,
projected to the end of an epoch (dataset length ÷ workers) and across
persistent epochs, against the memory actually available (cgroup-aware, as
SYS006 reads it).

Under fork every read of a Python object writes its reference count, so a
worker copies each page of them it touches: growth that ends once a worker
holds its own copy of them all (a random sampler gets there early, so its
projection is capped at their size), but that N workers reach N times.
Growth well past what copy-on-read can copy is something else (a cache, a
leak): with persistent_workers it goes on every epoch.
"""
from __future__ import annotations

from statistics import median
from typing import NamedTuple

from envdoctor.facts import Facts
from envdoctor.facts.loader import ContainerFacts, HazardsFacts, MemoryGrowthFacts
from envdoctor.model import Severity
from envdoctor.units import human_bytes

#: The key the memory judgements are kept under on the Facts they judged (`Facts.judgements`).
KEY = "memory"
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


class Measured(NamedTuple):
    """One measurement of worker memory and what the projection needs of the loader it measured."""

    #: "smoke test" or "run" (the user's own loop), and for a run the process and rank it was in.
    measured_in: str
    pid: int | None
    rank: int | None
    memory: MemoryGrowthFacts
    length: int
    #: The loader's own num_workers (0: none) and persistent_workers.
    current_workers: int
    persistent: bool
    hazards: HazardsFacts | None


class Projection(NamedTuple):
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


class MemoryJudgement(NamedTuple):
    """A measured growth that does not fit: the projection, what it does, and the container that holds it."""

    measured: Measured
    slope: float
    stderr: float
    samples: int
    observed: int
    projection: Projection
    severity: Severity | None
    verdict: str
    container: ContainerFacts | None


def fitted_slope(memory: MemoryGrowthFacts) -> tuple[float, float, int] | None:
    """(bytes a sample, its standard error, samples a worker delivered) across the measured workers."""
    fitted = [w for w in memory.get("workers", []) if w.get("bytes_per_sample") is not None]
    if not fitted:
        return None
    slope = median(float(w["bytes_per_sample"] or 0.0) for w in fitted)
    stderr = max(float(w.get("stderr_bytes_per_sample") or 0.0) for w in fitted)
    samples = int(median(w.get("samples", 0) for w in fitted))
    return slope, stderr, samples


def observed_growth(memory: MemoryGrowthFacts) -> int:
    grown = [w.get("uss_end_bytes", 0) - w.get("uss_start_bytes", 0) for w in memory.get("workers", [])]
    return int(median(grown)) if grown else 0


def _largest(hazards: HazardsFacts | None) -> ContainerFacts | None:
    containers = (hazards or {}).get("containers") or []
    return containers[0] if containers else None


def project(m: Measured, slope: float, observed: int, available: int) -> Projection:
    """Each worker's growth over an epoch (capped at the Python objects' size when a random order reaches them all
    early), whether it recurs, and what it leaves of the memory available."""
    if m.current_workers > 0:
        nw, workers_from = m.current_workers, "your num_workers"
    else:
        nw, workers_from = int(m.memory.get("num_workers") or 2), "the measured num_workers (yours is 0)"
    per_worker_samples = m.length / nw
    linear = slope * per_worker_samples
    python_bytes = int((m.hazards or {}).get("python_bytes") or 0)
    capped = bool(m.memory.get("shuffled")) and python_bytes > 0 and linear > python_bytes
    growth = max(float(python_bytes) if capped else linear, float(observed))
    workers = m.memory.get("workers", [])
    start = max(int(w.get("uss_start_bytes", 0)) for w in workers) if workers else 0
    return Projection(
        nw=nw, workers_from=workers_from, length=m.length, per_worker_samples=per_worker_samples,
        python_bytes=python_bytes, capped=capped, growth=growth,
        recurring=python_bytes == 0 or growth > BEYOND_COPY * python_bytes,
        persistent=m.persistent, available=available, one_epoch=nw * (start + growth),
        epochs_left=int((available - nw * start) // max(1.0, nw * growth)) if available > nw * start else 0,
        share=growth / python_bytes if python_bytes else None)


def _verdict(p: Projection) -> tuple[Severity | None, str] | None:
    """What the projected growth does (an epoch over the memory, a recurring fill, a private copy), or None."""
    if p.one_epoch > p.available:
        return Severity.ERROR, (f"{p.nw} workers reach about {human_bytes(p.one_epoch)} within one epoch, above the "
                                f"{human_bytes(p.available)} available")
    if p.persistent and p.recurring and p.epochs_left <= EPOCHS_HORIZON:
        return None, (f"with persistent_workers the growth recurs every epoch: {p.nw} workers fill the "
                      f"{human_bytes(p.available)} available after about {p.epochs_left} epoch(s)")
    if p.share is None or p.share < PYTHON_SHARE or p.growth < MIN_GROWTH_BYTES:
        return None
    if p.recurring:
        return None, (f"each worker grows by {human_bytes(p.growth)} over the epoch, {p.share:.1f}× the dataset's "
                      f"Python objects ({human_bytes(p.python_bytes)}): copying them on read explains part of it, "
                      f"something else (a cache, a leak) the rest; {p.nw} workers × {human_bytes(p.growth)}")
    return None, (f"each worker ends the epoch holding its own copy of {p.share:.0%} of the dataset's Python "
                  f"objects: {p.nw} workers × {human_bytes(p.growth)}")


def judge(m: Measured, available: int) -> MemoryJudgement | None:
    """One measurement judged: None when the growth is noise or the projection fits."""
    fitted = fitted_slope(m.memory)
    if fitted is None or m.length <= 0:
        return None
    slope, stderr, samples = fitted
    observed = observed_growth(m.memory)
    # A random order can copy nearly everything within the measurement: then the slope flattens (and its
    # error grows) while what the workers already copied says enough.
    if not (slope > SIGNIFICANCE * stderr and observed >= MIN_OBSERVED_BYTES) and observed < MIN_GROWTH_BYTES:
        return None
    p = project(m, slope, observed, available)
    said = _verdict(p)
    if said is None:
        return None
    return MemoryJudgement(measured=m, slope=slope, stderr=stderr, samples=samples, observed=observed,
                           projection=p, severity=said[0], verdict=said[1], container=_largest(m.hazards))


def measurements(facts: Facts) -> list[Measured]:
    """The smoke test's measurement (a synthetic dataset's excepted) and each run loader's."""
    found: list[Measured] = []
    section = facts["loader"]
    if section and section.get("memory") and section.get("length") \
            and section.get("source", {"kind": ""})["kind"] != "synthetic":
        current = section.get("current") or {}
        found.append(Measured("smoke test", None, None, section["memory"], int(section.get("length") or 0),
                              int(current.get("num_workers") or 0), bool(current.get("persistent_workers")),
                              section.get("hazards")))
    loop = facts["loop"]
    for row in loop["loaders"] if loop else []:
        if row.get("memory") and row.get("dataset_length"):
            settings = row["settings"]
            found.append(Measured("run", row["pid"], row["rank"], row["memory"] or {},
                                  int(row["dataset_length"] or 0), int(settings.get("num_workers") or 0),
                                  bool(settings.get("persistent_workers")), row.get("hazards")))
    return found


def memory_judgements(facts: Facts) -> list[MemoryJudgement]:
    """The memory judgements of this check, decided on first use and kept on `facts`."""
    held = facts.judgements.get(KEY)
    if held is None:
        available = int(facts["system"]["memory"]["effective_available"])
        held = facts.judgements[KEY] = [j for m in measurements(facts) if (j := judge(m, available)) is not None]
    return list(held)
