"""Running a plan: journal first, then each step, then a fresh check of the affected rules.

The manifest lists every step before the first one runs and is saved again
before and after each step (status planned → running → done / failed), so
whatever happens in between, `fix --undo` knows what may have changed. A
file move puts the path where the step says; a pip or uv step runs after its
distributions' files are copied into the journal (envdoctor.fix.snapshot).
Every command is an argv list run without a shell, with a time limit.
"""
from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from envdoctor.fix.journal import Journal, tree
from envdoctor.fix.plan import Plan, PlannedStep
from envdoctor.fix.snapshot import PackageSnapshot, conda_inverse, conda_records, site_dirs
from envdoctor.fix.tools import Refused, Target, authorize, authorize_move
from envdoctor.model import Finding, Report

#: Seconds one package command may take (a large reinstall over a slow disk included).
STEP_TIMEOUT_S = 900.0
#: Characters of a command's output kept in the journal and the result.
OUTPUT_TAIL = 2000
#: Tools whose changes are read back from conda-meta and reversed with the same tool.
CONDA_TOOLS = ("conda", "mamba", "micromamba")


@dataclass
class StepResult:
    number: int
    status: str  # done, failed, skipped, not-run
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.number, "status": self.status, "detail": self.detail}


@dataclass
class Outcome:
    """What the re-check says about the planned findings."""

    fixed: list[Finding] = field(default_factory=list)
    remaining: list[Finding] = field(default_factory=list)
    new: list[Finding] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"fixed": [f.to_dict() for f in self.fixed], "remaining": [f.to_dict() for f in self.remaining],
                "new": [f.to_dict() for f in self.new]}


def finding_identity(finding: Finding) -> tuple[Any, ...]:
    """Which problem a finding is about, stable across a re-check whose versions may differ."""
    ev = finding.evidence
    about = tuple(str(ev.get(k)) for k in ("package", "distribution", "dependency", "requirement", "clash", "path")
                  if ev.get(k) is not None)
    where = (finding.location.path, finding.location.line) if finding.location else None
    return (finding.rule, where, about or finding.message)


def compare_findings(planned: list[Finding], before_all: list[Finding], after: list[Finding]) -> Outcome:
    after_ids = {finding_identity(f) for f in after}
    before_ids = {finding_identity(f) for f in before_all}
    outcome = Outcome()
    for finding in planned:
        (outcome.remaining if finding_identity(finding) in after_ids else outcome.fixed).append(finding)
    outcome.new = [f for f in after if finding_identity(f) not in before_ids]
    return outcome


class Executor:
    """Runs the runnable steps of one plan into one journal."""

    def __init__(self, plan: Plan, journal: Journal, environ: Mapping[str, str] | None = None) -> None:
        self.plan, self.journal = plan, journal
        self.environ = dict(os.environ if environ is None else environ)
        self.target = Target.from_report_target(plan.target)
        self.dirs = site_dirs(self.target, plan.target)

    def run(self) -> list[StepResult]:
        manifest = self.journal.manifest
        manifest["steps"] = [{**s.to_dict(), "status": "planned" if s.runs else "skipped"} for s in self.plan.steps]
        self.journal.save()  # before the first change: an interrupted fix is still undoable
        results = []
        broken_findings: set[tuple[str, str]] = set()
        for planned, record in zip(self.plan.steps, manifest["steps"]):
            if not planned.runs:
                results.append(StepResult(planned.number, "skipped", planned.skip or ""))
                continue
            if (planned.rule, planned.finding) in broken_findings:
                record["status"] = "not-run"
                results.append(StepResult(planned.number, "not-run", "an earlier step of this fix failed"))
                continue
            result = self._run_one(planned, record)
            if result.status != "done":
                broken_findings.add((planned.rule, planned.finding))
            results.append(result)
            self.journal.save()
        manifest["status"] = "finished" if any(r.status in ("done", "failed") for r in results) else "nothing-changed"
        self.journal.save()
        return results

    def _run_one(self, planned: PlannedStep, record: dict[str, Any]) -> StepResult:
        step = planned.step
        try:  # the state may have moved on since planning (an earlier step): authorize again
            if step.argv:
                argv = authorize(step, self.target, self.environ)
            else:
                source, destination = authorize_move(step, self.target)
        except Refused as exc:
            record.update(status="skipped", reason=str(exc))
            return StepResult(planned.number, "skipped", str(exc))
        record["status"] = "running"
        if not step.argv:
            record["moved"] = {"from": source, "to": destination, "tree": tree(source)}
            self.journal.save()
            try:
                shutil.move(source, destination)
            except OSError as exc:
                record["status"] = "failed"
                return StepResult(planned.number, "failed", f"cannot move {source}: {exc.strerror or exc}")
            record["status"] = "done"
            return StepResult(planned.number, "done", f"moved {source} to {destination}")
        snapshot = None
        try:
            if step.tool in ("pip", "uv"):
                snapshot = PackageSnapshot(self.journal, planned.number, self.target, self.dirs, self.environ)
                record["package"] = snapshot.before(step.tool, argv)
            elif step.tool in CONDA_TOOLS:
                record["conda"] = {"before": conda_records(self.target.prefix)}
        except OSError as exc:  # no copy, no step: what cannot be put back is not changed
            record.pop("package", None)
            record.update(status="skipped", reason=f"cannot keep a copy first: {exc}")
            return StepResult(planned.number, "skipped", record["reason"])
        self.journal.save()
        from envdoctor.process import run_bounded

        run = run_bounded(argv, STEP_TIMEOUT_S, env=self.environ)
        record["returncode"] = run.returncode
        record["output"] = (run.stdout + run.stderr)[-OUTPUT_TAIL:]
        if snapshot is not None:
            record["package"].update(snapshot.after(record["package"]))
        elif "conda" in record:
            after = conda_records(self.target.prefix)
            record["conda"].update(after=after, inverse=conda_inverse(
                step.argv[0], str(self.target.prefix), record["conda"]["before"], after))
        record["status"] = "done" if run.ok else "failed"
        detail = "exited with status 0" if run.ok else run.describe_failure()
        return StepResult(planned.number, record["status"], detail)


def recheck(config: Any, plan: Plan, before: Report, run_check: Callable[[Any], Report]) -> Outcome:
    """Run the affected rules again on fresh facts and sort the planned findings into fixed and remaining."""
    fresh = run_check(config.with_overrides(select=plan.rules, ignore=()))
    before_same_rules = [f for f in before.findings if f.rule in plan.rules]
    return compare_findings(plan.planned, before_same_rules, fresh.findings)
