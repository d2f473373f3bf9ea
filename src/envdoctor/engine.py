"""The engine: choose the rules, run each in isolation, assemble one Report.

A rule that raises becomes an entry under the report's `errors` and never
hides the other findings; a rule whose facts could not be gathered is skipped
with the probe's reason.
"""
from __future__ import annotations

import datetime as _dt
import socket
from collections.abc import Iterable

from envdoctor._version import __version__
from envdoctor.catalog import Catalog, RuleMeta, load_catalog
from envdoctor.config import Config, ConfigError
from envdoctor.facts import Facts, ProbeFailed
from envdoctor.model import Finding, Report, Severity
from envdoctor.redact import redact_finding, redact_tree
from envdoctor.rules import Hit


def select_rules(catalog: Catalog, select: Iterable[str] = (), ignore: Iterable[str] = ()) -> list[RuleMeta]:
    """The rules to run, in catalog order. Unknown ids or families are a ConfigError (`Catalog.select`)."""
    return catalog.select(select, ignore)


def node_rules(metas: list[RuleMeta], select: Iterable[str] = ()) -> list[RuleMeta]:
    """The rules of a single-machine check: fleet rules compare several nodes' reports instead."""
    kept = [m for m in metas if m.scope == "node"]
    if metas and not kept and tuple(select):
        raise ConfigError(f"{', '.join(m.id for m in metas[:3])}{' …' if len(metas) > 3 else ''} compare "
                          "several machines: run them with `envdoctor compare REPORT.json ...` or "
                          "`envdoctor check --distributed` under torchrun")
    return kept


def check_severity_overrides(catalog: Catalog, overrides: dict[str, str]) -> dict[str, Severity]:
    """`--severity` pairs resolved to rule ids: a key may be an id, a name or a family, like `--select`.

    A family's level applies to each of its rules; a pair naming one rule beats its family's.
    """
    resolved: dict[str, Severity] = {}
    exact: dict[str, Severity] = {}
    for token, level in overrides.items():
        matched = catalog.resolve(token)
        if not matched:
            raise ConfigError(f"--severity: unknown rule {token!r} (see `envdoctor rules`)")
        try:
            severity = Severity.parse(level)
        except ValueError as exc:
            raise ConfigError(f"--severity {token}: {exc}") from None
        one_rule = any(m.id == token.strip().upper() or m.name == token.strip().lower() for m in matched)
        (exact if one_rule else resolved).update({m.id: severity for m in matched})
    return {**resolved, **exact}


def _to_finding(meta: RuleMeta, hit: Hit, overrides: dict[str, Severity]) -> Finding:
    severity = overrides.get(meta.id) or hit.severity or meta.severity
    return Finding(
        rule=meta.id,
        name=meta.name,
        severity=Severity.parse(severity),
        message=hit.message,
        evidence=dict(hit.evidence),
        fix=hit.fix,
        location=hit.location,
        fix_steps=tuple(hit.fix_steps),
    )


def run_rules(catalog: Catalog, metas: list[RuleMeta], facts: Facts,
              overrides: dict[str, Severity]) -> tuple[list[Finding], list[dict[str, object]]]:
    findings: list[Finding] = []
    errors: list[dict[str, object]] = []
    # Looked up before any rule runs: a family module that is missing a function is a broken
    # catalog (CatalogError, exit 2), not one rule's error.
    functions = {meta.id: catalog.functions[meta.id] for meta in metas}
    for meta in metas:
        try:
            hits = list(functions[meta.id](facts) or ())
        except ProbeFailed as exc:
            # Not checked is not clean: Report.not_checked() names it and the exit code says so.
            errors.append({"rule": meta.id, "probe": exc.section, "message": f"skipped: {exc}"})
            continue
        except Exception as exc:  # one broken rule never hides the others
            import traceback  # only a failure needs it

            errors.append({
                "rule": meta.id,
                "message": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(limit=6),
            })
            continue
        for hit in hits:
            if not isinstance(hit, Hit):
                errors.append({"rule": meta.id, "message": f"returned {type(hit).__name__}, not a Hit"})
                continue
            findings.append(_to_finding(meta, hit, overrides))
    order = {m.id: i for i, m in enumerate(catalog.rules)}
    findings.sort(key=lambda f: (-f.severity.rank, order.get(f.rule, 0)))
    return findings, errors


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def assemble_report(facts: Facts, findings: list[Finding], errors: list[dict[str, object]],
                    checked: list[str] | None = None) -> Report:
    """The Report of one run, its verdict decided (`envdoctor.verdict`): the one place it is."""
    from envdoctor.verdict import decide

    gathered = dict(facts.gathered())
    target = gathered.pop("target", None) or {}
    loader = gathered.pop("loader", None)
    loop = gathered.pop("loop", None)
    if loop:
        # What `envdoctor run` measured, with its judgement (the speaking process, the recommendation): the
        # one the rules read, decided once for the check.
        from envdoctor.judge.loop import loop_judgement

        loop = dict(loop_judgement(facts) or {})
    if loader:
        # The facts with their judgement (bottleneck, recommendation), less the torch probe.
        from envdoctor.judge.loader import loader_judgement, loader_report

        judged = loader_judgement(facts)
        loader = dict(loader_report(judged)) if judged else None
    report = Report(
        tool={"name": "envdoctor", "version": __version__},
        generated_at=utc_now(),
        host=_host_record(),
        target=redact_tree({
            **target,
            "prefix": target.get("prefix"),
            "kind": target.get("kind"),
            "python": target.get("python"),
        }),
        facts=redact_tree(gathered),
        findings=[redact_finding(f) for f in findings],
        loader=redact_tree(loader) if loader else None,
        loop=redact_tree(loop) if loop else None,
        errors=redact_tree(errors + facts.errors),
        checked=checked,
    )
    report.verdict = decide(report)
    return report


def _host_record() -> dict[str, object]:
    """The host name and platform, and inside a Slurm job its node name, job and step (fleet.placement)."""
    from envdoctor.facts.target import conda_platform
    from envdoctor.fleet.placement import scheduler_record

    host: dict[str, object] = {"hostname": socket.gethostname(), "platform": conda_platform()}
    scheduler = scheduler_record()
    if scheduler:
        host["scheduler"] = scheduler
    return host


def check_inputs(config: Config) -> None:
    """Refuse, before anything runs, what the user gave that does not exist."""
    import os

    from envdoctor.facts.target import resolve_prefix

    resolve_prefix(config.prefix, config.env_name)
    if config.data and not os.path.exists(config.data):
        # A mistyped data path would otherwise end in "0 errors" (no storage to
        # judge, no files to read) and the training run would die on it.
        raise ConfigError(f"the data path {config.data} does not exist (--data, or `data` in pyproject.toml)")
    if config.data and not (os.path.isdir(config.data) or os.path.isfile(config.data)):
        # A FIFO or a device has no storage to judge and no files to read: a quiet "✓ storage" would lie.
        raise ConfigError(f"the data path {config.data} is neither a folder nor a regular file "
                          "(--data takes the folder your training data lives in)")
    if config.against:
        # Missing, the comparison would be skipped and the run look clean; a FIFO
        # or a device would block or never end.
        if not os.path.exists(config.against):
            raise ConfigError(f"the file to compare with, {config.against}, does not exist "
                              "(--against, or `against` in pyproject.toml)")
        if not os.path.isfile(config.against):
            raise ConfigError(f"--against {config.against} is not a regular file "
                              "(give an environment.yml or a requirements file)")


def run_check(config: Config, catalog: Catalog | None = None, facts: Facts | None = None) -> Report:
    """Run every selected rule against one snapshot of facts and build the Report."""
    catalog = catalog or load_catalog()
    metas = node_rules(select_rules(catalog, config.select, config.ignore), config.select)
    overrides = check_severity_overrides(catalog, config.severity)
    facts = facts or Facts(config)
    # The target is resolved first so a wrong --prefix is one clear error, not N skipped rules.
    from envdoctor.errors import TargetError

    check_inputs(config)
    try:
        target = facts["target"]
    except ProbeFailed as exc:
        raise TargetError(exc.reason) from None
    # Facts fixed in advance (a saved report, a test) may hold no target section.
    if target is not None and target.get("interpreter") and target.get("interpreter_error"):
        # Every live check and most static ones read the environment through its
        # own interpreter: a report without it would be a false all-clear.
        raise TargetError(f"the environment's Python cannot start ({target['interpreter_error']}); "
                          "repair or recreate the environment, then check it again")
    findings, errors = run_rules(catalog, metas, facts, overrides)
    return assemble_report(facts, findings, errors, checked=[m.id for m in metas])
