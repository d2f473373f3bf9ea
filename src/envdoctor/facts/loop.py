"""The `loop` section: what `envdoctor run` observed in the user's own training loop.

Observations only, filed from the observer's events and the supervisor's
samples (`envdoctor.loop.supervisor.CommandRun`): per process and per
DataLoader, the seconds each step waited in `next()` and the seconds between
batches (the step), over the window after warm-up; the process tree's CPU
time and the GPUs' utilisation inside that window. Which loader speaks for the
run, whether it waits too long and what to set is the judge layer's
(`envdoctor.judge.loop`), said as DL009 by `envdoctor.rules.loader.loop`.

A check (`envdoctor check`) never measures a loop: there the section is None.
"""
from __future__ import annotations

import bisect
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypedDict, final

from envdoctor.facts.loader import HazardsFacts, MemoryGrowthFacts
from envdoctor.inside.loader_growth import uss_source, worker_growth
from envdoctor.redact import redact_command, redact_environ

if TYPE_CHECKING:  # pragma: no cover
    from envdoctor.config import FactsReader


class LoopSettings(TypedDict, total=False):
    """The DataLoader's own settings, as the observer read them from the loader."""

    num_workers: int
    batch_size: int | None
    prefetch_factor: int | None
    pin_memory: bool
    persistent_workers: bool
    start_method: str | None
    dataset: str


class LoopLoader(TypedDict):
    """One DataLoader in one process, over its window (or what it had when the process ended)."""

    pid: int
    rank: int | None
    local_rank: int | None
    #: "transformers" (the HF Trainer), "lightning", or None: who built the loop, as the observer saw it.
    framework: str | None
    settings: LoopSettings
    #: Steps inside the window; `complete` says whether the window filled.
    steps: int
    complete: bool
    #: Totals over the window, seconds.
    wait_total_s: float
    step_total_s: float
    data_wait_share: float | None
    batches_per_s: float | None
    first_batch_s: list[float]
    #: Batches whose gap held another loader's batches (a validation pass), left out of the window.
    interrupted: int
    window_start: float | None
    window_end: float | None
    #: torch's intra-op threads in the process, and OMP_NUM_THREADS as it saw it.
    intra_op_threads: int | None
    omp_num_threads: str | None
    #: DL010: the workers' private memory read from outside against the samples the loader yielded (the
    #: same measurement as the smoke test's), or None for a loader without workers.
    memory: MemoryGrowthFacts | None
    #: The dataset's length, and the large Python containers it holds (the smoke test's walk, run in the
    #: user's process when the loader first yields), for the projection; None when not known.
    dataset_length: int | None
    hazards: HazardsFacts | None


class LoopCpu(TypedDict):
    """CPU time of the command's whole process tree inside the window."""

    cpu_s: float
    window_s: float
    usable_cpus: int
    #: cpu_s / (window_s × usable_cpus): 1.0 means every usable CPU was busy.
    busy_share: float
    processes: int
    #: The whole machine's CPUs busy in the window (every process, the neighbours too), 0..1; None unknown.
    machine_busy_share: float | None


class LoopGpu(TypedDict, total=False):
    index: int
    name: str
    util_mean: float | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    samples: int


@final  # no subclass adds keys: `"…" in window` tells it from the loader's PairedWindow
class LoopProofWindow(TypedDict):
    """One pair of `--prove`'s bounded runs: the loop's steps per second, a batch each, with either setting."""

    order: Literal["current-first", "candidate-first"]
    current_batches_per_s: float
    candidate_batches_per_s: float


class LoopProof(TypedDict, total=False):
    """`--prove`'s paired bounded runs of the command, the candidate injected against the user's settings (judged
    as the smoke test's paired windows are: `envdoctor.judge.pairing`)."""

    current: int
    candidate: int
    windows: list[LoopProofWindow]
    #: Why fewer pairs than planned were measured, if so.
    cut: str | None
    #: Each bounded run's window, in steps.
    steps: int
    #: Why nothing was proved (no setting was predicted to remove the wait).
    skipped: str


class LoopFacts(TypedDict):
    command: list[str]
    returncode: int | None
    start_error: str | None
    stopped: bool
    #: measured | no-bootstrap | no-loader | too-short | start-failed
    outcome: str
    plan: dict[str, Any]
    python_processes: int
    loaders: list[LoopLoader]
    cpu: LoopCpu | None
    cuda: dict[str, Any] | None
    environment: dict[str, str]
    wall_s: float
    #: `--prove`: the paired bounded runs (candidate injected against the user's settings), or None.
    proof: LoopProof | None
    #: `--tune`: what the smoke test of the same loader was given, or why it did not run; None without --tune.
    tune: dict[str, Any] | None


def gather_loop(facts: FactsReader) -> LoopFacts | None:
    """Only `envdoctor run` measures a loop, and hands its section in as a preset."""
    return None


def redacted_command(argv: Sequence[str]) -> list[str]:
    """The command line as a report shows it: secrets redacted by option name and by shape (envdoctor.redact)."""
    return redact_command(argv)


def _loader_row(event: Mapping[str, Any]) -> LoopLoader:
    waits = [float(x) for x in event.get("wait_s") or []]
    steps = [float(x) for x in event.get("step_s") or []]
    wait, step = sum(waits), sum(steps)
    total = wait + step
    return {
        "pid": int(event.get("pid") or 0),
        "rank": event.get("rank"),
        "local_rank": event.get("local_rank"),
        "framework": event.get("framework"),
        "settings": dict(event.get("settings") or {}),  # type: ignore[typeddict-item]  # the observer writes the LoopSettings keys as JSON
        "steps": len(steps),
        "complete": event.get("event") == "window",
        "wait_total_s": round(wait, 6),
        "step_total_s": round(step, 6),
        "data_wait_share": round(wait / total, 4) if total > 0 else None,
        "batches_per_s": round(len(steps) / total, 3) if total > 0 else None,
        "first_batch_s": [float(x) for x in event.get("first_batch_s") or []],
        "interrupted": int(event.get("interrupted") or 0),
        "window_start": event.get("window_start"),
        "window_end": event.get("time") if event.get("event") == "window" else None,
        "intra_op_threads": event.get("intra_op_threads"),
        "omp_num_threads": event.get("omp_num_threads"),
        "memory": None,
        "dataset_length": None,
        "hazards": None,
    }


#: Readings of a worker needed for a slope (the fit leaves the first share out as warm-up).
MIN_READINGS = 6


def _yielded_at(series: Sequence[tuple[float, int]], times: Sequence[float], when: float) -> float | None:
    """The loader's samples yielded by `when`, between its progress readings (`times`: theirs); None before the
    first."""
    at = bisect.bisect_right(times, when)
    if at == 0:
        return None
    if at == len(series):
        return float(series[-1][1])
    (t0, y0), (t1, y1) = series[at - 1], series[at]
    return y0 + (y1 - y0) * (when - t0) / (t1 - t0) if t1 > t0 else float(y0)


def _worker_points(readings: Sequence[tuple[float, int]], progress: Sequence[tuple[float, int]], base: int,
                   workers: int) -> list[tuple[int, int]]:
    """(samples this worker delivered, USS) at each reading: the loader's samples since the worker started,
    shared evenly (a map-style loader hands its workers batches in turn)."""
    points = []
    times = [t for t, _ in progress]
    for when, uss in readings:
        yielded = _yielded_at(progress, times, when)
        if yielded is not None and yielded >= base:
            points.append((int((yielded - base) / workers), uss))
    return points


def _int_pids(event: Mapping[str, Any]) -> list[int]:
    return [p for p in event.get("pids") or [] if isinstance(p, int)]


def _walked(event: Mapping[str, Any]) -> HazardsFacts | None:
    """The observer's walk of the dataset (its large Python containers), or None where it failed."""
    hazards = event.get("hazards")
    if not isinstance(hazards, dict) or "error" in hazards:
        return None
    return {"containers": list(hazards.get("containers") or []), "python_bytes": int(hazards.get("python_bytes") or 0),
            "objects_visited": int(hazards.get("objects_visited") or 0), "cut": bool(hazards.get("cut"))}


def worker_memory(run: Any, pid: int, loader: object, row: LoopLoader, epochs: int) -> None:
    """DL010 for one observed loader: each named worker's USS against the samples it delivered."""
    named = [e for e in run.events if e.get("event") == "workers" and e.get("pid") == pid
             and e.get("loader") == loader]
    progress = getattr(run, "progress", {}).get((pid, loader)) or []
    if not named or not progress:
        return
    rows, seconds = [], 0.0
    for event in named:
        pids = _int_pids(event)
        for worker in pids:
            readings = getattr(run, "worker_uss", {}).get(worker) or []
            points = _worker_points(readings, progress, int(event.get("samples") or 0), len(pids))
            if len(points) >= MIN_READINGS:
                rows.append(worker_growth(points))
                seconds = max(seconds, readings[-1][0] - readings[0][0])
    last = named[-1]
    row["dataset_length"] = last.get("length") if isinstance(last.get("length"), int) else None
    row["hazards"] = _walked(last)
    if rows:
        row["memory"] = {"num_workers": len(_int_pids(last)), "seconds": round(seconds, 3), "epoch_done": epochs > 0,
                         "shuffled": bool(last.get("shuffled")), "start_method": row["settings"].get("start_method"),
                         "workers": rows, "source": uss_source()}


def tree_cpu(samples: Sequence[tuple[float, Mapping[tuple[int, float], float]]], start: float, end: float,
             usable_cpus: int) -> LoopCpu | None:
    """CPU seconds the whole tree spent between the first and last sample inside [start, end]."""
    inside = [(t, cpu) for t, cpu in samples if start <= t <= end]
    if len(inside) < 2:
        return None
    (t0, first), (t1, _last) = inside[0], inside[-1]
    peak: dict[tuple[int, float], float] = {}
    for _t, cpu in inside:
        for key, value in cpu.items():
            peak[key] = max(peak.get(key, 0.0), value)
    used = sum(max(0.0, value - first.get(key, 0.0)) for key, value in peak.items())
    span = t1 - t0
    if span <= 0:
        return None
    return {"cpu_s": round(used, 3), "window_s": round(span, 3), "usable_cpus": usable_cpus,
            "busy_share": round(used / (span * max(1, usable_cpus)), 3), "processes": len(peak),
            "machine_busy_share": None}


def machine_busy(samples: Sequence[tuple[float, float, float]], start: float, end: float) -> float | None:
    """The share of the whole machine's CPU time that was busy between the samples inside [start, end]."""
    inside = [(busy, total) for t, busy, total in samples if start <= t <= end]
    if len(inside) < 2 or inside[-1][1] <= inside[0][1]:
        return None
    return round((inside[-1][0] - inside[0][0]) / (inside[-1][1] - inside[0][1]), 3)


def gpu_summary(samples: Sequence[tuple[float, Sequence[Mapping[str, Any]]]], start: float, end: float,
                error: str | None) -> dict[str, Any] | None:
    """Each GPU's mean utilisation and peak memory inside the window; None where NVML does not answer."""
    if error is not None and not samples:
        return None
    inside = [rows for t, rows in samples if start <= t <= end] or [rows for _t, rows in samples]
    devices: dict[int, dict[str, Any]] = {}
    for rows in inside:
        for row in rows:
            device = devices.setdefault(int(row["index"]), {"index": int(row["index"]), "name": row.get("name"),
                                                             "util": [], "memory_used_bytes": None,
                                                             "memory_total_bytes": row.get("memory_total_bytes")})
            if row.get("util") is not None:
                device["util"].append(float(row["util"]))
            if row.get("memory_used_bytes") is not None:
                device["memory_used_bytes"] = max(device["memory_used_bytes"] or 0, int(row["memory_used_bytes"]))
    if not devices:
        return None
    out = []
    for device in devices.values():
        util = device.pop("util")
        out.append({**device, "util_mean": round(sum(util) / len(util), 1) if util else None, "samples": len(util)})
    return {"devices": out}


def _last_window_per_loader(events: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Each loader's closing `window` event, or its last `partial` one when it never closed."""
    by_loader: dict[tuple[int, object], Mapping[str, Any]] = {}
    for event in events:
        if event.get("event") in ("window", "partial"):
            key = (int(event.get("pid") or 0), event.get("loader"))
            if key not in by_loader or by_loader[key].get("event") != "window":
                by_loader[key] = event
    return list(by_loader.values())


def _outcome(run: Any, loaders: Sequence[LoopLoader], windows: Sequence[LoopLoader]) -> str:
    """How far the observation got: start-failed, no-bootstrap, no-loader, too-short or measured."""
    seen = any(e.get("event") == "loader" for e in run.events)
    if run.start_error:
        return "start-failed"
    if not run.loaded:
        return "no-bootstrap"
    if not seen and not loaders:
        return "no-loader"
    if not windows:
        return "too-short"
    return "measured"


def loop_facts(run: Any, plan: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> LoopFacts:
    """File one observed run (`CommandRun`) into the section."""
    loaders = []
    for event in _last_window_per_loader(run.events):
        row = _loader_row(event)
        worker_memory(run, row["pid"], event.get("loader"), row, int(event.get("epochs") or 0))
        loaders.append(row)
    loaders.sort(key=lambda row: (row["rank"] if row["rank"] is not None else -1, row["pid"], -row["steps"]))
    windows = [row for row in loaders if row["complete"]]
    outcome = _outcome(run, loaders, windows)
    cpu = cuda = None
    if windows:
        start = min(row["window_start"] or 0.0 for row in windows)
        end = max(row["window_end"] or 0.0 for row in windows)
        cpu = tree_cpu(run.cpu_samples, start, end, run.usable_cpus)
        if cpu is not None:
            cpu["machine_busy_share"] = machine_busy(getattr(run, "machine_samples", []), start, end)
        cuda = gpu_summary(run.gpu_samples, start, end, run.gpu_error)
    return {
        "command": redacted_command(run.argv),
        "returncode": run.returncode,
        "start_error": run.start_error,
        "stopped": run.stopped,
        "outcome": outcome,
        "plan": dict(plan),
        "python_processes": len(run.loaded),
        "loaders": loaders,
        "cpu": cpu,
        "cuda": cuda,
        "environment": redact_environ(os.environ if environ is None else environ),
        "wall_s": round(run.wall_s, 3),
        "proof": None,
        "tune": None,
    }
