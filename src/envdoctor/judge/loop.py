"""The loop judgement: does the user's own training loop wait for data, and what removes the wait.

The facts (`envdoctor.facts.loop`) hold, per process and DataLoader, the
seconds each step of the window waited in `next()` and the seconds between
batches. Judged here, once per check (`loop_judgement`), for DL009, the report's `loop` object and
`envdoctor run` itself:

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

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, TypedDict, cast

from envdoctor.facts.loop import LoopCpu, LoopFacts, LoopLoader, LoopProof, LoopSettings
from envdoctor.inside.loader_knee import recommended
from envdoctor.judge.pairing import judge_pairing

if TYPE_CHECKING:  # pragma: no cover
    from envdoctor.facts import Facts
    from envdoctor.judge.loader import JudgedLoader

#: DL009 fires when the loop waits for data this share of each step or more. TensorBoard's profiler
#: calls a step "not input-bound" below 5% and "highly input-bound" from 20%; 10% sits between, and
#: is twice the per-batch handover a worker queue costs even when workers keep up (unpickling,
#: pinning: about 0.5 ms on a 20 ms step), so a loop whose workers do keep up stays quiet. Below 10%
#: removing the wait gives back at most 1.11× the steps per second.
DATA_WAIT_SHARE = 0.10
#: Worker counts the model considers beyond the user's own.
MAX_WORKERS = 8
#: A command that ended before its window closed is judged from the steps it measured, when at least this many:
#: fewer are one or two slow batches (a first epoch's file cache, a checkpoint) more than a share of each step.
MIN_STEPS = 20
#: A worker needs a CPU of its own beside the main process's step: with less left by the CPUs other processes
#: hold, what workers gain depends on how the scheduler shares the CPUs, which the model cannot tell.
FREE_CPUS_FOR_A_WORKER = 1.0


#: The key the loop judgement is kept under on the Facts it judged (`Facts.judgements`).
KEY = "loop"


class LoopRecommendation(TypedDict):
    #: "loop-model" (from the loop's own wait and step) or "smoke-test" (--tune: the same loader measured alone).
    basis: str
    num_workers: int
    prefetch_factor: int | None
    persistent_workers: bool
    pin_memory: bool
    #: None when not predicted ("machine-busy") and not measured.
    gain: float | None
    gain_interval: list[float] | None
    paired_windows: int
    #: "unpaired" (predicted by the loop model, not yet measured), "machine-busy" (not predicted: other processes
    #: left no CPU for a worker), or what the paired runs (--prove) said of it.
    trust: str
    predicted_gain: float | None


class ModelRun(TypedDict):
    """One worker count of the loop model's predicted sweep, as `loader_knee` reads a run."""

    num_workers: int
    #: Batches/s the loader would deliver beside the step.
    samples_per_s: float


class LoopMemory(TypedDict):
    """DL010's measurement of one process's loader workers over the whole run, as the report shows it: measured
    (and quiet unless DL010 fires) or not, which a quiet DL010 alone cannot tell apart."""

    #: Workers read at least MIN_READINGS times against the samples the loader yielded (0: not measured).
    workers: int
    #: The fewest readings of a measured worker, their span in seconds, and across the measured workers the
    #: median growth from the first reading to the last and the median fitted slope after warm-up.
    readings: int
    seconds: float | None
    grown_bytes: int | None
    bytes_per_sample: float | None


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
    #: None for a loader without workers.
    memory: LoopMemory | None


class _LoopJudgementBase(TypedDict):
    outcome: str
    command: list[str]
    returncode: int | None
    stopped: bool
    plan: dict[str, Any]
    #: The speaking process's window: steps, mean seconds a step waited and computed, and the rest.
    steps: int
    wait_s: float | None
    step_s: float | None
    data_wait_share: float | None
    batches_per_s: float | None
    settings: LoopSettings | None
    recommendation: LoopRecommendation | None
    cuda: dict[str, Any] | None
    cpu: LoopCpu | None
    processes: list[LoopProcessRow]
    threshold: float
    #: None when no process's window filled.
    waits_for_data: bool | None


class LoopJudgement(_LoopJudgementBase, total=False):
    """The report's `loop` object: what the loop judgement decided, with the facts it speaks of."""

    #: The speaking process's (present when one iterated a loader).
    rank: int | None
    memory: LoopMemory | None
    framework: str | None
    intra_op_threads: int | None
    #: `--prove`'s paired runs (present when the loop waits for data).
    proof: LoopProof | None
    tune: dict[str, Any] | None
    #: Whether the speaking process's window filled; false: the command ended first, and `steps` were measured.
    window_complete: bool
    #: CPUs other processes kept busy in the window (`others_cpus`); None when not measured.
    others_cpus: float | None


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


class LoopModel(NamedTuple):
    """The loop model's predicted sweep (`model_runs`) and what it was predicted from."""

    runs: list[ModelRun]
    #: Seconds one process takes to load one batch.
    load_s: float
    #: The CPUs the model gives the workers (at least one).
    worker_cpus: float
    #: The CPUs left beside the main process's step and other processes' load (may be less than one).
    free_cpus: float


def model_runs(current: int, wait_s: float, step_s: float, usable_cpus: int,
               cpus_busy: float | None = None, others_cpus: float | None = None) -> LoopModel:
    """The loop model's predicted sweep: a run per worker count the model considers, as the knee reads a sweep,
    with the batch load time and the CPUs left for workers that predicted it: the usable CPUs less the main
    process's step and the CPUs other processes kept busy in the window (`others_cpus`).

    A run's rate is batches/s (batch size 1 for the knee), as the smoke test measures a loader alone: 1 / load
    at num_workers=0, min(N, worker CPUs) / load with N workers. The knee itself rates num_workers=0 as it
    delivers in the loop, loading and stepping in turn (`loader_knee.in_loop_rate`: 1 / (load + step), what the
    loop measures at 0 workers).
    """
    load = batch_load_s(current, wait_s, step_s)
    main = step_cpu_share(wait_s, step_s, cpus_busy if current == 0 else None)
    free = usable_cpus - main - (others_cpus or 0.0)
    worker_cpus = max(1.0, free)
    candidates = range(0, max(current, min(MAX_WORKERS, int(round(worker_cpus + 0.49)))) + 1)
    runs: list[ModelRun] = [{"num_workers": n, "samples_per_s": max(1.0, min(float(n), worker_cpus)) / load}
                            for n in candidates if load > 0]
    return LoopModel(runs, load, worker_cpus, free)


def recommend(settings: Mapping[str, Any], wait_s: float, step_s: float, usable_cpus: int,
              cuda: bool, cpus_busy: float | None = None, others_cpus: float | None = None
              ) -> LoopRecommendation | None:
    """The settings the loop model says remove the wait; None when no worker count would help.

    The pick is the one knee (`loader_knee.recommended`) of the model's predicted sweep (`model_runs`), with the
    measured step as its consumer. `cpus_busy` is the CPUs one training process kept busy in the window (its
    share of the tree's), `others_cpus` its share of the CPUs other processes kept busy. When those leave no CPU
    for a worker, the gain is not predicted (trust "machine-busy"): the pick is named for `--prove` to measure.
    """
    current = int(settings.get("num_workers") or 0)
    model = model_runs(current, wait_s, step_s, usable_cpus, cpus_busy, others_cpus)
    # The model already keeps to the CPUs left for workers: no run of it computes past them.
    chosen, _ = recommended(model.runs, None, 1, step_s)
    if chosen is None:
        return None
    pick = chosen["num_workers"]
    now = 1.0 / (step_s + wait_s) if step_s + wait_s > 0 else 1.0 / predicted_step_s(
        current, model.load_s, step_s, model.worker_cpus)
    gain = 1.0 / predicted_step_s(pick, model.load_s, step_s, model.worker_cpus) / now if now > 0 else None
    if pick == current or gain is None or gain < 1.0 + DATA_WAIT_SHARE / 2:
        return None
    busy = others_cpus is not None and model.free_cpus < FREE_CPUS_FOR_A_WORKER
    shown = None if busy else round(gain, 2)
    return {"basis": "loop-model", "num_workers": pick, "prefetch_factor": 2 if pick else None,
            "persistent_workers": pick > 0,
            "pin_memory": bool(cuda) or bool(settings.get("pin_memory")), "gain": shown,
            "gain_interval": None, "paired_windows": 0, "trust": "machine-busy" if busy else "unpaired",
            "predicted_gain": shown}


def tuned(settings: LoopSettings, wait_s: float, step_s: float, loader: JudgedLoader | None,
          cuda: bool) -> LoopRecommendation | None:
    """--tune: the recommendation of the smoke test of the very same loader, judged with the measured step as
    consumer (`envdoctor.judge.loader`, the loader judgement of this check: the report's DL findings and DL009 name
    the same num_workers). Its gain is its batches/s put in the loop: at num_workers=0 loading and the step take
    turns (step + 1/rate), with workers they overlap (max(step, 1/rate)). None without a recommendation, or when
    it is the loop's own setting.
    """
    found = loader.rec if loader is not None else None
    if loader is None or found is None or not found["samples_per_s"]:
        return None
    pick = found["num_workers"]
    if pick == int(settings.get("num_workers") or 0):
        return None
    rate = found["samples_per_s"] / (loader.section.get("batch_size") or settings.get("batch_size") or 1)
    gain = (wait_s + step_s) / (step_s + 1.0 / rate if pick == 0 else max(step_s, 1.0 / rate))
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
                     "settings": row["settings"], "memory": memory_measured(row)})
    return rows


def memory_measured(row: LoopLoader) -> LoopMemory | None:
    """What DL010 measured of one loader's workers, as the memory judgement reads it (None: no workers)."""
    from envdoctor.judge.memory import fitted_slope, observed_growth

    if not row["settings"].get("num_workers"):
        return None
    memory = row.get("memory") or {}
    workers = memory.get("workers", [])  # each read MIN_READINGS times or more (facts.loop.worker_memory)
    if not workers:
        return {"workers": 0, "readings": 0, "seconds": None, "grown_bytes": None, "bytes_per_sample": None}
    fitted = fitted_slope(memory)
    return {"workers": len(workers), "readings": min(int(w["readings"]) for w in workers),
            "seconds": memory.get("seconds"), "grown_bytes": observed_growth(memory),
            "bytes_per_sample": fitted[0] if fitted else None}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 5)


def speaker(section: LoopFacts) -> LoopProcessRow | None:
    """The row of the process that speaks for the run: the first (rank 0 first) whose window filled, else the
    first; None when no process iterated a loader."""
    rows = process_rows(section)
    return next((r for r in rows if r["complete"]), rows[0] if rows else None)


def loop_judgement(facts: Facts) -> LoopJudgement | None:
    """The loop judgement of this check, decided on first use and kept on `facts` (None without a loop section).

    With `--tune` (a `loader_source` in the config) the smoke test measured the loop's own loader, and its
    judgement is read; any other loader section is not the loop's.
    """
    from envdoctor.facts import ProbeFailed
    from envdoctor.judge.loader import loader_judgement

    held = facts.judgements.get(KEY)
    if held is None:
        section = facts["loop"]
        if not section:
            return None
        loader = None
        if facts.config.loader_source is not None:
            try:
                loader = loader_judgement(facts)
            except ProbeFailed:
                loader = None  # the smoke test failed: the loop model alone
        held = facts.judgements[KEY] = judge_loop(section, loader)
    return cast(LoopJudgement, held)


def judge_loop(section: LoopFacts, loader: JudgedLoader | None = None) -> LoopJudgement:
    """The report's `loop` object: the speaking process's numbers, its recommendation, a row per process.

    `loader` is the judgement of the smoke test `--tune` ran on the same loader. A command that ended before the
    window closed (outcome "too-short") is judged from the steps it measured, when there are MIN_STEPS of them
    (`window_complete` false, `steps` their count).
    """
    rows = process_rows(section)
    lead = next((r for r in rows if r["complete"]), rows[0] if rows else None)
    out: LoopJudgement = {
        "outcome": section["outcome"], "command": section["command"], "returncode": section["returncode"],
        "stopped": section["stopped"], "plan": section["plan"],
        "steps": 0, "wait_s": None, "step_s": None, "data_wait_share": None, "batches_per_s": None,
        "settings": None, "recommendation": None, "cuda": section.get("cuda"), "cpu": section.get("cpu"),
        "processes": rows, "threshold": DATA_WAIT_SHARE, "waits_for_data": None,
    }
    if lead is None:
        return out
    out.update({"steps": lead["steps"], "wait_s": lead["wait_s"], "step_s": lead["step_s"],
                "data_wait_share": lead["data_wait_share"], "batches_per_s": lead["batches_per_s"],
                "settings": lead["settings"], "rank": lead["rank"], "framework": lead["framework"],
                "intra_op_threads": lead["intra_op_threads"], "window_complete": lead["complete"],
                "memory": lead["memory"],
                "others_cpus": others_cpus(section.get("cpu"))})
    ended_early = section["outcome"] == "too-short" and lead["steps"] >= MIN_STEPS
    if (lead["complete"] or ended_early) and lead["wait_s"] is not None and lead["step_s"] is not None:
        out["waits_for_data"] = (lead["data_wait_share"] or 0.0) >= DATA_WAIT_SHARE
        if out["waits_for_data"]:
            out["recommendation"] = _recommendation(section, lead, len(rows), loader)
            out["proof"] = section.get("proof")
    out["tune"] = section.get("tune")
    return out


def others_cpus(cpu: LoopCpu | None) -> float | None:
    """CPUs other processes (not the command's tree) kept busy in the window: the machine's busy share of the
    usable CPUs, less the tree's own. None when the machine's share was not measured. (The machine's share is of
    all its CPUs; where the usable ones are fewer, this counts the others' load on those alike.)"""
    if not cpu or cpu.get("machine_busy_share") is None or cpu["window_s"] <= 0:
        return None
    share = cpu["machine_busy_share"] or 0.0
    return round(max(0.0, share * cpu["usable_cpus"] - cpu["cpu_s"] / cpu["window_s"]), 2)


def _recommendation(section: LoopFacts, lead: LoopProcessRow, procs: int,
                    loader: JudgedLoader | None) -> LoopRecommendation | None:
    """What removes the wait: --tune's smoke test, else the loop model (each process with its share of the CPUs,
    of the load the tree and the other processes put on them); then what --prove measured of it."""
    wait, step = lead["wait_s"] or 0.0, lead["step_s"] or 0.0
    cpu, cuda = section.get("cpu"), bool(section.get("cuda"))
    busy = cpu["cpu_s"] / cpu["window_s"] / procs if cpu and cpu["window_s"] > 0 else None
    others = others_cpus(cpu)
    rec = tuned(lead["settings"], wait, step, loader, cuda) or recommend(
        lead["settings"], wait, step, max(1, int(cpu["usable_cpus"] if cpu else 1) // procs), cuda,
        cpus_busy=busy, others_cpus=None if others is None else others / procs)
    proof = section.get("proof")
    if rec is not None and proof and proof.get("windows"):
        _judge_proof(rec, proof, int(lead["settings"].get("num_workers") or 0))
    return rec


def _judge_proof(rec: LoopRecommendation, proof: LoopProof, current: int) -> None:
    """What the paired bounded runs say of the candidate: measured gain and interval, or too noisy to tell."""
    trust, interval = judge_pairing(proof, rec["num_workers"], current)
    rec["trust"] = trust
    rec["paired_windows"] = len(proof.get("windows") or [])
    if interval is not None:
        rec["gain"] = round(interval[1], 3)
        rec["gain_interval"] = [round(interval[0], 3), round(interval[2], 3)]
    else:
        rec["gain"] = None
