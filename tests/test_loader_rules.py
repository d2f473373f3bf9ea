"""DL001–DL008 and SPW003 on recorded smoke-test sections: each fires on its state, stays quiet otherwise.

The sections have the exact shape `envdoctor.loader.gather_loader` emits
(runs, getitem, current, failure …); the classification is run on them the
way the loader stage runs it, so these tests pin the judgement, and the live
tests (test_loader_suite.py, test_loader_hostile.py) pin the measuring.
"""
from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from envdoctor.config import Config
from envdoctor.engine import run_check
from envdoctor.facts import Facts
from envdoctor.inside.loader_knee import knee
from envdoctor.judge.bottleneck import classify
from envdoctor.judge.loader import judge_loader, recommend

SYSTEM = {"cpu": {"count": 2, "affinity": 2, "usable": 2, "quota_cpus": None, "cgroup_version": 2},
          "memory": {"effective_available": 16 * 1024**3, "cgroup_limit": None},
          "limits": {"nofile": {"soft": 65536, "hard": 65536}},
          "shm": {"path": "/dev/shm", "total": 8 * 1024**3, "free": 8 * 1024**3}}
#: The environment the recorded sections were measured in (the engine resolves the target first).
TARGET = {"kind": "venv", "prefix": "/env", "interpreter": "/env/bin/python", "python": "3.11.7"}


def run(nw: int, rate: float, first: float = 0.05, **extra: Any) -> dict[str, Any]:
    return {"num_workers": nw, "samples_per_s": rate, "first_batch_s": first, "spread": 0.05, **extra}


def section(runs: list[dict[str, Any]], *, getitem: dict[str, Any] | None = None, length: int = 100000,
            batch_size: int = 16, current: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    data = {
        "dataset": "fixture", "runs": runs, "bottleneck": None, "recommendation": None, "skipped": [],
        "batch_bytes": 4096, "tensors_per_batch": 2, "worker_rss_bytes": 200 * 1024**2,
        "current": current or {"num_workers": 0, "prefetch_factor": None, "persistent_workers": False,
                               "pin_memory": False, "batch_size": batch_size},
        "failure": None, "length": length, "batch_size": batch_size, "start_method": "fork",
        "getitem": getitem or {"per_sample_s": 0.003, "cpu_fraction": 0.97, "blocked_fraction": 0.01},
        "torch": {"cuda_available": False},
    }
    data.update(extra)
    return data


def judged(data: dict[str, Any], step_time: float | None = None, usable: int = 2) -> dict[str, Any]:
    """The facts with the usable CPUs the loader stage records, and the judge layer's judgement beside them
    (as the report's `loader` object carries it)."""
    data = copy.deepcopy(data)
    data["usable_cpus"] = usable
    return {**data, **judge_loader(data, step_time).judgement}


def findings_of(data: dict[str, Any], rule: str, step_time: float | None = None) -> list[Any]:
    config = Config(select=(rule,), step_time=step_time)
    facts = Facts.from_dict({"loader": data, "system": SYSTEM, "target": TARGET}, config)
    report = run_check(config, facts=facts)
    assert not report.errors, report.errors
    return report.by_rule(rule)


CPU_BOUND = section([run(0, 330, 0.05), run(1, 320, 0.1, worker_cpu=0.97, worker_runqueue=0.02),
                     run(2, 610, 0.1, worker_cpu=0.95, worker_runqueue=0.04, main_cpu=0.05)])
REMOTE = section([run(0, 66, 0.12), run(1, 66, 0.2, worker_cpu=0.02), run(2, 131, 0.2, worker_cpu=0.02),
                  run(4, 262, 0.2, worker_cpu=0.02, worker_blocked=0.97),
                  run(8, 515, 0.25, worker_cpu=0.03, worker_blocked=0.96)],
                 getitem={"per_sample_s": 0.0151, "cpu_fraction": 0.01, "blocked_fraction": 0.99}, batch_size=8)
TINY = section([run(0, 52000, 0.001), run(1, 4100, 0.05, worker_cpu=0.08, worker_runqueue=0.09),
                run(2, 6900, 0.06, worker_cpu=0.05, worker_runqueue=0.04), run(4, 7100, 0.08)],
               getitem={"per_sample_s": 2e-6, "cpu_fraction": 1.0, "blocked_fraction": 0.0}, batch_size=1,
               current={"num_workers": 4, "prefetch_factor": 2, "persistent_workers": False,
                        "pin_memory": False, "batch_size": 1})
STARTUP = section([run(0, 480, 0.02), run(1, 470, 1.05), run(2, 930, 1.06), run(4, 1800, 1.1)],
                  getitem={"per_sample_s": 0.0021, "cpu_fraction": 0.02, "blocked_fraction": 0.97},
                  length=96, batch_size=8,
                  current={"num_workers": 2, "prefetch_factor": 2, "persistent_workers": False,
                           "pin_memory": False, "batch_size": 8},
                  persistent={"num_workers": 4, "measured": True, "saving_s": 0.98,
                              "epoch2_first_batch_s": {"false": 1.1, "true": 0.12}})


#: A CPU-bound loader on CPUs other processes hold: workers compute or queue, and still lose to 0.
CONTENDED = section([run(0, 523, 0.06), run(1, 500, 0.12, worker_cpu=0.93, worker_runqueue=0.05),
                     run(2, 436, 0.22, worker_cpu=0.5, worker_runqueue=0.48)])


@pytest.mark.parametrize("data, expected", [
    (CPU_BOUND, "cpu-saturated"), (REMOTE, "storage"), (TINY, "ipc"), (STARTUP, "startup"),
    (CONTENDED, "cpu-saturated")])
def test_classification_of_recorded_sweeps(data: dict[str, Any], expected: str) -> None:
    bottleneck, reason = classify(data, 2, None)
    assert bottleneck == expected, reason


def test_one_worker_matching_none_is_not_called_ipc() -> None:
    # Under spawn the budget may allow only num_workers=1, which at best equals 0: inconclusive,
    # so the blocked __getitem__ decides.
    data = section([run(0, 65, 0.12), run(1, 65, 3.0, worker_cpu=0.02, worker_blocked=0.97)],
                   getitem={"per_sample_s": 0.015, "cpu_fraction": 0.01, "blocked_fraction": 0.98})
    assert classify(data, 2, None)[0] == "storage"


def test_getitem_class_when_cpus_are_left_over() -> None:
    data = section([run(0, 300), run(1, 290, worker_cpu=0.9), run(2, 580, worker_cpu=0.9),
                    run(4, 1150, worker_cpu=0.9, main_cpu=0.1), run(8, 1160, worker_cpu=0.45)])
    assert classify(data, 16, None)[0] == "getitem"


def test_step_time_makes_a_fast_loader_no_bottleneck() -> None:
    bottleneck, reason = classify(CPU_BOUND, 2, 0.1)  # 16 samples / 0.1 s = 160 samples/s needed
    assert bottleneck == "none"
    assert "160 samples/s" in reason


def test_knee_is_the_fewest_workers_within_95_percent() -> None:
    assert knee(REMOTE["runs"])["num_workers"] == 8
    flat = [run(0, 100), run(1, 180), run(2, 300), run(4, 310), run(8, 312)]
    assert knee(flat)["num_workers"] == 2
    # Workers within 10% of none are not worth their processes, whatever the noise put first.
    assert knee([run(0, 400), run(1, 390), run(2, 425)])["num_workers"] == 0


def test_recommendation_and_gain_over_current() -> None:
    data = judged(REMOTE)
    rec = data["recommendation"]
    assert rec == {**rec, "num_workers": 8, "prefetch_factor": 4, "persistent_workers": True, "pin_memory": False}
    assert rec["gain"] == pytest.approx(515 / 66, rel=1e-3)
    cuda = recommend(data, "storage", cuda=True)
    assert cuda["pin_memory"] is True


def test_no_recommendation_without_a_worker_run() -> None:
    data = judged(section([run(0, 95)]))
    assert data["recommendation"] is None
    assert data["bottleneck"] is None


def test_dl001_fires_when_the_loader_cannot_feed_the_step() -> None:
    data = judged(REMOTE, step_time=0.02)  # 8 / 0.02 = 400 samples/s wanted, current 66
    (hit,) = findings_of(data, "DL001", step_time=0.02)
    assert hit.evidence["current_samples_per_s"] == 66
    assert hit.evidence["consumer_samples_per_s"] == 400
    assert hit.evidence["best_samples_per_s"] == 515
    assert "num_workers=8" in hit.fix


def test_dl001_quiet_when_current_settings_keep_up() -> None:
    data = judged(REMOTE, step_time=1.0)
    assert findings_of(data, "DL001", step_time=1.0) == []
    assert findings_of(judged(REMOTE), "DL001") == []  # no step time, nothing to compare with


def test_dl002_fires_for_ipc_bound() -> None:
    (hit,) = findings_of(judged(TINY), "DL002")
    assert hit.evidence["num_workers_0_samples_per_s"] == 52000
    assert hit.evidence["best_worker_setting"] == 4
    assert hit.evidence["best_worker_samples_per_s"] == 7100
    assert "num_workers=0" in hit.fix


def test_dl002_is_information_when_the_loader_already_uses_no_workers() -> None:
    """Workers losing to num_workers=0 is a warning for a loader that has workers; at 0 nothing is wrong."""
    at_zero = copy.deepcopy(TINY)
    at_zero["current"] = {**at_zero["current"], "num_workers": 0, "prefetch_factor": None}
    (hit,) = findings_of(judged(at_zero), "DL002")
    assert hit.severity.value == "info"
    assert hit.evidence["best_worker_setting"] == 4
    assert "already the better setting" in hit.message and hit.fix.startswith("keep num_workers=0")
    (hit,) = findings_of(judged(TINY), "DL002")
    assert hit.severity.value == "warning" and hit.fix.startswith("use num_workers=0")


def test_dl002_quiet_when_workers_help() -> None:
    assert findings_of(judged(REMOTE), "DL002") == []


def test_dl003_fires_for_storage_and_cpu() -> None:
    (hit,) = findings_of(judged(REMOTE), "DL003")
    assert hit.evidence["bottleneck"] == "storage"
    assert hit.evidence["blocked_fraction"] == 0.99
    assert hit.evidence["recommended_num_workers"] == 8
    (hit,) = findings_of(judged(CPU_BOUND), "DL003")
    assert hit.evidence["bottleneck"] == "cpu-saturated"
    assert hit.evidence["curve"] == {"0": 330, "1": 320, "2": 610}


def test_dl001_to_dl004_do_not_judge_the_built_in_synthetic_dataset() -> None:
    """The synthetic workload measures the machine; its __getitem__ is ours, not the user's code."""
    for data, rule in ((CPU_BOUND, "DL003"), (REMOTE, "DL003"), (TINY, "DL002"), (STARTUP, "DL004")):
        synthetic = judged({**copy.deepcopy(data), "source": {"kind": "synthetic"}})
        assert findings_of(synthetic, rule) == [], rule
        assert findings_of(judged({**copy.deepcopy(data), "source": {"kind": "factory"}}), rule), rule
    slow = judged({**copy.deepcopy(CPU_BOUND), "source": {"kind": "synthetic"}}, step_time=0.001)
    assert findings_of(slow, "DL001", step_time=0.001) == []
    (settings,) = findings_of(judged({**copy.deepcopy(REMOTE), "source": {"kind": "synthetic"}}), "DL005")
    assert "built-in synthetic dataset" in settings.message


def test_dl003_quiet_for_ipc() -> None:
    assert findings_of(judged(TINY), "DL003") == []


def test_dl004_fires_when_startup_dominates() -> None:
    (hit,) = findings_of(judged(STARTUP), "DL004")
    assert hit.evidence["num_workers"] == 4
    assert hit.evidence["startup_s"] == pytest.approx(1.1 - 8 * 4 / 1800, abs=1e-3)
    assert hit.evidence["startup_share"] > 0.5
    assert hit.evidence["epoch_saving_s"] == 0.98
    assert hit.evidence["saving_measured"] is True
    assert "persistent_workers=True" in hit.fix


def test_dl004_quiet_with_persistent_workers_or_cheap_startup() -> None:
    persistent = copy.deepcopy(STARTUP)
    persistent["current"]["persistent_workers"] = True
    assert findings_of(judged(persistent), "DL004") == []
    assert findings_of(judged(REMOTE), "DL004") == []


def test_dl005_gives_settings_and_gain() -> None:
    (hit,) = findings_of(judged(REMOTE), "DL005")
    assert hit.evidence["recommendation"] == {"num_workers": 8, "prefetch_factor": 4,
                                              "persistent_workers": True, "pin_memory": False}
    assert hit.evidence["gain"] == pytest.approx(7.803, abs=1e-3)
    assert hit.fix == ("DataLoader(dataset, batch_size=8, num_workers=8, prefetch_factor=4, "
                       "persistent_workers=True, pin_memory=False)")


def test_dl005_quiet_when_settings_already_match() -> None:
    data = copy.deepcopy(REMOTE)
    data["current"] = {"num_workers": 8, "prefetch_factor": 4, "persistent_workers": True,
                       "pin_memory": False, "batch_size": 8}
    assert findings_of(judged(data), "DL005") == []


def test_dl006_names_kind_and_index() -> None:
    data = judged(section([], failure={"kind": "raised", "index": 7, "num_workers": 0, "where": "__getitem__",
                                       "exception": "ValueError", "signal": None,
                                       "message": "ValueError: corrupt record 7"}))
    (hit,) = findings_of(data, "DL006")
    assert hit.evidence["kind"] == "raised"
    assert hit.evidence["index"] == 7
    assert hit.evidence["exception"] == "ValueError"
    assert "at index 7 in the main process" in hit.message
    assert "dataset[7]" in hit.fix


def test_dl006_quiet_without_failure_and_for_pickling() -> None:
    assert findings_of(judged(REMOTE), "DL006") == []
    pickled = section([run(0, 90)], failure={"kind": "pickle", "message": "Can't pickle", "index": None})
    assert findings_of(judged(pickled), "DL006") == []


def test_spw003_fires_under_spawn() -> None:
    problems = [{"object": "collate_fn", "type": "function",
                 "error": "AttributeError: Can't get local object 'make.<locals>.<lambda>'"}]
    data = judged(section([run(0, 90)], start_method="spawn",
                          pickle={"start_method": "spawn", "checked": True, "problems": problems}))
    (hit,) = findings_of(data, "SPW003")
    assert hit.severity.value == "error"
    assert hit.evidence["start_method"] == "spawn"
    assert hit.evidence["problems"] == problems


def test_spw003_quiet_when_everything_pickles() -> None:
    data = judged(section([run(0, 90)], pickle={"start_method": "spawn", "checked": True, "problems": []}))
    assert findings_of(data, "SPW003") == []


def test_rules_quiet_without_loader_section() -> None:
    for rule in ("DL001", "DL002", "DL003", "DL004", "DL005", "DL006", "SPW003"):
        config = Config(select=(rule,), no_loader=True, step_time=0.1)
        facts = Facts.from_dict({"system": SYSTEM, "target": TARGET}, config)
        report = run_check(config, facts=facts)
        assert report.findings == [] and report.errors == []


#: Recorded live (a pure-Python CPU-bound dataset, DataLoader(num_workers=8), 2 usable CPUs shared with
#: other jobs): the 8 computing workers happened to measure twice the rate of 2. Contention cannot be
#: staged on demand, so the measurement is kept as it came.
PAST_CPUS = section([run(0, 401.8, 0.0406, main_cpu=0.98),
                     run(8, 752.86, 0.5363, worker_cpu=0.231, worker_runqueue=0.721, worker_blocked=0.048,
                         main_cpu=0.056),
                     run(1, 391.15, 0.0855, worker_cpu=0.95, worker_runqueue=0.051, worker_blocked=0.0,
                         main_cpu=0.033),
                     run(2, 376.66, 0.1666, worker_cpu=0.479, worker_runqueue=0.516, worker_blocked=0.005,
                         main_cpu=0.03)],
                    getitem={"per_sample_s": 0.00247, "cpu_fraction": 0.992, "blocked_fraction": 0.0},
                    current={"num_workers": 8, "prefetch_factor": 2, "persistent_workers": False,
                             "pin_memory": False, "batch_size": 16})
#: Recorded live under `taskset -c 0` beside a busy loop: one usable CPU, taken half by another process.
ONE_CPU_TAKEN = section([run(0, 205.37, 0.073, main_cpu=0.497),
                         run(8, 187.15, 1.27, worker_cpu=0.059, worker_runqueue=0.927, worker_blocked=0.015,
                             main_cpu=0.014),
                         run(1, 199.81, 0.15, worker_cpu=0.477, worker_runqueue=0.549, worker_blocked=0.0,
                             main_cpu=0.031)],
                        getitem={"per_sample_s": 0.00454, "cpu_fraction": 0.542, "blocked_fraction": 0.0},
                        current={"num_workers": 8, "prefetch_factor": 2, "persistent_workers": False,
                                 "pin_memory": False, "batch_size": 16})


def test_computing_workers_past_the_cpus_are_never_recommended() -> None:
    data = judged(PAST_CPUS, usable=2)
    rec = data["recommendation"]
    assert rec["num_workers"] <= 2, rec
    assert rec["left_out"] == [{"num_workers": 8, "samples_per_s": 752.86, "worker_runqueue": 0.721}]
    assert rec["best_samples_per_s"] == 401.8
    assert data["bottleneck"] == "cpu-saturated", data["bottleneck_reason"]
    assert "num_workers=2 waiting 52%" in data["bottleneck_reason"]
    (hit,) = findings_of(data, "DL005")
    assert hit.evidence["recommendation"]["num_workers"] <= 2
    assert hit.evidence["left_out"][0]["num_workers"] == 8 and hit.evidence["usable_cpus"] == 2
    assert "num_workers=8 (753 samples/s) left out" in hit.message
    # Waiting workers (storage) past the CPUs still gain honestly and stay eligible.
    assert judged(REMOTE)["recommendation"]["num_workers"] == 8


def test_workers_that_waited_for_a_taken_cpu_are_not_called_getitem() -> None:
    data = judged(ONE_CPU_TAKEN, usable=1)
    assert data["bottleneck"] == "cpu-saturated", data["bottleneck_reason"]
    assert "waited for a CPU 55%" in data["bottleneck_reason"]
    assert data["recommendation"]["num_workers"] <= 1
    (hit,) = findings_of(data, "DL003")
    assert hit.evidence["bottleneck"] == "cpu-saturated"
    assert "rises with workers" not in hit.message


def test_one_worker_that_merely_matches_none_on_idle_cpus_is_no_diagnosis() -> None:
    data = judged(section([run(0, 400, main_cpu=0.98), run(1, 395, worker_cpu=0.97, worker_runqueue=0.02,
                                                             worker_blocked=0.01)]), usable=4)
    assert data["bottleneck"] is None
    assert "nothing tells the causes apart" in data["bottleneck_reason"]
    for rule in ("DL002", "DL003"):
        assert findings_of(data, rule) == [], rule


def test_equally_busy_worker_runs_do_not_crash_the_classification() -> None:
    data = section([run(0, 500), run(1, 400, worker_cpu=0.97, worker_runqueue=0.03),
                    run(2, 420, worker_cpu=0.97, worker_runqueue=0.03)])
    assert classify(data, 2, None)[0] == "cpu-saturated"


def test_a_noisy_loss_to_num_workers_0_is_not_called_ipc() -> None:
    """Recorded live on a loaded machine: num_workers=0 swung from 218 to 2,139 samples/s between
    windows and one worker's fastest window beat its mean. Means of such runs prove no IPC cost."""
    data = section([run(0, 770.6, 1.27, samples_per_s_min=217.74, samples_per_s_max=2138.53, main_cpu=1.362),
                    run(1, 839.36, 0.1, samples_per_s_min=797.6, samples_per_s_max=880.66, main_cpu=0.131,
                        worker_cpu=0.911, worker_runqueue=0.001, worker_blocked=0.088),
                    run(2, 644.55, 0.16, samples_per_s_min=547.19, samples_per_s_max=750.51, main_cpu=0.087,
                        worker_cpu=0.415, worker_runqueue=0.507, worker_blocked=0.078)],
                   getitem={"per_sample_s": 0.0316, "cpu_fraction": 0.493, "blocked_fraction": 0.0},
                   batch_size=32)
    judged_data = judged(data)
    assert judged_data["bottleneck"] != "ipc", judged_data["bottleneck_reason"]
    assert findings_of(judged_data, "DL002") == []
    # A clear loss (every window of every worker setting below num_workers=0) is still IPC.
    clear = copy.deepcopy(TINY)
    for r in clear["runs"]:
        r.update(samples_per_s_min=0.9 * r["samples_per_s"], samples_per_s_max=1.1 * r["samples_per_s"])
    assert classify(clear, 2, None)[0] == "ipc"


def test_waiting_workers_past_the_cpus_stay_eligible_on_busy_cpus() -> None:
    """Recorded live (2 MiB samples behind a 10 ms wait, 2 CPUs shared with other jobs): eight workers
    queued for a CPU 47% of the time, yet of the rest they computed 10% and waited 43%. Queueing
    grows with the workers on busy CPUs; it does not make waiting workers computing ones."""
    data = section([run(0, 54.32, 0.22, main_cpu=0.717),
                    run(2, 155.26, 0.18, worker_cpu=0.187, worker_runqueue=0.015, worker_blocked=0.798),
                    run(1, 75.21, 0.16, worker_cpu=0.214, worker_runqueue=0.024, worker_blocked=0.762),
                    run(4, 296.07, 0.25, worker_cpu=0.166, worker_runqueue=0.064, worker_blocked=0.77),
                    run(8, 357.35, 0.28, worker_cpu=0.1, worker_runqueue=0.469, worker_blocked=0.431)],
                   getitem={"per_sample_s": 0.0157, "cpu_fraction": 0.115, "blocked_fraction": 0.615},
                   batch_size=8)
    rec = judged(data)["recommendation"]
    assert rec["num_workers"] == 8 and rec["left_out"] == []


def test_workers_queued_for_cpus_they_do_not_outnumber_are_not_called_getitem() -> None:
    """Recorded live (the CPU-bound fixture on CPUs other jobs held): one worker measured 12% above
    num_workers=0 by noise, two waited for a CPU 62% of the time. The CPUs are not free."""
    data = section([run(0, 263.19, main_cpu=0.648),
                    run(1, 295.32, worker_cpu=0.705, worker_runqueue=0.282, worker_blocked=0.014, main_cpu=0.026),
                    run(2, 250.25, worker_cpu=0.362, worker_runqueue=0.621, worker_blocked=0.017, main_cpu=0.028)],
                   getitem={"per_sample_s": 0.00406, "cpu_fraction": 0.619, "blocked_fraction": 0.0})
    bottleneck, reason = classify(data, 2, None)
    assert bottleneck == "cpu-saturated", reason
    assert "with num_workers=2 (no more than the 2 usable CPU(s)) the workers waited for a CPU 62%" in reason


def test_blocked_getitem_on_busy_cpus_is_still_storage() -> None:
    """Recorded live (the 10 ms-wait fixture on CPUs other jobs held): __getitem__ computed 20% of the
    time, was blocked 48% and queued for a CPU the rest; the curve climbs to 8 waiting workers."""
    data = section([run(0, 86.7), run(2, 147.16, worker_cpu=0.218, worker_runqueue=0.013, worker_blocked=0.769),
                    run(1, 78.95, worker_cpu=0.19, worker_runqueue=0.014, worker_blocked=0.796),
                    run(4, 290.11, worker_cpu=0.163, worker_runqueue=0.06, worker_blocked=0.777),
                    run(8, 499.73, worker_cpu=0.153, worker_runqueue=0.206, worker_blocked=0.641)],
                   getitem={"per_sample_s": 0.016, "cpu_fraction": 0.197, "blocked_fraction": 0.478}, batch_size=8)
    bottleneck, reason = classify(data, 2, None)
    assert bottleneck == "storage", reason
    # Without the probe's split, 8 waiting workers past 2 CPUs are not "cpu-saturated" either.
    data["getitem"] = {"per_sample_s": 0.016}
    assert classify(data, 2, None)[0] != "cpu-saturated"


#: Recorded live (loaderfixtures.trust:large_cheap_samples — 2 MiB float32 samples from a cache — on 2 CPUs
#: other jobs held): __getitem__ 0.008 ms, but 20 ms a sample at num_workers=0 collating 16 MiB batches; two
#: workers measured faster only by taking more CPU share. The time is in the batches: IPC, never DL003.
LARGE_CHEAP = section([run(0, 49.87, 0.18, samples_per_s_max=72.94, main_cpu=0.304),
                       run(2, 114.68, 0.5, samples_per_s_max=193.73, main_cpu=0.05, worker_cpu=0.126,
                           worker_runqueue=0.737, worker_blocked=0.137),
                       run(1, 107.9, 0.43, samples_per_s_max=177.94, main_cpu=0.081, worker_cpu=0.214,
                           worker_runqueue=0.79, worker_blocked=0.0)],
                      getitem={"per_sample_s": 9.0e-06, "median_s": 7.9e-06, "cpu_fraction": 0.936,
                               "blocked_fraction": 0.0},
                      batch_size=8, batch_bytes=8 * 512 * 1024 * 4,
                      current={"num_workers": 2, "prefetch_factor": 2, "persistent_workers": False,
                               "pin_memory": False, "batch_size": 8})


def test_large_cheap_samples_are_ipc_not_slow_getitem() -> None:
    data = judged(LARGE_CHEAP)
    assert data["bottleneck"] == "ipc", data["bottleneck_reason"]
    assert "collating and moving batches of 16.0 MiB" in data["bottleneck_reason"]
    assert findings_of(data, "DL003") == []
    (hit,) = findings_of(data, "DL002")
    assert hit.evidence["batch_bytes"] == 16 * 1024**2
    assert "uint8" in hit.fix and "normalise and augment on the GPU" in hit.fix


def test_ipc_told_from_compute_by_cpu_per_sample() -> None:
    # Workers lose, and each sample costs them 5x the CPU it costs made in the main process: IPC.
    moved = section([run(0, 1000, main_cpu=0.9), run(1, 400, main_cpu=0.3, worker_cpu=0.95, worker_runqueue=0.0,
                                                     worker_blocked=0.05),
                     run(2, 450, main_cpu=0.3, worker_cpu=0.9, worker_runqueue=0.05, worker_blocked=0.05)],
                    getitem={"per_sample_s": 0.0008, "cpu_fraction": 0.99, "blocked_fraction": 0.0})
    assert classify(moved, 2, None)[0] == "ipc"
    # The same loss where the samples cost the workers what they cost the main process: CPUs are short.
    short = section([run(0, 1000, main_cpu=0.9), run(1, 850, main_cpu=0.02, worker_cpu=0.8, worker_runqueue=0.15,
                                                     worker_blocked=0.05),
                     run(2, 880, main_cpu=0.03, worker_cpu=0.42, worker_runqueue=0.55, worker_blocked=0.03)],
                    getitem={"per_sample_s": 0.0008, "cpu_fraction": 0.99, "blocked_fraction": 0.0})
    assert classify(short, 2, None)[0] == "cpu-saturated"


def paired(current: int, candidate: int, pairs: list[tuple[float, float]]) -> dict[str, Any]:
    return {"current": current, "candidate": candidate, "window_s": 0.5,
            "windows": [{"order": "current-first" if k % 2 == 0 else "candidate-first",
                         "current_samples_per_s": c, "candidate_samples_per_s": n}
                        for k, (c, n) in enumerate(pairs)], "cut": None}


def test_a_paired_gain_is_shown_beside_the_paired_rates_never_a_sunk_sweep_point() -> None:
    """Seen once in stop 25 (a live check on a busy machine): "recommended num_workers=2 — measured 280
    samples/s, 1.57× the 365 samples/s of your settings" while the sweep had num_workers=0 fastest. The sweep
    kept 0; its runner-up 2, sunk to 280 in its one sweep point, won 1.57× in the paired windows. The message
    must not put the sunk point beside the pairs' gain."""
    data = section([run(0, 365.0, main_cpu=0.95), run(1, 300.0, worker_cpu=0.9, worker_runqueue=0.05),
                    run(2, 280.0, worker_cpu=0.6, worker_runqueue=0.3)])
    data["paired"] = paired(0, 2, [(360, 570), (372, 580), (365, 566), (368, 578)])
    judged_data = judged(data)
    rec = judged_data["recommendation"]
    assert rec["num_workers"] == 2 and rec["trust"] == "gain" and rec["basis"] == "paired"
    assert rec["samples_per_s"] == 574.0 and rec["current_samples_per_s"] == 366.5
    assert rec["gain"] == pytest.approx(1.57, abs=0.01)
    (hit,) = findings_of(judged_data, "DL005")
    assert "measured 574 samples/s, 1.57× the 366 samples/s of your settings" in hit.message, hit.message
    assert rec["samples_per_s"] > rec["current_samples_per_s"]


def test_a_gain_that_holds_in_paired_windows_is_recommended_with_its_interval() -> None:
    data = copy.deepcopy(REMOTE)
    data["paired"] = paired(0, 8, [(60, 480), (64, 500), (58, 470), (62, 505)])
    rec = judged(data)["recommendation"]
    assert rec["num_workers"] == 8 and rec["trust"] == "gain"
    low, high = rec["gain_interval"]
    assert 1 < low < rec["gain"] < high and rec["paired_windows"] == 4
    (hit,) = findings_of(judged(data), "DL005")
    assert hit.evidence["gain_interval"] == [low, high] and "paired windows" in hit.message


def test_too_noisy_to_tell_keeps_the_users_setting() -> None:
    """Recorded pattern of a loaded run: one sweep point claimed a gain that paired windows cannot confirm."""
    data = copy.deepcopy(REMOTE)
    data["paired"] = paired(0, 8, [(60, 120), (200, 70), (65, 130), (150, 80)])
    judged_data = judged(data)
    rec = judged_data["recommendation"]
    assert rec["trust"] == "too-noisy" and rec["num_workers"] == 0 and rec["basis"] == "current"
    assert rec["candidate_num_workers"] == 8 and rec["gain_interval"][0] < 1 < rec["gain_interval"][1]
    (hit,) = findings_of(judged_data, "DL005")
    assert "too noisy to tell" in hit.message and hit.evidence["trust"] == "too-noisy"
    assert hit.severity.value == "info" and "keep your settings" in hit.fix


def test_two_pairs_that_agree_with_the_sweep_leave_its_word_standing() -> None:
    """Seen in the CI run of stop 26 (one core busy beside the suite): the sweep of the remote-read loader
    scaled ×8.5 to num_workers=8, the budget left time for two pairs only, ×5.8 and ×7.8 (current-first
    and candidate-first), and one degree of freedom made that an interval from 0.8 to 50: "too noisy to
    tell", keep num_workers=0. Two pairs whose interval decides nothing agree with the sweep or do not."""
    data = copy.deepcopy(REMOTE)
    data["paired"] = paired(0, 8, [(65.7, 378.0), (65.7, 515.5)])
    rec = judged(data)["recommendation"]
    assert rec["num_workers"] == 8 and rec["trust"] == "unpaired" and rec["basis"] == "knee"
    assert rec["gain_interval"] is None and rec["paired_windows"] == 0
    # One of the two against the sweep: too noisy to tell, the user's setting kept.
    data["paired"] = paired(0, 8, [(65.7, 378.0), (65.7, 60.0)])
    rec = judged(data)["recommendation"]
    assert rec["trust"] == "too-noisy" and rec["num_workers"] == 0 and rec["candidate_num_workers"] == 8
    # Two pairs close enough to give a decisive interval decide, as more do.
    data["paired"] = paired(0, 8, [(65.7, 378.0), (65.7, 380.0)])
    rec = judged(data)["recommendation"]
    assert rec["trust"] == "gain" and rec["gain_interval"][0] > 1 and rec["paired_windows"] == 2
    # From three pairs on, an interval that decides nothing is too noisy to tell, agreeing pairs or not.
    data["paired"] = paired(0, 8, [(65.7, 378.0), (65.7, 70.0), (65.7, 515.5)])
    assert judged(data)["recommendation"]["trust"] == "too-noisy"
    # A third pair narrows the interval, and the interval decides.
    data["paired"] = paired(0, 8, [(65.7, 378.0), (65.7, 515.5), (65.5, 378.5)])
    rec = judged(data)["recommendation"]
    assert rec["trust"] == "gain" and rec["gain_interval"][0] > 1 and rec["paired_windows"] == 3


def test_a_candidate_that_loses_its_own_re_measurement_is_never_recommended() -> None:
    data = copy.deepcopy(REMOTE)
    data["paired"] = paired(0, 8, [(66, 50), (64, 48), (67, 51), (65, 47)])
    rec = judged(data)["recommendation"]
    assert rec["trust"] == "loss" and rec["num_workers"] == 0


def test_dl007_fires_on_repeats_only_workers_make() -> None:
    data = section([run(0, 900)], iterable=True, length=None,
                   duplicates={"num_workers": 2, "samples_0": 512, "duplicates_0": 0, "samples_n": 1024,
                               "duplicates_n": 512, "most_repeats_n": 2, "bounded": True})
    (hit,) = findings_of(data, "DL007")
    assert hit.evidence["duplicates_n"] == 512 and hit.evidence["most_repeats_n"] == 2
    assert "get_worker_info()" in hit.fix
    sharded = copy.deepcopy(data)
    sharded["duplicates"].update(duplicates_n=0, most_repeats_n=1)
    assert findings_of(sharded, "DL007") == []
    # A stream that repeats itself without workers too: the data, not the workers.
    repeating = copy.deepcopy(data)
    repeating["duplicates"].update(duplicates_0=256)
    assert findings_of(repeating, "DL007") == []


def test_dl008_fires_only_when_random_in_main_and_identical_in_workers() -> None:
    data = section([run(0, 900)], rng={"index": 0, "main_differs": True, "workers_identical": True,
                                       "num_workers": 2, "worker_init_fn": None})
    (hit,) = findings_of(data, "DL008")
    assert hit.evidence["index"] == 0 and "worker_init_fn" in hit.fix
    for quiet in ({"main_differs": True, "workers_identical": False}, {"main_differs": False,
                                                                      "workers_identical": None}):
        other = copy.deepcopy(data)
        other["rng"].update(quiet)
        assert findings_of(other, "DL008") == []


def test_the_cpus_of_a_node_are_shared_among_its_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    from envdoctor.facts.node_share import cpus_per_process, processes_per_node

    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert processes_per_node(None) == 1 and processes_per_node(4) == 4
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    assert processes_per_node(None) == 8 and processes_per_node(2) == 2
    assert cpus_per_process(32, 8) == 4 and cpus_per_process(2, 8) == 1
    # Judged with the share: 8 computing workers on a 4-CPU share are left out.
    data = judged(PAST_CPUS, usable=cpus_per_process(16, 8))
    assert data["recommendation"]["num_workers"] <= 2


def test_a_curve_the_budget_cut_before_the_cpus_is_no_knee() -> None:
    """Recorded under load (torch's import took 5.5 of a 15 s budget): 0 and 1 worker measured alike, 2 was
    skipped for the budget. num_workers=0 is where the budget ended, not a knee: say so, keep the setting."""
    data = section([run(0, 63.09), run(1, 67.41, worker_cpu=0.02, worker_blocked=0.97)],
                   getitem={"per_sample_s": 0.0151, "cpu_fraction": 0.01, "blocked_fraction": 0.99}, batch_size=8,
                   skipped=[{"what": "num_workers=2", "reason": "not enough of the budget left (0.4 s, about 0.9 s "
                                                                  "needed)"}])
    judged_data = judged(data)
    rec = judged_data["recommendation"]
    assert rec["trust"] == "incomplete" and rec["unmeasured"] == [2] and rec["basis"] == "current"
    (hit,) = findings_of(judged_data, "DL005")
    assert "--budget" in hit.fix and hit.evidence["unmeasured"] == [2]
    assert "not decoded" not in hit.message
    # Read from a --data folder without Pillow, it says what it measured, as every DL005 does.
    undecoded = judged({**data, "decoding": {"undecoded_images": 3}})
    (hit,) = findings_of(undecoded, "DL005")
    assert "no setting can be called best" in hit.message and "3 image file(s) read but not decoded" in hit.message


def test_a_runner_up_that_beats_the_kept_setting_in_paired_windows_is_recommended() -> None:
    """Recorded pattern under a busy core: the sweep's one point for num_workers=2 was sunk by the
    neighbour, so the knee was the user's num_workers=0; the runner-up, re-measured in pairs, wins."""
    data = section([run(0, 196.3, main_cpu=0.95), run(1, 199.98, worker_cpu=0.9, worker_runqueue=0.05),
                    run(2, 187.78, worker_cpu=0.5, worker_runqueue=0.45)])
    assert judged(data)["recommendation"]["trust"] == "same"
    data["paired"] = paired(0, 1, [(200, 260), (190, 250), (205, 262), (198, 255)])
    rec = judged(data)["recommendation"]
    assert rec["num_workers"] == 1 and rec["trust"] == "gain" and rec["basis"] == "paired"
    assert rec["gain_interval"][0] > 1
    # Both rates are the pairs' medians, as the gain is the pairs' word (not the sweep's 199.98).
    assert rec["samples_per_s"] == 257.5 and rec["current_samples_per_s"] == 199.0
    # A runner-up that does not clearly win leaves the kept setting as it was.
    data["paired"] = paired(0, 1, [(200, 230), (190, 170), (205, 240), (198, 180)])
    rec = judged(data)["recommendation"]
    assert rec["num_workers"] == 0 and rec["trust"] == "same"


def test_figures_in_thousands_carry_their_separators_everywhere() -> None:
    """One convention on one screen: the table shows 52,000 and 6,900, so the verdict's words do too."""
    handover = section([run(0, 5200, 0.001), run(1, 4100, 0.05, worker_cpu=0.5)],
                       getitem={"per_sample_s": 2e-4, "cpu_fraction": 1.0, "blocked_fraction": 0.0})
    words = " ".join(str(judged(data).get("bottleneck_reason")) for data in (TINY, handover))
    words += " ".join(f.message + " " + f.fix for rule in ("DL002", "DL005") for f in findings_of(judged(TINY), rule))
    assert re.findall(r"\b\d{4,}(?:\.\d+)? samples/s", words) == [], words
    assert "(num_workers=1, 4,100 samples/s) does not beat num_workers=0 (5,200 samples/s)" in words, words
