"""The Python API: `check()` for a Report, `preflight()` for the top of a training script."""
from __future__ import annotations

import sys
from collections.abc import Iterable

from envdoctor.model import Report, Severity


class PreflightError(RuntimeError):
    """Raised by preflight() when a finding reaches `fail_on`; carries the report."""

    def __init__(self, report: Report, fail_on: str) -> None:
        worst = [f for f in report.findings if f.severity.rank >= Severity.parse(fail_on).rank]
        lines = [f"envdoctor preflight failed: {len(worst)} finding(s) at or above {fail_on}"]
        lines += [f"  {f.rule} {f.name}: {f.message}\n    fix: {f.fix}" for f in worst]
        for probe, rules in report.not_checked().items():  # not checked is not an all-clear
            reason = next((e["message"] for e in report.errors if e.get("probe") == probe and "rule" not in e), "")
            lines.append(f"  not checked: {', '.join(rules)} (the {probe} probe failed{': ' + reason if reason else ''})")
        super().__init__("\n".join(lines))
        self.report = report


def check(*, scripts: Iterable[str] = (), budget_s: float | None = None, step_time_s: float | None = None,
          **settings: object) -> Report:
    """Run the checks and return the Report (nothing is printed).

    `settings` are the settings of `envdoctor check` by their Config names
    (`prefix`, `env_name`, `data`, `dataset`, `no_loader`, `deep`, `select`,
    `ignore`, `severity`, `against`, …; see `envdoctor.config.Config`);
    `budget_s` and `step_time_s` are `budget` and `step_time`. An unknown name
    or a wrong value raises `envdoctor.config.ConfigError`.
    """
    from envdoctor.config import config_from_settings
    from envdoctor.engine import run_check

    config = config_from_settings({**settings, "budget": budget_s, "step_time": step_time_s},
                                  scripts=tuple(scripts))
    return run_check(config)


def preflight(
    loader: object = None,
    *,
    fail_on: str = "error",
    budget_s: float = 15.0,
    step_time_s: float | None = None,
    select: Iterable[str] = (),
    ignore: Iterable[str] = (),
    quiet: bool = False,
    procs_per_node: int = 1,
) -> Report:
    """Check the environment (and profile `loader`) before training; raise on bad findings.

    With a DataLoader, the smoke test runs on that loader's own dataset,
    batch size, collate_fn, sampler and worker settings. A short summary goes
    to stderr; `PreflightError` carrying the report is raised when a finding
    reaches `fail_on` ("error", "warning", "info" or "never").

    `procs_per_node` is the number of training processes on this node
    (one per device under DDP): they share its usable CPUs, so num_workers
    is swept and recommended from each one's share.

    Without a loader it checks the environment and profiles the built-in
    synthetic dataset, so it works as a one-liner at the top of a script.

    Where `os.fork` exists the smoke test runs in a forked child of this
    process, in a session of its own that is killed with its workers when it
    overstays `budget_s`: the loader's objects are used as they are, without
    pickling, and its workers start the way the loader's own start method
    starts them, so a dataset that spawn cannot pickle fails there as it would
    in training (SPW003). Without fork (Windows) the dataset, sampler and
    collate_fn cross into a fresh interpreter as a pickle.
    """
    from envdoctor.config import config_from_settings
    from envdoctor.engine import run_check

    if loader is not None and not hasattr(loader, "dataset"):
        raise TypeError(f"preflight(loader=...) wants a torch.utils.data.DataLoader, not {type(loader).__name__}")
    config = config_from_settings({"budget": budget_s, "step_time": step_time_s, "select": tuple(select),
                                   "ignore": tuple(ignore), "fail_on": fail_on,
                                   "procs_per_node": procs_per_node}, loader_object=loader)
    report = run_check(config)
    if not quiet:
        print(preflight_summary(report), file=sys.stderr)
    if report.fails(fail_on):
        raise PreflightError(report, fail_on)
    return report


def preflight_summary(report: Report) -> str:
    """The few lines preflight() prints: the report's verdict (the counts, and the areas not checked), each
    finding, and the loader's verdict."""
    from envdoctor.report.text import verdict_line

    lines = [f"envdoctor preflight: {verdict_line(report)[1]}"]
    for finding in report.findings:
        lines.append(f"  {finding.severity.value:<7} {finding.rule} {finding.name}: {finding.message}")
    loader = report.loader
    if loader:
        rec = loader.get("recommendation")
        rates = ", ".join(f"{r['num_workers']}:{r['samples_per_s']:,.0f}"
                          for r in sorted(loader.get("runs") or [], key=lambda r: r["num_workers"])
                          if r.get("samples_per_s"))
        verdict = f"bottleneck {loader.get('bottleneck')}"
        if rec:
            from envdoctor.report.loader_view import settings_line

            verdict += f"; recommended {settings_line(rec)}"
        lines.append(f"  loader: {verdict}" + (f" (samples/s by num_workers {rates})" if rates else ""))
    return "\n".join(lines)
