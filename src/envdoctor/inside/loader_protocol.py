"""The smoke test's event stream: what the runner writes, what envdoctor's supervisor reads.

One JSON object a line on a pipe, each with "ev" naming its kind. The runner
(loader_session.Events) imports this module as a top-level module from its own
folder; envdoctor imports it as `envdoctor.inside.loader_protocol`. Standard
library only, and it must run on the oldest Python envdoctor inspects.
"""
from __future__ import annotations

import json
from typing import Literal, TypedDict, Union

#: A measuring phase started; `limit_s` is its own time limit (the supervisor's watchdog adds a grace).
PHASE = "phase"
#: A measured result, filed under `key` in the loader facts (run, dataset, getitem, paired, skip …).
RESULT = "result"
#: The index the dataset is about to be asked for (so a hang or crash names it).
INDEX = "index"
#: The dataset failed (raised, hung, crashed, …): `value` is a FailureFacts.
FAILURE = "failure"
#: The runner could not set up (torch missing, a plan it cannot read): `message` says why.
SETUP_ERROR = "setup_error"
#: The runner itself raised: `message` and `traceback`.
RUNNER_ERROR = "runner_error"
#: The runner finished (`reason` when it stopped early, e.g. the budget).
DONE = "done"
#: The temporary folder the runner's multiprocessing made for itself (`path`: forkserver's socket, a Manager's),
#: which envdoctor removes should the runner be killed (see process.remove_multiprocessing_folder).
TEMPDIR = "tempdir"

KINDS = (PHASE, RESULT, INDEX, FAILURE, SETUP_ERROR, RUNNER_ERROR, DONE, TEMPDIR)


class PhaseEvent(TypedDict, total=False):
    ev: Literal["phase"]
    name: str
    limit_s: float
    num_workers: int
    label: str


class ResultEvent(TypedDict, total=False):
    ev: Literal["result"]
    key: str
    value: object


class IndexEvent(TypedDict, total=False):
    ev: Literal["index"]
    i: object


class FailureEvent(TypedDict, total=False):
    ev: Literal["failure"]
    value: dict[str, object]


class ErrorEvent(TypedDict, total=False):
    ev: Literal["setup_error", "runner_error"]
    message: str
    traceback: str


class DoneEvent(TypedDict, total=False):
    ev: Literal["done"]
    reason: str


class TempdirEvent(TypedDict, total=False):
    ev: Literal["tempdir"]
    path: str


#: Union, not "|": this line runs in the target interpreter, which may predate Python 3.10.
Event = Union[PhaseEvent, ResultEvent, IndexEvent, FailureEvent, ErrorEvent, DoneEvent, TempdirEvent]  # noqa: UP007


def encode(ev: str, fields: dict[str, object]) -> bytes:
    """One event as the line the runner writes (values JSON cannot hold are written as repr)."""
    return (json.dumps({"ev": ev, **fields}, default=repr) + "\n").encode("utf-8")


def decode(line: bytes) -> dict[str, object] | None:
    """The event on one line, or None for anything that is not one (a torn line, stray output).

    Returned as a plain dict: its shape is the `Event` member its "ev" names.
    """
    try:
        event = json.loads(line)
    except ValueError:
        return None
    if not isinstance(event, dict) or event.get("ev") not in KINDS:
        return None
    return event
