"""The `envdoctor` command: argument parsing and exit codes, nothing else.

Exit codes: 0 nothing at or above --fail-on, 1 findings at or above it,
2 a usage error or envdoctor itself could not run.
"""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from envdoctor import __version__
from envdoctor.errors import UsageError

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one clear line, exit 2, like every other usage error
        self.exit(EXIT_ERROR, f"envdoctor: error: {message} (see `{self.prog} --help`)\n")


def _severity_pair(text: str) -> tuple[str, str]:
    rule, sep, level = text.partition("=")
    if not sep or not rule or not level:
        raise argparse.ArgumentTypeError(f"expected RULE=LEVEL (e.g. SYS003=error), not {text!r}")
    return rule.strip().upper(), level.strip().lower()


def _add_check_options(p: argparse.ArgumentParser, default_format: str) -> None:
    target = p.add_argument_group("what to inspect")
    target.add_argument("--prefix", metavar="PATH", help="inspect the conda env, venv or pixi env at PATH")
    target.add_argument("-n", "--name", dest="env_name", metavar="NAME", help="inspect the conda env called NAME")
    target.add_argument("--data", metavar="PATH", help="where the training data lives (storage checks, file-reading smoke test)")
    target.add_argument("--dataset", metavar="MODULE:CALLABLE",
                        help="a factory returning your Dataset, or (Dataset, DataLoader kwargs)")
    target.add_argument("--against", metavar="FILE", help="environment.yml or requirements file to compare with")
    run = p.add_argument_group("how to check")
    run.add_argument("--no-loader", action="store_true", default=None, help="static checks only: skip the DataLoader smoke test")
    run.add_argument("--budget", type=float, metavar="SECONDS", help="time budget of the loader stage (default 15)")
    run.add_argument("--step-time", type=float, metavar="SECONDS", help="seconds your training step takes per batch")
    run.add_argument("--deep", action="store_true", default=None, help="run the slow checks too (file hashes, torch import probe)")
    run.add_argument("--distributed", action="store_true", default=None,
                     help="under torchrun: gather every rank's facts to rank 0 and print the fleet view")
    run.add_argument("--distributed-timeout", type=float, metavar="SECONDS",
                     help="with --distributed: how long rank 0 waits for the other ranks (default 120)")
    rules = p.add_argument_group("which rules")
    rules.add_argument("--select", nargs="+", metavar="RULE", help="run only these rules or families")
    rules.add_argument("--ignore", nargs="+", metavar="RULE", help="skip these rules or families")
    rules.add_argument("--severity", nargs="+", type=_severity_pair, metavar="RULE=LEVEL",
                       help="override a rule's severity (error, warning, info)")
    rules.add_argument("--fail-on", choices=("error", "warning", "info", "never"),
                       help="lowest severity that makes the exit code 1 (default: error)")
    out = p.add_argument_group("output")
    out.add_argument("--format", choices=("text", "json", "sarif", "markdown"),
                     help=f"output format (default: {default_format})")
    out.add_argument("--json", action="store_const", const="json", dest="format", help="same as --format json")
    out.add_argument("--output", "-o", metavar="FILE", help="write the report to FILE instead of standard output")
    out.add_argument("--svg", metavar="FILE", help="also save the text report as an SVG picture")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="envdoctor", description="A doctor for PyTorch training environments.")
    parser.add_argument("--version", action="version", version=f"envdoctor {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    check = sub.add_parser("check", help="run all checks and print a human report")
    check.add_argument("scripts", nargs="*", metavar="SCRIPT", help="training scripts or folders to check for the spawn guard")
    _add_check_options(check, "text")
    report = sub.add_parser("report", help="run all checks and print the JSON report (for CI)")
    report.add_argument("scripts", nargs="*", metavar="SCRIPT", help="training scripts or folders to check for the spawn guard")
    _add_check_options(report, "json")
    loader = sub.add_parser("loader", help="run only the DataLoader smoke test")
    _add_check_options(loader, "text")

    sub.add_parser("rules", help="list the rule catalog, one line each")
    explain = sub.add_parser("explain", help="show one rule's docs: what, why, example, fix")
    explain.add_argument("rule", metavar="RULE", help="a rule id (SYS002) or name (shm-too-small)")

    compare = sub.add_parser("compare", help="reports from several machines side by side: drift and stragglers")
    compare.add_argument("reports", nargs="+", metavar="REPORT", help="JSON reports, or folders holding them")
    compare.add_argument("--format", choices=("text", "json", "sarif", "markdown"), default="text")
    compare.add_argument("--json", action="store_const", const="json", dest="format")
    compare.add_argument("--output", "-o", metavar="FILE")
    compare.add_argument("--fail-on", choices=("error", "warning", "info", "never"), default="error")

    sub.add_parser("mcp", help="serve the checks as tools for AI coding agents (Model Context Protocol, stdio)")
    return parser


def _config_from_args(args: argparse.Namespace, default_format: str) -> Any:
    from envdoctor.config import load_config

    cli: dict[str, Any] = {
        "prefix": args.prefix,
        "env_name": args.env_name,
        "data": args.data,
        "dataset": args.dataset,
        "against": args.against,
        "no_loader": args.no_loader,
        "budget": args.budget,
        "step_time": args.step_time,
        "deep": args.deep,
        "distributed": args.distributed,
        "distributed_timeout": args.distributed_timeout,
        "select": tuple(args.select) if args.select else None,
        "ignore": tuple(args.ignore) if args.ignore else None,
        "severity": dict(args.severity) if args.severity else None,
        "fail_on": args.fail_on,
        "format": args.format,
        "output": args.output,
        "svg": args.svg,
        "scripts": tuple(getattr(args, "scripts", ()) or ()) or None,
    }
    return load_config(cli, defaults={"format": default_format})


def _open_output(path: str | None) -> Any:
    if path is None:
        return None
    try:
        # A file name that is not UTF-8 must not stop the report being written.
        return open(path, "w", encoding="utf-8", errors="backslashreplace")
    except OSError as exc:
        raise UsageError(f"cannot write the report to {path}: {exc.strerror or exc}") from None


def check_writable(path: str | None) -> None:
    """Fail before the checks run, not after, when the report cannot be written."""
    if path is not None:
        _open_output(path).close()


def emit(report: Any, fmt: str, output: str | None, svg: str | None = None) -> None:
    """Render the report to standard output or a file (and an SVG when asked)."""
    from envdoctor.report import render

    handle = _open_output(output)
    if fmt == "text" and handle is None:
        from rich.console import Console

        from envdoctor.report.text import write

        # Logs and pipes get whole lines; a terminal gets lines wrapped to its width.
        console = Console(record=bool(svg), highlight=False, emoji=False, soft_wrap=not sys.stdout.isatty())
        write(report, console)
        if svg:
            _save_svg(console, svg)
        return
    text = render(report, fmt)
    if handle is None:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        with handle:
            handle.write(text)
    if svg:
        from rich.console import Console

        from envdoctor.report.text import write

        console = Console(record=True, file=open(os.devnull, "w"), width=100, force_terminal=True)
        write(report, console)
        _save_svg(console, svg)


def _save_svg(console: Any, path: str) -> None:
    try:
        console.save_svg(path, title="envdoctor")
    except OSError as exc:
        raise UsageError(f"cannot write the SVG to {path}: {exc.strerror or exc}") from None


def _cmd_rules() -> int:
    from envdoctor.catalog import load_catalog

    catalog = load_catalog()
    width = max(len(m.name) for m in catalog.rules)
    for meta in catalog.rules:
        summary = " ".join(meta.summary.split())
        print(f"{meta.id}  {meta.name:<{width}}  {meta.severity.value:<7}  {summary}")
    return EXIT_OK


def explain_text(rule: str) -> str:
    """One rule's docs as `envdoctor explain` prints them."""
    import textwrap

    from envdoctor.catalog import load_catalog

    catalog = load_catalog()
    matched = [m for m in catalog.rules if m.id == rule.upper() or m.name == rule.lower()]
    if not matched:
        raise UsageError(f"unknown rule {rule!r} (see `envdoctor rules`)")
    meta = matched[0]
    headings = {"what": "What it checks", "why": "Why it matters", "example": "Example", "fix": "Fix"}
    out = [f"{meta.id} {meta.name} (default severity: {meta.severity.value})", "",
           textwrap.fill(" ".join(meta.summary.split()), 88), ""]
    for part, heading in headings.items():
        out.append(heading)
        body = meta.docs()[part]
        if part == "example":
            out += ["    " + line for line in body.splitlines()]
        else:
            for para in body.split("\n\n"):
                out.append(textwrap.fill(" ".join(para.split()), 88, initial_indent="    ", subsequent_indent="    "))
        out.append("")
    return "\n".join(out)


def _cmd_check(args: argparse.Namespace, default_format: str) -> int:
    from envdoctor.engine import check_inputs, run_check

    config = _config_from_args(args, default_format)
    if args.command == "loader":
        config = config.with_overrides(select=config.select or ("DL", "SPW003"), no_loader=False)
    check_writable(config.output)
    check_inputs(config)
    if config.distributed:
        from envdoctor.fleet.distributed import run_distributed

        report = run_distributed(config)
        if report is None:  # not rank 0: the fleet view is rank 0's to print
            return EXIT_OK
    else:
        report = _run_with_progress(config, run_check)
    emit(report, config.format, config.output, config.svg)
    return report.exit_code(config.fail_on)


def _run_with_progress(config: Any, run_check: Any) -> Any:
    """Run the checks; a text report bound for a terminal shows the loader stage live on stderr."""
    if config.no_loader or config.format != "text" or not sys.stderr.isatty():
        return run_check(config)
    from envdoctor.loader.progress import showing_progress

    with showing_progress(config.budget):
        return run_check(config)


def _cmd_compare(args: argparse.Namespace) -> int:
    from envdoctor.fleet.compare import compare_paths

    check_writable(args.output)
    report = compare_paths(args.reports)
    emit(report, args.format, args.output)
    return report.exit_code(args.fail_on)


def main(argv: Sequence[str] | None = None) -> int:
    from envdoctor.catalog import CatalogError
    from envdoctor.config import ConfigError
    from envdoctor.facts.target import TargetError

    args = build_parser().parse_args(argv)
    try:
        if args.command == "rules":
            return _cmd_rules()
        if args.command == "explain":
            print(explain_text(args.rule))
            return EXIT_OK
        if args.command == "compare":
            return _cmd_compare(args)
        if args.command == "mcp":
            from envdoctor.mcp_server import serve

            return serve()
        return _cmd_check(args, "json" if args.command == "report" else "text")
    except (UsageError, ConfigError, TargetError, CatalogError) as exc:
        print(f"envdoctor: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("envdoctor: interrupted", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:
        return EXIT_OK
    except Exception as exc:  # envdoctor itself failed: say so in one line, exit 2
        if os.environ.get("ENVDOCTOR_DEBUG"):
            raise
        print(f"envdoctor: internal error: {type(exc).__name__}: {exc} "
              "(set ENVDOCTOR_DEBUG=1 for the traceback)", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
