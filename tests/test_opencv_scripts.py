"""SYS007 from the scripts given (`envdoctor check train.py`): a script that imports cv2 — itself or in a
project module it imports — and starts DataLoader workers without limiting OpenCV's pool, with cv2's
default thread count read from the target (the real opencv-python-headless wheel of the test venv)."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from envdoctor.config import Config
from envdoctor.engine import run_check

DATASET = '''
import cv2
import numpy as np
from torch.utils.data import Dataset

{limit}

class Images(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, index):
        return cv2.resize(np.zeros((32, 32), np.uint8), (16, 16))
'''

TRAIN = '''
from torch.utils.data import DataLoader

from images import Images{extra_import}

{worker_init}

def main():
    loader = DataLoader(Images(), batch_size=8, num_workers=4{passed})
    for batch in loader:
        pass


if __name__ == "__main__":
    main()
'''


def _project(tmp_path: Path, *, module_level: str = "", worker_init: str = "", passed: str = "") -> Path:
    (tmp_path / "images.py").write_text(textwrap.dedent(DATASET.format(limit=module_level)))
    train = tmp_path / "train.py"
    train.write_text(textwrap.dedent(TRAIN.format(
        extra_import="\nimport cv2" if worker_init else "", worker_init=worker_init, passed=passed)))
    return train


def _check(script: Path, workers: int = 4) -> tuple[list, dict]:
    report = run_check(Config(scripts=(str(script),), select=("SYS007",), no_loader=True))
    assert report.errors == [], report.errors
    usable = report.facts["system"]["cpu"]["usable"] if workers else 0
    if workers and workers * _threads() <= usable:
        pytest.skip(f"{workers} workers × OpenCV's threads do not exceed {usable} usable CPUs here")
    return report.by_rule("SYS007"), report.facts["scripts"]


def _threads() -> int:
    import cv2

    threads = int(cv2.getNumThreads())
    if threads <= 1:
        pytest.skip("OpenCV runs one thread here: nothing to limit")
    return threads


def test_a_script_whose_workers_use_opencv_unlimited_fires(tmp_path: Path) -> None:
    threads = _threads()
    train = _project(tmp_path)
    hits, scripts = _check(train)
    import cv2

    assert scripts["opencv_target"] == {"version": cv2.__version__, "threads": threads, "error": None}
    (hit,) = hits
    evidence = hit.evidence
    assert evidence["script"] == str(train) and evidence["num_workers"] == 4
    assert evidence["opencv_threads"] == threads and evidence["total_threads"] == 4 * threads
    assert evidence["measured_in_workers"] is False and evidence["opencv_version"] == cv2.__version__
    # cv2 is imported by the project module the script imports, not by the script itself.
    assert evidence["imports"] == [{"path": str(tmp_path / "images.py"), "line": 2}]
    assert evidence["worker_start"]["path"] == str(train) and evidence["set_num_threads_calls"] == []
    assert "never calls cv2.setNumThreads" in hit.message and "worker_init_fn" in hit.fix


def test_setnumthreads_in_the_worker_init_fn_passed_stays_quiet(tmp_path: Path) -> None:
    _threads()
    init = "def limit_opencv(worker_id):\n    cv2.setNumThreads(1)\n"
    hits, scripts = _check(_project(tmp_path, worker_init=init, passed=", worker_init_fn=limit_opencv"))
    assert hits == []
    (info,) = scripts["files"]
    assert info["opencv"]["worker_init_fns"] == ["limit_opencv"]
    assert info["opencv"]["set_num_threads_calls"][0]["where"] == "limit_opencv"


def test_setnumthreads_in_a_function_never_passed_still_fires(tmp_path: Path) -> None:
    _threads()
    init = "def limit_opencv(worker_id):\n    cv2.setNumThreads(1)\n"
    (hit,) = _check(_project(tmp_path, worker_init=init))[0]
    (call,) = hit.evidence["set_num_threads_calls"]
    assert call["where"] == "limit_opencv" and call["value"] == 1
    assert "do not limit every worker" in hit.message


def test_setnumthreads_at_module_level_stays_quiet(tmp_path: Path) -> None:
    _threads()
    hits, scripts = _check(_project(tmp_path, module_level="cv2.setNumThreads(0)"))
    assert hits == []
    assert scripts["opencv_target"]["threads"] is not None  # cv2 was asked about, and the call kept it quiet


def test_a_script_without_opencv_asks_the_target_nothing(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("from torch.utils.data import DataLoader\nfor b in DataLoader(range(8), num_workers=4):\n"
                      "    pass\n")
    hits, scripts = _check(script, workers=0)
    assert hits == [] and scripts["opencv_target"] is None and "opencv" not in scripts["files"][0]


def test_a_notebook_that_imports_opencv_fires_with_its_cell(tmp_path: Path) -> None:
    import json

    threads = _threads()
    cells = ["import cv2\nimport numpy as np\nfrom torch.utils.data import DataLoader, Dataset",
             "class Images(Dataset):\n    def __len__(self):\n        return 8\n\n"
             "    def __getitem__(self, i):\n        return cv2.resize(np.zeros((8, 8), np.uint8), (4, 4))",
             "for batch in DataLoader(Images(), num_workers=3):\n    pass"]
    notebook = tmp_path / "explore.ipynb"
    notebook.write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": c}
        for c in cells]}))
    (hit,) = _check(notebook, workers=3)[0]
    assert hit.evidence["opencv_threads"] == threads
    assert hit.evidence["imports"] == [{"path": str(notebook), "line": 1, "cell": 1}]
    assert hit.evidence["num_workers"] == 3 and "cell 1" in hit.message


def test_a_module_changed_between_two_checks_is_read_again(tmp_path: Path) -> None:
    # The OpenCV pass remembers the project modules that spell no cv2 (one stat instead of a read per
    # script that imports them): one that gains `import cv2` between two checks of one process is read again.
    threads = _threads()
    train = _project(tmp_path)
    images = tmp_path / "images.py"
    with_cv2 = images.read_text()
    images.write_text(with_cv2.replace("import cv2\n", "").replace(
        "cv2.resize(np.zeros((32, 32), np.uint8), (16, 16))", "np.zeros((16, 16), np.uint8)"))
    hits, scripts = _check(train, workers=0)
    assert hits == [] and "opencv" not in scripts["files"][0]
    images.write_text(with_cv2)
    (hit,) = _check(train)[0]
    assert hit.evidence["imports"] == [{"path": str(images), "line": 2}]
    assert hit.evidence["opencv_threads"] == threads


def test_the_scan_of_marked_lines_finds_what_the_walk_of_every_node_finds() -> None:
    """`scan` skips the nodes whose lines spell no name it looks for (speed, issue 29): a decorator above its
    def, a call split over lines, a nested function and a line outside ASCII must still be found."""
    import ast

    from envdoctor.facts.opencv_use import ScriptOpenCV, marked_lines, scan

    source = textwrap.dedent('''
        import os
        import cv2 as opencv

        @register(
            worker_init_fn=seed_all)
        def build():
            def inner():
                opencv.setNumThreads(
                    1)
            return inner

        @cv2.setNumThreads(2)
        class Holder:
            def make(self):
                x = 1  # café
                return DataLoader(ds, num_workers=2,
                                  worker_init_fn=self.limit)

        if os.environ.get("X"):
            ｃｖ２ = None
        from cv2 import resize
        @wrap(
            worker_init_fn=late)
        def plain():
            return 1
    ''')
    found = []
    for marked in (None, marked_lines(source)):
        result: ScriptOpenCV = {"imports": [], "set_num_threads_calls": [], "worker_init_fns": []}
        scan(ast.parse(source), "t.py", result, marked)
        found.append(result)
    assert marked_lines(source) == [3, 6, 9, 13, 16, 18, 21, 22, 24]
    assert found[0] == found[1]
    assert found[1]["imports"] == [{"path": "t.py", "line": 3}, {"path": "t.py", "line": 22}]
    assert [(c["where"], c["line"], c["value"]) for c in found[1]["set_num_threads_calls"]] == [
        ("inner", 9, 1), ("module level", 13, 2)]
    assert found[1]["worker_init_fns"] == ["seed_all", "limit", "late"]


def test_within_one_check_a_module_found_quiet_is_not_asked_again(tmp_path: Path, monkeypatch) -> None:
    # Every script of a repository checked at once imports the same modules: one found to spell no cv2 is
    # not even stat'ed again for the next script of the same check; one that imports cv2 is read for each.
    from envdoctor.facts import opencv_use

    quiet_module, cv2_module = tmp_path / "plain.py", tmp_path / "vision.py"
    quiet_module.write_text("X = 1\n")
    cv2_module.write_text("import cv2\n")
    asked: list[str] = []
    stamp = opencv_use._stamp
    monkeypatch.setattr(opencv_use, "_stamp", lambda path: asked.append(path) or stamp(path))
    quiet: set[str] = set()
    for script in ("a.py", "b.py"):
        found = opencv_use.finish({"imports": [], "set_num_threads_calls": [], "worker_init_fns": []},
                                  str(tmp_path / script), [str(quiet_module), str(cv2_module)], quiet)
        assert found is not None and found["imports"] == [{"path": str(cv2_module), "line": 1}]
    assert quiet == {str(quiet_module)}
    assert asked == [str(quiet_module), str(cv2_module), str(cv2_module)]
