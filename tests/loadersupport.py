"""Helpers of the loader tests: run the real `envdoctor loader` from fixtures/, check nothing is left."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from envdoctor.inside.loader_knee import MIN_PAIRS
from envdoctor.judge import bottleneck as judge_bottleneck
from envdoctor.judge.pairing import FEWER_WORKERS_TOLERANCE
from support import group_members, json_report, leftover_children, run_envdoctor, shm_left, shm_names

FIXTURES_DIR = Path(__file__).resolve().parent.parent / "fixtures"


def shm_torch_segments() -> set[str]:
    return shm_names("torch_")


def loader_report(*args: str, env: dict[str, str] | None = None, prefix_cmd: tuple[str, ...] = ()
                  ) -> tuple[dict[str, Any], float, Any]:
    """Run `envdoctor loader ... --format json` from fixtures/; (validated report, wall seconds, process)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    start = time.monotonic()
    proc = run_envdoctor("loader", *args, "--format", "json", cwd=str(FIXTURES_DIR), env=full_env,
                         prefix_cmd=prefix_cmd)
    wall = time.monotonic() - start
    assert proc.returncode in (0, 1), f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    report = json_report(proc)
    skip_if_torch_outlasted_the_budget(report["loader"], wall)
    return report, wall, proc


#: How the stage says the target's `import torch` took the whole budget (envdoctor.loader's skip reason).
TORCH_IMPORT_CUT = "importing torch did not finish within the "


def skip_if_torch_outlasted_the_budget(loader: dict[str, Any] | None, wall: float) -> None:
    """A machine too busy to import torch within the budget leaves nothing to assert about the curve: how long
    the import takes is this machine's speed, not envdoctor's. What envdoctor promises is still checked — the
    stage ended within the budget it enforces and said why — and the test is skipped, saying so."""
    skipped = [s["reason"] for s in (loader or {}).get("skipped") or [] if s.get("what") == "smoke test"]
    cut = next((reason for reason in skipped if reason.startswith(TORCH_IMPORT_CUT)), None)
    if cut is None:
        return
    assert loader is not None and loader["runner"]["killed_for"] == "budget", loader
    assert wall < stage_bound(float(loader["budget_s"])), wall
    pytest.skip(f"this machine is too busy to import torch within the budget ({cut}); the stage ended within it")


def skip_if_the_budget_ran_out(loader: dict[str, Any], *what: str) -> None:
    """How far a sweep gets within its budget is this machine's speed: when the stage skipped `what` (e.g.
    "num_workers=1") or every run because the budget was spent (less than a quarter left: a skip with most of it
    unused is envdoctor's fault and still fails), there is nothing to assert about it; the test is skipped,
    saying so (the stage's own promises — within its budget, nothing left — are asserted before)."""
    import re

    def spent(reason: str) -> bool:  # the budget was used up: not skipped up front with most of it unused
        left = re.search(r"not enough of the budget left \((\d+(?:\.\d+)?) s", reason)
        return left is not None and float(left.group(1)) < 0.25 * float(loader.get("budget_s") or 0)

    cut = [f"{s['what']}: {s['reason']}" for s in loader.get("skipped") or []
           if spent(s["reason"]) and (s["what"] in what or not loader.get("runs"))]
    if cut:
        pytest.skip(f"this machine is too busy for the budget: {'; '.join(cut)}")


def stage_bound(budget_s: float) -> float:
    """The most `envdoctor loader --budget B` may take, seen from the test: only what the code enforces — the
    stage's deadline (B + STAGE_GRACE_S, the supervisor's) and, when the stage was cut while importing torch,
    the torch probe's second try (limited to max(B, MIN_SHARED_TIMEOUT_S)) — with slack derived from those
    (half as much again, for the interpreters a busy machine starts slowly), never a time measured here."""
    from envdoctor.facts.torch import MIN_SHARED_TIMEOUT_S
    from envdoctor.loader.supervisor import STAGE_GRACE_S

    enforced = budget_s + STAGE_GRACE_S + max(budget_s, MIN_SHARED_TIMEOUT_S)
    return 1.5 * enforced


def assert_nothing_left(report: dict[str, Any], shm_before: set[str]) -> None:
    """No process of the runner's group survives, and no torch segment was added to /dev/shm. A zombie
    (dead, its pid not yet reaped by init, which this sandbox does late) is no survivor."""
    pgid = report["loader"]["runner"]["pid"]
    survivors = [{"pid": proc.info["pid"], "name": proc.info["name"]} for proc in group_members(pgid)]
    assert survivors == [], f"processes of the runner's group survived: {survivors}"
    assert leftover_children() == []
    assert shm_left(shm_before, "torch_") == set()


def dump(report: dict[str, Any]) -> str:
    """The loader section for an assertion message."""
    loader = dict(report.get("loader") or {})
    loader.pop("torch_probe", None)
    # The verdict and what it was drawn from first: the message is cut, and the runs are long.
    first = ("recommendation", "paired", "bottleneck", "bottleneck_reason", "skipped")
    ordered = {**{k: loader[k] for k in first if k in loader}, **{k: v for k, v in loader.items() if k not in first}}
    return json.dumps(ordered, indent=1, default=str)[:6000]


def assert_honest_too_noisy(report: dict[str, Any], dl005_message: str, current_num_workers: int) -> None:
    """A live sweep on a busy machine may end in "too noisy to tell". That verdict is honest only if its own
    evidence says so: your setting kept and the sweep's pick named; either re-measured against it in paired
    windows that do not agree on a gain (from MIN_PAIRS on, an interval that reaches 1, or 0.95 for fewer
    workers; fewer pairs, one the candidate did not win), or, with no paired windows, other processes holding the
    CPUs while the sweep timed each setting in one stretch of their load (CONTENDED_CPUS); and DL005 saying
    which."""
    loader = report["loader"]
    rec, paired = loader["recommendation"], loader.get("paired") or {}
    assert rec["trust"] == "too-noisy", dump(report)
    assert rec["basis"] == "current" and rec["num_workers"] == current_num_workers, dump(report)
    candidate = rec["candidate_num_workers"]
    if not rec["paired_windows"]:
        # The sweep alone pointed at it (a neighbour may have sunk the worker counts below num_workers=0), or the
        # pairs measured fewer workers against yours while more were timed in one stretch each (SLEEPY_FEWER).
        assert candidate != current_num_workers, dump(report)
        assert candidate in [r["num_workers"] for r in loader["runs"] if r.get("samples_per_s")], dump(report)
        others = judge_bottleneck.others_cpus(loader)
        assert others is not None and others >= judge_bottleneck.CONTENDED_CPUS, dump(report)
        assert "cannot be told from this run" in dl005_message and "one stretch of their load" in dl005_message, \
            dl005_message
        return
    assert candidate != current_num_workers, dump(report)
    assert (paired.get("current"), paired.get("candidate")) == (current_num_workers, candidate), dump(report)
    windows = paired["windows"]
    # More workers must win outright; fewer may lose a little (a neighbour that sank the sweep's worker points
    # can make num_workers=0 the knee below your 1: seen in CI beside two busy processes, 0.83-1.09).
    needed = 1.0 if candidate > current_num_workers else FEWER_WORKERS_TOLERANCE
    if len(windows) >= MIN_PAIRS:
        low, high = rec["gain_interval"]
        assert low <= needed <= high, dump(report)
    else:
        assert any(w["candidate_samples_per_s"] <= needed * w["current_samples_per_s"] for w in windows), \
            dump(report)
    assert "too noisy to tell" in dl005_message or "cannot be told from this run" in dl005_message, dl005_message


def assert_honest_incomplete(report: dict[str, Any], dl005_message: str, current_num_workers: int) -> None:
    """A live sweep the budget cut (a busy machine makes every step slower) keeps your setting only if it names
    what it could not measure and says no setting can be called best."""
    rec = report["loader"]["recommendation"]
    assert rec["trust"] == "incomplete" and rec["basis"] == "current", dump(report)
    assert rec["num_workers"] == current_num_workers and rec["unmeasured"], dump(report)
    assert min(rec["unmeasured"]) > current_num_workers, dump(report)
    assert "no setting can be called best" in dl005_message, dl005_message


def measured_loop(batch_size: int, wait_s: float, step_s: float, workers: int = 0, dataset: str = "Recorded",
                  intra_op_threads: int = 1) -> dict[str, Any]:
    """A loop section as `envdoctor run` records it: one process, its window filled, waiting `wait_s` a step."""
    steps = 40
    loader = {"pid": 100, "rank": None, "local_rank": None, "framework": None, "steps": steps, "complete": True,
              "settings": {"num_workers": workers, "batch_size": batch_size, "prefetch_factor": 2 if workers else None,
                           "pin_memory": False, "persistent_workers": False, "start_method": None,
                           "dataset": dataset},
              "wait_total_s": wait_s * steps, "step_total_s": step_s * steps,
              "data_wait_share": round(wait_s / (wait_s + step_s), 4),
              "batches_per_s": round(1 / (wait_s + step_s), 3), "first_batch_s": [0.05], "interrupted": 0,
              "window_start": 1.0, "window_end": 2.0, "intra_op_threads": intra_op_threads, "omp_num_threads": None}
    return {"command": ["python", "train.py"], "returncode": 0, "start_error": None, "stopped": False,
            "outcome": "measured", "plan": {"steps": steps, "seconds": None, "warmup_steps": 5},
            "python_processes": 1, "loaders": [loader],
            "cpu": {"cpu_s": 0.9, "window_s": 1.0, "usable_cpus": 2, "busy_share": 0.45, "processes": 1,
                    "machine_busy_share": 0.5},
            "cuda": None, "environment": {}, "wall_s": 3.0, "proof": None, "tune": None}
