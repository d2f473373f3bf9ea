"""Ordering version strings that may not be valid PEP 440 versions."""
from __future__ import annotations

from typing import Any


def sortable_version(value: Any) -> tuple[int, Any]:
    """A sort key: valid versions by PEP 440, after every string that is not one."""
    from packaging.version import InvalidVersion, Version

    try:
        return (1, Version(str(value)))
    except InvalidVersion:
        return (0, str(value))
