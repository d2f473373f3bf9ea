"""Judging the measured runs: which bottleneck, which settings, how much they gain.

Pure functions of the loader section's measurements (no processes, no
clocks), so the classification can be tested on recorded numbers as well as
on live runs.

The classes, in the order they are decided:

- none: a step time is known and the recommended loader outruns the step;
- startup: worker start-up takes over half the time of an epoch's loading;
- ipc: workers do not beat num_workers=0 in steady state (moving each batch
  between processes costs more than making it), unless one usable CPU is
  the reason, which is cpu-saturated;
- storage: workers help and `__getitem__` mostly waits (blocked on reads, the
  network, sleeps) rather than computes, or raw reads outweigh decoding;
- cpu-saturated: workers help until every usable CPU is busy, or workers
  that do not help waited for a CPU;
- getitem: workers help, the samples cost CPU and the CPUs are not all busy;
- None when nothing measured tells the causes apart (one worker that merely
  matches num_workers=0, and no more measured).

Computing workers past the usable CPUs never count as a gain (computes_past_cpus).
"""
from __future__ import annotations

from typing import Any

#: A setting "reaches" the best throughput at this fraction of it.
KNEE_FRACTION = 0.95
#: Workers must beat num_workers=0 by this factor to count as a gain.
WORKER_GAIN = 1.10
#: Workers below this share of num_workers=0 lose to it outright.
WORKER_LOSS = 0.9
#: Start-up counts as the bottleneck above this share of an epoch's loading time.
STARTUP_SHARE = 0.5
#: Below this, start-up is too small to mention whatever its share.
STARTUP_FLOOR_S = 0.25
#: `__getitem__` that is blocked (not running, not waiting for a CPU) this much of its time waits on I/O.
BLOCKED_SHARE = 0.5
#: The CPUs count as all busy at this fraction of the usable CPUs.
CPU_BUSY_SHARE = 0.8
#: Workers computing or queued for a CPU this share of the time are not idle on IPC.
WORKER_BUSY_SHARE = 0.6
#: Workers queued for a CPU this share of the time find the CPUs taken.
CPU_WAIT_SHARE = 0.25
#: With a step time, a setting must deliver this multiple of what the step consumes (jitter, epoch starts).
STEP_HEADROOM = 1.25


def _rate(run: dict[str, Any] | None) -> float | None:
    return run.get("samples_per_s") if run else None


def measured_runs(section: dict[str, Any]) -> list[dict[str, Any]]:
    return sorted((r for r in section.get("runs") or [] if r.get("samples_per_s")),
                  key=lambda r: r["num_workers"])


def computes_past_cpus(run: dict[str, Any], usable_cpus: int | None) -> bool:
    """More workers than usable CPUs, and workers that compute rather than wait.

    Such a run can only beat the usable CPUs' worth of workers by taking CPU
    time from other processes (the training process among them), or by noise:
    it is never a setting to recommend. Workers that mostly wait (reads, the
    network) gain past the CPUs honestly. Unknown worker accounting counts as
    waiting, so nothing is excluded on no evidence.
    """
    if not usable_cpus or run["num_workers"] <= usable_cpus:
        return False
    share = computing_share(run)
    return share is not None and share >= 1 - BLOCKED_SHARE


def computing_share(run: dict[str, Any]) -> float | None:
    """Of the time a worker was not queued for a CPU, the share it computed (the rest it waited).

    Queueing is left out: on busy CPUs it grows with the number of workers and
    says nothing of whether a worker, given a CPU, computes or waits.
    """
    cpu, blocked = run.get("worker_cpu"), run.get("worker_blocked")
    if cpu is None or blocked is None or cpu + blocked <= 0:
        return None
    return cpu / (cpu + blocked)


def eligible_runs(runs: list[dict[str, Any]], usable_cpus: int | None) -> list[dict[str, Any]]:
    """The runs a recommendation may be drawn from (see computes_past_cpus)."""
    return [r for r in runs if not computes_past_cpus(r, usable_cpus)]


def knee(runs: list[dict[str, Any]], usable_cpus: int | None = None) -> dict[str, Any] | None:
    """The run with the fewest workers that reaches ~95% of the best throughput.

    Workers that do not beat num_workers=0 by 10% are not worth their processes,
    whatever the noise put first: then the knee is num_workers=0. With the
    usable CPUs known, computing workers past them are left out (computes_past_cpus).
    """
    runs = eligible_runs(runs, usable_cpus)
    if not runs:
        return None
    zero = next((r for r in runs if r["num_workers"] == 0), None)
    best = max(r["samples_per_s"] for r in runs)
    if zero is not None and best < WORKER_GAIN * zero["samples_per_s"]:
        return zero
    return min((r for r in runs if r["samples_per_s"] >= KNEE_FRACTION * best), key=lambda r: r["num_workers"])


def startup_cost(run: dict[str, Any], batch_size: int) -> float | None:
    """Seconds the first batch took beyond what one batch costs in steady state."""
    first, rate = run.get("first_batch_s"), run.get("samples_per_s")
    if first is None or not rate:
        return None
    # Each of N workers makes a whole batch, so in steady state one batch takes N × batch / rate.
    return max(0.0, first - batch_size * max(1, run["num_workers"]) / rate)


def _worker_busy(run: dict[str, Any]) -> float:
    """Share of the time a worker computed or waited for a CPU."""
    return (run.get("worker_cpu") or 0) + (run.get("worker_runqueue") or 0)


def classify(section: dict[str, Any], usable_cpus: int, step_time_s: float | None) -> tuple[str | None, str]:
    """The bottleneck class and one sentence saying why."""
    runs = measured_runs(section)
    if section.get("failure") or not runs:
        return None, "no run measured a throughput"
    batch_size = int(section.get("batch_size") or 1)
    chosen = knee(runs, usable_cpus)
    assert chosen is not None
    rate = chosen["samples_per_s"]
    if step_time_s:
        consumer = batch_size / step_time_s
        if rate >= consumer:
            return "none", (f"the loader delivers {rate:.0f} samples/s with num_workers={chosen['num_workers']}, "
                            f"more than the {consumer:.0f} samples/s a {step_time_s:g} s step consumes")
    zero = next((r for r in runs if r["num_workers"] == 0), None)
    workers = [r for r in eligible_runs(runs, usable_cpus) if r["num_workers"] > 0]
    if not workers:
        return None, "no run with workers could be measured, so nothing tells the causes apart"
    getitem = section.get("getitem") or {}
    length = section.get("length")
    if workers and chosen["num_workers"] > 0 and length:
        startup = startup_cost(chosen, batch_size) or 0.0
        epoch_load = length / rate
        if startup >= STARTUP_FLOOR_S and startup >= STARTUP_SHARE * (startup + epoch_load):
            return "startup", (f"starting {chosen['num_workers']} worker(s) takes {startup:.2f} s while loading "
                               f"an epoch of {length} samples takes {epoch_load:.2f} s in steady state")
    if zero and workers:
        best_worker = max(workers, key=lambda r: r["samples_per_s"])
        # One worker at best matches num_workers=0; only losing to it, or failing to beat it
        # with several workers, says the handover costs more than the work.
        conclusive = (best_worker["samples_per_s"] < WORKER_LOSS * zero["samples_per_s"]
                      or any(r["num_workers"] >= 2 for r in workers))
        # The loss must hold for the best worker setting's fastest window too: means of noisy runs
        # (other processes taking the CPUs now and then) decide nothing.
        best_window = best_worker.get("samples_per_s_max") or best_worker["samples_per_s"]
        if conclusive and best_window < WORKER_GAIN * zero["samples_per_s"]:
            # IPC-bound workers sit idle (blocked on the queue) while the main process unpacks
            # batches; workers that compute or queue for a CPU the whole time are short of CPUs.
            computing = (getitem.get("cpu_fraction") or 0) >= 0.5
            accounted = [r for r in workers if r.get("worker_cpu") is not None]
            busy = max((_worker_busy(r) for r in accounted), default=0.0)
            if computing and (usable_cpus <= 1 or busy >= WORKER_BUSY_SHARE):
                queued = max(accounted, key=lambda r: r.get("worker_runqueue") or 0, default={})
                waited = queued.get("worker_runqueue") or 0
                return "cpu-saturated", (
                    "workers cannot beat num_workers=0: __getitem__ computes and "
                    + ("there is a single usable CPU" if usable_cpus <= 1 else
                       f"the workers were computing or waiting for a CPU {busy:.0%} of the time"
                       + (f" (with num_workers={queued['num_workers']} waiting {waited:.0%})" if waited else "")
                       + ": the usable CPUs are taken, by the workers or by other processes"))
            return "ipc", (f"the best worker setting (num_workers={best_worker['num_workers']}, "
                           f"{best_worker['samples_per_s']:.0f} samples/s) does not beat num_workers=0 "
                           f"({zero['samples_per_s']:.0f} samples/s): handing batches between processes "
                           "costs more than making them")
    blocked = getitem.get("blocked_fraction")
    read_s, decode_s = getitem.get("read_s"), getitem.get("decode_s")
    # Blocked against computing, leaving out time spent queued for a busy CPU (which dilutes both).
    cpu_share = getitem.get("cpu_fraction")
    waits = (blocked / (blocked + cpu_share) if blocked is not None and cpu_share is not None
             and blocked + cpu_share > 0 else blocked)
    if (waits is not None and waits >= BLOCKED_SHARE) or (read_s is not None and decode_s is not None
                                                          and read_s > decode_s):
        detail = (f"raw reads take {read_s * 1e3:.2f} ms a sample against {decode_s * 1e3:.2f} ms of decoding"
                  if read_s is not None and decode_s is not None and read_s > decode_s else
                  f"__getitem__ is blocked (waiting on reads, the network or sleeps) {blocked:.0%} of its time"
                  + (f" and computes {cpu_share:.0%}" if cpu_share is not None and waits != blocked else ""))
        return "storage", detail
    # At or past the CPUs only workers that compute saturate them; waiting ones do not. CPUs used,
    # not demanded: on CPUs other processes hold, queueing grows with every worker added.
    share = computing_share(chosen)
    at_cpus = chosen["num_workers"] >= usable_cpus and (share is None or share >= 1 - BLOCKED_SHARE)
    used = (chosen.get("main_cpu") or 0) + chosen["num_workers"] * (chosen.get("worker_cpu") or 0)
    if at_cpus or used >= CPU_BUSY_SHARE * usable_cpus:
        waiting = chosen.get("worker_runqueue") or 0
        return "cpu-saturated", (f"with num_workers={chosen['num_workers']} the loader uses {used:.1f} of "
                                 f"{usable_cpus} usable CPUs"
                                 + (f" and its workers wait for a CPU {waiting:.0%} of the time" if waiting else "")
                                 + "; more workers cannot add throughput")
    best_worker = max(workers, key=lambda r: r["samples_per_s"])
    no_gain = zero is not None and best_worker["samples_per_s"] < WORKER_GAIN * zero["samples_per_s"]
    # Workers no more than the CPUs that still waited for one: the CPUs are taken (by the main
    # process or by other processes), whatever the curve's noise says of the gain.
    queued = [r for r in workers if r["num_workers"] <= usable_cpus
              and (r.get("worker_runqueue") or 0) >= CPU_WAIT_SHARE]
    if queued:
        worst = max(queued, key=lambda r: r["worker_runqueue"])
        return "cpu-saturated", (
            ("workers do not beat num_workers=0, and " if no_gain else "")
            + f"with num_workers={worst['num_workers']} (no more than the {usable_cpus} usable CPU(s)) the "
            f"workers waited for a CPU {worst['worker_runqueue']:.0%} of the time: the CPUs are taken, by the "
            "loader or by other processes")
    if no_gain:
        # Too few workers measured to call it IPC, and no sign of busy CPUs: nothing to go on.
        return None, (f"num_workers={best_worker['num_workers']} ({best_worker['samples_per_s']:.0f} samples/s) "
                      f"does not beat num_workers=0 ({zero['samples_per_s']:.0f} samples/s), and no more workers "
                      "were measured: nothing tells the causes apart")
    per_sample = getitem.get("per_sample_s")
    cost = f"{per_sample * 1e3:.2f} ms a sample" if per_sample else "its cost"
    return "getitem", f"__getitem__ ({cost}) limits the loader and the CPUs are not all busy"


def enough_for_step(runs: list[dict[str, Any]], chosen: dict[str, Any], consumer: float) -> dict[str, Any] | None:
    """The fewest workers that outrun the training step with headroom, when that is fewer than the knee.

    Throughput beyond what the step consumes buys nothing but processes and memory. Stays with
    workers when the knee has them: num_workers=0 loads in the training process, between steps.
    """
    floor = 1 if chosen["num_workers"] > 0 else 0
    fits = [r for r in runs if floor <= r["num_workers"] < chosen["num_workers"]
            and r["samples_per_s"] >= STEP_HEADROOM * consumer]
    return min(fits, key=lambda r: r["num_workers"]) if fits else None


def recommend(section: dict[str, Any], bottleneck: str | None, cuda: bool,
              usable_cpus: int | None = None, step_time_s: float | None = None) -> dict[str, Any] | None:
    """Settings for the knee of the curve (or, with a step time, the fewest workers that outrun the
    step), and their measured gain over the current ones."""
    runs = measured_runs(section)
    chosen = knee(runs, usable_cpus)
    if chosen is None or section.get("failure"):
        return None
    if not any(r["num_workers"] > 0 for r in runs):
        return None  # no worker count was measured, so none can be recommended
    eligible = eligible_runs(runs, usable_cpus)
    basis = "knee"
    consumer = None
    if step_time_s and section.get("batch_size"):
        consumer = int(section["batch_size"]) / step_time_s
        fewer = enough_for_step(eligible, chosen, consumer)
        if fewer is not None:
            chosen, basis = fewer, "step"
    nw = chosen["num_workers"]
    pin = section.get("pin_memory") or {}
    pinned, unpinned = pin.get("pinned_samples_per_s"), pin.get("unpinned_samples_per_s")
    pin_memory = bool(cuda) and not (pinned and unpinned and pinned < 0.95 * unpinned)
    current = section.get("current") or {}
    current_run = next((r for r in runs if r["num_workers"] == current.get("num_workers", 0)), None)
    recommendation: dict[str, Any] = {
        "num_workers": nw,
        "prefetch_factor": None if nw == 0 else (4 if bottleneck == "storage" else 2),
        "persistent_workers": nw > 0,
        "pin_memory": pin_memory,
        "samples_per_s": chosen["samples_per_s"],
        "best_samples_per_s": max(r["samples_per_s"] for r in eligible),
        # Measured, but computing workers past the usable CPUs: never recommended (computes_past_cpus).
        "left_out": [{"num_workers": r["num_workers"], "samples_per_s": r["samples_per_s"],
                      "worker_runqueue": r.get("worker_runqueue")}
                     for r in runs if computes_past_cpus(r, usable_cpus)],
        "current_samples_per_s": _rate(current_run),
        "gain": round(chosen["samples_per_s"] / current_run["samples_per_s"], 3) if current_run else None,
        # "knee": the fewest workers within 95% of the best; "step": the fewest that outrun the step.
        "basis": basis,
        "consumer_samples_per_s": round(consumer, 2) if consumer else None,
    }
    return recommendation


def differs_from_current(recommendation: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """The settings the user would change, as `name=value` strings."""
    changes = []
    for key in ("num_workers", "prefetch_factor", "persistent_workers", "pin_memory"):
        want, have = recommendation.get(key), current.get(key)
        if key == "prefetch_factor" and (recommendation.get("num_workers") or 0) == 0:
            continue
        if want != have:
            changes.append(f"{key}={want}")
    return changes
