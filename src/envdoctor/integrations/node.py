"""One preflight per node, shared by the framework callbacks.

Under DDP every process of a node runs the callback's hook; only the node's
local rank 0 profiles the loader (the others would compete for the same CPUs
and print the same report N times). The usable CPUs of the node are shared
by its training processes, so the smoke test sweeps and recommends
num_workers from each process's share.
"""
from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TextIO

from envdoctor.model import FAIL_ON_CHOICES, Report, Severity


class PreflightWarning(UserWarning):
    """Findings that did not reach `fail_on`: training goes on, the user is told."""


class PreflightStopped(RuntimeError):
    """Raised on the ranks that did not fail themselves when a node's preflight failed, so every rank stops.

    The node whose local rank 0 failed raises `envdoctor.PreflightError`
    there, with the report; this names where to look.
    """

    def __init__(self, fail_on: str) -> None:
        super().__init__(f"envdoctor preflight reached fail_on={fail_on!r} on a node's local rank 0 "
                         "(its output has the findings); this rank stops too")


@dataclass
class NodePreflight:
    """The settings both callbacks take, and the one run of preflight() they make."""

    fail_on: str = "error"
    budget_s: float = 15.0
    step_time_s: float | None = None
    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    #: The report of this node's run (local rank 0 only), once it has run.
    report: Report | None = field(default=None, repr=False)
    #: True once the hook has fired in this process, whatever the rank.
    done: bool = False

    def __post_init__(self) -> None:
        if self.fail_on not in FAIL_ON_CHOICES:
            raise ValueError(f"fail_on must be one of {', '.join(FAIL_ON_CHOICES)}, not {self.fail_on!r}")
        if self.budget_s <= 0:
            raise ValueError(f"budget_s must be a positive number of seconds, not {self.budget_s}")
        self.select = tuple(self.select)
        self.ignore = tuple(self.ignore)

    def run(self, loader: object, *, framework: str, local_rank: int, procs_per_node: int,
            stream: TextIO | None = None) -> Report | None:
        """Profile `loader` on local rank 0, once; None on the other ranks and on later calls.

        Prints what was profiled and the summary, then raises
        `envdoctor.PreflightError` when a finding reaches `fail_on`, or warns
        (`PreflightWarning`) about the findings below it.
        """
        if self.done:
            return None
        self.done = True
        if local_rank != 0:
            return None
        from envdoctor.api import PreflightError, preflight, preflight_summary

        procs = max(1, procs_per_node)
        report = preflight(loader=loader, fail_on="never", budget_s=self.budget_s, step_time_s=self.step_time_s,
                           select=self.select, ignore=self.ignore, quiet=True, procs_per_node=procs)
        self.report = report
        out = stream or sys.stderr
        print(describe_run(report, framework, procs, own_loader=loader is not None), file=out)
        print(preflight_summary(report), file=out, flush=True)
        if report.fails(self.fail_on):
            raise PreflightError(report, self.fail_on)
        below = [f for f in report.findings if f.severity.rank >= Severity.WARNING.rank]
        if below:
            names = ", ".join(f"{f.rule} {f.name}" for f in below)
            warnings.warn(f"envdoctor preflight: {len(below)} finding(s) below fail_on={self.fail_on!r} "
                          f"({names}); training goes on", PreflightWarning, stacklevel=2)
        return report

    def run_on_every_rank(self, loader: object, *, framework: str, local_rank: int, procs_per_node: int,
                          any_rank: Callable[[bool], bool]) -> None:
        """`run`, then agree across the ranks: a failure on local rank 0 stops every rank.

        `any_rank(flag)` is the framework's collective (True on every rank when
        True on any); every rank calls it, since a rank that raised alone would
        leave the others waiting.
        """
        if self.done:
            return
        failure: Exception | None = None
        try:
            self.run(loader, framework=framework, local_rank=local_rank, procs_per_node=procs_per_node)
        except Exception as exc:  # re-raised below, once every rank knows
            failure = exc
        stop = any_rank(failure is not None)
        if failure is not None:
            raise failure
        if stop:
            raise PreflightStopped(self.fail_on)


def describe_run(report: Report, framework: str, procs_per_node: int, own_loader: bool = True) -> str:
    """The line that says which loader was profiled, for whom, and with how many CPUs."""
    loader = report.loader or {}
    if own_loader:
        what = f"profiled the train loader {loader.get('dataset')}"
        if loader.get("length") is not None:
            what += f", {loader['length']} samples"
    else:
        what = f"the trainer holds no torch DataLoader; profiled {loader.get('dataset')} instead"
    node_cpus = report.facts.get("system", {}).get("cpu", {}).get("usable")
    share = loader.get("usable_cpus")
    return (f"envdoctor preflight [{framework}] on local rank 0: {what}; "
            f"{procs_per_node} training process(es) share this node's {node_cpus} usable CPU(s): {share} each")


def first_dataloader(loaders: object) -> object:
    """The DataLoader in what a trainer holds: a loader, or a dict/list/tuple of them (first one)."""
    if loaders is None or hasattr(loaders, "dataset"):
        return loaders
    values: Iterable[object] = ()
    if isinstance(loaders, dict):
        values = loaders.values()
    elif isinstance(loaders, (list, tuple)):
        values = loaders
    for value in values:
        found = first_dataloader(value)
        if found is not None:
            return found
    return None

