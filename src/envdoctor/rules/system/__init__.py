"""SYS rules: the limits of the machine and the process that DataLoader workers run into.

limits (SYS001 nofile, SYS002 /dev/shm, SYS003 CPU quota, SYS006 memory) reads the
`system` facts; runtime (SYS004 sharing strategy, SYS005 threads) what torch does
once imported; opencv (SYS007) OpenCV's thread pool in the loader's workers; session (SYS008
shared memory removed at logout, SYS009 WSL) the session a run lives in. `RULES` is the family's
one table, which catalog/SYS.toml names.
"""
from __future__ import annotations

from envdoctor.rules.system import limits, opencv, runtime, session

RULES = {**limits.RULES, **runtime.RULES, **opencv.RULES, **session.RULES}
