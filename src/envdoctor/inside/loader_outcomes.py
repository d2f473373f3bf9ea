"""How a run ends when it does not end well: distinct types for each way, and reading a failed fetch.

Part of the standalone runner (see loader_runner.py). A run that stops early
raises one of:

- `DatasetFailure`: the dataset (or its collate_fn) raised, hung, or killed the
  process fetching it — a finding (DL006);
- `SlowStart`: the workers delivered nothing when the budget ran out, and none
  had begun a `__getitem__`, or the one in progress had run for less than the
  hang limit — still starting (or just begun), a skip;
- `BudgetEnd`: the budget ran out while the workers made a batch, before the
  wait was long enough to call it a hang — a skip;
- `SetupProblem` / `FactoryProblem`: the smoke test could not be set up.

`SlowStart` and `BudgetEnd` are both a `RunCut` (the budget, not the dataset).
`read_failure` turns what torch raised into one of these from the workers'
exit codes and the tracked slots, and `timed_out` says whether a wait ended
by the DataLoader's timeout (every worker alive, the whole timeout waited)
rather than by a worker's death.
"""
from __future__ import annotations

import pickle
import re
import signal
from typing import Protocol

from loader_timing import workers_alive


class _Tracked(Protocol):
    """What a failure reads of the tracked dataset (loader_session.Tracked; mypy cannot follow the runner's
    top-level imports, so the part used here is spelt out)."""

    def in_progress(self) -> dict[int, int]: ...
    def oldest_fetch(self) -> tuple[int, float] | None: ...
    def failures(self) -> dict[int, int]: ...
    def slot_of_pid(self, pid: int) -> int | None: ...


class DatasetFailure(Exception):
    """The dataset (or its collate_fn) raised, hung, or killed the process fetching it."""

    def __init__(self, kind: str, message: str, *, index: object = None, num_workers: int | None = None,
                 where: str = "__getitem__", exception: str | None = None, signal_name: str | None = None) -> None:
        super().__init__(message)
        self.info = {"kind": kind, "message": message, "index": index, "num_workers": num_workers,
                     "where": where, "exception": exception, "signal": signal_name}


class RunCut(Exception):
    """A run the budget cut short: not the dataset's fault, reported as a skip."""

    def __init__(self, message: str, num_workers: int) -> None:
        super().__init__(message)
        self.num_workers = num_workers


class SlowStart(RunCut):
    """Workers that delivered no batch before the budget ran out, and were still starting: none had begun a
    `__getitem__`, or the fetch in progress (`fetching`: its index and how long it had run) had run for less
    than the hang limit, the start-up having taken the rest of the wait."""

    def __init__(self, num_workers: int, waited_s: float, fetching: tuple[int, float] | None = None) -> None:
        if fetching is None:
            detail = ("none had begun a __getitem__ (still starting: importing modules and unpickling the dataset "
                      "under spawn or forkserver)")
        else:
            detail = (f"the fetch in progress (index {fetching[0]}) had run only {fetching[1]:.1f} s, too short to "
                      "call it a hang: starting the workers took the rest of the wait")
        super().__init__(f"the {num_workers} worker(s) had not delivered a first batch after {waited_s:.1f} s, "
                         f"when the budget ran out; {detail}", num_workers)


class BudgetEnd(RunCut):
    """The budget ran out while the workers made a batch, before the wait was long enough to be a hang."""

    def __init__(self, num_workers: int, waited_s: float) -> None:
        super().__init__(f"stopped at the end of the budget after waiting {waited_s:.1f} s for a batch, "
                         "too short to call it a hang", num_workers)


class SetupProblem(Exception):
    """The smoke test could not be set up (not the dataset's fault: a bad path, a bad spec)."""


class FactoryProblem(Exception):
    """The --dataset factory could not be imported or called."""

    def __init__(self, message: str, trace: str | None = None) -> None:
        super().__init__(message)
        self.trace = trace


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def original_error(text: str) -> str | None:
    """The last line of the worker's original traceback that torch re-raises."""
    if "Original Traceback" not in text:
        return None
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else None


def looks_like_pickling(exc: BaseException) -> bool:
    text = f"{type(exc).__name__}: {exc}".lower()
    return isinstance(exc, pickle.PicklingError) or "pickle" in text or "can't get local object" in text


def timed_out(exc: BaseException, iterator: object, waited_s: float, timeout_s: float) -> bool:
    """The wait ended by the DataLoader's own timeout: the whole timeout passed with every worker alive."""
    return (isinstance(exc, RuntimeError) and getattr(iterator, "_workers", None) is not None
            and waited_s >= timeout_s - 0.1 and workers_alive(iterator))


def raised(exc: BaseException, index: object, nw: int, length: int | None) -> DatasetFailure:
    """`__getitem__` raised in this process."""
    kind = "memory" if isinstance(exc, MemoryError) else "raised"
    message = f"{type(exc).__name__}: {first_line(exc)}"
    if isinstance(exc, IndexError) and length is not None and isinstance(index, int) and index < length:
        message += f" (len() says {length} samples, so __len__ promises more than __getitem__ serves)"
    return DatasetFailure(kind, message, index=index, num_workers=nw, where="__getitem__",
                          exception=type(exc).__name__)


def _exit_codes(iterator: object) -> dict[int, int | None]:
    codes = {}
    for w in (getattr(iterator, "_workers", None) or []):
        try:
            w.join(timeout=0.05)
            codes[w.pid] = w.exitcode
        except Exception:
            pass
    return codes


def _signal_name(code: int | None) -> str | None:
    if code is None or code >= 0:
        return None
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def read_failure(exc: BaseException, nw: int, iterator: object, tracked: _Tracked | None, *, length: int | None,
                 start_method: str, was_timeout: bool, delivered: bool, waited_s: float,
                 hang_s: float = 0.0) -> Exception:
    """What a failed run means: a DatasetFailure, or SlowStart when the workers were merely starting (a fetch
    in progress for less than `hang_s` is not a hang)."""
    text = str(exc)
    failed = tracked.failures() if tracked is not None else {}
    busy = tracked.in_progress() if tracked is not None else {}
    exitcodes = _exit_codes(iterator)
    if (nw == 0 or not failed and not busy and not exitcodes) and failed.get(0) is not None:
        return raised(exc, failed[0], nw, length)  # raised in this process (slot 0)
    # torch's own words for a batch that did not fit through /dev/shm (nothing else tells it).
    if "shared memory" in text or "No space left on device" in text or "Bus error" in text:
        return DatasetFailure("shm", f"a worker could not hand its batch over through shared memory: "
                              f"{original_error(text) or first_line(exc)}", index=next(iter(failed.values()), None),
                              num_workers=nw, where="shared memory", exception=type(exc).__name__,
                              signal_name="SIGBUS" if "Bus error" in text else None)
    if was_timeout:
        return _timed_out(exc, nw, tracked, busy, not delivered and not failed, waited_s, hang_s)
    crashed = _crashed(text, nw, exitcodes, tracked, busy)
    if crashed is not None:
        return crashed
    if isinstance(exc, MemoryError):
        return DatasetFailure("memory", f"MemoryError: {first_line(exc)}", num_workers=nw,
                              index=next(iter(failed.values()), None), exception="MemoryError")
    if looks_like_pickling(exc) and nw > 0 and start_method in ("spawn", "forkserver"):
        return DatasetFailure("pickle", f"starting {start_method} workers failed: {type(exc).__name__}: "
                              f"{first_line(exc)}", num_workers=nw, where="pickling", exception=type(exc).__name__)
    return _raised_in_a_worker(exc, text, nw, failed, length)


def _timed_out(exc: BaseException, nw: int, tracked: _Tracked | None, busy: dict[int, int], first: bool,
               waited_s: float, hang_s: float) -> Exception:
    """No batch within the DataLoader's timeout: a hang, or workers still starting (SlowStart). `first`: no batch
    had come and no fetch had failed; `busy`: the fetches in progress."""
    index = next(iter(busy.values()), None)
    if first:
        if not busy:
            # No worker had begun a __getitem__: still starting (importing, unpickling the dataset).
            return SlowStart(nw, waited_s)
        oldest = tracked.oldest_fetch() if tracked is not None else None
        if oldest is not None and oldest[1] < hang_s - 0.05:
            # The first batch's wait is bounded by the budget, not the hang limit: workers whose start-up took
            # most of it had only just begun fetching (a sample begun 0.1 s ago is not a hang).
            return SlowStart(nw, waited_s, oldest)
    return DatasetFailure("hung", f"no batch arrived within the DataLoader timeout ({first_line(exc)})"
                          + (f"; index {index} was still being fetched" if index is not None else ""),
                          index=index, num_workers=nw)


def _crashed(text: str, nw: int, exitcodes: dict[int, int | None], tracked: _Tracked | None, busy: dict[int, int]
             ) -> DatasetFailure | None:
    """A worker that died (its exit status or signal, the index it was fetching), or None when none did."""
    dead = {pid: code for pid, code in exitcodes.items() if code not in (None, 0)}
    if not (dead or "exited unexpectedly" in text or "killed by signal" in text):
        return None
    pid, code = next(iter(dead.items()), (None, None))
    match = re.search(r"pid\(?s?\)? (\d+)", text)
    if pid is None and match:
        pid = int(match.group(1))
    slot = tracked.slot_of_pid(pid) if (tracked is not None and pid) else None
    index = busy.get(slot) if slot is not None else next(iter(busy.values()), None)
    signame = _signal_name(code)
    how = f"was killed by {signame}" if signame else (f"exited with status {code}" if code is not None
                                                      else "exited unexpectedly")
    return DatasetFailure("crashed", f"a worker process {how}"
                          + (f" while fetching index {index}" if index is not None else ""),
                          index=index, num_workers=nw, signal_name=signame)


def _raised_in_a_worker(exc: BaseException, text: str, nw: int, failed: dict[int, int], length: int | None
                        ) -> DatasetFailure:
    """What raised in a worker: a __getitem__ (its index), or else collate_fn, the sampler or worker_init_fn."""
    original = original_error(text) or f"{type(exc).__name__}: {first_line(exc)}"
    if failed:
        _, index = next(iter(failed.items()))
        if isinstance(exc, IndexError) and length is not None and isinstance(index, int) and index < length:
            original += f" (len() says {length} samples)"
        return DatasetFailure("raised", original, index=index, num_workers=nw, exception=type(exc).__name__)
    return DatasetFailure("raised", original + " (in collate_fn, the sampler or worker_init_fn: no "
                          "__getitem__ call failed)", index=None, num_workers=nw, where="collate_fn",
                          exception=type(exc).__name__)
