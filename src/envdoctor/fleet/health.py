"""`envdoctor health`: one node's fast, loader-free check for a scheduler.

Meant for Slurm's `HealthCheckProgram`, a Prolog, or a pre-flight step of a job script:

* static checks only: the limits (SYS001 open files, SYS002 /dev/shm, SYS003 CPU quota), the
  driver against torch's CUDA build (GPU002) and the package state (PKG001, PKG002, PKG008);
  no DataLoader stage, no `import torch` (the torch section is read from its files), nothing
  measured, so the same node gives the same answer on every run: SYS001 sizes its need from the
  usable CPUs, never from a noisy smoke test;
* optionally against an expected-values file (the fleet's agreed torch, driver, limits,
  environment), the differences being FLT001/FLT002/FLT005 findings for this node;
* one short line per problem, fit for a drain reason, and the exit codes of `check`
  (0 healthy, 1 findings at or above --fail-on, 2 envdoctor could not run or a bad file).

envdoctor never drains a node itself: the docs show the `scontrol update ... state=drain` line.
"""
from __future__ import annotations

import argparse
import re
import socket
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from envdoctor.model import FAIL_ON_CHOICES, Finding, Report

if TYPE_CHECKING:  # pragma: no cover
    from envdoctor.config import Config
    from envdoctor.facts import Facts
    from envdoctor.facts.fleet import ExpectedValues

EXIT_OK, EXIT_FINDINGS = 0, 1
#: The node rules health runs: static, cheap, and stable from run to run.
HEALTH_RULES = ("SYS001", "SYS002", "SYS003", "GPU002", "PKG001", "PKG002", "PKG008")
#: A drain reason is one line; Slurm shows it in `sinfo -R`, so keep it short.
MAX_LINE = 160
#: The keys an expected-values file may set (node-record fields, see facts.fleet.FIELDS), with their type.
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B?|B)?\s*$", re.IGNORECASE)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `envdoctor health` (cli.py makes its sub-parser, description and exit codes)."""
    parser.add_argument("--expect", metavar="FILE",
                        help="a TOML file of the values every node should have (torch, driver, nofile, shm, "
                             "environ …); see docs/clusters.md")
    parser.add_argument("--prefix", metavar="PATH", help="inspect the conda env, venv or pixi env at PATH")
    parser.add_argument("-n", "--name", dest="env_name", metavar="NAME", help="inspect the conda env called NAME")
    parser.add_argument("--fail-on", choices=FAIL_ON_CHOICES, default="error",
                        help="exit 1 when a finding is at or above this severity (default: error)")
    parser.add_argument("--format", choices=("text", "json"), default="text",
                        help="text: one line per problem (default); json: the whole report")
    parser.add_argument("--output", "-o", metavar="FILE", help="write the report there (placeholders as for report)")


def _size(value: object, key: str, source: str) -> int:
    from envdoctor.errors import UsageError

    if isinstance(value, int) and not isinstance(value, bool):
        return value
    match = _SIZE.match(str(value))
    if match is None:
        raise UsageError(f"{source}: {key} = {value!r} is not a size (e.g. 8G, 512MiB, or bytes)")
    number, unit = float(match[1]), (match[2] or "B").upper().rstrip("B").rstrip("I")
    return int(number * 1024 ** " KMGT".index(unit or " ")) if unit else int(number)


def read_expected(path: str) -> ExpectedValues:
    """The expected values of `path` as node-record values (sizes in bytes, versions as text)."""
    from envdoctor.errors import UsageError
    from envdoctor.facts.fleet import FIELDS

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read the expected values {path}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"{path} is not a TOML file: {exc}") from None
    table = data.get("expect", data)
    if not isinstance(table, Mapping):
        raise UsageError(f"{path}: [expect] must be a table")
    fields = {f.key: f for f in FIELDS}
    aliases = {"shm": "shm_total", "memory": "memory_total", "cpus": "usable_cpus", "open_files": "nofile",
               "cuda": "cuda_build"}
    wanted: ExpectedValues = {}
    for key, value in table.items():
        name = aliases.get(key, key)
        if name == "environ":
            if not isinstance(value, Mapping):
                raise UsageError(f"{path}: environ must be a table of NAME = \"value\"")
            wanted["environ"] = {str(k): str(v) for k, v in value.items()}
        elif name not in fields or fields[name].group == "throughput":
            known = sorted(k for k, f in fields.items() if f.group != "throughput") + ["environ"]
            raise UsageError(f"{path}: unknown key {key!r} (known: {', '.join(known)})")
        elif fields[name].kind == "bytes":
            wanted[name] = _size(value, key, path)
        elif fields[name].kind == "count":
            if not isinstance(value, int) or isinstance(value, bool):
                raise UsageError(f"{path}: {key} = {value!r} is not a whole number")
            wanted[name] = value
        else:
            wanted[name] = str(value)
    return wanted


def _static_facts(config: Config) -> Facts:
    """The facts with the torch section read from its files only: no `import torch`, even on a GPU node."""
    from envdoctor.facts import Facts
    from envdoctor.facts.torch import read_torch_files

    first = Facts(config)
    target = first["target"]
    torch = read_torch_files(dict(target))
    torch["probe"] = {"ran": False, "reason": "envdoctor health: static checks only"}
    return Facts(config, preset={"target": target, "torch": torch})


def node_name() -> str:
    from envdoctor.fleet.placement import placeholder_values

    return placeholder_values()["node"]


def run_health(args: argparse.Namespace) -> Report:
    """The node's report: the static node rules, and with --expect the FLT findings against the file."""
    from envdoctor.config import load_config
    from envdoctor.engine import run_check
    from envdoctor.facts.fleet import FleetFacts, node_record
    from envdoctor.fleet import fleet_report

    expected = read_expected(args.expect) if args.expect else None
    given: dict[str, object] = {"no_loader": True, "select": HEALTH_RULES, "format": "json"}
    if args.prefix:
        given["prefix"] = args.prefix
    if args.env_name:
        given["env_name"] = args.env_name
    config = load_config(given, defaults={"format": "json"})
    report = run_check(config, facts=_static_facts(config))
    if expected is None:
        return report
    data = report.to_dict()
    fleet: FleetFacts = {"mode": "health", "nodes": [node_record(node_name(), data, "this node")]}
    fleet["expected_values"] = expected
    against = fleet_report(fleet, target=data.get("target"))
    findings = sorted([*report.findings, *against.findings], key=lambda f: -f.severity.rank)
    merged = Report(tool=report.tool, generated_at=report.generated_at, host=report.host, target=report.target,
                    facts={**report.facts, "fleet": fleet}, findings=findings, loader=None,
                    errors=report.errors + against.errors, checked=[*(report.checked or []),
                                                                    *sorted({f.rule for f in against.findings})])
    from envdoctor.verdict import decide

    merged.verdict = decide(merged)
    return merged


def short_line(finding: Finding) -> str:
    """One line fit for a drain reason: `SYS001 nofile-limit-low: the open-file limit is 1024 but ...`."""
    text = " ".join(f"{finding.rule} {finding.name}: {finding.message}".split())
    text = text.replace("'", "").replace('"', "")  # a reason goes into a shell line: reason="..."
    return text if len(text) <= MAX_LINE else text[:MAX_LINE - 1] + "…"


def handle(args: argparse.Namespace, check_writable: Callable[[str], None],
           write_report: Callable[[str, str], None], render_json: Callable[[Report], str]) -> int:
    """Run the node check; the command line hands in how it checks and writes an --output file."""
    from envdoctor.model import Severity

    started = time.monotonic()
    output, claim = None, None
    if args.output:
        from envdoctor.fleet.placement import output_for_task

        output, claim = output_for_task(args.output)
        check_writable(output)
    report = run_health(args)
    if output is not None or args.format == "json":
        text = render_json(report)
        if claim is not None:  # one of several tasks of a step: created exclusively
            claim.write(text)
        elif output is not None:
            write_report(output, text)
        else:
            print(text, end="")
    code = report.exit_code(args.fail_on)
    if args.format == "text":
        threshold = Severity.parse(args.fail_on).rank if args.fail_on != "never" else 99
        problems = [f for f in report.findings if f.severity.rank >= threshold]
        node = node_name()
        for finding in problems:  # the node first: `srun` mixes every node's lines into one output
            print(f"{node}: {short_line(finding)}")
        for error in report.errors:
            print(" ".join(f"not checked: {error.get('rule') or error.get('probe')}: {error.get('message')}".split())
                  [:MAX_LINE])
        if not code:
            print(f"healthy: {node} ({len(report.checked or [])} checks in "
                  f"{time.monotonic() - started:.2f} s on {socket.gethostname()})")
    return 1 if code else 0
