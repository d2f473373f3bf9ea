"""A first batch that does not come within the DataLoader's timeout (issue 32).

The first batch's wait is bounded by the budget left, not by the hang limit: workers whose start-up (under
load, under spawn) takes most of that wait have only just begun fetching when it ends. That is a start-up the
budget did not fit (SlowStart, a skip), not a hang. A fetch that has run for the hang limit is one (DL006).
These tests run real workers through a real DataLoader and the runner's own reading of the failure.
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from envdoctor.loader import supervisor

torch = pytest.importorskip("torch")

HANG_S = 3.0  # what the runner's measure() passes for a batch of samples this fast: max(3.0, 10 * batch_s)


class _Sleepy:
    """A sample every `sample_s`; index `stuck_at` never returns."""

    def __init__(self, sample_s: float, stuck_at: int | None = None) -> None:
        self.sample_s = sample_s
        self.stuck_at = stuck_at

    def __len__(self) -> int:
        return 10_000

    def __getitem__(self, index: int):
        time.sleep(3600 if index == self.stuck_at else self.sample_s)
        return torch.zeros(4)


def _starts_late(_worker_id: int) -> None:
    time.sleep(1.5)  # a start-up (imports, unpickling under spawn, a slow machine) that takes most of the wait


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(Path(supervisor.RUNNER_PATH).parent))
    import loader_outcomes
    import loader_timing
    import loader_workloads

    return loader_outcomes, loader_timing, loader_workloads


def _first_batch_failure(runner, dataset: _Sleepy, timeout_s: float, worker_init_fn=None) -> Exception:
    """Wait for the first batch of one forked worker for `timeout_s`; what the runner makes of the timeout."""
    outcomes, timing, workloads = runner
    tracked = workloads.TrackedDataset(dataset, 1)
    loader = torch.utils.data.DataLoader(tracked, batch_size=64, num_workers=1, timeout=timeout_s,
                                         worker_init_fn=worker_init_fn, multiprocessing_context="fork")
    iterator = iter(loader)
    start = time.perf_counter()
    try:
        with pytest.raises(RuntimeError) as caught:
            next(iterator)
        waited = time.perf_counter() - start
        was_timeout = outcomes.timed_out(caught.value, iterator, waited, timeout_s)
        assert was_timeout, caught.value
        return outcomes.read_failure(caught.value, 1, iterator, tracked, length=len(dataset), start_method="fork",
                                     was_timeout=True, delivered=False, waited_s=waited, hang_s=HANG_S)
    finally:
        timing.abandon_workers(iterator)


@pytest.mark.slow
def test_a_worker_that_has_just_begun_fetching_is_a_slow_start(runner) -> None:
    """The wrong diagnosis of issue 32: the worker started 1.5 s into a 2 s wait, fetched a few 50 ms samples,
    and was on the next one when the wait ended. It was reported as DL006 `hung`."""
    outcomes = runner[0]
    failure = _first_batch_failure(runner, _Sleepy(0.05), 2.0, _starts_late)
    assert isinstance(failure, outcomes.SlowStart), failure
    message = str(failure)
    assert "had not delivered a first batch after 2." in message
    ran = float(message.split("had run only ")[1].split(" s")[0])
    assert ran < HANG_S, message
    assert "too short to call it a hang" in message


@pytest.mark.slow
def test_a_fetch_that_ran_for_the_hang_limit_is_a_hang(runner) -> None:
    """The counterpart: index 2 never returns; the wait (5 s) leaves its fetch past the 3 s hang limit."""
    outcomes = runner[0]
    failure = _first_batch_failure(runner, _Sleepy(0.01, stuck_at=2), 5.0)
    assert isinstance(failure, outcomes.DatasetFailure), failure
    assert failure.info["kind"] == "hung" and failure.info["index"] == 2, failure.info
    assert "no batch arrived within the DataLoader timeout" in failure.info["message"]
