"""SYS007 opencv-threads: OpenCV's own thread pool in every DataLoader worker.

OpenCV sizes its pool to the CPUs it sees, in each process, and torch's
`set_num_threads(1)` in workers does not touch it; threadpoolctl does not see
it either (SYS005). The smoke test reads `cv2.getNumThreads()` where the
loader's code imported cv2: in the runner once the dataset is built, and in
the workers themselves (after worker_init_fn and `__getitem__`), and lists
the `cv2.setNumThreads(...)` calls in the source of the dataset's and
worker_init_fn's modules.
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


RULES = {"SYS007": find_opencv_threads}
