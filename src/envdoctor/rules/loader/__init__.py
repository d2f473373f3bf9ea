"""DL rules: what the live DataLoader smoke test found.

The judge layer decides, once per check, the bottleneck class, the knee and the
recommendation (`envdoctor.judge.loader`) and what `envdoctor run` measured in the
user's own training loop (`envdoctor.judge.loop`); `findings` says the first as
DL001–DL008 with the numbers that back it, `loop` the second as DL009; `memory`
projects the workers' measured memory growth (DL010) and `handles` reports
open handles shared across fork (DL011). `RULES` is the family's one table
(catalog/DL.toml).
"""
from __future__ import annotations

from envdoctor.rules.loader import findings, handles, loop, memory

RULES = {**findings.RULES, **loop.RULES, **memory.RULES, **handles.RULES}
