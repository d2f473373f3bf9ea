"""Conda-owned steps: no conda can be installed here, so they are tested up to the exact commands.

The prefixes are real (py-rattler installs them from the local channel); the
inverse of a conda step is read from what conda-meta says before and after,
and undo's commands are asserted argv for argv.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from condafixtures import PY_FULL, PYTORCH, World
from envdoctor.fix.snapshot import conda_inverse, conda_records

pytestmark = pytest.mark.slow


def test_conda_step_inverse_reinstalls_exact_builds_and_removes_what_it_added(conda_world: World,
                                                                               tmp_path: Path) -> None:
    base = [f"python =={PY_FULL}", "pip >=1", "numpy ==1.26.4"]
    before_prefix = conda_world.make_prefix(tmp_path / "before", [*base, "pytorch >=1"],
                                            channels={"pytorch": PYTORCH})
    after_prefix = conda_world.make_prefix(tmp_path / "after", [*base, "mkl >=1"])
    before, after = conda_records(before_prefix), conda_records(after_prefix)
    assert before["pytorch"] == {"version": "2.5.1", "build": "py3.11_cpu_0",
                                 "channel": "https://conda.anaconda.org/pytorch"}
    prefix = str(before_prefix)
    assert conda_inverse("conda", prefix, before, after) == [
        ["conda", "install", "-p", prefix, "-y", "--no-deps", "--override-channels",
         "-c", "https://conda.anaconda.org/pytorch", "pytorch=2.5.1=py3.11_cpu_0"],
        ["conda", "remove", "-p", prefix, "-y", "--force", "mkl"],
    ]
    assert conda_inverse("micromamba", prefix, before, before) == []
