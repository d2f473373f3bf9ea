"""The smoke test on loaders nobody tuned for it: where the time goes (IPC, not __getitem__), and what the
loader feeds training (repeated samples, cloned randomness). Each fixture in fixtures/loaderfixtures/trust.py
runs once through the real `envdoctor loader`; its expected class and rules are declared beside it, and
each firing case has a quiet twin. Each budget leaves room for torch's import on a busy machine."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from loaderfixtures.trust import EXPECTED
from loadersupport import assert_nothing_left, dump, loader_report, shm_torch_segments, skip_if_the_budget_ran_out, stage_bound
from support import findings

pytestmark = [pytest.mark.slow, pytest.mark.standalone]

#: A case whose class is judged (IPC) is decided by the curve: room for torch's import on a busy machine,
#: then the sweep and the paired windows.
CLASS_BUDGET = "20"
#: The other cases assert the data checks (DL007, DL008), which run before the sweep and need at most 3 s of
#: the budget left (DL007: two 0.75 s reads and a 1 s worker start-up allowance, loader_data_checks.py):
#: 12 s leaves that after 8 s of setup (torch's import took 4-6.6 s with a busy core beside the machine's
#: other load). They select only the rules that read the checks, so the smoke test ends after them.
CHECK_BUDGET = "12"
CHECK_RULES = ("DL007", "DL008")


def budget(name: str) -> str:
    return CLASS_BUDGET if EXPECTED[name][0] is not None else CHECK_BUDGET


def selection(name: str) -> list[str]:
    """Every rule for a class case; the rules that read the checks for a data-check case."""
    return [] if EXPECTED[name][0] is not None else ["--select", *CHECK_RULES]


def _duplicates(report: dict[str, Any]) -> None:
    (hit,) = findings(report, "DL007")
    evidence = hit["evidence"]
    assert hit["severity"] == "error"
    assert evidence["num_workers"] == 2 and evidence["duplicates_0"] == 0
    # Every record comes once per worker: about half of what two workers read repeats a sample.
    assert evidence["duplicates_n"] >= 0.3 * evidence["samples_n"] > 0, evidence
    assert evidence["most_repeats_n"] == 2
    assert "get_worker_info()" in hit["fix"]


def _sharded(report: dict[str, Any]) -> None:
    assert "duplicates" in report["loader"], dump(report)
    duplicates = report["loader"]["duplicates"]  # the check ran, and found nothing repeated
    assert duplicates["samples_n"] > 0 and duplicates["duplicates_n"] == 0, duplicates


def _cloned(report: dict[str, Any]) -> None:
    (hit,) = findings(report, "DL008")
    assert hit["evidence"]["main_differs"] is True and hit["evidence"]["workers_identical"] is True
    assert "np.random.default_rng(info.seed)" in hit["fix"] and "worker_init_fn" in hit["fix"]


def _reseeded(report: dict[str, Any]) -> None:
    assert "rng" in report["loader"], dump(report)
    rng = report["loader"]["rng"]  # the check ran: the sample is random, and the workers drew apart
    assert rng["main_differs"] is True and rng["workers_identical"] is False, rng
    assert rng["worker_init_fn"] == "reseed_worker"


def _torch_random(report: dict[str, Any]) -> None:
    assert "rng" in report["loader"], dump(report)
    rng = report["loader"]["rng"]
    assert rng["main_differs"] is True and rng["workers_identical"] is False, rng


def _large(report: dict[str, Any]) -> None:
    (hit,) = findings(report, "DL002")
    assert hit["evidence"]["batch_bytes"] == 8 * 512 * 1024 * 4
    assert "uint8" in hit["fix"] and "GPU" in hit["fix"]
    assert "moving" in report["loader"]["bottleneck_reason"] or "handing" in report["loader"]["bottleneck_reason"]


def _tiny(report: dict[str, Any]) -> None:
    (hit,) = findings(report, "DL002")
    assert hit["evidence"]["num_workers_0_samples_per_s"] > hit["evidence"]["best_worker_samples_per_s"]


MORE: dict[str, Callable[[dict[str, Any]], None]] = {
    "duplicating_stream": _duplicates, "sharded_stream": _sharded, "cloned_rng": _cloned,
    "reseeded_rng": _reseeded, "torch_rng": _torch_random, "large_cheap_samples": _large,
    "tiny_cheap_samples": _tiny,
}


def test_how_far_the_smoke_test_goes_for_a_selection() -> None:
    from envdoctor.catalog import load_catalog, loader_reads

    declared = {m.id: m.loader for m in load_catalog().rules if m.loader != "timed"}
    assert declared == {"SPW003": "checks", "SYS007": "memory", "DL007": "checks", "DL008": "checks",
                        "DL010": "memory", "DL011": "checks"}
    assert loader_reads(("DL007", "DL008")) == "checks"
    assert loader_reads(("iterable-duplicates,cloned-worker-rng", "DL011", "SPW003")) == "checks"
    assert loader_reads(("DL010",)) == loader_reads(("DL011", "SYS007")) == "memory"
    assert loader_reads(("DL",), ignore=("DL001", "DL002", "DL003", "DL004", "DL005", "DL006", "DL009")) == "memory"
    # Every rule, the family, a rule that reads the failure wherever it happens (DL006), a rule that reads no
    # loader at all (not declared: timed), and a selection the catalog cannot resolve.
    for select in ((), ("DL",), ("DL007", "DL006"), ("DL010", "DL001"), ("DL007", "PKG001"), ("NOPE001",)):
        assert loader_reads(select) == "timed", select


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_expected_class_and_rules(name: str) -> None:
    expected_class, fire, quiet = EXPECTED[name]
    before = shm_torch_segments()
    report, wall, _ = loader_report("--dataset", f"loaderfixtures.trust:{name}", "--budget", budget(name),
                                    *selection(name))
    loader = report["loader"]
    assert_nothing_left(report, before)
    assert wall < stage_bound(float(budget(name)))
    assert loader["failure"] is None, dump(report)
    if expected_class is None:  # a data-check case: the checks it asserts ran, or the busy machine spent the budget
        skip_if_the_budget_ran_out(loader, "repeated samples (DL007)", "cloned randomness (DL008)")
        # Only rules that read the checks were selected: the smoke test ended before its first timed run.
        assert loader["runs"] == [] and loader["recommendation"] is None, dump(report)
        assert [s["what"] for s in loader["skipped"]][:1] == ["timed runs"], loader["skipped"]
        quiet = quiet & set(CHECK_RULES)
    else:  # every rule: the sweep ran
        assert loader["runs"] and "timed runs" not in {s["what"] for s in loader["skipped"]}, dump(report)
    fired = {f["rule"] for f in report["findings"]}
    assert fire <= fired, (name, fired, dump(report))
    assert not (quiet & fired), (name, fired, dump(report))
    if expected_class is not None:
        assert loader["bottleneck"] == expected_class, dump(report)
    MORE[name](report)
