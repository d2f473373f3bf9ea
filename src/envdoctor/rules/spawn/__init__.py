"""SPW rules: starting worker processes safely under spawn and forkserver.

guard (SPW001, SPW002, SPW004, SPW005) reads the spawn guard's static analysis of
the scripts (`envdoctor.analysis.spawn`); pickling (SPW003) what the smoke test
found pickling the dataset. `RULES` is the family's one table (catalog/SPW.toml).
"""
from __future__ import annotations

from envdoctor.rules.spawn import guard, pickling

RULES = {**guard.RULES, **pickling.RULES}
