"""How a facts section says it does not apply on this platform.

A fact that cannot exist on a platform (NVML on macOS, a rotational flag
where the kernel exposes none) is "not applicable", never an error. A probe
says so by returning its section with `"applicable": False` and a
`not_applicable_reason` (mix `Applicability` into the section's TypedDict,
and build the keys with `not_applicable`); the verdict
(`envdoctor.verdict`) then shows the area the section serves as
`not-applicable` instead of ✓, unless a rule found something there all the
same. Sections without the key apply.
"""
from __future__ import annotations

from typing import TypedDict


class Applicability(TypedDict, total=False):
    """The keys a section carries when its facts cannot exist here."""

    #: False when the section's facts cannot exist on this platform; absent means it applies.
    applicable: bool
    #: Why not, for the checklist ("no NVML on macOS").
    not_applicable_reason: str


def not_applicable(reason: str) -> Applicability:
    """The keys to merge into a section whose facts cannot exist on this platform."""
    return {"applicable": False, "not_applicable_reason": reason}
