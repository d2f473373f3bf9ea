"""One knee rule: the runner re-measures the setting envdoctor then recommends, on every recorded sweep.

The runner (src/envdoctor/inside/, started by path) picks the candidate for its paired windows with
`loader_paired.candidate`, which imports `loader_knee` from its own folder as a top-level module; the rule layer
recommends with `envdoctor.rules.loader.verdict.recommend`, which imports `envdoctor.inside.loader_knee`. Both are
run here on the sweeps in fixtures/sweeps.json (recorded live), with and without a training step time.
"""
from __future__ import annotations

import copy
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

import envdoctor.inside.loader_knee as host_knee
from envdoctor.rules.loader.verdict import recommend

ROOT = Path(__file__).resolve().parents[1]
#: The folder the runner is started from: beside the installed envdoctor, as loader.supervisor finds it.
INSIDE = Path(host_knee.__file__).resolve().parent
SWEEPS = json.loads((ROOT / "fixtures" / "sweeps.json").read_text(encoding="utf-8"))["sweeps"]
#: None, or the step time as a share of what the best run delivers: the step rule may then pick fewer workers.
STEP_SHARES = (None, 0.3, 0.7)


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


def _section(sweep: dict[str, Any]) -> dict[str, Any]:
    return {"dataset": sweep["name"], "runs": copy.deepcopy(sweep["runs"]), "skipped": [], "failure": None,
            "batch_size": sweep["batch_size"], "usable_cpus": sweep["usable_cpus"],
            "current": {"num_workers": 0, "prefetch_factor": None, "persistent_workers": False,
                        "pin_memory": False, "batch_size": sweep["batch_size"]}}


def _step_time(sweep: dict[str, Any], share: float | None) -> float | None:
    if share is None:
        return None
    best = max(r["samples_per_s"] for r in sweep["runs"])
    return sweep["batch_size"] / (share * best)


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
    session = SimpleNamespace(runs=copy.deepcopy(sweep["runs"]), usable=sweep["usable_cpus"],
                              batch_size=sweep["batch_size"], plan={"step_time_s": step})
    candidate = runner_paired.candidate(session)
    rec = recommend(_section(sweep), None, False, sweep["usable_cpus"], step)
    assert rec is not None and candidate is not None
    assert rec["trust"] in ("unpaired", "same"), rec  # nothing re-measured: the recommendation is the sweep's
    assert candidate == rec["num_workers"], (sweep["name"], share, rec)


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
