"""Hostile datasets: each ends within budget + 5 s with a DL006 that says what and where, and leaves nothing.

Every test runs the real `envdoctor loader` on a real dataset (fixtures/loaderfixtures/hostile.py)
and then checks that no process of the runner's group and no new /dev/shm torch segment survives.
"""
from __future__ import annotations

import json
import shlex
import subprocess

import pytest

from loadersupport import FIXTURES_DIR, assert_nothing_left, dump, loader_report, shm_torch_segments, stage_bound
from support import can_mount_private_shm, envdoctor_argv, findings, validate_report

pytestmark = pytest.mark.slow

BUDGET = 10.0
#: factory -> extra environment. The memory cap is lowered so that test does not take half the
#: machine's memory first.
CASES = {
    "raises_at_7": None, "sleeps_forever": None, "segfaults_worker": None, "segfaults_main": None,
    "exits_worker": None,
    "non_tensors": None, "len_lies": None, "allocates_20g": {"ENVDOCTOR_LOADER_MEMORY_CAP": "1G"},
    "factory_raises": None, "bad_kwargs": None,
}


@pytest.fixture(scope="module")
def outcomes() -> dict[str, tuple[dict, float, int]]:
    """Every hostile case, two at a time (their time is mostly torch's import), then the leftovers check."""
    from concurrent.futures import ThreadPoolExecutor

    before = shm_torch_segments()

    def one(factory: str) -> tuple[dict, float, int]:
        report, wall, proc = loader_report("--dataset", f"loaderfixtures.hostile:{factory}",
                                           "--budget", str(BUDGET), env=CASES[factory])
        return report, wall, proc.returncode

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = dict(zip(CASES, pool.map(one, CASES)))
    for report, _, _ in results.values():
        assert_nothing_left(report, before)
    return results


@pytest.fixture
def _dl006(outcomes):
    def get(factory: str) -> tuple[dict, dict]:
        report, wall, returncode = outcomes[factory]
        assert returncode == 1, dump(report)
        assert wall < stage_bound(BUDGET), f"took {wall:.1f} s"
        hits = findings(report, "DL006")
        assert len(hits) == 1, dump(report)
        assert hits[0]["severity"] == "error"
        return hits[0], report
    return get


def test_raises_at_index_7(_dl006) -> None:
    hit, _ = _dl006("raises_at_7")
    assert hit["evidence"]["kind"] == "raised"
    assert hit["evidence"]["index"] == 7
    assert hit["evidence"]["exception"] == "ValueError"
    assert "corrupt record 7" in hit["message"]


def test_sleeps_forever(_dl006) -> None:
    hit, _ = _dl006("sleeps_forever")
    assert hit["evidence"]["kind"] == "hung"
    assert hit["evidence"]["index"] == 3
    assert hit["evidence"]["num_workers"] == 0


def test_segfault_in_worker(_dl006) -> None:
    hit, _ = _dl006("segfaults_worker")
    assert hit["evidence"]["kind"] == "crashed"
    assert hit["evidence"]["signal"] == "SIGSEGV"
    assert hit["evidence"]["index"] == 5
    assert hit["evidence"]["num_workers"] >= 1
    assert "SIGSEGV" in hit["message"]


def test_segfault_in_the_main_process(_dl006) -> None:
    hit, report = _dl006("segfaults_main")
    assert hit["evidence"]["kind"] == "crashed"
    assert hit["evidence"]["signal"] == "SIGSEGV"
    assert hit["evidence"]["index"] == 4
    assert report["loader"]["runner"]["returncode"] == -11


def test_os_exit_in_worker(_dl006) -> None:
    hit, _ = _dl006("exits_worker")
    assert hit["evidence"]["kind"] == "crashed"
    assert hit["evidence"]["index"] == 2
    assert "exited with status 3" in hit["message"]


def test_non_tensors(_dl006) -> None:
    hit, _ = _dl006("non_tensors")
    assert hit["evidence"]["kind"] == "collate"
    assert hit["evidence"]["exception"] == "TypeError"
    assert "loaderfixtures.hostile.Opaque" in hit["message"]


def test_len_lies(_dl006) -> None:
    hit, _ = _dl006("len_lies")
    assert hit["evidence"]["kind"] == "raised"
    assert hit["evidence"]["index"] == 10
    assert hit["evidence"]["exception"] == "IndexError"
    assert "len() says 1000" in hit["message"]


def test_allocates_20_gib(_dl006) -> None:
    hit, report = _dl006("allocates_20g")
    if hit["evidence"]["kind"] == "hung":
        # A machine too busy (or too short of free memory, so each page costs a reclaim) to allocate up to the
        # memory cap within one sample's limit: envdoctor's promise still holds — it stopped the fetch only after
        # that limit (loader_getitem.probe: at least 3 s, after torch's import) and said so — and nothing is left
        # to assert. CI once saw it: torch imported in 4.6 s, the fetch cut at 8.5 s at 0.98 GiB of a 1 GiB cap.
        loader = report["loader"]
        assert loader["runner"]["wall_s"] >= loader["torch"]["import_s"] + 3.0, dump(report)
        assert "did not finish in time" in hit["message"] and hit["evidence"]["index"] == 0
        pytest.skip(f"this machine is too busy to reach the memory cap within one sample's limit of its "
                    f"{report['loader']['budget_s']} s "
                    f"budget (torch took {report['loader']['torch']['import_s']} s to import)")
    assert hit["evidence"]["kind"] in ("memory", "raised"), dump(report)
    assert hit["evidence"]["index"] == 0
    if hit["evidence"]["kind"] == "memory":
        assert report["loader"]["runner"]["killed_for"] == "memory"
        assert report["loader"]["runner"]["peak_rss_bytes"] > 1024**3


def test_dataloader_settings_with_a_typo(_dl006) -> None:
    hit, _ = _dl006("bad_kwargs")
    assert hit["evidence"]["kind"] == "factory"
    assert "num_wrokers" in hit["message"]


def test_factory_that_raises(_dl006) -> None:
    hit, _ = _dl006("factory_raises")
    assert hit["evidence"]["kind"] == "factory"
    assert "cannot reach the data bucket" in hit["message"]


@pytest.mark.skipif(not can_mount_private_shm(), reason="needs unshare -m and mount (root)")
def test_large_batches_in_a_small_dev_shm() -> None:
    """Docker's small /dev/shm, for real: a private 24 MiB tmpfs, 16 MiB batches, two workers."""
    command = ("mount -t tmpfs -o size=24m tmpfs /dev/shm && "
               + shlex.join(envdoctor_argv("report", "--dataset", "loaderfixtures.suite:large_samples",
                                           "--select", "SYS002", "DL", "--budget", "10")))
    proc = subprocess.run(["unshare", "-m", "sh", "-c", command], capture_output=True, text=True,
                          cwd=str(FIXTURES_DIR), timeout=120)
    report = json.loads(proc.stdout)
    validate_report(report)
    (sys002,) = findings(report, "SYS002")
    assert sys002["evidence"]["batch_bytes"] == 16 * 1024**2  # measured by the smoke test
    assert sys002["evidence"]["bytes_in_flight"] == 16 * 1024**2 * 2 * 2
    (dl006,) = findings(report, "DL006")
    assert dl006["evidence"]["kind"] == "shm", dump(report)
    assert "shm-size" in dl006["fix"]
