"""envdoctor: a doctor for PyTorch training environments.

Importing this package is cheap on purpose: the public names are resolved on
first use, so `import envdoctor` pulls in neither rich, psutil nor torch.
"""
from __future__ import annotations

from envdoctor._version import __version__

__all__ = [
    "Finding",
    "PreflightError",
    "Report",
    "Severity",
    "__version__",
    "check",
    "preflight",
]

_LAZY = {
    "Finding": "envdoctor.model",
    "Report": "envdoctor.model",
    "Severity": "envdoctor.model",
    "check": "envdoctor.api",
    "preflight": "envdoctor.api",
    "PreflightError": "envdoctor.api",
}

# `typing` alone costs more than the rest of this module: no import of it here.
TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from envdoctor.api import PreflightError, check, preflight
    from envdoctor.model import Finding, Report, Severity


def __getattr__(name: str) -> object:
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'envdoctor' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
