"""Ordering version strings that may not be valid PEP 440 versions."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from packaging.version import Version


def sortable_version(value: object) -> tuple[int, Version | str]:
    """A sort key: valid versions by PEP 440, after every string that is not one."""
    from packaging.version import InvalidVersion, Version

    try:
        return (1, Version(str(value)))
    except InvalidVersion:
        return (0, str(value))
