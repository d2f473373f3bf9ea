"""The Lightning PreflightCallback in a real `Trainer.fit` on CPU, with the tiny model of lightningsupport.py.

Each test reads what the callback printed and the report it kept: the loader it profiled must be
the trainer's own train DataLoader (its dataset class, length and batch size), profiled once.
"""
from __future__ import annotations

import re
import tempfile
from pathlib import Path
from types import ModuleType

import pytest

import envdoctor
from callbacksupport import assert_profiled_once
from envdoctor.integrations.node import PreflightWarning

pytestmark = pytest.mark.slow

HEADER = "envdoctor preflight [lightning] on local rank 0: profiled the train loader"


@pytest.fixture(autouse=True)
def _temporary_files_of_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rank that raises leaves torch.multiprocessing's pytorch-errorfile-*.pickle behind (torch reads it and
    keeps it): in the test's folder, not in the machine's /tmp."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


@pytest.fixture(scope="module")
def lit() -> ModuleType:
    """lightningsupport: the tiny model, its data, a CPU trainer and the PreflightCallback under test.

    Imported here, when a test of this module runs, not when pytest-xdist's workers collect it.
    """
    pytest.importorskip("lightning.pytorch", reason="the Lightning extra is not installed (pip install -e '.[test]')")
    import lightningsupport

    return lightningsupport


def test_fit_profiles_its_own_train_loader_once(lit: ModuleType, capfd: pytest.CaptureFixture[str]) -> None:
    callback = lit.PreflightCallback(fail_on="error", budget_s=6, select=["DL", "SYS"])
    model = lit.TinyRegressor(lit.LightningPairs(), batch_size=6)
    lit.trainer(callback).fit(model)
    lit.trainer(callback, max_epochs=1).fit(model)  # a second fit: the node was already checked

    assert model.steps == 2 * 3 + 3
    assert_profiled_once(callback.report, capfd.readouterr().err, HEADER,
                         "DataLoader(LightningPairs, batch_size=6, num_workers=0)", length=96, batch_size=6)


def test_fail_on_stops_fit_before_the_first_step(lit: ModuleType, capfd: pytest.CaptureFixture[str]) -> None:
    callback = lit.PreflightCallback(fail_on="error", budget_s=6, select=["DL"])
    model = lit.TinyRegressor(lit.LightningPairs(bad_index=2), batch_size=4)
    with pytest.raises(envdoctor.PreflightError) as caught:
        lit.trainer(callback).fit(model)
    assert model.steps == 0
    (dl006,) = caught.value.report.by_rule("DL006")
    assert dl006.evidence["index"] == 2 and dl006.evidence["exception"] == "KeyError"
    assert "DL006 dataset-failure" in str(caught.value)
    assert capfd.readouterr().err.count(HEADER) == 1


def test_below_fail_on_it_warns_and_training_goes_on(lit: ModuleType) -> None:
    """fail_on="never": the finding is a warning, and training starts (and meets the bad record itself)."""
    callback = lit.PreflightCallback(fail_on="never", budget_s=6, select=["DL"])
    model = lit.TinyRegressor(lit.LightningPairs(bad_index=2), batch_size=4)
    with pytest.warns(PreflightWarning, match="DL006 dataset-failure"), pytest.raises(KeyError, match="no record 2"):
        lit.trainer(callback).fit(model)
    assert callback.report.by_rule("DL006")


def test_ddp_profiles_on_local_rank_0_only_with_its_share_of_the_cpus(lit: ModuleType, capfd: pytest.CaptureFixture[str]) -> None:
    """Two CPU processes under DDP (spawned): one profile, with the node's CPUs shared by two."""
    callback = lit.PreflightCallback(fail_on="error", budget_s=6, select=["DL"])
    model = lit.TinyRegressor(lit.LightningPairs(), batch_size=6)
    lit.trainer(callback, strategy="ddp_spawn", devices=2, max_epochs=1, limit_train_batches=2).fit(model)
    err = capfd.readouterr().err
    assert err.count(HEADER) == 1, err
    (line,) = [ln for ln in err.splitlines() if ln.startswith(HEADER)]
    assert "LightningPairs, batch_size=6" in line
    shared = re.search(r"2 training process\(es\) share this node's (\d+) usable CPU\(s\): (\d+) each", line)
    assert shared, line
    node, each = int(shared.group(1)), int(shared.group(2))
    assert each == max(1, node // 2)


def test_a_failure_on_rank_0_stops_every_rank(lit: ModuleType, capfd: pytest.CaptureFixture[str]) -> None:
    """Two CPU processes under DDP, forked (Lightning's ddp_fork, as in a notebook): rank 0's failure stops both.

    Forked, not spawned as above: how the ranks start is not what this test is about (the stop goes through
    the strategy's collective either way), and a fork does not import Lightning again in each rank (about
    5 CPU-s a rank). The spawned launcher is the test above's.
    """
    callback = lit.PreflightCallback(fail_on="error", budget_s=6, select=["DL"])
    model = lit.TinyRegressor(lit.LightningPairs(bad_index=2), batch_size=4)
    with pytest.raises(Exception, match="preflight") as caught:
        lit.trainer(callback, strategy="ddp_fork", devices=2, max_epochs=1, limit_train_batches=2).fit(model)
    err = capfd.readouterr().err
    assert err.count(HEADER) == 1, err
    assert "error   DL006 dataset-failure: the dataset raised an exception at index 2" in err
    # torch reports the first rank to fail: rank 0 with the findings, or rank 1 told to stop with it.
    assert re.search(r"envdoctor\.(api\.PreflightError|integrations\.node\.PreflightStopped)", str(caught.value))
