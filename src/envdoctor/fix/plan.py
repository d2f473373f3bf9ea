"""The plan: from a fresh check's findings to the steps `envdoctor fix` would run.

Each finding with `fix_steps` contributes its steps in order; each step is
authorized against the target (envdoctor.fix.tools) or marked skipped with
the reason. A finding's steps stand or fall together: when one cannot run,
the other ones of the same finding are skipped too, since half a fix (an
uninstall without its reinstall) leaves things worse, so none of them runs
(earlier ones included). A step identical to one already planned runs once.
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from envdoctor.fix.tools import Refused, Target, authorize, authorize_move
from envdoctor.model import Finding, FixStep, Report


@dataclass(frozen=True)
class PlannedStep:
    """One line of the plan."""

    number: int
    rule: str
    finding: str  # the finding's message: what the step should change
    step: FixStep
    argv: tuple[str, ...] = ()  # the command as it will run (argv[0] found on PATH or in the prefix)
    skip: str | None = None  # why it will not run

    @property
    def runs(self) -> bool:
        return self.skip is None

    def describe(self) -> str:
        """The command or the move, as one readable line."""
        import shlex

        if self.step.argv:
            return " ".join(shlex.quote(a) for a in (self.argv or self.step.argv))
        return f"move {shlex.quote(self.step.move or '')} -> {shlex.quote(self.step.to or '')}"

    def to_dict(self) -> dict[str, object]:
        return {"step": self.number, "rule": self.rule, "finding": self.finding, **self.step.to_dict(),
                "run_argv": list(self.argv) if self.argv else None,
                "action": "run" if self.runs else "skip", "reason": self.skip}


@dataclass
class Plan:
    """The steps, the findings they should clear, and the findings with no step at all."""

    target: dict[str, object]
    steps: list[PlannedStep] = field(default_factory=list)
    planned: list[Finding] = field(default_factory=list)
    without_steps: list[Finding] = field(default_factory=list)

    @property
    def runnable(self) -> list[PlannedStep]:
        return [s for s in self.steps if s.runs]

    @property
    def rules(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(f.rule for f in self.planned))

    def to_dict(self) -> dict[str, object]:
        return {"steps": [s.to_dict() for s in self.steps],
                "findings": [f.to_dict() for f in self.planned],
                "findings_without_steps": [f.to_dict() for f in self.without_steps]}


def make_plan(report: Report, environ: Mapping[str, str] | None = None) -> Plan:
    """Authorize every step of every finding in `report` against its target."""
    environ = os.environ if environ is None else environ
    target = Target.from_report_target(report.target)
    plan = Plan(target=dict(report.target))
    seen: dict[FixStep, int] = {}
    for finding in report.findings:
        if not finding.fix_steps:
            plan.without_steps.append(finding)
            continue
        plan.planned.append(finding)
        first = len(plan.steps) + 1
        steps = list(_authorize_fix(finding, first, target, environ, seen))
        refused = next((s.number for s in steps if s.skip and not s.skip.startswith("same as")), None)
        for planned in steps:
            if refused is not None and planned.skip is None:
                planned = dataclasses.replace(planned, argv=(), skip=f"another step of this fix cannot run (step {refused})")
            elif refused is None and planned.skip is None:
                seen[planned.step] = planned.number
            plan.steps.append(planned)
    return plan


def _authorize_fix(finding: Finding, first: int, target: Target, environ: Mapping[str, str],
                   seen: Mapping[FixStep, int]) -> Iterator[PlannedStep]:
    """One finding's steps, each authorized on its own (a step already planned runs once)."""
    ensured: set[str] = set()  # interpreters an earlier step gives pip (`python -m ensurepip`)
    for number, step in enumerate(finding.fix_steps, start=first):
        if step in seen:
            yield PlannedStep(number, finding.rule, finding.message, step, skip=f"same as step {seen[step]}")
            continue
        try:
            if step.argv:
                argv = authorize(step, target, environ, pip_coming=step.argv[0] in ensured)
                if step.tool == "pip" and list(step.argv[1:3]) == ["-m", "ensurepip"]:
                    ensured.add(step.argv[0])
            else:
                authorize_move(step, target)
                argv = ()
        except Refused as exc:
            yield PlannedStep(number, finding.rule, finding.message, step, skip=str(exc))
            continue
        yield PlannedStep(number, finding.rule, finding.message, step, argv)
