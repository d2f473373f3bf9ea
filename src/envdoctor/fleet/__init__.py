"""Beyond one machine: the fleet view of several nodes' reports.

Two ways in, one way out. `envdoctor compare` reads saved reports
(`fleet.compare`), `check --distributed` gathers every rank's report through
torch.distributed (`fleet.distributed`); both turn each report into a node
record (`facts.fleet`), put the records in the `fleet` facts section and run
the FLT rules over it (`fleet_report`), so the result is an ordinary Report
that every formatter renders and whose exit code works as for `check`.

The FLT rules run only here: their catalog family has `scope = "fleet"`, and a
single-machine check leaves such rules out. What they decide (drift,
stragglers) is carried in their findings' evidence, and the fleet view
renders it from there.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from envdoctor.facts.fleet import FleetFacts
    from envdoctor.model import Finding, Report, Severity


def fleet_report(
    fleet: FleetFacts,
    *,
    target: dict[str, object] | None = None,
    node_findings: Iterable[Finding] = (),
    errors: Iterable[dict[str, object]] = (),
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
    metas = [m for m in engine.select_rules(catalog, (), ignore) if m.scope == "fleet"]
    facts = Facts.from_dict({"target": dict(target or {}), "fleet": fleet})
    findings, rule_errors = engine.run_rules(catalog, metas, facts, overrides or {})
    order = {rule_id: i for i, rule_id in enumerate(catalog.ids())}
    findings = sorted([*findings, *node_findings], key=lambda f: (-f.severity.rank, order.get(f.rule, len(order))))
    return engine.assemble_report(facts, findings, [*rule_errors, *errors])
