"""The judge layer: what is decided of the facts, once per check, before any rule speaks.

A decision that produces no finding by itself — the loader's bottleneck, knee and recommendation
(`loader.py`, with its bottleneck classes in `bottleneck.py` and the paired windows' interval in
`pairing.py`), and what `envdoctor run` measured of the training loop (`loop.py`) — is computed here,
from the facts alone, the first time a reader asks, and kept on the `Facts` it judged
(`Facts.judgements`). The rules (DL001–DL009, SYS001–SYS005's worker plan), the engine (the report's
`loader` and `loop` objects) and `envdoctor run` read that one result, never decide again.

Like the rules, the judge does no I/O: it reads `facts[section]` and `facts.config`, and imports what
rules may import (tests/test_architecture.py). The knee itself is `envdoctor.inside.loader_knee`, shared
with the runner inside the target. The overall verdict of a report (`ok` / `problems` / `unchecked`)
is `envdoctor.verdict`, decided from the findings once the rules have run.
"""
