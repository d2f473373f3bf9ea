"""Formatters: every output is rendered from one Report, one module a format.

Formatters know nothing of individual rules; the SARIF one reads rule
metadata from the catalog, the way a linter's output does. Strings from
outside pass through `report.safe` in every human or CI format.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from envdoctor.model import FORMATS

if TYPE_CHECKING:  # pragma: no cover
    from envdoctor.model import Report

#: The formatter module of each value `--format` accepts (`envdoctor.model.FORMATS`, declared once there).
FORMAT_MODULES = {name: f"envdoctor.report.{name}" for name in FORMATS}


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


#: The largest saved report `load_report` reads.
MAX_REPORT_BYTES = 512 * 1024 * 1024


def load_report(path: str) -> Report:
    """A saved JSON report, read back for `envdoctor render`; a bad file is a one-line UsageError."""
    import json
    import os
    import stat

    from envdoctor.errors import UsageError
    from envdoctor.model import Report

    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise UsageError(f"{path} is not a regular file (a JSON report from `envdoctor report`)")
        if info.st_size > MAX_REPORT_BYTES:
            raise UsageError(f"{path} is larger than {MAX_REPORT_BYTES // 2**20} MiB; not reading it")
        with open(path, encoding="utf-8", errors="surrogateescape") as fh:
            data = json.load(fh)
        return Report.from_dict(data)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (ValueError, RecursionError) as exc:
        raise UsageError(f"{path} is not an envdoctor JSON report: {str(exc)[:200]}") from None


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
