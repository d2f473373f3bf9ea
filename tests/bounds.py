"""How long a test lets envdoctor run: only the limits the code itself enforces, with slack derived from them.

A machine whose cores other processes keep busy runs everything slower, by a factor no test can know, so no
test asserts a time measured on this one. Where a path enforces limits on what it waits for (the target's
interpreter, the torch probe, --deep's hashing and imports, a rank's wait for the others), a run of it is
bounded by those limits, one after another, plus half as much again for the interpreters a busy machine
starts slowly (the same slack as loadersupport.stage_bound). Where a path enforces none (render, compare,
parsing a file: computation on the input), no time is asserted: the test checks the outcome, and a hang
guard only ends a run that hung.
"""
from __future__ import annotations

#: The slack a bound gives over the limits the code enforces: half as much again.
SLACK = 0.5


def within(*enforced_s: float) -> float:
    """The most a run may take, seen from a test, whose enforced limits are `enforced_s` (one after another)."""
    return (1 + SLACK) * sum(enforced_s)


def static_check_limits(*, deep: bool = False) -> tuple[float, ...]:
    """The limits `check`/`report --no-loader` enforces on what it waits for: the target interpreter's
    self-report and the torch probe, and under --deep the conda records' hashing and the import probe's total."""
    from envdoctor.facts.conda_meta import MAX_HASH_SECONDS
    from envdoctor.facts.imports import TOTAL_TIMEOUT_S
    from envdoctor.facts.target import INTERPRETER_TIMEOUT_S
    from envdoctor.facts.torch import probe_timeout

    limits = (INTERPRETER_TIMEOUT_S, probe_timeout())
    return (*limits, MAX_HASH_SECONDS, TOTAL_TIMEOUT_S) if deep else limits


def static_check_s(*, deep: bool = False) -> float:
    """The most a `check --no-loader` (or `report --no-loader`) run may take, seen from a test."""
    return within(*static_check_limits(deep=deep))


def hang_guard_s() -> float:
    """Ends a run of a path that enforces no limit (render, compare), only so a hang ends the test: the most
    the slowest static check may take (static_check_s(deep=True)). Not an assertion about speed."""
    return static_check_s(deep=True)
