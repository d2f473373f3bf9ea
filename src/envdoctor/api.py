"""The Python API: `check()` for a Report, `preflight()` for the top of a training script."""
from __future__ import annotations

import sys
from typing import Any, Iterable

from envdoctor.model import Report, Severity


class PreflightError(RuntimeError):
    """Raised by preflight() when a finding reaches `fail_on`; carries the report."""

    def __init__(self, report: Report, fail_on: str) -> None:
        worst = [f for f in report.findings if f.severity.rank >= Severity.parse(fail_on).rank]
        lines = [f"envdoctor preflight failed: {len(worst)} finding(s) at or above {fail_on}"]
        lines += [f"  {f.rule} {f.name}: {f.message}\n    fix: {f.fix}" for f in worst]
        super().__init__("\n".join(lines))
        self.report = report


def check(
    *,
    prefix: str | None = None,
    env_name: str | None = None,
    data: str | None = None,
    dataset: str | None = None,
    scripts: Iterable[str] = (),
    no_loader: bool = False,
    budget_s: float = 15.0,
    step_time_s: float | None = None,
    deep: bool = False,
    select: Iterable[str] = (),
    ignore: Iterable[str] = (),
    severity: dict[str, str] | None = None,
    against: str | None = None,
) -> Report:
    """Run the checks and return the Report (nothing is printed)."""
    from envdoctor.config import Config, validate
    from envdoctor.engine import run_check

    config = validate(Config(
        prefix=prefix, env_name=env_name, data=data, dataset=dataset, scripts=tuple(scripts),
        no_loader=no_loader, budget=budget_s, step_time=step_time_s, deep=deep,
        select=tuple(select), ignore=tuple(ignore), severity=dict(severity or {}), against=against,
    ))
    return run_check(config)


def preflight(
    loader: Any = None,
    *,
    fail_on: str = "error",
    budget_s: float = 15.0,
    step_time_s: float | None = None,
    select: Iterable[str] = (),
    ignore: Iterable[str] = (),
    quiet: bool = False,
) -> Report:
    """Check the environment (and profile `loader`) before training; raise on bad findings.

    With a DataLoader, the smoke test runs on that loader's own dataset,
    batch size, collate_fn, sampler and worker settings. A short summary goes
    to stderr; `PreflightError` carrying the report is raised when a finding
    reaches `fail_on` ("error", "warning", "info" or "never").
    """
    from envdoctor.config import Config, validate
    from envdoctor.engine import run_check

    config = validate(Config(
        budget=budget_s, step_time=step_time_s, select=tuple(select), ignore=tuple(ignore),
        fail_on=fail_on, loader_object=loader, no_loader=False,
    ))
    report = run_check(config)
    if not quiet:
        from envdoctor.report.text import summary_line

        print(f"envdoctor preflight: {summary_line(report)}", file=sys.stderr)
        for finding in report.findings:
            print(f"  {finding.severity.value:<7} {finding.rule} {finding.name}: {finding.message}", file=sys.stderr)
    if report.exit_code(fail_on):
        raise PreflightError(report, fail_on)
    return report
