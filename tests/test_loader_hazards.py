"""What ends a run later (issue 30): worker memory growth (DL010), handles shared across fork (DL011) and
OpenCV's threads in workers (SYS007), measured for real by the smoke test.

The live tests run the real `envdoctor loader --dataset loaderfixtures.hazards:NAME` (and `handles:NAME`;
fork, Linux): a
dataset that holds 1.2 million Python objects, whose forked workers really grow, against the same records
as NumPy arrays; real h5py, LMDB and sqlite3 handles opened in `__init__` against the same opened lazily;
the real opencv-python-headless wheel with and without `cv2.setNumThreads(1)` in worker_init_fn. The walk
itself is tested on real handles in this process, and the rules' decisions on recorded sections.
"""
from __future__ import annotations

import copy
import functools
import io
import multiprocessing
import socket
import sqlite3
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest

from envdoctor.config import Config
from envdoctor.engine import run_check
from envdoctor.facts import Facts
from envdoctor.inside import loader_hazards
from envdoctor.judge.memory import MIN_GROWTH_BYTES, MIN_OBSERVED_BYTES, PYTHON_SHARE
from loadersupport import assert_nothing_left, dump, loader_report, shm_torch_segments
from support import findings

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork and /proc/PID/smaps_rollup")
BUDGET = "30"
MIB = 1024**2


def _live(name: str, select: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    before = shm_torch_segments()
    module = "handles" if "handles" in name else "hazards"
    report, _, _ = loader_report("--dataset", f"loaderfixtures.{module}:{name}", "--budget", BUDGET,
                                 "--select", select, env=env)
    assert_nothing_left(report, before)
    assert report["loader"]["failure"] is None, dump(report)
    return report


# -- live: the smoke test on real datasets --------------------------------

@pytest.mark.slow
@linux_only
def test_python_objects_make_forked_workers_grow() -> None:
    report = _live("python_objects", "DL010")
    memory = report["loader"]["memory"]
    assert memory["num_workers"] == 2 and memory["start_method"] == "fork", dump(report)
    # DL010 reads the checks and the memory run (`loader = "memory"` in the catalog): nothing was timed.
    assert report["loader"]["runs"] == [] and report["loader"]["skipped"][0]["what"] == "timed runs", dump(report)
    # The workers' private memory really grew with the samples they read.
    assert all(w["uss_end_bytes"] - w["uss_start_bytes"] >= MIN_OBSERVED_BYTES for w in memory["workers"]), memory
    (hit,) = findings(report, "DL010")
    evidence = hit["evidence"]
    assert evidence["container"] == {**evidence["container"], "path": "dataset.records", "type": "list",
                                     "length": 400_000}
    assert evidence["container"]["objects"] >= 1_000_000
    assert evidence["bytes_per_sample"] > 0 and evidence["dataset_length"] == 400_000
    assert evidence["num_workers"] == 2 and evidence["samples_per_worker_epoch"] == 200_000
    assert evidence["projected_growth_per_worker_bytes"] >= MIN_GROWTH_BYTES
    assert evidence["python_share"] >= PYTHON_SHARE
    assert hit["severity"] == "warning"
    assert "dataset.records" in hit["message"] and "NumPy arrays" in hit["fix"]


@pytest.mark.slow
@linux_only
def test_the_same_records_as_numpy_arrays_stay_quiet() -> None:
    report = _live("numpy_records", "DL010")
    assert findings(report, "DL010") == []
    memory = report["loader"]["memory"]
    assert len(memory["workers"]) == 2, dump(report)  # measured, and nothing grew
    assert report["loader"]["hazards"]["containers"] == []


@pytest.mark.slow
@linux_only
def test_handles_opened_in_init_and_opencv_threads(tmp_path: Path) -> None:
    import cv2

    report = _live("open_handles", "DL011,SYS007", env={"ENVDOCTOR_FIXTURE_DIR": str(tmp_path)})
    (hit,) = findings(report, "DL011")
    assert hit["severity"] == "error"
    handles = {h["path"]: (h["kind"], h["file"]) for h in hit["evidence"]["handles"]}
    assert handles == {"dataset.h5": ("h5py.File", str(tmp_path / "images.h5")),
                       "dataset.images": ("h5py.Dataset", str(tmp_path / "images.h5")),
                       "dataset.env": ("lmdb.Environment", str(tmp_path / "images.lmdb")),
                       "dataset.stores['labels']": ("sqlite3.Connection", None)}
    assert hit["evidence"]["start_method"] == "fork" and hit["evidence"]["num_workers"] == 2
    usable = report["loader"]["usable_cpus"]
    threads = cv2.getNumThreads()
    if 2 * threads <= usable:
        pytest.skip(f"OpenCV runs {threads} thread(s) here: 2 workers do not exceed {usable} usable CPUs")
    skipped = {s["what"]: s["reason"] for s in report["loader"]["skipped"]}
    if "worker memory growth (DL010)" in skipped:  # the run that reads the workers' threads (a busy machine)
        pytest.skip(f"the workers' threads were not read: {skipped['worker memory growth (DL010)']}")
    (cv,) = findings(report, "SYS007")
    assert cv["evidence"] == {**cv["evidence"], "num_workers": 2, "opencv_threads": threads,
                              "measured_in_workers": True, "total_threads": 2 * threads, "usable_cpus": usable}
    # The module has a worker_init_fn that would limit OpenCV, but this loader does not pass it: read in the
    # workers, the threads say so.
    (call,) = cv["evidence"]["set_num_threads_calls"]
    assert call["where"] == "opencv_one_thread" and "not where it takes effect" in cv["message"]


@pytest.mark.slow
@linux_only
def test_handles_opened_lazily_and_one_opencv_thread_stay_quiet(tmp_path: Path) -> None:
    # The usual lazy pattern, nothing more: the smoke test reads samples in its own process first (the
    # handles open there), and puts the dataset back as built before workers fork, as training's main
    # process, which reads nothing, leaves it. Were the LMDB environment left open in this process, the
    # forked workers could not open it again ("already open in this process"): a false DL006.
    report = _live("lazy_handles", "DL006,DL011,SYS007", env={"ENVDOCTOR_FIXTURE_DIR": str(tmp_path)})
    assert findings(report, "DL006") == [] and findings(report, "DL011") == [] and findings(report, "SYS007") == []
    assert report["loader"]["hazards"]["handles"] == []
    assert report["loader"]["getitem"]["samples"] > 0  # read in the main process first …
    assert any(r["num_workers"] > 0 and r.get("samples_per_s") for r in report["loader"]["runs"]), dump(report)
    opencv = report["loader"]["opencv"]
    (call,) = opencv["set_num_threads_calls"]
    assert call["where"] == "opencv_one_thread" and call["value"] == 1 and call["file"].endswith("handles.py")
    skipped = {s["what"]: s["reason"] for s in report["loader"]["skipped"]}
    if "worker memory growth (DL010)" in skipped:  # the run that reads the workers' threads (a busy machine)
        pytest.skip(f"the workers' threads were not read: {skipped['worker memory growth (DL010)']}")
    assert opencv["worker_threads"] == 1, dump(report)  # read in the workers, after worker_init_fn


# -- the dataset as built, put back before workers fork -------------------

class _LazyLMDB:
    """Opens its LMDB environment on first read in each process, in a reader object it holds (one level
    down)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.reader = _Holder(env=None, pid=None)
        self.reads = 0

    def read(self) -> bytes:
        import os

        import lmdb

        if self.reader.env is None or self.reader.pid != os.getpid():
            self.reader.env = lmdb.open(self.path, readonly=True, lock=False)
            self.reader.pid = os.getpid()
        self.reads += 1
        with self.reader.env.begin() as txn:
            return bytes(txn.get(b"k"))


def _read_in_a_forked_child(dataset: _LazyLMDB) -> str:
    """What a forked worker gets reading the dataset: the value, or LMDB's error."""
    ctx = multiprocessing.get_context("fork")
    queue = ctx.SimpleQueue()

    def child() -> None:
        try:
            queue.put(dataset.read().decode())
        except Exception as exc:
            queue.put(f"{type(exc).__name__}: {exc}")

    process = ctx.Process(target=child)
    process.start()
    process.join(30)
    return queue.get()


@linux_only
def test_the_dataset_is_put_back_as_built_before_workers_fork(tmp_path: Path) -> None:
    import lmdb

    env = lmdb.open(str(tmp_path / "db"), map_size=1 << 20)
    with env.begin(write=True) as txn:
        txn.put(b"k", b"value")
    env.close()
    dataset = _LazyLMDB(str(tmp_path / "db"))
    state = loader_hazards.built_state(dataset)
    assert [type(obj).__name__ for obj, _ in state] == ["_LazyLMDB", "_Holder"]
    assert dataset.read() == b"value"  # read in this process: the environment is open here now
    # Left as it is, the forked worker cannot open the environment again: the false DL006 of the smoke test.
    assert "already open in this process" in _read_in_a_forked_child(dataset)
    assert sorted(loader_hazards.restore(state)) == ["_Holder.env", "_Holder.pid", "_LazyLMDB.reads"]
    assert dataset.reader.env is None and dataset.reads == 0
    assert _read_in_a_forked_child(dataset) == "value"  # the worker opens its own, as in training
    assert loader_hazards.restore(state) == []  # nothing changed since: nothing to put back
    dataset.extra = 1
    assert loader_hazards.restore(state) == ["_LazyLMDB.extra"] and not hasattr(dataset, "extra")


# -- the walk, on real handles in this process ---------------------------

class _Holder:
    def __init__(self, **attributes: Any) -> None:
        self.__dict__.update(attributes)


def test_the_walk_tells_open_handles_by_what_they_are(tmp_path: Path) -> None:
    import h5py
    import lmdb

    with h5py.File(tmp_path / "a.h5", "w") as fh:
        fh.create_dataset("x", data=[1, 2, 3])
    with zipfile.ZipFile(tmp_path / "a.zip", "w") as zf:
        zf.writestr("a", b"a")
    with tarfile.open(tmp_path / "a.tar", "w") as tf:
        tf.add(tmp_path / "a.zip", arcname="a.zip")
    h5 = h5py.File(tmp_path / "a.h5", "r")
    env = lmdb.open(str(tmp_path / "db"), map_size=1 << 20)
    txn = env.begin()
    db = sqlite3.connect(tmp_path / "a.sqlite")
    raw = open(tmp_path / "a.zip", "rb")  # left open: the walk must see it open
    sock = socket.socket()
    archive = zipfile.ZipFile(tmp_path / "a.zip")
    tar = tarfile.open(tmp_path / "a.tar")
    queue = multiprocessing.get_context("fork").SimpleQueue()
    opened = {"h5": h5, "h5_dataset": h5["x"], "env": env, "txn": txn, "db": db, "raw": raw, "sock": sock,
              "archive": archive, "tar": tar}

    def reader() -> Any:
        return raw

    try:
        dataset = _Holder(stores=[_Holder(**{k: v for k, v in opened.items() if k != "raw"})],
                          queue=queue, stdout=sys.stdout, text=io.StringIO("x"))
        collate = functools.partial(print, file=reader)
        found = loader_hazards.walk([("dataset", dataset), ("collate_fn", collate)])
        kinds = {h["path"]: h["kind"] for h in found["handles"]}
        assert kinds == {
            "dataset.stores[0].h5": "h5py.File", "dataset.stores[0].h5_dataset": "h5py.Dataset",
            "dataset.stores[0].env": "lmdb.Environment", "dataset.stores[0].txn": "lmdb.Transaction",
            "dataset.stores[0].db": "sqlite3.Connection", "dataset.stores[0].sock": "socket.socket",
            "dataset.stores[0].archive": "zipfile.ZipFile", "dataset.stores[0].tar": "tarfile.TarFile",
            "collate_fn.keywords['file'].<closure raw>": "file"}, kinds
        # Closed, every one of them is quiet (the standard streams, a StringIO and a queue always are).
        txn.abort()
        for handle in (h5, env, db, raw, sock, archive, tar):
            handle.close()
        assert loader_hazards.walk([("dataset", dataset), ("collate_fn", collate)])["handles"] == []
    finally:
        for handle in (h5, env, db, raw, sock, archive, tar):
            handle.close()
        queue.close()


class _Proxy:
    """Answers every attribute, as an RPC client does: the walk must call none of them."""

    def __init__(self) -> None:
        self.called: list[str] = []

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> int:
            self.called.append(name)
            return 7
        return call


def test_the_walk_calls_nothing_a_proxy_makes_up() -> None:
    proxy = _Proxy()
    assert loader_hazards.walk([("dataset", _Holder(client=proxy))])["handles"] == []
    assert proxy.called == []


def test_the_walk_sizes_python_containers_and_stays_bounded() -> None:
    records = [(f"/data/{i:08d}.jpg", i) for i in range(50_000)]
    nested = _Holder(index={"train": records, "names": {str(i): i for i in range(20_000)}})
    found = loader_hazards.walk([("dataset", nested)])
    by_path = {c["path"]: c for c in found["containers"]}
    assert set(by_path) == {"dataset.index['train']", "dataset.index['names']"}
    train = by_path["dataset.index['train']"]
    assert train["type"] == "list" and train["length"] == 50_000 and train["objects"] == 150_000
    assert 50_000 * 100 < train["approx_bytes"] < 50_000 * 300
    assert found["python_bytes"] == sum(c["approx_bytes"] for c in found["containers"])
    # A chain deeper than the walk goes, and more objects than it visits, end the walk rather than hang it.
    deep: Any = _Holder()
    head = deep
    for _ in range(loader_hazards.MAX_DEPTH + 3):
        deep.next = _Holder(f=io.BytesIO())
        deep = deep.next
    assert loader_hazards.walk([("dataset", head)])["handles"] == []
    wide = [_Holder(k=i) for i in range(loader_hazards.MAX_OBJECTS * 2)]
    found = loader_hazards.walk([("dataset", _Holder(**{f"a{i}": _Holder(items=wide[i::64]) for i in range(64)}))])
    assert found["objects_visited"] <= loader_hazards.MAX_OBJECTS


# -- the rules on recorded sections --------------------------------------

SYSTEM = {"cpu": {"count": 2, "affinity": 2, "usable": 2, "quota_cpus": None, "cgroup_version": 2},
          "memory": {"effective_available": 16 * 1024**3, "cgroup_limit": None},
          "limits": {"nofile": {"soft": 65536, "hard": 65536}}}
TARGET = {"kind": "venv", "prefix": "/env", "interpreter": "/env/bin/python", "python": "3.11.7"}
CONTAINER = {"path": "dataset.records", "type": "list", "length": 4_000_000, "approx_bytes": 300 * MIB,
             "objects": 12_000_000}


def _worker(slope: float, stderr: float = 1.0, grown: int = 4 * MIB) -> dict[str, Any]:
    return {"samples": 12_000, "uss_start_bytes": 10 * MIB, "uss_end_bytes": 10 * MIB + grown, "readings": 6,
            "fitted_readings": 5, "bytes_per_sample": slope, "stderr_bytes_per_sample": stderr}


def _section(slope: float, *, workers: int = 8, persistent: bool = False, containers: list | None = None,
             stderr: float = 1.0, grown: int = 4 * MIB, start_method: str = "fork") -> dict[str, Any]:
    containers = [CONTAINER] if containers is None else containers
    return {"dataset": "fixture", "runs": [], "skipped": [], "batch_bytes": 4096, "tensors_per_batch": 2,
            "worker_rss_bytes": None, "failure": None, "length": 4_000_000, "batch_size": 64,
            "start_method": start_method, "source": {"kind": "factory"}, "usable_cpus": 2,
            "current": {"num_workers": workers, "prefetch_factor": 2, "persistent_workers": persistent,
                        "pin_memory": False, "batch_size": 64},
            "hazards": {"handles": [], "containers": containers,
                        "python_bytes": sum(c["approx_bytes"] for c in containers), "objects_visited": 9,
                        "cut": False, "start_method": start_method},
            "memory": {"num_workers": 4, "seconds": 1.5, "epoch_done": False, "shuffled": False,
                       "start_method": start_method, "workers": [_worker(slope, stderr, grown)] * 2,
                       "source": "smaps_rollup"}}


def _findings(section: dict[str, Any], rule: str, available: int = 16 * 1024**3) -> list[Any]:
    system = copy.deepcopy(SYSTEM)
    system["memory"]["effective_available"] = available
    config = Config(select=(rule,))
    report = run_check(config, facts=Facts.from_dict({"loader": section, "system": system, "target": TARGET},
                                                     config))
    assert not report.errors, report.errors
    return report.by_rule(rule)


def test_dl010_error_when_an_epoch_does_not_fit() -> None:
    # 180 bytes a sample × 500,000 samples a worker = 86 MiB each; 8 workers within 512 MiB do not fit.
    (hit,) = _findings(_section(180.0), "DL010", available=512 * MIB)
    assert hit.severity.value == "error"
    assert hit.evidence["projected_growth_per_worker_bytes"] == int(180.0 * 500_000)
    assert hit.evidence["projected_epoch_bytes"] == 8 * (10 * MIB + int(180.0 * 500_000))
    assert hit.evidence["available_bytes"] == 512 * MIB and hit.evidence["container"]["path"] == "dataset.records"
    assert "within one epoch" in hit.message


def test_dl010_warns_on_a_share_of_the_python_objects_and_not_below_it() -> None:
    (hit,) = _findings(_section(180.0), "DL010")
    assert hit.severity.value == "warning" and not hit.evidence["recurring"]
    assert hit.evidence["python_share"] == pytest.approx(180 * 500_000 / (300 * MIB), abs=1e-3)
    # Growth under the share (and under 32 MiB a worker) is no finding; nor is a slope within its noise.
    assert _findings(_section(20.0), "DL010") == []
    assert _findings(_section(180.0, stderr=100.0), "DL010") == []


def test_dl010_recurring_growth_with_persistent_workers() -> None:
    # No Python containers to copy: 40 bytes a sample is a cache or a leak, 20 MiB a worker every epoch.
    section = _section(40.0, persistent=True, containers=[])
    (hit,) = _findings(section, "DL010", available=2 * 1024**3)
    assert hit.evidence["recurring"] and hit.evidence["persistent_workers"]
    assert hit.evidence["epochs_until_full"] == int((2 * 1024**3 - 8 * 10 * MIB) // (8 * 40.0 * 500_000))
    assert "persistent_workers" in hit.message
    assert _findings(_section(40.0, persistent=False, containers=[]), "DL010", available=2 * 1024**3) == []


def test_dl011_fires_under_fork_only() -> None:
    handle = {"path": "dataset.h5", "kind": "h5py.File", "file": "/data/a.h5"}
    section = _section(0.0)
    section["hazards"]["handles"] = [handle]
    (hit,) = _findings(section, "DL011")
    assert hit.severity.value == "error" and hit.evidence["handles"] == [handle]
    assert "h5py.File(path, 'r')" in hit.fix
    section["current"]["num_workers"] = 0
    (hit,) = _findings(section, "DL011")
    assert hit.severity.value == "warning"
    spawned = _section(0.0, start_method="spawn")
    spawned["hazards"]["handles"] = [handle]
    assert _findings(spawned, "DL011") == []


def test_sys007_counts_the_threads_in_workers_or_else_the_main_process() -> None:
    section = _section(0.0, workers=2)
    section["opencv"] = {"version": "5.1.0", "main_threads": 8, "set_num_threads_calls": []}
    (hit,) = _findings(section, "SYS007")
    assert hit.evidence["opencv_threads"] == 8 and not hit.evidence["measured_in_workers"]
    assert hit.evidence["total_threads"] == 16
    # Read in the main process only, a call that limits the pool somewhere may be what the workers run.
    call = {"where": "limit_threads", "file": "/src/data.py", "line": 9, "value": 1}
    assert _findings({**section, "opencv": {**section["opencv"], "set_num_threads_calls": [call]}}, "SYS007") == []
    section["opencv"]["worker_threads"] = 1
    assert _findings(section, "SYS007") == []
    section["current"]["num_workers"] = 0
    section["opencv"]["worker_threads"] = 8
    assert _findings(section, "SYS007") == []
