"""Formatters: every output is rendered from one Report, one module a format.

Formatters know nothing of individual rules; the SARIF one reads rule
metadata from the catalog, the way a linter's output does. Strings from
outside pass through `report.safe` in every human or CI format.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from envdoctor.model import Report

FORMAT_MODULES = {
    "text": "envdoctor.report.text",
    "json": "envdoctor.report.json",
    "markdown": "envdoctor.report.markdown",
    "sarif": "envdoctor.report.sarif",
    "github": "envdoctor.report.github",
}
#: The values `--format` accepts.
FORMATS = tuple(FORMAT_MODULES)


@dataclass(frozen=True)
class RenderOptions:
    """What a format needs beyond the Report: the evidence switch, and where findings go in CI."""

    verbose: bool = False
    #: The --against file: environment findings are shown on it in GitHub and SARIF.
    against: str | None = None
    #: The scripts checked: the last resort for where environment findings are shown.
    scripts: Sequence[str] = ()
    #: Columns of the plain-text rendering.
    width: int = 80


def render(report: Report, fmt: str, options: RenderOptions | None = None) -> str:
    """The report as text in the given format (text has no colour here)."""
    import importlib

    options = options or RenderOptions()
    module = importlib.import_module(FORMAT_MODULES[fmt])
    if fmt == "text":
        return str(module.render(report, width=options.width, verbose=options.verbose))
    if fmt in ("sarif", "github"):
        return str(module.render(report, against=options.against, scripts=tuple(options.scripts)))
    return str(module.render(report))
