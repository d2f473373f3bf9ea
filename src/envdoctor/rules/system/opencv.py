"""SYS007 opencv-threads: OpenCV's own thread pool in every DataLoader worker.

OpenCV sizes its pool to the CPUs it sees, in each process, and torch's
`set_num_threads(1)` in workers does not touch it; threadpoolctl does not see
it either (SYS005). The smoke test reads `cv2.getNumThreads()` where the
loader's code imported cv2: in the runner once the dataset is built, and in
the workers themselves (after worker_init_fn and `__getitem__`), and lists
the `cv2.setNumThreads(...)` calls in the source of the dataset's and
worker_init_fn's modules.

From static facts too (`envdoctor check train.py`): a script or notebook
that imports cv2 (itself or in the project modules it imports) and starts
DataLoader workers, with cv2's default thread count read from the target
(facts.opencv_use). A `cv2.setNumThreads(0|1)` at module level, or in a
function the code passes as `worker_init_fn=`, keeps it quiet.
"""
from __future__ import annotations

from collections.abc import Iterator

from envdoctor.facts import Facts
from envdoctor.rules import Hit


def find_opencv_threads(facts: Facts) -> Iterator[Hit]:
    """SYS007: workers × OpenCV threads exceed the usable CPUs."""
    section = facts.get("loader")
    if not section or not section.get("opencv"):
        return
    opencv = section["opencv"]
    measured_in_workers = opencv.get("worker_threads") is not None
    threads = opencv.get("worker_threads") if measured_in_workers else opencv.get("main_threads")
    workers = (section.get("current") or {}).get("num_workers") or 0
    usable = section.get("usable_cpus") or facts["system"]["cpu"]["usable"]
    if not threads or threads <= 1 or not workers or workers * threads <= usable:
        return
    calls = opencv.get("set_num_threads_calls") or []
    if not measured_in_workers and any(c.get("value") in (0, 1) for c in calls):
        return  # read in the main process only: a call that limits the pool may be what runs in the workers
    where = ("read in the workers" if measured_in_workers
             else "read in the main process; the workers inherit it")
    said = ("; the code calls cv2.setNumThreads at " + ", ".join(f"{c['file']}:{c['line']} ({c['where']})"
                                                                 for c in calls)
            + ", but not where it takes effect in the workers" if calls else
            "; the loader's code never calls cv2.setNumThreads")
    yield Hit(
        message=(f"{workers} DataLoader workers × {threads} OpenCV threads each ({where}) = {workers * threads} "
                 f"threads on {usable} usable CPU(s){said}: the workers' OpenCV calls preempt each other, and "
                 "OpenCV's pool used in the main process before the fork can deadlock workers"),
        evidence={"num_workers": workers, "opencv_threads": threads, "measured_in_workers": measured_in_workers,
                  "main_threads": opencv.get("main_threads"), "total_threads": workers * threads,
                  "usable_cpus": usable, "set_num_threads_calls": [dict(c) for c in calls],
                  "opencv_version": opencv.get("version")},
        fix=("call cv2.setNumThreads(0) at the top of the dataset's module (before the DataLoader forks; "
             "re-run by spawn workers on import), or in a module-level worker_init_fn: "
             "`def worker_init_fn(_): cv2.setNumThreads(1)` and DataLoader(..., worker_init_fn=worker_init_fn)"),
    )


def _limits_workers(opencv: dict) -> bool:
    """A literal setNumThreads(0|1) that runs in every worker: at module level (fork inherits it, spawn
    re-runs it), or in a function passed as worker_init_fn."""
    named = set(opencv.get("worker_init_fns") or ())
    return any(c.get("value") in (0, 1) and (c.get("where") == "module level" or c.get("where") in named)
               for c in opencv.get("set_num_threads_calls") or ())


def _place(where: dict) -> str:
    cell = f"cell {where['cell']}, " if where.get("cell") is not None else ""
    return f"{where['path']}:{cell}{where['line']}" if not cell else f"{where['path']} ({cell}line {where['line']})"


def find_opencv_in_scripts(facts: Facts) -> Iterator[Hit]:
    """SYS007 from the scripts given: cv2 imported, workers started, OpenCV's threads never limited."""
    scripts = facts.get("scripts")
    target = (scripts or {}).get("opencv_target") or {}
    threads = target.get("threads")
    if not scripts or not threads or threads <= 1:
        return
    usable = facts["system"]["cpu"]["usable"]
    for info in scripts["files"]:
        opencv = info.get("opencv")
        if not opencv or not opencv.get("imports") or _limits_workers(opencv):
            continue
        starts = [w for w in info.get("worker_starts") or () if isinstance(w.get("num_workers"), int)
                  and w["num_workers"] > 0]
        if starts and max(w["num_workers"] for w in starts) * threads > usable:
            yield _script_hit(info, max(starts, key=lambda w: w["num_workers"]), threads, usable,
                              target.get("version"))


def _script_hit(info: dict, start: dict, threads: int, usable: int, version: str | None) -> Hit:
    opencv = info["opencv"]
    workers = start["num_workers"]
    calls = opencv.get("set_num_threads_calls") or []
    said = ("; its cv2.setNumThreads calls (" + ", ".join(f"{_place(c)} in {c['where']}" for c in calls)
            + ") do not limit every worker to 0 or 1" if calls else "; it never calls cv2.setNumThreads")
    return Hit(
        message=(f"{info['path']} imports cv2 ({_place(opencv['imports'][0])}) and starts {workers} DataLoader "
                 f"workers ({_place(start)}): {workers} × {threads} OpenCV threads each (cv2's default "
                 f"in this environment) = {workers * threads} threads on {usable} usable CPU(s){said}"),
        evidence={"script": info["path"], "num_workers": workers, "opencv_threads": threads,
                  "measured_in_workers": False, "total_threads": workers * threads, "usable_cpus": usable,
                  "worker_start": {"path": start["path"], "line": start["line"]},
                  "imports": [dict(i) for i in opencv["imports"]],
                  "set_num_threads_calls": [dict(c) for c in calls],
                  "worker_init_fns": list(opencv.get("worker_init_fns") or ()),
                  "opencv_version": version},
        fix=("call cv2.setNumThreads(0) at the top of the module that imports cv2 (before the DataLoader "
             "forks; re-run by spawn workers on import), or in a module-level worker_init_fn: "
             "`def worker_init_fn(_): cv2.setNumThreads(1)` and DataLoader(..., worker_init_fn=worker_init_fn)"),
    )


def find_opencv(facts: Facts) -> Iterator[Hit]:
    """SYS007: measured by the smoke test (the loader section), or from the scripts given."""
    yield from find_opencv_threads(facts)
    yield from find_opencv_in_scripts(facts)


RULES = {"SYS007": find_opencv}
