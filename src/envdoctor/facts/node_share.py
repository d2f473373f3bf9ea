"""How many training processes share this node, and the CPUs each one (with its workers) may use.

torchrun, Lightning and Accelerate set LOCAL_WORLD_SIZE to the processes on a node; the
loader stage, the SYS rules and the framework callbacks divide the usable CPUs by it.
"""
from __future__ import annotations

import os

#: The environment variable torchrun (and Lightning, Accelerate) set to the processes on this node.
LOCAL_WORLD_SIZE_ENV = "LOCAL_WORLD_SIZE"


def processes_per_node(setting: int | None) -> int:
    """Training processes sharing this node's CPUs: the setting, else LOCAL_WORLD_SIZE, else 1."""
    if setting:
        return max(1, int(setting))
    try:
        return max(1, int(os.environ.get(LOCAL_WORLD_SIZE_ENV, "1")))
    except ValueError:
        return 1


def cpus_per_process(usable: int, procs: int) -> int:
    """The CPUs one training process (and its workers) may use: its share of the usable CPUs."""
    return max(1, usable // max(1, procs))
