"""The public types every part of envdoctor shares: Severity, Location, Finding, Report.

Rules produce Findings, the engine collects them into one Report, and every
formatter (text, json, markdown, sarif) renders that Report. Nothing here
imports anything heavy.
"""
from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

SCHEMA_VERSION = 1


class Severity(str, enum.Enum):
    """How bad a finding is. Ordered: info < warning < error."""

    INFO = "info"
    WARNING = "warning"
    ERROR = "error"

    # `_value_` rather than `value`: the enum property costs a Python call, which over a saved report of a
    # million findings (rank, counts, JSON) was seconds.
    @property
    def rank(self) -> int:
        return _RANK[self._value_]

    @classmethod
    def parse(cls, value: str | Severity) -> Severity:
        if isinstance(value, Severity):
            return value
        known = _BY_VALUE.get(value) if isinstance(value, str) else None
        if known is not None:
            return known
        try:
            return cls(str(value).lower())
        except ValueError:
            raise ValueError(
                f"unknown severity {value!r} (expected one of: error, warning, info)"
            ) from None

    def __str__(self) -> str:
        return self.value


_RANK = {"info": 1, "warning": 2, "error": 3}
_BY_VALUE = {member._value_: member for member in Severity}

#: The values `--fail-on` accepts, mapped to the lowest severity that fails.
FAIL_ON_CHOICES = ("error", "warning", "info", "never")
#: The values `--format` accepts: one formatter module each, `envdoctor.report.<format>` (report.FORMAT_MODULES).
FORMATS: tuple[str, ...] = ("text", "json", "markdown", "sarif", "github")


@dataclass(frozen=True)
class Location:
    """Where in a file a finding points (1-based line, 1-based column; for a notebook, the 1-based cell
    and the line within it)."""

    path: str
    line: int
    column: int = 1
    cell: int | None = None

    def to_dict(self) -> dict[str, object]:
        where: dict[str, object] = {"path": self.path, "line": self.line, "column": self.column}
        if self.cell is not None:
            where["cell"] = self.cell
        return where


#: The tools a fix step may name: who owns the files the step changes.
FIX_TOOLS = ("pip", "uv", "conda", "mamba", "micromamba", "pixi", "apt", "dnf", "file")


@dataclass(frozen=True)
class FixStep:
    """One step of a fix, as data: a command (argv, never a shell string) or a file move.

    `envdoctor fix` runs these; `Finding.fix` stays the human text. Exactly one of
    `argv` or `move`/`to` is set. `tool` names who owns the files the step changes
    (pip, uv, conda, pixi, apt, dnf; `file` for a move).
    """

    tool: str
    argv: tuple[str, ...] = ()
    move: str | None = None
    to: str | None = None

    def __post_init__(self) -> None:
        if self.tool not in FIX_TOOLS:
            raise ValueError(f"unknown fix tool {self.tool!r} (expected one of {', '.join(FIX_TOOLS)})")
        if bool(self.argv) == (self.move is not None):
            raise ValueError("a fix step is either a command (argv) or a file move (move, to)")
        if (self.move is None) != (self.to is None):
            raise ValueError("a file move needs both `move` and `to`")

    @classmethod
    def command(cls, tool: str, *argv: str) -> FixStep:
        return cls(tool=tool, argv=tuple(str(a) for a in argv))

    @classmethod
    def file_move(cls, source: str, destination: str) -> FixStep:
        return cls(tool="file", move=str(source), to=str(destination))

    def to_dict(self) -> dict[str, object]:
        if self.argv:
            return {"tool": self.tool, "argv": list(self.argv)}
        return {"tool": self.tool, "move": self.move, "to": self.to}


@dataclass(frozen=True)
class Finding:
    """One thing a rule found: what, the evidence, and the exact fix."""

    rule: str
    name: str
    severity: Severity
    message: str
    evidence: Mapping[str, Any] = field(default_factory=dict)
    fix: str = ""
    location: Location | None = None
    fix_steps: tuple[FixStep, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {
            "rule": self.rule,
            "name": self.name,
            "severity": self.severity._value_,
            "message": self.message,
            "evidence": dict(self.evidence),
            "fix": self.fix,
            "location": self.location.to_dict() if self.location else None,
            "fix_steps": [step.to_dict() for step in self.fix_steps],
        }


#: One area of the checklist: found a problem, checked and fine, not checked, or not applicable here.
AreaStatus = Literal["ok", "problem", "not-checked", "not-applicable"]
#: Why an area is not `ok` without a problem: what `not-checked` (or `not-applicable`) means there.
AreaCause = Literal["failed", "not-selected", "not-run", "no-facts", "not-applicable"]
#: The whole environment: problems found, nothing found but not everything checked, or sound.
VerdictResult = Literal["ok", "problems", "unchecked"]


class AreaDetail(TypedDict):
    """What the verdict saw in one area, so every format can say it the same way."""

    #: The worst severity among the area's findings (info findings leave an area `ok`).
    worst: Literal["error", "warning", "info"] | None
    findings: int
    #: The ids of the rules that found something, in report order.
    rules: list[str]
    cause: AreaCause | None
    #: Why the area was not checked, or does not apply (human text), else None.
    reason: str | None


class Verdict(TypedDict):
    """The overall result and the per-area checklist, decided once by `envdoctor.verdict.decide`."""

    result: VerdictResult
    worst: Literal["error", "warning", "info"] | None
    areas: dict[str, AreaStatus]
    #: The areas left unchecked because a probe or a rule failed (what makes the result `unchecked`).
    unchecked: list[str]
    details: dict[str, AreaDetail]


#: What a format shows for a report assembled without a verdict (not by the engine): nothing decided.
NO_VERDICT: Verdict = {"result": "unchecked", "worst": None, "areas": {}, "unchecked": [], "details": {}}


@dataclass
class Report:
    """Everything one run of envdoctor found, in the shape of the JSON contract."""

    tool: dict[str, Any]
    generated_at: str
    host: dict[str, Any]
    target: dict[str, Any]
    facts: dict[str, Any]
    findings: list[Finding]
    loader: dict[str, Any] | None = None
    errors: list[dict[str, Any]] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION
    #: The ids of the rules that ran (None when unknown, e.g. a fleet view): what "✓" covers.
    checked: list[str] | None = None
    #: The overall result and the checklist, set by the engine (`envdoctor.verdict`); formats only render it.
    verdict: Verdict | None = None
    #: What `envdoctor run` measured in the user's own training loop, with its verdict; None otherwise.
    loop: dict[str, Any] | None = None

    @property
    def summary(self) -> dict[str, int]:
        counts = {"error": 0, "warning": 0, "info": 0}
        for finding in self.findings:
            counts[finding.severity._value_] += 1
        return counts

    def by_rule(self, rule_id: str) -> list[Finding]:
        return [f for f in self.findings if f.rule == rule_id]

    def not_checked(self) -> dict[str, list[str]]:
        """The selected rules that did not run because a probe they read failed: {probe: [rule, ...]}."""
        skipped: dict[str, list[str]] = {}
        for error in self.errors:
            if error.get("rule") and error.get("probe"):
                skipped.setdefault(str(error["probe"]), []).append(str(error["rule"]))
        return skipped

    def left_unchecked(self) -> bool:
        """Whether something the report should have checked could not be (the verdict's "not checked: …", cause
        `failed`): a selected rule whose facts could not be gathered, or the smoke test skipped as a whole. A
        rule that crashed is not counted: it is listed under `errors` and never changes the exit code on its own.
        """
        if self.not_checked():
            return True
        if self.verdict is None:
            return False
        crashed = {str(e["rule"]) for e in self.errors if e.get("rule") and not e.get("probe")}
        for area in self.verdict["unchecked"]:
            detail = self.verdict["details"].get(area)
            reason = str(detail["reason"] or "") if detail else ""
            if reason.split(":", 1)[0] not in crashed:  # a crashed rule's area reads "RULE: message"
                return True
        return False

    def fails(self, fail_on: str = "error") -> bool:
        """What `preflight()` raises on: a finding at or above `fail_on`, or a selected rule that could not run.
        (A smoke test skipped as a whole, say in a training process, does not stop training.)"""
        if fail_on == "never":
            return False
        threshold = Severity.parse(fail_on).rank
        return bool(self.not_checked()) or any(f.severity.rank >= threshold for f in self.findings)

    def exit_code(self, fail_on: str = "error") -> int:
        """The command line's: 0 when nothing reaches `fail_on`; 1 when something does, or something could not
        be checked (the verdict's "not checked", docs/reference.md#exit-codes)."""
        if fail_on == "never":
            return 0
        return 1 if self.fails(fail_on) or self.left_unchecked() else 0

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Report:
        """A Report back from its JSON form (schema version 1), e.g. to render a saved report.

        Raises ValueError (naming the field) when `data` is not such a report.
        """
        try:
            if data.get("schema_version") != SCHEMA_VERSION:
                raise ValueError(f"schema_version {data.get('schema_version')!r} is not {SCHEMA_VERSION}")
            findings = [_finding_from_dict(item) for item in data["findings"]]
            return cls(tool=dict(data["tool"]), generated_at=str(data["generated_at"]), host=dict(data["host"]),
                       target=dict(data["target"]), facts=dict(data["facts"]), findings=findings,
                       loader=dict(data["loader"]) if data.get("loader") else None,
                       errors=[dict(e) for e in data.get("errors") or []],
                       checked=[str(r) for r in data["checked"]] if data.get("checked") is not None else None,
                       # Saved before the verdict was carried, or not one this version renders: none (then
                       # `envdoctor.verdict.settle` decides it).
                       verdict=_verdict_from_dict(data["verdict"]) if data.get("verdict") else None,
                       loop=dict(data["loop"]) if data.get("loop") else None)
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"not an envdoctor report: {type(exc).__name__}: {exc}") from None

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "tool": self.tool,
            "generated_at": self.generated_at,
            "host": self.host,
            "target": self.target,
            "facts": self.facts,
            "findings": [f.to_dict() for f in self.findings],
            "loader": self.loader,
            "errors": self.errors,
            "summary": self.summary,
            "checked": self.checked,
            "verdict": self.verdict,
            "loop": self.loop,
        }


_RESULTS = ("ok", "problems", "unchecked")
_STATUSES = ("ok", "problem", "not-checked", "not-applicable")
_CAUSES = (None, "failed", "not-selected", "not-run", "no-facts", "not-applicable")
_LEVELS = (None, "error", "warning", "info")
#: What an area's name looks like (`packages`, `gpu`, …): anything else in a saved report is not a verdict.
_AREA_NAME = re.compile(r"[a-z][a-z0-9-]{0,39}")


# complexity: 24 — a saved verdict is validated field by field (result, worst, areas, details); any mismatch means it
#   is decided again.
def _verdict_from_dict(data: Any) -> Verdict | None:
    """A saved verdict, or None when it is not one this version can render (then it is decided again)."""
    try:
        areas = {str(area): status for area, status in dict(data["areas"]).items()}
        details = {}
        for area, d in dict(data["details"]).items():
            details[str(area)] = AreaDetail(worst=d.get("worst"), findings=int(d.get("findings") or 0),
                                            rules=[str(r) for r in d.get("rules") or []], cause=d.get("cause"),
                                            reason=None if d.get("reason") is None else str(d["reason"]))
        verdict = Verdict(result=data["result"], worst=data.get("worst"), areas=areas,
                          unchecked=[str(a) for a in data.get("unchecked") or []], details=details)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    if (verdict["result"] not in _RESULTS or verdict["worst"] not in _LEVELS or set(areas) != set(details)
            or not all(_AREA_NAME.fullmatch(area) for area in areas)
            or not set(verdict["unchecked"]) <= set(areas)
            or any(not _AREA_NAME.fullmatch(rule.lower()) for d in details.values() for rule in d["rules"])
            or any(status not in _STATUSES for status in areas.values())
            or any(d["cause"] not in _CAUSES or d["worst"] not in _LEVELS for d in details.values())):
        return None
    return verdict


def _finding_from_dict(data: Mapping[str, Any]) -> Finding:
    loc = data.get("location")
    steps = []
    for step in data.get("fix_steps") or []:
        if step.get("argv"):
            steps.append(FixStep.command(step["tool"], *step["argv"]))
        else:
            steps.append(FixStep.file_move(step["move"], step["to"]))
    return Finding(
        rule=str(data["rule"]), name=str(data["name"]), severity=Severity.parse(data["severity"]),
        message=str(data["message"]), evidence=dict(data.get("evidence") or {}), fix=str(data.get("fix") or ""),
        location=Location(str(loc["path"]), int(loc["line"]), int(loc.get("column") or 1)) if loc else None,
        fix_steps=tuple(steps),
    )
