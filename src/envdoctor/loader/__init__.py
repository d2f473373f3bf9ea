"""The live DataLoader smoke test (the loader stage of check/report)."""
from __future__ import annotations

from typing import Any

from envdoctor.facts import ProbeFailed


def gather_loader(facts: Any) -> dict[str, Any] | None:
    """The loader section: None when the stage is switched off (--no-loader)."""
    if facts.config.no_loader:
        return None
    raise ProbeFailed("loader", "the DataLoader smoke test is not part of this build yet")
