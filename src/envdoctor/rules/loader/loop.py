"""DL009: the user's own training loop waits for data (`envdoctor run`), with the settings that remove the wait.

The loop judgement (`envdoctor.judge.loop`: which process speaks, its wait share, the recommendation and what
`--prove` measured of it) is decided once per check; this rule says it as a finding.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from envdoctor.facts import Facts
from envdoctor.judge.loop import DATA_WAIT_SHARE, LoopJudgement, LoopRecommendation, loop_judgement
from envdoctor.rules import Hit


def _window_text(plan: Mapping[str, Any]) -> str:
    return f"{plan['steps']}-step" if plan.get("steps") else f"{plan.get('seconds')} s"


def _predicted(rec: LoopRecommendation) -> str:
    return ("not predicted (the machine was busy)" if rec["predicted_gain"] is None
            else f"predicted {rec['predicted_gain']:.2f}×")


def _recommendation_text(rec: LoopRecommendation, loop: LoopJudgement) -> str:
    """The settings to use, with what backs them: measured by --prove, predicted, or not predicted (busy)."""
    settings = _settings_text(rec, loop.get("framework"))
    if rec["trust"] == "gain" and rec["gain_interval"]:
        low, high = rec["gain_interval"]
        return (settings + f" — measured in your loop: {rec['gain']:.2f}× the steps per second "
                f"(95% interval {low:.2f}–{high:.2f}×, {rec['paired_windows']} paired runs)")
    if rec["trust"] == "machine-busy":
        cpu = loop["cpu"]
        held = (f"other processes kept {loop.get('others_cpus')} of the {cpu['usable_cpus']} usable CPUs busy in "
                "the window, " if cpu else "")
        return (settings + f" — not predicted: the machine is busy ({held}leaving no CPU for a worker beside your "
                "step), so what workers would gain depends on the other load; `envdoctor run --prove -- CMD` "
                "measures it in your loop")
    if rec["trust"] in ("too-noisy", "incomplete") or (rec["trust"] != "unpaired" and rec["gain"] is None):
        return (settings + f" — {_predicted(rec)}; measured in your loop it was too noisy to tell "
                f"({rec['paired_windows']} paired runs)")
    if rec["trust"] == "loss":
        return (f"keep your settings: {settings} was {_predicted(rec)} but measured slower in your loop; make each "
                "sample cheaper instead")
    basis = ("from the smoke test of this loader (--tune)" if rec["basis"] == "smoke-test"
             else "from the loop's own wait and step")
    return settings + (f" — {_predicted(rec)} the steps per second {basis}; "
                       "`envdoctor run --prove -- CMD` measures it in your loop")


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
    if not section or section["outcome"] not in ("measured", "too-short"):
        return
    # A command that ended before its window closed is judged from the steps it measured (if enough).
    loop = loop_judgement(facts)
    if loop is None or not loop["waits_for_data"]:
        return
    share, wait, step = loop["data_wait_share"], loop["wait_s"], loop["step_s"]
    if share is None or wait is None or step is None:
        return  # waits_for_data is decided only from measured steps, which have all three
    rec: LoopRecommendation | None = loop["recommendation"]
    who = f"rank {loop['rank']}: " if loop.get("rank") is not None and len(loop["processes"]) > 1 else ""
    early = "" if loop.get("window_complete", True) else (
        f" (from the {loop['steps']} steps measured before the command ended, of the "
        f"{_window_text(loop['plan'])} window)")
    message = (f"{who}training waits for data {share:.0%} of each step ({_ms(wait)} of {_ms(wait + step)})"
               f"{early}: removing the wait gives the accelerator back up to {share:.0%} of its time, "
               f"{(wait + step) / step:.2f}× the steps per second")
    evidence: dict[str, Any] = {
        "data_wait_share": share, "wait_s_per_step": wait, "step_s_per_step": step,
        "batches_per_s": loop["batches_per_s"], "steps": loop["steps"], "threshold": DATA_WAIT_SHARE,
        "settings": loop["settings"], "processes": len(loop["processes"]),
        "window_complete": loop.get("window_complete", True),
    }
    contention = ""
    cpu = loop["cpu"]
    if cpu:
        evidence["cpu_busy_share"] = cpu["busy_share"]
        evidence["usable_cpus"] = cpu["usable_cpus"]
        evidence["machine_busy_share"] = cpu.get("machine_busy_share")
        evidence["others_cpus"] = loop.get("others_cpus")
        evidence["intra_op_threads"] = loop.get("intra_op_threads")
        contention = thread_contention(loop)
    if rec is None:
        fix = ("no worker count is predicted to remove the wait (the CPUs left for workers cannot load a batch "
               "within a step): make each sample cheaper (decode smaller, cache decoded samples, augment on the "
               "GPU) or give the job more CPUs")
    else:
        evidence["recommendation"] = dict(rec)
        fix = _recommendation_text(rec, loop)
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
