"""The verdict: is this environment sound? Decided once, here, for every format.

The engine calls `decide` on the assembled Report and the answer travels in
the JSON report as `verdict`; text, Markdown, GitHub and SARIF only render
it, so no two formats can disagree on whether an environment is healthy.

Each area of the checklist covers the rule families listed in `AREAS` and
the facts sections they read. An area is, in this order of precedence:

- `problem`: a finding of the area at warning or error (info findings are
  notes, not problems: an info-only area is `ok`, its worst severity `info`);
- `not-checked`, cause `failed`: a probe of its sections or one of its rules
  failed, or (the loader) the smoke test was skipped as a whole;
- `not-checked`, cause `not-selected`: none of its rules was selected;
- `not-applicable`: its primary facts section says so (`"applicable": false`
  with a `not_applicable_reason`: the hook a probe uses when its fact cannot
  exist on this platform — see `envdoctor.facts.not_applicable`);
- `not-checked`, cause `not-run` (the smoke test did not run: --no-loader) or
  `no-facts` (a report that holds none of its sections, e.g. a fleet view);
- `ok`: every selected rule of the area ran and found nothing worse than info.

The result is `problems` when any finding is at warning or above, else
`unchecked` when any area failed (nothing found is not an all-clear when
not everything could be looked at) or a rule could not run, else `ok`.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from envdoctor.model import AreaCause, AreaDetail, AreaStatus, Finding, Report, Verdict, VerdictResult


@dataclass(frozen=True)
class Area:
    """One line of the checklist: the rule families it covers and the facts sections they read."""

    key: str
    families: tuple[str, ...]
    #: The sections whose probe failing leaves the area unchecked; the first says whether it applies.
    sections: tuple[str, ...]


#: The areas of the checklist, in the order every format shows them.
AREAS: tuple[Area, ...] = (
    Area("packages", ("PKG",), ("packages", "target")),
    Area("channels", ("CHN",), ("packages", "target")),
    Area("system", ("SYS",), ("system",)),
    Area("spawn", ("SPW",), ("scripts",)),
    Area("storage", ("DSK",), ("storage",)),
    Area("gpu", ("GPU",), ("gpu", "torch")),
    Area("loader", ("DL",), ("loader",)),
)
#: The fleet view's own area (`envdoctor compare`, `check --distributed`): a fleet report's checklist is
#: this area and the node areas in which the nodes found something (under --distributed).
FLEET_AREA = Area("fleet", ("FLT",), ("fleet",))
Level = Literal["error", "warning", "info"]
_WORST_FIRST: tuple[Level, ...] = ("error", "warning", "info")


def family(rule_id: str) -> str:
    return rule_id.rstrip("0123456789")


def decide(report: Report) -> Verdict:
    """The overall result and the per-area checklist of an assembled report (findings, errors, facts,
    loader and `checked` set)."""
    fleet = report.facts.get("fleet") is not None
    every = (*AREAS, FLEET_AREA) if fleet else AREAS
    by_family = {fam: area.key for area in every for fam in area.families}
    found: dict[str, list[Finding]] = {area.key: [] for area in every}
    for finding in report.findings:
        key = by_family.get(family(finding.rule))
        if key is not None:
            found[key].append(finding)
    # A fleet view checks the fleet; a node's area appears there only with what the nodes found in it.
    areas = [FLEET_AREA, *(a for a in AREAS if found[a.key])] if fleet else list(AREAS)
    details = {area.key: _detail(report, area, found[area.key]) for area in areas}
    statuses = {key: _status(detail) for key, detail in details.items()}
    worst = _worst(report.findings)
    failed = [key for key, detail in details.items() if detail["cause"] == "failed"]
    rule_crashed = any(e.get("rule") and not e.get("probe") for e in report.errors)
    result: VerdictResult
    if worst in ("error", "warning"):
        result = "problems"
    elif failed or report.not_checked() or rule_crashed:
        result = "unchecked"
    else:
        result = "ok"
    return {"result": result, "worst": worst, "areas": statuses, "unchecked": failed, "details": details}


def _worst(findings: Iterable[Finding]) -> Level | None:
    levels = {f.severity._value_ for f in findings}  # `_value_`: see Severity.rank
    return next((level for level in _WORST_FIRST if level in levels), None)


def _detail(report: Report, area: Area, found: list[Finding]) -> AreaDetail:
    rules = list(dict.fromkeys(f.rule for f in found))
    detail: AreaDetail = {"worst": _worst(found), "findings": len(found), "rules": rules,
                          "cause": None, "reason": None}
    if detail["worst"] in ("error", "warning"):
        return detail
    cause, reason = _not_checked(report, area)
    if cause is None and not found:
        cause, reason = _not_applicable(report, area)
    detail["cause"], detail["reason"] = cause, reason
    return detail


def _not_checked(report: Report, area: Area) -> tuple[AreaCause | None, str | None]:
    for error in report.errors:
        if error.get("probe") in area.sections:
            return "failed", f"{error['probe']} probe failed: {error.get('message', '')}"
        rule = error.get("rule")
        if rule and family(str(rule)) in area.families:
            return "failed", f"{rule}: {error.get('message', '')}"
    if report.checked is not None and not any(family(r) in area.families for r in report.checked):
        return "not-selected", "not selected"
    if area.key == "loader":
        if report.loop is not None and not report.loader:
            return None, None  # `envdoctor run`: the user's own loop was measured instead (DL009)
        if not report.loader:
            return "not-run", "the smoke test did not run"
        skipped = next((s for s in report.loader.get("skipped") or [] if s.get("what") == "smoke test"), None)
        if skipped is not None:
            return "failed", f"the smoke test was skipped: {skipped.get('reason')}"
    elif report.checked is None and area.key != "fleet" and not any(s in report.facts for s in area.sections):
        return "no-facts", "no facts gathered"
    return None, None


def _not_applicable(report: Report, area: Area) -> tuple[AreaCause | None, str | None]:
    primary = report.loader if area.key == "loader" else report.facts.get(area.sections[0])
    if isinstance(primary, Mapping) and primary.get("applicable") is False:
        return "not-applicable", str(primary.get("not_applicable_reason") or "not on this platform")
    return None, None


def _status(detail: AreaDetail) -> AreaStatus:
    if detail["worst"] in ("error", "warning"):
        return "problem"
    if detail["cause"] == "not-applicable":
        return "not-applicable"
    if detail["cause"] is not None:
        return "not-checked"
    return "ok"


def settle(report: Report) -> Report:
    """The report with its verdict decided, when it has none yet (a saved report from before `verdict`)."""
    if report.verdict is None:
        report.verdict = decide(report)
    return report

