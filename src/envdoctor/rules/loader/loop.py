"""DL009 and the `loop` verdict: does the user's own training loop wait for data, and what removes the wait.

The facts (`envdoctor.facts.loop`) hold, per process and DataLoader, the
seconds each step of the window waited in `next()` and the seconds between
batches. Judged here, once, for every view:

- which loader speaks for a process (the one whose window filled, with the
  most steps: the training loader, not a short validation pass) and which
  process speaks for the run (rank 0, else the first);
- the share of each step spent waiting, against `DATA_WAIT_SHARE`;
- what num_workers would remove the wait: the one knee (`loader_knee.recommended`,
  the rule the smoke test and its runner use: the fewest workers within 95% of
  the best, or fewer when they already load STEP_HEADROOM, 1.25×, what the step
  consumes) of the sweep a model of the loop predicts. The
  measurement fixes the model: with `num_workers=0` the main process loads a batch and
  then runs the step, in turn, so a step costs wait + step; with N workers
  loading overlaps the step and a step costs max(step, load / N), where the
  load of one batch is what the main process waited for at 0 workers, or
  N × (step + wait) when N workers could not keep up. Workers beyond the
  CPUs left after the main process's step add nothing (at num_workers=0 the
  step's own CPU share is told from the process's CPU time in the window: a
  step that is mostly accelerator time leaves most of its CPU to workers).
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypedDict

from envdoctor.facts import Facts
from envdoctor.facts.loop import LoopFacts, LoopLoader, LoopSettings
from envdoctor.inside.loader_knee import measured, recommended
from envdoctor.rules import Hit

#: DL009 fires when the loop waits for data this share of each step or more. TensorBoard's profiler
#: calls a step "not input-bound" below 5% and "highly input-bound" from 20%; 10% sits between, and
#: is twice the per-batch handover a worker queue costs even when workers keep up (unpickling,
#: pinning: about 0.5 ms on a 20 ms step), so a loop whose workers do keep up stays quiet. Below 10%
#: removing the wait gives back at most 1.11× the steps per second.
DATA_WAIT_SHARE = 0.10
#: Worker counts the model considers beyond the user's own.
MAX_WORKERS = 8


class LoopRecommendation(TypedDict):
    #: "loop-model" (from the loop's own wait and step) or "smoke-test" (--tune: the same loader measured alone).
    basis: str
    num_workers: int
    prefetch_factor: int | None
    persistent_workers: bool
    pin_memory: bool
    gain: float | None
    gain_interval: list[float] | None
    paired_windows: int
    #: "unpaired" (predicted by the loop model, not yet measured), or the paired check's verdict.
    trust: str
    predicted_gain: float | None


class ModelRun(TypedDict):
    """One worker count of the loop model's predicted sweep, as `loader_knee` reads a run."""

    num_workers: int
    #: Batches/s the loader would deliver beside the step.
    samples_per_s: float


class LoopProcessRow(TypedDict):
    pid: int
    rank: int | None
    local_rank: int | None
    framework: str | None
    intra_op_threads: int | None
    steps: int
    complete: bool
    wait_s: float | None
    step_s: float | None
    data_wait_share: float | None
    batches_per_s: float | None
    settings: LoopSettings


def speaking_loader(loaders: Sequence[LoopLoader]) -> list[LoopLoader]:
    """One loader per process: the one whose window filled with the most steps (else the most steps)."""
    best: dict[int, LoopLoader] = {}
    for row in loaders:
        held = best.get(row["pid"])
        if held is None or (row["complete"], row["steps"]) > (held["complete"], held["steps"]):
            best[row["pid"]] = row
    return sorted(best.values(), key=lambda r: (r["rank"] if r["rank"] is not None else 1 << 30, r["pid"]))


def per_step(row: LoopLoader) -> tuple[float | None, float | None]:
    if not row["steps"]:
        return None, None
    return row["wait_total_s"] / row["steps"], row["step_total_s"] / row["steps"]


def batch_load_s(workers: int, wait_s: float, step_s: float) -> float:
    """Seconds of loading one batch costs, from what the loop waited with `workers` workers."""
    if workers <= 0:
        return wait_s
    return workers * (step_s + wait_s)


def predicted_step_s(workers: int, load_s: float, step_s: float, worker_cpus: float) -> float:
    """Seconds a step takes with `workers` workers, in the model of the module's docstring."""
    if workers <= 0:
        return step_s + load_s
    return max(step_s, load_s / max(1.0, min(float(workers), worker_cpus)))


def step_cpu_share(wait_s: float, step_s: float, cpus_busy: float | None) -> float:
    """The share of a CPU the main process's step itself takes (1.0 when it cannot be told).

    Known at num_workers=0 only: the process then makes every batch itself, so of the CPU it
    uses per step (`cpus_busy` × (wait + step)) the wait is the loading and the rest the step's.
    A step that is mostly accelerator time (or sleep) leaves most of its CPU to workers.
    """
    if cpus_busy is None or step_s <= 0:
        return 1.0
    return min(1.0, max(0.0, cpus_busy * (wait_s + step_s) - wait_s) / step_s)


def model_runs(current: int, wait_s: float, step_s: float, usable_cpus: int,
               cpus_busy: float | None = None) -> tuple[list[ModelRun], float, float]:
    """The loop model's predicted sweep: a run per worker count the model considers, as the knee reads a sweep,
    with the batch load time and the CPUs left for workers that predicted it.

    A run's rate is batches/s (batch size 1 for the knee), as the smoke test measures a loader alone: 1 / load
    at num_workers=0, min(N, worker CPUs) / load with N workers. The knee itself rates num_workers=0 as it
    delivers in the loop, loading and stepping in turn (`loader_knee.in_loop_rate`: 1 / (load + step), what the
    loop measures at 0 workers).
    """
    load = batch_load_s(current, wait_s, step_s)
    main = step_cpu_share(wait_s, step_s, cpus_busy if current == 0 else None)
    worker_cpus = max(1.0, usable_cpus - main)
    candidates = range(0, max(current, min(MAX_WORKERS, int(round(worker_cpus + 0.49)))) + 1)
    runs: list[ModelRun] = [{"num_workers": n, "samples_per_s": max(1.0, min(float(n), worker_cpus)) / load}
                            for n in candidates if load > 0]
    return runs, load, worker_cpus


def recommend(settings: Mapping[str, Any], wait_s: float, step_s: float, usable_cpus: int,
              cuda: bool, cpus_busy: float | None = None) -> LoopRecommendation | None:
    """The settings the loop model says remove the wait; None when no worker count would help.

    The pick is the one knee (`loader_knee.recommended`) of the model's predicted sweep (`model_runs`), with the
    measured step as its consumer. `cpus_busy` is the CPUs one training process kept busy in the window (its share of the tree's).
    """
    current = int(settings.get("num_workers") or 0)
    runs, load, worker_cpus = model_runs(current, wait_s, step_s, usable_cpus, cpus_busy)
    # The model already keeps to the CPUs left for workers: no run of it computes past them.
    chosen, _ = recommended(runs, None, 1, step_s)
    if chosen is None:
        return None
    pick = chosen["num_workers"]
    now = 1.0 / (step_s + wait_s) if step_s + wait_s > 0 else 1.0 / predicted_step_s(current, load, step_s,
                                                                                       worker_cpus)
    gain = 1.0 / predicted_step_s(pick, load, step_s, worker_cpus) / now if now > 0 else None
    if pick == current or gain is None or gain < 1.0 + DATA_WAIT_SHARE / 2:
        return None
    return {"basis": "loop-model", "num_workers": pick, "prefetch_factor": 2 if pick else None,
            "persistent_workers": pick > 0,
            "pin_memory": bool(cuda) or bool(settings.get("pin_memory")), "gain": round(gain, 2),
            "gain_interval": None, "paired_windows": 0, "trust": "unpaired", "predicted_gain": round(gain, 2)}


def tuned(settings: Mapping[str, Any], wait_s: float, step_s: float, loader: Mapping[str, Any] | None,
          cuda: bool) -> LoopRecommendation | None:
    """--tune: the recommendation from the smoke test of the very same loader, with the measured step as consumer.

    The pick is the smoke test's own (`loader_knee.recommended` on its runs, its usable CPUs and batch size,
    the measured step as consumer), so the report's DL findings and DL009 name the same num_workers. Its gain is
    its batches/s put in the loop: at num_workers=0 loading and the step take turns (step + 1/rate), with workers
    they overlap (max(step, 1/rate)). None without measured runs.
    """
    if not loader:
        return None
    runs = measured(loader.get("runs") or [])
    size = loader.get("batch_size") or settings.get("batch_size") or 1
    chosen, _ = recommended(runs, loader.get("usable_cpus") or 1, size, step_s)
    if chosen is None:
        return None
    pick, rate = int(chosen["num_workers"]), float(chosen["samples_per_s"]) / size
    gain = (wait_s + step_s) / (step_s + 1.0 / rate if pick == 0 else max(step_s, 1.0 / rate))
    if pick == int(settings.get("num_workers") or 0):
        return None
    return {"basis": "smoke-test", "num_workers": pick, "prefetch_factor": 2 if pick else None,
            "persistent_workers": pick > 0, "pin_memory": bool(cuda) or bool(settings.get("pin_memory")),
            "gain": round(gain, 2), "gain_interval": None, "paired_windows": 0, "trust": "unpaired",
            "predicted_gain": round(gain, 2)}


def process_rows(section: LoopFacts) -> list[LoopProcessRow]:
    rows: list[LoopProcessRow] = []
    for row in speaking_loader(section["loaders"]):
        wait, step = per_step(row)
        rows.append({"pid": row["pid"], "rank": row["rank"], "local_rank": row["local_rank"],
                     "framework": row.get("framework"), "intra_op_threads": row.get("intra_op_threads"),
                     "steps": row["steps"],
                     "complete": row["complete"], "wait_s": _round(wait), "step_s": _round(step),
                     "data_wait_share": row["data_wait_share"], "batches_per_s": row["batches_per_s"],
                     "settings": row["settings"]})
    return rows


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 5)


def loop_verdict(section: LoopFacts, loader: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The report's `loop` object: the speaking process's numbers, its recommendation, a row per process.

    `loader` is the smoke test's section when `--tune` ran one on the same loader.
    """
    rows = process_rows(section)
    lead = next((r for r in rows if r["complete"]), rows[0] if rows else None)
    cuda = section.get("cuda")
    out: dict[str, Any] = {
        "outcome": section["outcome"], "command": section["command"], "returncode": section["returncode"],
        "stopped": section["stopped"], "plan": section["plan"],
        "steps": 0, "wait_s": None, "step_s": None, "data_wait_share": None, "batches_per_s": None,
        "settings": None, "recommendation": None, "cuda": cuda, "cpu": section.get("cpu"),
        "processes": rows, "threshold": DATA_WAIT_SHARE, "waits_for_data": None,
    }
    if lead is None:
        return out
    out.update({"steps": lead["steps"], "wait_s": lead["wait_s"], "step_s": lead["step_s"],
                "data_wait_share": lead["data_wait_share"], "batches_per_s": lead["batches_per_s"],
                "settings": lead["settings"], "rank": lead["rank"], "framework": lead["framework"],
                "intra_op_threads": lead["intra_op_threads"]})
    if lead["complete"] and lead["wait_s"] is not None and lead["step_s"] is not None:
        share = lead["data_wait_share"] or 0.0
        out["waits_for_data"] = share >= DATA_WAIT_SHARE
        if out["waits_for_data"]:
            cpu = section.get("cpu")
            cpus = cpu["usable_cpus"] if cpu else 1
            procs = max(1, len(rows))
            busy = cpu["cpu_s"] / cpu["window_s"] / procs if cpu and cpu["window_s"] > 0 else None
            rec = tuned(lead["settings"], lead["wait_s"], lead["step_s"], loader, bool(cuda)) or recommend(
                lead["settings"], lead["wait_s"], lead["step_s"], max(1, int(cpus) // procs), bool(cuda),
                cpus_busy=busy)
            proof = section.get("proof")
            if rec is not None and proof and proof.get("windows"):
                _judge_proof(rec, proof, int(lead["settings"].get("num_workers") or 0))
            out["recommendation"] = rec
            out["proof"] = proof
    out["tune"] = section.get("tune")
    return out


def _judge_proof(rec: LoopRecommendation, proof: Mapping[str, Any], current: int) -> None:
    """The paired bounded runs' verdict on the candidate: measured gain and interval, or too noisy to tell."""
    from envdoctor.rules.loader.verdict import judge_pairing

    trust, interval = judge_pairing(proof, rec["num_workers"], current)  # type: ignore[arg-type]
    rec["trust"] = trust
    rec["paired_windows"] = len(proof.get("windows") or [])
    if interval is not None:
        rec["gain"] = round(interval[1], 3)
        rec["gain_interval"] = [round(interval[0], 3), round(interval[2], 3)]
    else:
        rec["gain"] = None


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 10 else f"{seconds:.1f} s"


def _settings_text(rec: LoopRecommendation, framework: str | None = None) -> str:
    """The settings where the user sets them: the HF Trainer builds its loader from TrainingArguments."""
    prefix = "dataloader_" if framework == "transformers" else ""
    parts = [f"{prefix}num_workers={rec['num_workers']}"]
    if rec["num_workers"]:
        parts += [f"{prefix}persistent_workers={rec['persistent_workers']}",
                  f"{prefix}prefetch_factor={rec['prefetch_factor']}"]
    if rec["pin_memory"]:
        parts.append(f"{prefix}pin_memory=True")
    owner = "TrainingArguments" if framework == "transformers" else "DataLoader"
    return f"{owner}(..., " + ", ".join(parts) + ")"


def training_waits_for_data(facts: Facts) -> Iterator[Hit]:
    """DL009: the loop waits for the next batch DATA_WAIT_SHARE of each step or more."""
    section = facts["loop"]
    if not section or section["outcome"] != "measured":
        return
    # Only --tune's smoke test measured the loop's own loader; any other loader section is not its.
    loop = loop_verdict(section, facts.get("loader") if facts.config.loader_source is not None else None)
    if not loop["waits_for_data"]:
        return
    share, wait, step = loop["data_wait_share"], loop["wait_s"], loop["step_s"]
    rec: LoopRecommendation | None = loop["recommendation"]
    who = f"rank {loop['rank']}: " if loop.get("rank") is not None and len(loop["processes"]) > 1 else ""
    message = (f"{who}training waits for data {share:.0%} of each step ({_ms(wait)} of {_ms(wait + step)}): "
               f"removing the wait gives the accelerator back up to {share:.0%} of its time, "
               f"{(wait + step) / step:.2f}× the steps per second")
    evidence: dict[str, Any] = {
        "data_wait_share": share, "wait_s_per_step": wait, "step_s_per_step": step,
        "batches_per_s": loop["batches_per_s"], "steps": loop["steps"], "threshold": DATA_WAIT_SHARE,
        "settings": loop["settings"], "processes": len(loop["processes"]),
    }
    contention = ""
    if loop.get("cpu"):
        evidence["cpu_busy_share"] = loop["cpu"]["busy_share"]
        evidence["usable_cpus"] = loop["cpu"]["usable_cpus"]
        evidence["machine_busy_share"] = loop["cpu"].get("machine_busy_share")
        evidence["intra_op_threads"] = loop.get("intra_op_threads")
        contention = thread_contention(loop)
    if rec is None:
        fix = ("no worker count is predicted to remove the wait (the CPUs left for workers cannot load a batch "
               "within a step): make each sample cheaper (decode smaller, cache decoded samples, augment on the "
               "GPU) or give the job more CPUs")
    else:
        evidence["recommendation"] = dict(rec)
        fix = _settings_text(rec, loop.get("framework"))
        if rec["trust"] == "gain" and rec["gain_interval"]:
            low, high = rec["gain_interval"]
            fix += (f" — measured in your loop: {rec['gain']:.2f}× the steps per second "
                    f"(95% interval {low:.2f}–{high:.2f}×, {rec['paired_windows']} paired runs)")
        elif rec["trust"] in ("too-noisy", "incomplete") or (rec["trust"] != "unpaired" and rec["gain"] is None):
            fix += (f" — predicted {rec['predicted_gain']:.2f}×; measured in your loop it was too noisy to tell "
                    f"({rec['paired_windows']} paired runs)")
        elif rec["trust"] == "loss":
            fix = (f"keep your settings: {_settings_text(rec, loop.get('framework'))} was predicted "
                   f"{rec['predicted_gain']:.2f}× but measured "
                   "slower in your loop; make each sample cheaper instead")
        else:
            basis = ("from the smoke test of this loader (--tune)" if rec["basis"] == "smoke-test"
                     else "from the loop's own wait and step")
            fix += (f" — predicted {rec['predicted_gain']:.2f}× the steps per second {basis}; "
                    "`envdoctor run --prove -- CMD` measures it in your loop")
    if contention:
        fix += ". " + contention
    yield Hit(message=message, evidence=evidence, fix=fix)


#: The machine counts as busy for the main process's threads from this share of all its CPU time.
BUSY_MACHINE_SHARE = 0.9


def thread_contention(loop: Mapping[str, Any]) -> str:
    """A sentence naming main-process thread contention, or "": at num_workers=0 the loading runs on
    torch's intra-op threads in the main process, which on a busy machine fight the neighbours for the
    CPUs (a sample can cost many times its quiet-machine time); each worker runs one thread."""
    settings, cpu, threads = loop.get("settings") or {}, loop.get("cpu") or {}, loop.get("intra_op_threads")
    busy = cpu.get("machine_busy_share")
    if settings.get("num_workers") or not threads or threads < 2 or busy is None or busy < BUSY_MACHINE_SHARE:
        return ""
    return (f"The main process loads on {threads} intra-op threads while the machine is {busy:.0%} busy: they "
            "contend with other processes for the CPUs (workers run one thread each); with num_workers=0 kept, "
            "try OMP_NUM_THREADS=1")


RULES = {"DL009": training_waits_for_data}
