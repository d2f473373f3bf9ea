"""Running a plan: the before-state first, then each step, then verification and a fresh check.

The manifest lists every step before anything changes. Before the first step, every root a
step's tool may write is listed and kept whole in the journal (envdoctor.fix.state); the
manifest is saved again before and after each step (status planned → running → done /
failed), so a fix killed anywhere can still be undone to that before-state. Steps write no
bytecode into the environment (`PYTHONDONTWRITEBYTECODE`, pip's `--no-compile`). Every
command is an argv list run without a shell, with a time limit.
"""
from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from envdoctor.fix.journal import Journal, JournalError, boundary, tree
from envdoctor.fix.plan import Plan, PlannedStep
from envdoctor.fix.state import take_after, take_before, write_roots
from envdoctor.fix.tools import Refused, Target, authorize, authorize_move, package_arguments
from envdoctor.model import Finding, Report

if TYPE_CHECKING:  # pragma: no cover
    from envdoctor.config import Config

#: Seconds one package command may take (a large reinstall over a slow disk included).
STEP_TIMEOUT_S = 900.0
#: Characters of a command's output kept in the journal and the result.
OUTPUT_TAIL = 2000


@dataclass
class StepResult:
    number: int
    status: str  # done, failed, skipped, not-run
    detail: str = ""

    def to_dict(self) -> dict[str, object]:
        return {"step": self.number, "status": self.status, "detail": self.detail}


@dataclass
class Outcome:
    """What the re-check says about the planned findings."""

    fixed: list[Finding] = field(default_factory=list)
    remaining: list[Finding] = field(default_factory=list)
    new: list[Finding] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {"fixed": [f.to_dict() for f in self.fixed], "remaining": [f.to_dict() for f in self.remaining],
                "new": [f.to_dict() for f in self.new]}


def finding_identity(finding: Finding) -> tuple[object, ...]:
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


def step_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The steps' environment: no bytecode written into the patient by pip, uv or the Python they start."""
    env = dict(environ)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.pop("UV_COMPILE_BYTECODE", None)
    env.pop("PIP_COMPILE", None)
    return env


def without_bytecode(tool: str, argv: tuple[str, ...]) -> tuple[str, ...]:
    """pip install writes `.pyc` files unless told not to: add `--no-compile` right after the verb."""
    if tool != "pip" or package_arguments(tool, argv)[0] != "install" or "--no-compile" in argv:
        return argv
    at = argv.index("install", 3) + 1
    return (*argv[:at], "--no-compile", *argv[at:])


def metadata_folders(roots: list[str]) -> list[str]:
    """Every dist-info / egg-info directly in a site folder under the roots (what a package step changes)."""
    found = []
    for root in roots:
        for folder, dirs, _files in os.walk(root):
            names = [d for d in dirs if d.endswith((".dist-info", ".egg-info"))]
            found += [os.path.join(folder, d) for d in names]
            dirs[:] = [d for d in dirs if d not in names and d not in ("__pycache__", "envs", "pkgs")
                       and not os.path.islink(os.path.join(folder, d))]
    return sorted(found)


class Executor:
    """Runs the runnable steps of one plan into one journal."""

    def __init__(self, plan: Plan, journal: Journal, environ: Mapping[str, str] | None = None) -> None:
        self.plan, self.journal = plan, journal
        self.environ = step_environment(os.environ if environ is None else environ)
        self.target = Target.from_report_target(plan.target)
        self.roots = write_roots(plan.target)

    def run(self) -> list[StepResult]:
        manifest = self.journal.manifest
        manifest["steps"] = [{**s.to_dict(), "status": "planned" if s.runs else "skipped"} for s in self.plan.steps]
        self.journal.save()
        if any(s.runs for s in self.plan.steps):
            self._keep_before()
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
            boundary(f"step {planned.number} {result.status}")
        manifest["status"] = "finished" if any(r.status in ("done", "failed") for r in results) else "nothing-changed"
        if manifest["status"] == "finished":
            self.record_after()
        self.journal.save()
        boundary("after-state recorded")
        return results

    def _keep_before(self) -> None:
        """The whole before-state of the roots into the journal, before anything changes — or no step runs."""
        try:
            self.journal.manifest["before"] = take_before(self.journal, self.roots)
        except OSError as exc:
            self.journal.manifest["status"] = "nothing-changed"
            try:
                self.journal.save()
            finally:
                raise JournalError(f"cannot keep the before-state of {', '.join(self.roots)} in {self.journal.path}: "
                                   f"{exc.strerror or exc}; nothing was changed") from None
        self.journal.save()  # from here on, an interrupted fix is undone to exactly this state
        boundary("before-state kept")

    def record_after(self) -> None:
        """What the fix left in the roots: undo refuses to overwrite what someone changed since."""
        state = self.journal.manifest.get("before")
        if state is not None:
            self.journal.manifest["after"] = take_after(self.journal, state)

    def _run_one(self, planned: PlannedStep, record: dict[str, object]) -> StepResult:
        step = planned.step
        try:  # the state may have moved on since planning (an earlier step): authorize again
            if step.argv:
                argv = without_bytecode(step.tool, authorize(step, self.target, self.environ))
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
        record["ran"] = list(argv)
        before = metadata_folders(self.roots)
        self.journal.save()
        from envdoctor.process import run_bounded

        run = run_bounded(argv, STEP_TIMEOUT_S, env=self.environ)
        record["returncode"] = run.returncode
        record["output"] = (run.stdout + run.stderr)[-OUTPUT_TAIL:]
        after = metadata_folders(self.roots)
        # The inverse is the before-state the journal kept: these are what it puts back and takes away.
        record["distributions"] = {"removed": sorted(set(before) - set(after)), "added": sorted(set(after) - set(before))}
        status = record["status"] = "done" if run.ok else "failed"
        detail = "exited with status 0" if run.ok else run.describe_failure()
        return StepResult(planned.number, status, detail)


def recheck(config: Config, plan: Plan, before: Report, run_check: Callable[[Config], Report]) -> Outcome:
    """Run the affected rules again on fresh facts and sort the planned findings into fixed and remaining."""
    fresh = run_check(config.with_overrides(select=plan.rules, ignore=()))
    before_same_rules = [f for f in before.findings if f.rule in plan.rules]
    return compare_findings(plan.planned, before_same_rules, fresh.findings)
