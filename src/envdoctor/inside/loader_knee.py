"""The knee rule: which worker count the sweep points to. One module, read by every path that picks one.

Four paths pick a num_workers, all with `recommended`: the runner
(`loader_paired.py`, inside the target's interpreter) re-measures the pick
against the user's own setting in paired windows; the host's loader judgement
recommends it (`envdoctor.judge.loader`); `envdoctor run --tune` puts the
smoke test of the loop's own loader into the loop, and `envdoctor run`'s loop
model picks from the sweep it predicts (`envdoctor.judge.loop`). The
runner imports this file as the top-level module `loader_knee` from its own
folder, the host as `envdoctor.inside.loader_knee`, so the setting re-measured is
the one recommended, by construction. Hence the standard library only, and plain
dicts: a run is what the runner's `run` results hold (`num_workers`,
`samples_per_s`, `worker_cpu`, `worker_blocked`, …).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

#: A setting "reaches" the best throughput at this fraction of it.
KNEE_FRACTION = 0.95
#: Workers must beat num_workers=0 by this factor to count as a gain.
WORKER_GAIN = 1.10
#: Workers blocked (not running, not queued for a CPU) this share of their time wait on I/O.
BLOCKED_SHARE = 0.5
#: With a step time, a setting must deliver this multiple of what the step consumes (jitter, epoch starts).
STEP_HEADROOM = 1.25
#: Paired windows give an interval from this many pairs; fewer (the budget cut them) only agree or disagree.
MIN_PAIRS = 3

Run = TypeVar("Run", bound=Mapping[str, Any])


def rate(run: Mapping[str, Any]) -> float:
    """Samples/s of a run, 0 when it measured none."""
    return float(run.get("samples_per_s") or 0.0)


def computing_share(run: Mapping[str, Any]) -> float | None:
    """Of the time a worker was not queued for a CPU, the share it computed (the rest it waited).

    Queueing is left out: on busy CPUs it grows with the number of workers and
    says nothing of whether a worker, given a CPU, computes or waits.
    """
    cpu, blocked = run.get("worker_cpu"), run.get("worker_blocked")
    if cpu is None or blocked is None or cpu + blocked <= 0:
        return None
    return float(cpu) / (cpu + blocked)


def computes_past_cpus(run: Mapping[str, Any], usable_cpus: int | None) -> bool:
    """More workers than usable CPUs, and workers that compute rather than wait.

    Such a run can only beat the usable CPUs' worth of workers by taking CPU
    time from other processes (the training process among them), or by noise:
    it is never a setting to recommend. Unknown worker accounting counts as
    waiting, so nothing is excluded on no evidence.
    """
    if not usable_cpus or run["num_workers"] <= usable_cpus:
        return False
    share = computing_share(run)
    return share is not None and share >= 1 - BLOCKED_SHARE


def measured(runs: Sequence[Run]) -> list[Run]:
    """The runs that measured a throughput, fewest workers first."""
    return sorted((r for r in runs if r.get("samples_per_s")), key=lambda r: r["num_workers"])


def eligible_runs(runs: Sequence[Run], usable_cpus: int | None) -> list[Run]:
    """The runs a recommendation may be drawn from (see computes_past_cpus)."""
    return [r for r in runs if not computes_past_cpus(r, usable_cpus)]


def knee(runs: Sequence[Run], usable_cpus: int | None = None, consumer: float | None = None) -> Run | None:
    """The measured run with the fewest workers that reaches ~95% of the best throughput.

    Workers that do not beat num_workers=0 by 10% are not worth their processes,
    whatever the noise put first: then the knee is num_workers=0. With a
    `consumer` (the samples/s a training step takes), num_workers=0 is rated as it
    delivers in the loop (`in_loop_rate`): it loads only between steps.
    """
    eligible = eligible_runs(measured(runs), usable_cpus)
    if not eligible:
        return None

    def delivered(run: Mapping[str, Any]) -> float:
        return in_loop_rate(rate(run), consumer) if run["num_workers"] == 0 else rate(run)

    zero = next((r for r in eligible if r["num_workers"] == 0), None)
    best = max(delivered(r) for r in eligible)
    if zero is not None and best < WORKER_GAIN * delivered(zero):
        return zero
    return min((r for r in eligible if delivered(r) >= KNEE_FRACTION * best), key=lambda r: r["num_workers"])


def in_loop_rate(alone: float, consumer: float | None) -> float:
    """Samples/s num_workers=0 delivers to a training loop whose step takes `consumer` samples/s: the main process
    loads a batch, then runs the step, in turn (1 / (1/alone + 1/consumer)); `alone` without a consumer."""
    if not consumer or alone <= 0:
        return alone
    return 1.0 / (1.0 / alone + 1.0 / consumer)


def enough_for_step(runs: Sequence[Run], chosen: Mapping[str, Any], consumer: float) -> Run | None:
    """The fewest workers that outrun the training step (`consumer` samples/s) with headroom, when that is
    fewer than `chosen`'s; never 0 when `chosen` has workers."""
    floor = 1 if chosen["num_workers"] > 0 else 0
    fits = [r for r in runs if floor <= r["num_workers"] < chosen["num_workers"]
            and rate(r) >= STEP_HEADROOM * consumer]
    return min(fits, key=lambda r: r["num_workers"]) if fits else None


def recommended(runs: Sequence[Run], usable_cpus: int | None, batch_size: int | None = None,
                step_time_s: float | None = None) -> tuple[Run | None, str]:
    """The run the sweep recommends and why: ("knee") or, with a step time, the fewest workers that outrun
    the step ("step"). (None, "knee") when nothing was measured.

    The one knee: the runner's candidate (`loader_paired.candidate`), the host's recommendation
    (`envdoctor.judge.loader`), `envdoctor run --tune`'s and the loop model's picks (`envdoctor.judge.loop`) all
    come from this call.
    """
    consumer = batch_size / step_time_s if step_time_s and batch_size else None
    chosen = knee(runs, usable_cpus, consumer)
    if chosen is None:
        return None, "knee"
    if consumer:
        eligible = eligible_runs(measured(runs), usable_cpus)
        fewer = enough_for_step(eligible, chosen, consumer)
        if fewer is not None:
            return fewer, "step"
    return chosen, "knee"
