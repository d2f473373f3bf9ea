"""Rules: pure functions from Facts to Hits, one module or package per family.

    channels.py (CHN)  storage.py (DSK)  gpu.py (GPU)
    packages/ (PKG)    system/ (SYS)     spawn/ (SPW)   loader/ (DL)   fleet/ (FLT)


A rule function takes the `Facts` snapshot and yields `Hit`s. It never
prints, never shells out and never gathers anything itself: it reads
`facts[section]`. The engine turns each Hit into a `Finding`, adding the
rule's id, name and severity from the catalog (catalog/<FAMILY>.toml), so
metadata lives in one place. Each family module (or family package's
`__init__`) has an explicit `RULES = {"ID": function}` table, which the catalog
file of its family names. Helpers that write fixes are in `envdoctor.remedies`.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from envdoctor.model import FixStep, Location, Severity


@dataclass(frozen=True)
class Hit:
    """What a rule function reports; the engine adds id, name and severity."""

    message: str
    evidence: Mapping[str, object] = field(default_factory=dict)
    fix: str = ""
    location: Location | None = None
    #: Set only when this hit is worse (or milder) than the rule's default.
    severity: Severity | None = None
    #: The fix as data (what `envdoctor fix` runs); `fix` stays the human text.
    fix_steps: tuple[FixStep, ...] = ()
