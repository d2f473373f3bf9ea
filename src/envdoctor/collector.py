"""The cyclic garbage collector, paused while a large tree with no cycles is built.

A syntax tree or a loaded report (dicts, lists, strings) holds no reference
cycles, so a collection frees nothing in it; yet every collection that its
allocations trigger walks the whole tree again. Reference counting still frees
what it always frees.
"""
from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The collector off for the block, then as it was (left off when the caller had turned it off)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
