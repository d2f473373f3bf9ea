"""FLT rules: several nodes' reports side by side (compare, --distributed).

`drift` decides what differs between nodes (the majority value, stragglers against
the median of the other nodes); `findings` says it as FLT001–FLT009. `RULES` is the
family's one table (catalog/FLT.toml).
"""
from __future__ import annotations

from envdoctor.rules.fleet import findings

RULES = {**findings.RULES}
