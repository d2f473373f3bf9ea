"""DL rules: what the live DataLoader smoke test found.

`verdict` decides, once, the bottleneck class, the knee and the recommendation;
`findings` says it as DL001–DL008 with the numbers that back it. `RULES` is the
family's one table (catalog/DL.toml).
"""
from __future__ import annotations

from envdoctor.rules.loader import findings

RULES = {**findings.RULES}
