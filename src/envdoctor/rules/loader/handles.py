"""DL011 handle-shared-across-fork: an open native handle reachable from the loader's objects before workers
start, under fork.

The walk (inside/loader_hazards.py) tells handles by what they are — h5py
objects, LMDB environments and transactions, sqlite3 connections, zip and tar
archives, sockets, open files, anything with a live `fileno()` — not by
attribute names. Under spawn or forkserver such a handle fails to pickle,
which SPW003 reports; under fork it crosses silently, and every worker shares
its file offset and its library's state.
"""
from __future__ import annotations

from collections.abc import Iterator

from envdoctor.facts import Facts
from envdoctor.model import Severity
from envdoctor.rules import Hit

#: What to open per worker, by the kind of handle.
_OPEN_PER_WORKER = {
    "h5py": "h5py.File(path, 'r')",
    "lmdb": "lmdb.open(path, readonly=True, lock=False)",
    "sqlite3": "sqlite3.connect(path)",
    "zipfile": "zipfile.ZipFile(path)",
    "tarfile": "tarfile.open(path)",
    "socket": "the connection",
    "file": "open(path, 'rb')",
}


def _describe(handle: dict[str, object]) -> str:
    file = handle.get("file")
    return f"`{handle['path']}` ({handle['kind']}" + (f" {file})" if file else ")")


def find_handle_shared_across_fork(facts: Facts) -> Iterator[Hit]:
    """DL011: the dataset (or sampler, collate_fn, worker_init_fn) holds open handles that fork shares."""
    section = facts["loader"]
    if not section or not section.get("hazards"):
        return
    hazards = section["hazards"]
    handles = hazards.get("handles") or []
    start = hazards.get("start_method") or section.get("start_method")
    if not handles or start != "fork":
        return
    workers = (section.get("current") or {}).get("num_workers") or 0
    kinds = sorted({str(h["kind"]).split(".")[0] for h in handles})
    opens = "; ".join(f"{_OPEN_PER_WORKER[k]}" for k in kinds if k in _OPEN_PER_WORKER)
    listed = ", ".join(_describe(dict(h)) for h in handles)
    yield Hit(
        message=(f"{len(handles)} open native handle(s) reachable from the loader before its workers start: "
                 f"{listed}; under fork every worker inherits the same one — one file offset and one library "
                 "state shared by all — which gives wrong or mixed-up samples, 'bad object header' and "
                 "similar read errors, or hangs"
                 + ("" if workers else " (your num_workers is 0 now: this bites once workers are on)")),
        evidence={"handles": [dict(h) for h in handles], "start_method": start, "num_workers": workers,
                  "objects_visited": hazards.get("objects_visited"), "walk_cut": hazards.get("cut", False)},
        fix=("keep only paths in __init__ and open each handle lazily in the process that uses it: on first "
             "__getitem__ (remember os.getpid() and reopen when it changes) or in "
             "worker_init_fn (`info = torch.utils.data.get_worker_info(); info.dataset.open()`)"
             + (f": {opens}" if opens else "") + "; close the main process's copy before the DataLoader starts "
             "its workers"),
        severity=None if workers else Severity.WARNING,
    )


RULES = {"DL011": find_handle_shared_across_fork}
