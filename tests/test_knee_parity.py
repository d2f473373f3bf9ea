"""One knee: every path that picks a worker count picks it with `loader_knee.recommended`, on every recorded sweep.

Four paths pick a num_workers:

- the runner (src/envdoctor/inside/, started by path) picks the candidate for its paired windows with
  `loader_paired.candidate`, which imports `loader_knee` from its own folder as a top-level module;
- the host recommends with the loader judgement's `recommend`, which imports `envdoctor.inside.loader_knee`;
- `envdoctor run --tune` puts the smoke test of the loop's own loader into the loop, with the loop's measured step
  as the consumer: run here through the engine, as `envdoctor run` builds its report, with the sweep as the loader
  section;
- `envdoctor run`'s loop model predicts a sweep from the loop's wait and step, and picks from it.

The first three are run on the sweeps in fixtures/sweeps.json (recorded live, and `loop-knee-disagreed`, built from
issue 28: there the smoke test recommended num_workers=2 and `--tune` 4, from a second knee that lacked the
CPU-eligibility filter and the worker-gain guard), with and without a training step time; the loop model on loops
whose wait is each sweep's num_workers=0 batch time.
"""
from __future__ import annotations

import copy
import json
import os
import pickle
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

import envdoctor.inside.loader_knee as host_knee
from envdoctor.judge.loader import recommend
from loadersupport import measured_loop

ROOT = Path(__file__).resolve().parents[1]
#: The folder the runner is started from: beside the installed envdoctor, as loader.supervisor finds it.
INSIDE = Path(host_knee.__file__).resolve().parent
SWEEPS = json.loads((ROOT / "fixtures" / "sweeps.json").read_text(encoding="utf-8"))["sweeps"]
#: None, or the step time as a share of what the best run delivers: the step rule may then pick fewer workers.
#: At 1.0 no run outruns the step with headroom, and the knee alone decides.
STEP_SHARES = (None, 0.3, 0.7, 1.0)
#: The loop's own setting in the --tune runs: a count no sweep measured, so the pick is always a change.
LOOP_WORKERS = 3


@pytest.fixture(scope="module")
def runner_paired() -> Iterator[ModuleType]:
    """loader_paired imported the way the runner imports its parts (top-level names from inside/)."""
    names = ("loader_knee", "loader_paired", "loader_session", "loader_timing", "loader_outcomes")
    saved = {name: sys.modules.pop(name) for name in names if name in sys.modules}
    sys.path.insert(0, str(INSIDE))
    try:
        import loader_paired

        yield loader_paired
    finally:
        sys.path.remove(str(INSIDE))
        for name in names:
            sys.modules.pop(name, None)
        sys.modules.update(saved)


def _section(sweep: dict[str, Any], current: int = 0) -> dict[str, Any]:
    return {"dataset": sweep["name"], "runs": copy.deepcopy(sweep["runs"]), "skipped": [], "failure": None,
            "batch_size": sweep["batch_size"], "usable_cpus": sweep["usable_cpus"],
            "current": {"num_workers": current, "prefetch_factor": 2 if current else None,
                        "persistent_workers": False, "pin_memory": False, "batch_size": sweep["batch_size"]}}


def _step_time(sweep: dict[str, Any], share: float | None) -> float | None:
    if share is None:
        return None
    best = max(r["samples_per_s"] for r in sweep["runs"])
    return sweep["batch_size"] / (share * best)


def _runner_pick(runner_paired: ModuleType, sweep: dict[str, Any], step: float | None) -> int | None:
    session = SimpleNamespace(runs=copy.deepcopy(sweep["runs"]), usable=sweep["usable_cpus"],
                              batch_size=sweep["batch_size"], plan={"step_time_s": step})
    candidate: int | None = runner_paired.candidate(session)
    return candidate


def _tune_report(sweep: dict[str, Any], step: float) -> Any:
    """`envdoctor run --tune`'s report: the loop measured, then the smoke test of its loader (the sweep) judged with
    the loop's step as consumer, through `tuning_config` and the engine as `run_and_report` does."""
    from envdoctor.config import Config
    from envdoctor.engine import run_check
    from envdoctor.facts import Facts
    from envdoctor.loop.command import tuning_config

    best = max(r["samples_per_s"] for r in sweep["runs"])
    # The loop waits as long as its loader at LOOP_WORKERS would make a batch: well over DL009's threshold.
    wait = sweep["batch_size"] / best
    loop = measured_loop(sweep["batch_size"], wait, step, LOOP_WORKERS)
    config = Config(format="json", select=("DL009",), no_loader=True)
    # A real pickle that needs nothing of `__main__`, as the observer writes for a library-built loader.
    with tempfile.NamedTemporaryFile(suffix=".pickle", delete=False) as handle:
        pickle.dump({"dataset": list(range(8)), "batch_size": sweep["batch_size"]}, handle)
    config = tuning_config(config, loop, {"path": handle.name, "executable": sys.executable})
    os.unlink(handle.name)
    assert config.step_time == pytest.approx(step, rel=1e-3) and config.loader_source is not None
    # The engine would gather the smoke test; here its section is the recorded sweep.
    facts = Facts(config, preset={"loop": loop, "loader": _section(sweep, LOOP_WORKERS)})
    return run_check(config, facts=facts)


def test_the_runner_and_the_rule_layer_load_one_file(runner_paired: ModuleType) -> None:
    runner_knee = sys.modules["loader_knee"]
    assert runner_knee is not host_knee  # two imports (top-level and packaged) ...
    assert Path(runner_knee.__file__).resolve() == Path(host_knee.__file__).resolve()  # ... of one module
    assert runner_paired.recommended is runner_knee.recommended


@pytest.mark.parametrize("share", STEP_SHARES, ids=lambda s: "no-step" if s is None else f"step-{s}")
@pytest.mark.parametrize("sweep", SWEEPS, ids=lambda s: s["name"])
def test_the_candidate_is_the_recommendation(runner_paired: ModuleType, sweep: dict[str, Any],
                                             share: float | None) -> None:
    step = _step_time(sweep, share)
    candidate = _runner_pick(runner_paired, sweep, step)
    rec = recommend(_section(sweep), None, False, sweep["usable_cpus"], step)
    assert rec is not None and candidate is not None
    assert rec["trust"] in ("unpaired", "same"), rec  # nothing re-measured: the recommendation is the sweep's
    assert candidate == rec["num_workers"], (sweep["name"], share, rec)


@pytest.mark.parametrize("share", [s for s in STEP_SHARES if s is not None], ids=lambda s: f"step-{s}")
@pytest.mark.parametrize("sweep", SWEEPS, ids=lambda s: s["name"])
def test_tune_recommends_the_smoke_tests_pick(runner_paired: ModuleType, sweep: dict[str, Any],
                                              share: float) -> None:
    """--tune always has a step (the loop's): the loop's recommendation and the report's loader recommendation, from
    one engine run, are the runner's candidate."""
    step = _step_time(sweep, share)
    assert step is not None
    candidate = _runner_pick(runner_paired, sweep, step)
    report = _tune_report(sweep, step)
    assert report.loader is not None and report.loop is not None, report.errors
    host = report.loader["recommendation"]
    assert host is not None and host["num_workers"] == candidate, (sweep["name"], share, host)
    rec = report.loop["recommendation"]
    assert rec is not None and rec["basis"] == "smoke-test", rec
    assert rec["num_workers"] == candidate, (sweep["name"], share, candidate, rec)
    (dl009,) = report.by_rule("DL009")
    assert dl009.evidence["recommendation"]["num_workers"] == candidate
    assert f"num_workers={candidate}" in dl009.fix


def test_the_sweep_where_the_knees_disagreed_now_agrees(runner_paired: ModuleType) -> None:
    """Issue 28: 2 usable CPUs, num_workers=4 computes past them; the smoke test said 2, `--tune` said 4."""
    (sweep,) = [s for s in SWEEPS if s["name"] == "loop-knee-disagreed"]
    step = _step_time(sweep, 1.0)
    assert step is not None
    assert host_knee.computes_past_cpus(next(r for r in sweep["runs"] if r["num_workers"] == 4), 2)
    assert _runner_pick(runner_paired, sweep, step) == 2
    report = _tune_report(sweep, step)
    assert report.loader is not None and report.loop is not None
    assert report.loader["recommendation"]["num_workers"] == 2
    assert report.loop["recommendation"]["num_workers"] == 2, report.loop["recommendation"]


@pytest.mark.parametrize("share", [s for s in STEP_SHARES if s is not None], ids=lambda s: f"step-{s}")
@pytest.mark.parametrize("sweep", SWEEPS, ids=lambda s: s["name"])
def test_the_loop_model_picks_the_knee_of_its_predicted_sweep(sweep: dict[str, Any], share: float) -> None:
    """The loop at num_workers=0 waiting as long as the sweep's num_workers=0 makes a batch: the model's pick is
    `loader_knee.recommended` on the sweep it predicts (no knee of its own)."""
    from envdoctor.judge.loop import DATA_WAIT_SHARE, model_runs, predicted_step_s
    from envdoctor.judge.loop import recommend as loop_recommend

    step = _step_time(sweep, share)
    assert step is not None
    zero = next(r for r in sweep["runs"] if r["num_workers"] == 0)
    wait = sweep["batch_size"] / zero["samples_per_s"]
    runs, load, worker_cpus, _ = model_runs(0, wait, step, sweep["usable_cpus"])
    assert [r["num_workers"] for r in runs][:2] == [0, 1] and worker_cpus >= 1.0
    chosen, _ = host_knee.recommended(runs, None, 1, step)
    assert chosen is not None
    rec = loop_recommend({"num_workers": 0}, wait, step, sweep["usable_cpus"], cuda=False)
    gain = (wait + step) / predicted_step_s(chosen["num_workers"], load, step, worker_cpus)
    if chosen["num_workers"] == 0 or gain < 1 + DATA_WAIT_SHARE / 2:
        assert rec is None, (chosen, gain, rec)  # the knee keeps the loop's setting, or gains too little to say
    else:
        assert rec is not None and rec["basis"] == "loop-model", rec
        assert rec["num_workers"] == chosen["num_workers"] and rec["gain"] == round(gain, 2), (chosen, rec)


def test_the_recorded_sweeps_exercise_every_branch_of_the_knee() -> None:
    # Guards the fixtures: parity on sweeps that all end the same way would prove little.
    outcomes = set()
    for sweep in SWEEPS:
        for share in STEP_SHARES:
            chosen, basis = host_knee.recommended(sweep["runs"], sweep["usable_cpus"], sweep["batch_size"],
                                                  _step_time(sweep, share))
            assert chosen is not None
            left_out = any(host_knee.computes_past_cpus(r, sweep["usable_cpus"]) for r in sweep["runs"])
            outcomes.add((basis, chosen["num_workers"] == 0, left_out))
    assert {("knee", True, False), ("knee", False, False), ("step", False, False)} <= outcomes, outcomes
    assert any(left_out for _, _, left_out in outcomes), outcomes


def test_with_a_step_num_workers_0_is_rated_as_it_delivers_in_the_loop() -> None:
    """The CPU-bound sweep: alone, one worker (356 samples/s) does not beat the main process (395); in a loop whose
    step takes 0.135 s a batch of 16, the main process loads only between steps (91 samples/s), and one worker
    that loads while the step runs is the pick of every path."""
    (sweep,) = [s for s in SWEEPS if s["name"] == "cpu-bound"]
    alone, _ = host_knee.recommended(sweep["runs"], sweep["usable_cpus"], sweep["batch_size"])
    assert alone is not None and alone["num_workers"] == 0
    step = _step_time(sweep, 0.3)
    assert step is not None
    in_loop, _ = host_knee.recommended(sweep["runs"], sweep["usable_cpus"], sweep["batch_size"], step)
    assert in_loop is not None and in_loop["num_workers"] == 1
    assert host_knee.in_loop_rate(395.16, sweep["batch_size"] / step) == pytest.approx(91.2, abs=0.1)
    report = _tune_report(sweep, step)
    assert report.loop is not None and report.loop["recommendation"]["num_workers"] == 1
