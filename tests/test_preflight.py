"""envdoctor.preflight(): the smoke test on the caller's own DataLoader, in a forked child of the caller.

The datasets here are defined in this test module, as they would be in a training script; fork
carries them to the smoke test as they are, without pickling.
"""
from __future__ import annotations

import time

import pytest
from torch.utils.data import DataLoader, Dataset, default_collate

import envdoctor
import torch
from envdoctor.api import preflight_summary
from loaderfixtures.busy import Sleepy  # 5 ms of waiting a sample: workers help a lot
from loadersupport import assert_honest_incomplete, assert_honest_too_noisy, dump, skip_if_the_budget_ran_out, stage_bound
from support import can_mount_private_shm, in_private_shm, leftover_children, shm_left, shm_names

pytestmark = [pytest.mark.standalone]



class RaisesAt5(Dataset):
    def __len__(self) -> int:
        return 1000

    def __getitem__(self, index: int):
        if index == 5:
            raise KeyError(f"no record {index}")
        return torch.zeros(2)


class HangsAt2(Dataset):
    def __len__(self) -> int:
        return 1000

    def __getitem__(self, index: int):
        if index == 2:
            time.sleep(3600)
        return torch.zeros(2)


def _no_children() -> None:
    assert leftover_children() == []


@pytest.mark.slow
def test_preflight_profiles_the_loaders_own_settings(capfd: pytest.CaptureFixture[str]) -> None:
    loader = DataLoader(Sleepy(), batch_size=8, num_workers=1)
    report = envdoctor.preflight(loader=loader, budget_s=8, step_time_s=0.002, select=["DL"], fail_on="error")
    section = report.loader
    assert section["current"] == {**section["current"], "num_workers": 1, "batch_size": 8,
                                  "persistent_workers": False}
    assert section["dataset"] == "DataLoader(Sleepy, batch_size=8, num_workers=1)"
    assert [r["num_workers"] for r in section["runs"]][:2] == [0, 1]
    assert section["bottleneck"] == "storage"
    (dl001,) = report.by_rule("DL001")  # 8 samples every 2 ms: more than any worker count delivers
    assert dl001.evidence["consumer_samples_per_s"] == 4000
    assert dl001.evidence["current_num_workers"] == 1
    (dl005,) = report.by_rule("DL005")
    if section["recommendation"]["trust"] == "too-noisy":
        # Seen in CI (four test workers and a spinning core on two CPUs): the sweep's num_workers=2 measured
        # ×2 over your 1, and three paired windows gave ×1.68 with an interval from 0.99 to 2.88.
        assert_honest_too_noisy(report.to_dict(), dl005.message, current_num_workers=1)
    elif section["recommendation"]["trust"] == "incomplete":
        # Seen beside six spinning processes: 0: 192, 1: 196, 2: 359 samples/s, then the budget ended before
        # num_workers=4; ×1.84 is no clear gain, so your setting is kept and the cut said.
        assert_honest_incomplete(report.to_dict(), dl005.message, current_num_workers=1)
    else:
        assert dl005.evidence["recommendation"]["num_workers"] > 1, dump(report.to_dict())
    err = capfd.readouterr().err
    assert "envdoctor preflight:" in err and "loader: bottleneck storage" in err
    curve = err.split("(samples/s by num_workers ")[1].split(")")[0]
    counts = [int(pair.split(":")[0]) for pair in curve.split(", ")]
    assert counts == sorted(counts), curve
    _no_children()


@pytest.mark.slow
def test_with_a_step_time_the_fewest_workers_that_keep_up_are_recommended() -> None:
    """8 samples every 20 ms: 400 samples/s. Four 5 ms workers deliver ~750, enough with headroom;
    eight deliver more, which the step cannot use (processes and memory for nothing)."""
    loader = DataLoader(Sleepy(), batch_size=8, num_workers=1)
    report = envdoctor.preflight(loader=loader, budget_s=10, step_time_s=0.02, select=["DL"], fail_on="never",
                                 quiet=True)
    section = report.loader
    rates = {r["num_workers"]: r["samples_per_s"] for r in section["runs"] if r.get("samples_per_s")}
    rec = section["recommendation"]
    seen = (rec, rates, section.get("paired"))
    assert rec["consumer_samples_per_s"] == 400, seen
    if rec["trust"] == "too-noisy":
        # CPUs so busy (seen in CI: four test workers and two spinning cores on two CPUs) that the paired
        # windows could not confirm the step's pick: your num_workers=1 kept, the pick named as the candidate.
        (dl005,) = report.by_rule("DL005")
        assert_honest_too_noisy(report.to_dict(), dl005.message, current_num_workers=1)
        _no_children()
        # Nothing was recommended, so which count keeps up is not decided here: the candidate named is the knee or
        # step pick of a sweep the neighbours slowed (seen beside two spinning cores: 4 workers sunk below 2's 369
        # samples/s made 2 the knee, short of the step's 500).
        pytest.skip(f"too noisy to tell on this machine: num_workers=1 kept, "
                    f"num_workers={rec['candidate_num_workers']} named ({rates})")
    if rec["trust"] == "incomplete":
        # A machine so busy that the budget ended before the sweep timed every setting it meant to (as the test
        # above has seen): your num_workers=1 kept, the settings left unmeasured named.
        (dl005,) = report.by_rule("DL005")
        assert_honest_incomplete(report.to_dict(), dl005.message, current_num_workers=1)
        _no_children()
        pytest.skip(f"the budget ended before num_workers={rec['unmeasured']} on this machine ({rates})")
    if max(rates.values()) < 1.25 * 400:
        # A machine so busy that no measured setting delivered what the step consumes with headroom (seen in CI
        # with two spinning cores: 4 workers 291 samples/s): the step cannot decide, and envdoctor must not say it
        # did; which count reaches 500 here is this machine's speed, nothing to assert.
        assert rec["basis"] != "step", seen
        pytest.skip(f"this machine is too busy for any setting to reach the step's 500 samples/s: {rates}")
    # "step" where fewer workers than the knee keep up; "knee" where the knee itself is the fewest that do (seen in CI
    # beside two spinning cores: the knee fell to 4, the step's own pick; the one pair the message kept: 4 at 717, your 1 at 192).
    assert rec["basis"] == ("step" if section["knee"] > rec["num_workers"] else "knee"), seen
    assert rates[rec["num_workers"]] >= 1.25 * 400, (rec, rates)
    assert all(rate < 1.25 * 400 for n, rate in rates.items() if 0 < n < rec["num_workers"]), (rec, rates)
    # Never more workers than the knee; fewer where more workers measured clearly faster (on a quiet machine 8
    # deliver about twice what 4 do), which the step cannot use.
    assert rec["num_workers"] <= section["knee"], seen
    if any(rate > 1.5 * rates[rec["num_workers"]] for n, rate in rates.items() if n > rec["num_workers"]):
        assert section["knee"] > rec["num_workers"], seen
    (dl001,) = report.by_rule("DL001")  # one worker (~190 samples/s) cannot feed it
    assert f"num_workers={rec['num_workers']}" in dl001.fix
    (dl005,) = report.by_rule("DL005")
    # The finding says the recommendation's own basis (checked above): "knee" where the knee itself is the fewest
    # workers that keep up (a full-suite run here had it so, and the finding still asserted "step").
    assert dl005.evidence["basis"] == rec["basis"]
    assert ("step consumes" if rec["basis"] == "step" else "within 95% of the best") in dl005.message
    _no_children()


@pytest.mark.slow
def test_preflight_raises_with_the_report_for_unpicklable_spawn_loader() -> None:
    loader = DataLoader(Sleepy(), batch_size=4, num_workers=2, multiprocessing_context="spawn",
                        collate_fn=lambda batch: default_collate(batch))
    with pytest.raises(envdoctor.PreflightError) as caught:
        envdoctor.preflight(loader=loader, budget_s=8, select=["DL", "SPW003"], quiet=True)
    (hit,) = caught.value.report.by_rule("SPW003")
    assert hit.evidence["start_method"] == "spawn"
    assert hit.evidence["problems"][0]["object"] == "collate_fn"
    assert "SPW003" in str(caught.value)
    _no_children()


@pytest.mark.slow
def test_preflight_names_the_failing_index() -> None:
    loader = DataLoader(RaisesAt5(), batch_size=4)
    with pytest.raises(envdoctor.PreflightError) as caught:
        envdoctor.preflight(loader=loader, budget_s=6, select=["DL"], quiet=True)
    (hit,) = caught.value.report.by_rule("DL006")
    assert hit.evidence["kind"] == "raised" and hit.evidence["index"] == 5
    assert hit.evidence["exception"] == "KeyError"
    _no_children()


@pytest.mark.slow
def test_preflight_hang_is_bounded() -> None:
    loader = DataLoader(HangsAt2(), batch_size=4)
    start = time.monotonic()
    with pytest.raises(envdoctor.PreflightError) as caught:
        envdoctor.preflight(loader=loader, budget_s=6, select=["DL"], quiet=True)
    assert time.monotonic() - start < stage_bound(6)  # the stage's own deadline, slack derived from it
    (hit,) = caught.value.report.by_rule("DL006")
    assert hit.evidence["kind"] == "hung" and hit.evidence["index"] == 2
    _no_children()


@pytest.mark.slow
def test_preflight_fail_on_never_returns_the_report() -> None:
    loader = DataLoader(RaisesAt5(), batch_size=4)
    report = envdoctor.preflight(loader=loader, budget_s=6, select=["DL"], fail_on="never", quiet=True)
    assert report.by_rule("DL006")
    assert "DL006" in preflight_summary(report)


@pytest.mark.slow
def test_preflight_without_a_loader_measures_the_synthetic_dataset() -> None:
    report = envdoctor.preflight(budget_s=6, select=["DL"], fail_on="never", quiet=True)
    assert report.loader["dataset"].startswith("synthetic")
    assert report.loader["runs"]
    _no_children()


def test_preflight_rejects_what_is_not_a_loader() -> None:
    with pytest.raises(TypeError, match="DataLoader"):
        envdoctor.preflight(loader=[1, 2, 3], quiet=True)


@pytest.mark.slow
def test_without_fork_the_loader_crosses_as_a_pickle(monkeypatch: pytest.MonkeyPatch) -> None:
    """Windows has no fork: the dataset, sampler and collate_fn go to a fresh interpreter pickled."""
    import os

    monkeypatch.delattr(os, "fork")
    loader = DataLoader(Sleepy(), batch_size=8, num_workers=1)
    report = envdoctor.preflight(loader=loader, budget_s=10, select=["DL"], fail_on="never", quiet=True)
    assert report.loader["dataset"] == "DataLoader(Sleepy, batch_size=8, num_workers=1)"
    assert report.loader["runs"] and report.loader["runs"][0]["num_workers"] == 0
    assert report.loader["current"]["num_workers"] == 1


def test_without_fork_an_unpicklable_loader_is_spw003(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    monkeypatch.delattr(os, "fork")
    loader = DataLoader(Sleepy(), batch_size=8, collate_fn=lambda batch: default_collate(batch))
    with pytest.raises(envdoctor.PreflightError) as caught:
        envdoctor.preflight(loader=loader, budget_s=5, select=["DL", "SPW003"], quiet=True)
    (hit,) = caught.value.report.by_rule("SPW003")
    assert [p["object"] for p in hit.evidence["problems"]] == ["collate_fn"]
    assert caught.value.report.loader["skipped"][0]["what"] == "smoke test"


#: The spawn script's budget. Its samples are random, so the DL008 check first starts two spawn workers: with
#: one core busy beside a loaded 2-core machine (load 6-9) their start took 10 s or more, and with 12 s the sweep
#: was then left less than the 1 s a first worker run needs (the user's 4 workers skipped for the budget: neither
#: measured nor a slow start) or nothing at all (the check cut at the budget's end; no run): 3 runs of 3 failed.
#: With 20 s, 3 of 3 passed there, the 4 workers tried and skipped as still starting.
SPAWN_BUDGET = 20


@pytest.mark.slow
def test_spawn_workers_starting_slowly_are_not_a_hang(tmp_path) -> None:
    """`python train.py` under set_start_method("spawn"): each worker imports torch before its first
    batch, seconds on a busy machine. That is start-up (DL004's business), never a DL006 hang that
    stops the training run. No named semaphore of its queues may stay in /dev/shm: the script runs on a
    /dev/shm of its own where it can (the machine's holds the other tests' semaphores while they run)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "fixtures" / "loaderfixtures" / "spawn_train.py"
    before = _semaphores()
    private = can_mount_private_shm()
    argv = [sys.executable, "-B", str(script), str(SPAWN_BUDGET)]
    listing = tmp_path / "shm-left.txt"
    proc = subprocess.run(in_private_shm(argv) if private else argv, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "NO_COLOR": "1", "SHM_LIST": str(listing)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    outcome = json.loads(proc.stdout.strip().splitlines()[-1])
    assert outcome["start_method"] == "spawn"
    assert outcome["failure"] is None, outcome
    assert "raised" not in outcome and [f for f in outcome["findings"] if f["rule"] == "DL006"] == [], outcome
    assert outcome["seconds"] < stage_bound(SPAWN_BUDGET)  # the stage's own deadline, slack derived from it
    if private:
        assert [name for name in listing.read_text().split() if name.startswith("sem.mp-")] == []
    else:
        assert shm_left(before, "sem.mp-") == set()
    # How far the sweep got within its budget is this machine's speed (no run at all, seen at load 14 with two
    # cores kept busy): skipped, saying so, when the budget was spent; what envdoctor promises is checked above.
    skip_if_the_budget_ran_out({"skipped": outcome["skipped"], "budget_s": SPAWN_BUDGET, "runs": outcome["runs"]},
                               "num_workers=0")
    assert outcome["runs"] and outcome["runs"][0]["num_workers"] == 0, outcome
    # The user's 4 workers were measured, or honestly skipped for start-up or for a budget that could not hold
    # their run (seen with six test workers on two cores; and a run the stage's deadline ended, seen on a spinner CI
    # run: num_workers=0 at 238 samples/s, then the 4 spawn workers' run stopped at the end of the budget), never
    # called stuck (no DL006, above).
    measured = [r for r in outcome["runs"] if r["num_workers"] > 0]
    slow = [s for s in outcome["skipped"] if "had not delivered a first batch" in s["reason"]
            or (s["what"] == "num_workers=4" and ("not enough of the budget left" in s["reason"]
                                                   or s["reason"] == "stopped at the end of the budget"))]
    assert measured or slow, json.dumps(outcome, indent=1)


def _semaphores() -> set[str]:
    return shm_names("sem.mp-")
