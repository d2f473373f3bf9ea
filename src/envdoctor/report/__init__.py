"""Formatters: every output is rendered from one Report, one module a format.

Formatters know nothing of individual rules; the SARIF one reads rule
metadata from the catalog, the way a linter's output does.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from envdoctor.model import Report

FORMAT_MODULES = {
    "text": "envdoctor.report.text",
    "json": "envdoctor.report.json",
    "markdown": "envdoctor.report.markdown",
    "sarif": "envdoctor.report.sarif",
}


def render(report: Report, fmt: str) -> str:
    """The report as text in the given format (text has no colour here)."""
    import importlib

    return importlib.import_module(FORMAT_MODULES[fmt]).render(report)
