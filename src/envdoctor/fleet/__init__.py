"""Beyond one machine: the fleet view of several nodes' reports.

Two ways in, one way out. `envdoctor compare` reads saved reports
(`fleet.compare`), `check --distributed` gathers every rank's report through
torch.distributed (`fleet.distributed`); both turn each report into a node
record (`fleet.nodes`), put the records in the `fleet` facts section and run
the FLT rules over it (`fleet_report`), so the result is an ordinary Report
that every formatter renders and whose exit code works as for `check`.

In a normal single-machine check the `fleet` section is None (`gather_fleet`),
so the FLT rules yield nothing there.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from envdoctor.model import Finding, Report, Severity


def gather_fleet(facts: Any) -> None:
    """The fleet section of a single-machine check: there is no fleet to compare."""
    return None


def fleet_report(
    fleet: dict[str, Any],
    *,
    target: dict[str, Any] | None = None,
    node_findings: Iterable[Finding] = (),
    errors: Iterable[dict[str, Any]] = (),
    ignore: Iterable[str] = (),
    overrides: dict[str, Severity] | None = None,
) -> Report:
    """Run the FLT rules over `fleet` and assemble a normal, schema-valid Report.

    `node_findings` and `errors` are what the nodes found themselves (under
    --distributed); they are listed with the FLT findings, worst first.
    """
    from envdoctor import engine
    from envdoctor.catalog import load_catalog
    from envdoctor.facts import Facts

    catalog = load_catalog()
    metas = engine.select_rules(catalog, ("FLT",), ignore)
    facts = Facts.from_dict({"target": dict(target or {}), "fleet": fleet})
    findings, rule_errors = engine.run_rules(catalog, metas, facts, overrides or {})
    order = {rule_id: i for i, rule_id in enumerate(catalog.ids())}
    findings = sorted([*findings, *node_findings], key=lambda f: (-f.severity.rank, order.get(f.rule, len(order))))
    return engine.assemble_report(facts, findings, [*rule_errors, *errors])
