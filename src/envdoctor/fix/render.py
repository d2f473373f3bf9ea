"""How a fix shows itself: the plan, each step's result and the re-check, as text or JSON.

The JSON shape (documented in docs/fix.md, "JSON output"):
`{"fix_version": 1, "target": {...}, "dry_run": bool, "journal": path|null,
"plan": {"steps": [...], "findings": [...], "findings_without_steps": [...]},
"results": [{"step", "status", "detail"}], "verification": {"ok", "problems", "removed", "imported"}|null,
"outcome": {"fixed", "remaining", "new"}|null,
"exit_code": 0|1|2, "message": str}`.
"""
from __future__ import annotations

import json

from envdoctor.fix.execute import Outcome, StepResult
from envdoctor.fix.plan import Plan
from envdoctor.fix.undo import Candidate, UndoResult
from envdoctor.fix.verify import Verification

FIX_JSON_VERSION = 1


def _clean(text: str) -> str:
    """One line, no control characters from metadata reaching the terminal."""
    return "".join(ch if ch.isprintable() else "?" for ch in " ".join(str(text).split()))


def plan_text(plan: Plan) -> list[str]:
    """The plan, one block per finding: the finding it should clear, then its steps, one line each."""
    lines = [f"envdoctor fix: {plan.target.get('prefix')} ({plan.target.get('kind')})"]
    if not plan.steps and not plan.without_steps:
        lines.append("  no finding to fix")
    last = None
    for step in plan.steps:
        if (step.rule, step.finding) != last:
            lines.append(f"  {step.rule} {_clean(step.finding)}")
            last = (step.rule, step.finding)
        mark = "run " if step.runs else "skip"
        lines.append(f"    {step.number:>2}. [{mark}] {step.step.tool}: {_clean(step.describe())}")
        if step.skip:
            lines.append(f"        not run: {_clean(step.skip)}")
    for finding in plan.without_steps:
        lines.append(f"  {finding.rule} {_clean(finding.message)}")
        # Advice (a shell limit, a docker flag, a driver): not automatic, so say what the user has to do.
        lines.append(f"        not automatic, left to you: {_clean(finding.fix)}" if finding.fix else
                     "        not automatic: see `envdoctor check` for what to do")
    return lines


def results_text(results: list[StepResult], outcome: Outcome | None, journal: str | None,
                 verification: Verification | None = None) -> list[str]:
    lines = ["ran:"] if results else []
    for result in results:
        lines.append(f"    {result.number:>2}. {result.status}: {_clean(result.detail)}")
    if verification is not None:
        if verification.removed:
            lines.append(f"verified: moved {len(verification.removed)} left-over file(s) of the removed version "
                         f"into the journal (e.g. {_clean(verification.removed[0])})")
        for module, path in sorted(verification.imported.items()):
            lines.append(f"verified: `import {module}` loads {_clean(path)}")
        lines += [f"verification failed: {_clean(p)}" for p in verification.problems]
    if journal:
        lines.append(f"journal: {journal} (undo with `envdoctor fix --undo`)")
    if outcome is not None:
        lines.append("checked again:")
        for label, items in (("fixed", outcome.fixed), ("still there", outcome.remaining), ("new", outcome.new)):
            for finding in items:
                lines.append(f"  {label}: {finding.rule} {_clean(finding.message)}")
    return lines


def fix_json(plan: Plan, *, dry_run: bool, journal: str | None, results: list[StepResult],
             outcome: Outcome | None, exit_code: int, message: str, verification: Verification | None = None) -> str:
    data: dict[str, object] = {
        "fix_version": FIX_JSON_VERSION,
        "target": plan.target,
        "dry_run": dry_run,
        "journal": journal,
        "plan": plan.to_dict(),
        "results": [r.to_dict() for r in results],
        "verification": verification.to_dict() if verification is not None else None,
        "outcome": outcome.to_dict() if outcome is not None else None,
        "exit_code": exit_code,
        "message": message,
    }
    return json.dumps(data, indent=2, default=str) + "\n"


def journals_text(prefix: object, found: list[Candidate]) -> list[str]:
    """`fix --undo --list`: the journals undo of `prefix` considers, newest first, and what it makes of each."""
    lines = [f"envdoctor fix --undo --list: journals of {prefix}, newest first"]
    if not found:
        lines.append("  none")
    for candidate in found:
        lines.append(f"  {candidate.path.name}  {_clean(candidate.status or '?')}  {_clean(candidate.verdict)}")
    chosen = next((c for c in found if c.verdict == "undo" or c.verdict.startswith("refused")), None)
    lines.append(f"`envdoctor fix --undo` would take {chosen.path}" if chosen is not None and chosen.verdict == "undo"
                 else f"`envdoctor fix --undo` would refuse {chosen.path}" if chosen is not None
                 else "`envdoctor fix --undo` would find nothing to undo")
    return lines


def undo_text(result: UndoResult) -> list[str]:
    lines = [f"envdoctor fix --undo: {result.journal or 'no journal'}"]
    lines += [f"  note: {_clean(n)}" for n in result.notes]
    if result.resumed:
        lines.append(f"  {_clean(result.resumed)}")
    if result.refused:
        lines.append("refused, nothing was changed:")
        lines += [f"  {_clean(r)}" for r in result.refused]
    lines += [f"  {_clean(r)}" for r in result.restored]
    lines += [f"  problem: {_clean(p)}" for p in result.problems]
    if result.stopped:
        lines.append("not finished: run `envdoctor fix --undo` again to finish it")
    elif result.problems:
        lines.append("not restored: the paths above differ from before the fix")
    return lines
