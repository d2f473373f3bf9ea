"""The DataLoader smoke test as it runs inside the target environment's interpreter.

Standalone: the standard library at top level, torch imported once the plan
runs, and never envdoctor (the inspected environment need not have it).
envdoctor starts this file as a script in a session of its own
(`python -B loader_runner.py PLAN.json`), or, for `preflight(loader=...)`,
calls `run_plan` in a forked child of the training process.

The runner measures and reports; it judges nothing. It writes one JSON object
a line to the event file descriptor the plan names (or, on Windows, to the
event file it names): `phase` events (what it
is doing now and how long that may take, so envdoctor can kill the group if
it overstays), `index` events while it fetches samples in its own process
(so a sample that kills the interpreter is still known), `result` events with
each measurement as soon as it exists (so a kill keeps what was measured),
`failure` when the dataset raised, hung or killed a worker, then `done`.

The parts, beside this file: loader_session (events, watchdog, shared
state), loader_setup (torch, the dataset, the user's settings, pickling),
loader_hazards (before workers start: open handles, large Python containers,
OpenCV), loader_getitem (`__getitem__` in this process), loader_data_checks
(repeated samples, cloned randomness), loader_memory (worker memory against
samples, OpenCV's threads in workers), loader_sweep and loader_measure (the timed
runs), loader_paired (the candidate against the user's setting in paired
windows), loader_extras (persistent_workers, pin_memory), loader_outcomes
(how a run that ends early is told: a failure, a slow start, the budget's
end) and loader_timing (the kernel's account of the processes).

A watchdog thread ends the run itself when a phase overstays, after writing
which indices were being fetched, and when envdoctor is gone; envdoctor's own
deadline is the backstop for hangs that hold the interpreter lock.
"""
from __future__ import annotations

import json
import os
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:  # the runner's parts live beside this file
    sys.path.insert(0, HERE)

import loader_data_checks  # noqa: E402 - the parts are found through the path set just above
import loader_extras  # noqa: E402 - as above
import loader_getitem  # noqa: E402 - as above
import loader_hazards  # noqa: E402 - as above
import loader_memory  # noqa: E402 - as above
import loader_paired  # noqa: E402 - as above
import loader_setup  # noqa: E402 - as above
import loader_sweep  # noqa: E402 - as above
from loader_outcomes import DatasetFailure, FactoryProblem, SetupProblem  # noqa: E402 - as above
from loader_session import Events, Session, announce_tempdir, release_multiprocessing_files  # noqa: E402 - as above
from loader_timing import schedstat  # noqa: E402 - as above

__all__ = ["Events", "main", "release_multiprocessing_files", "run_plan", "schedstat"]


def run_smoke_test(s: Session, given: tuple[object, object, object]) -> None:
    """The whole test, in order; every part writes its own results."""
    loader_setup.build(s, given)
    loader_hazards.before_workers(s)
    loader_getitem.probe(s)
    loader_data_checks.duplicates(s)
    loader_data_checks.cloned_rng(s, next(loader_getitem.index_stream(s), None) if not s.iterable else None)
    measure = s.plan.get("measure", "timed")  # how far the selected rules read (envdoctor.catalog.loader_reads)
    if measure == "checks":
        return
    if measure == "memory":
        loader_memory.growth(s)
        return
    loader_sweep.sweep(s)
    if s.plan.get("pair"):
        loader_paired.paired_windows(s)
    if not s.plan.get("workers"):
        # After the sweep (a dataset that fails in workers has failed there, with its index), in the seconds
        # the sweep kept back for it; the paired windows take what is left.
        loader_memory.growth(s)
        loader_paired.paired_windows(s)
        loader_extras.persistence(s)
        loader_extras.pin_memory(s)


def run_plan(plan: dict[str, object], events: Events, dataset: object = None, loader_kwargs: object = None,
             description: object = None) -> None:
    """Run the whole smoke test, writing events; never raises for the dataset's failures."""
    announce_tempdir(events)
    session = Session(plan, events)
    try:
        run_smoke_test(session, (dataset, loader_kwargs, description))
    except DatasetFailure as failure:
        events.emit("failure", value=failure.info)
    except FactoryProblem as exc:
        events.emit("failure", value={"kind": "factory", "message": str(exc), "index": None,
                                      "num_workers": None, "where": "factory", "exception": None,
                                      "signal": None, "trace": exc.trace})
    except SetupProblem as exc:
        events.emit("setup_error", message=str(exc))
    except ImportError as exc:
        events.emit("setup_error", message=f"torch cannot be imported: {exc}")
    except BaseException as exc:  # the runner's own bug: report it, do not hang
        events.emit("runner_error", message=f"{type(exc).__name__}: {exc}",
                    traceback=traceback.format_exc(limit=8))
    try:
        release_multiprocessing_files()
    except Exception:
        pass
    events.emit("done")


def main(argv: list[str]) -> int:
    with open(argv[1], encoding="utf-8") as fh:
        plan = json.load(fh)
    try:
        os.unlink(argv[1])  # read once: no plan file outlives the runner's start, whatever happens to envdoctor
    except OSError:
        pass
    events = Events.for_plan(plan)
    run_plan(plan, events)
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: a dataset's own threads or finalizers must not hold us.
    os._exit(0)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
