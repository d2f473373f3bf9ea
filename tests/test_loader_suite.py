"""Loaders with a known bottleneck, built for real: the diagnosis names the class, and the
recommendation is within 90% of the best throughput an exhaustive sweep finds in the same run.

Each case runs the real `envdoctor loader --dataset loaderfixtures.suite:NAME` (the smoke test, its
default budget), then `exhaustive_sweep` times every worker count of [0, 1, 2, 4, 8] on the same
dataset, and compares: the exhaustive throughput at the recommended num_workers against the best
exhaustive throughput. Sleep-based costs keep the effects large on a busy 2-core machine; the
CPU-bound case compares throughputs only when the sweep saw idle CPUs.
"""
from __future__ import annotations

import pytest

from envdoctor.loader import exhaustive_sweep
from loadersupport import FIXTURES_DIR, assert_nothing_left, dump, loader_report, shm_torch_segments
from support import findings

pytestmark = pytest.mark.slow

SWEEP = [0, 1, 2, 4, 8]
BUDGET = "12"
#: Workers waiting for a CPU more than this share of the time means other processes hold the CPUs.
CONTENDED = 0.25


def _exhaustive(name: str, recommended: int) -> dict[int, dict]:
    # The recommended count is always among the points (on a many-core machine it may pass 8).
    workers = sorted(set(SWEEP) | {recommended})
    section = exhaustive_sweep({"kind": "factory", "spec": f"loaderfixtures.suite:{name}", "cwd": str(FIXTURES_DIR)},
                               workers, point_s=0.5, cwd=str(FIXTURES_DIR))
    assert section["failure"] is None, section["failure"]
    return {r["num_workers"]: r for r in section["runs"] if r.get("samples_per_s")}


def _check(name: str, expected: str, rules: set[str], cpu_bound: bool = False, budget: str = BUDGET) -> dict:
    before = shm_torch_segments()
    report, wall, _ = loader_report("--dataset", f"loaderfixtures.suite:{name}", "--budget", budget)
    loader = report["loader"]
    assert_nothing_left(report, before)
    assert wall < float(budget) + 5
    assert loader["bottleneck"] == expected, dump(report)
    fired = {f["rule"] for f in report["findings"]}
    assert rules <= fired, (fired, dump(report))
    rec = loader["recommendation"]
    assert rec is not None
    sweep = _exhaustive(name, rec["num_workers"])
    best = max(r["samples_per_s"] for r in sweep.values())
    at_rec = sweep.get(rec["num_workers"])
    assert at_rec is not None, (rec, sweep)
    if cpu_bound:
        # A CPU-bound curve measured while other processes take the CPUs says nothing about this
        # machine's knee (the class above is still checked: contention is what it names then).
        # Past the usable CPUs workers queue for one by design; below them, queueing means others.
        usable = report["facts"]["system"]["cpu"]["usable"]
        contended = max((r.get("worker_runqueue") or 0) for n, r in sweep.items() if 0 < n <= usable)
        if contended > CONTENDED:
            pytest.skip(f"the CPUs were contended during the sweep (workers waited for a CPU "
                        f"{contended:.0%} of the time): the throughput comparison needs an idle machine")
    reached = at_rec["samples_per_s"]
    ratio = reached / best
    assert ratio >= 0.9, (f"recommended num_workers={rec['num_workers']} reached {ratio:.2f} of the best; "
                          f"exhaustive {[(n, r['samples_per_s']) for n, r in sweep.items()]}; {dump(report)}")
    return report


def test_cpu_bound_transform() -> None:
    report = _check("cpu_bound", "cpu-saturated", {"DL003"}, cpu_bound=True)
    (hit,) = findings(report, "DL003")
    assert hit["evidence"]["bottleneck"] == "cpu-saturated"
    assert hit["evidence"]["cpu_fraction"] > 0.5


def test_remote_read_is_storage_bound() -> None:
    report = _check("remote_read", "storage", {"DL003", "DL005"})
    (hit,) = findings(report, "DL003")
    assert hit["evidence"]["blocked_fraction"] > 0.5
    assert report["loader"]["recommendation"]["num_workers"] > 2  # more waiting workers than CPUs


def test_slow_worker_start() -> None:
    report = _check("slow_worker_start", "startup", {"DL004"}, budget="15")
    (hit,) = findings(report, "DL004")
    assert hit["evidence"]["startup_s"] > 0.8
    assert report["loader"]["recommendation"]["persistent_workers"] is True


def test_tiny_samples_are_ipc_bound() -> None:
    report = _check("tiny_samples", "ipc", {"DL002", "DL005"})
    assert report["loader"]["recommendation"]["num_workers"] == 0
    (hit,) = findings(report, "DL005")
    assert hit["evidence"]["gain"] > 2  # the user's num_workers=4 against 0


def test_large_samples() -> None:
    report = _check("large_samples", "storage", {"DL003"})
    loader = report["loader"]
    assert loader["batch_bytes"] == 8 * 512 * 1024 * 4
    assert loader["tensors_per_batch"] == 1
    assert loader["worker_rss_bytes"] > 0


def test_lambda_collate_under_spawn() -> None:
    report, _, _ = loader_report("--dataset", "loaderfixtures.suite:lambda_collate_spawn", "--budget", BUDGET)
    (hit,) = findings(report, "SPW003")
    assert hit["severity"] == "error"
    assert hit["evidence"]["start_method"] == "spawn"
    assert hit["evidence"]["problems"][0]["object"] == "collate_fn"
    assert findings(report, "DL006") == []
    loader = report["loader"]
    assert [r["num_workers"] for r in loader["runs"]] == [0]
    assert loader["recommendation"] is None  # no worker count could be measured
    assert any("cannot be pickled" in s["reason"] for s in loader["skipped"])
