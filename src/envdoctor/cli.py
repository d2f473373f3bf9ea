"""The `envdoctor` command: argument parsing and exit codes, nothing else.

Exit codes: 0 nothing at or above --fail-on, 1 findings at or above it,
2 a usage error or envdoctor itself could not run.
"""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from envdoctor import __version__
from envdoctor.errors import UsageError

if TYPE_CHECKING:  # pragma: no cover
    from envdoctor.config import Config

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one clear line, exit 2, like every other usage error
        self.exit(EXIT_ERROR, f"envdoctor: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    """The parser: one sub-parser a command; the checking options come from config.SETTINGS."""
    from envdoctor.config import add_arguments

    parser = _Parser(prog="envdoctor", description="A doctor for PyTorch training environments.")
    parser.add_argument("--version", action="version", version=f"envdoctor {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    for name, help_text, default_format in (("check", "run all checks and print a human report", "text"),
                                            ("report", "run all checks and print the JSON report (for CI)", "json")):
        checking = sub.add_parser(name, help=help_text)
        checking.add_argument("scripts", nargs="*", metavar="SCRIPT",
                              help="training scripts or folders to check for the spawn guard")
        add_arguments(checking, defaults={"format": default_format})
        checking.set_defaults(handler=_cmd_check, default_format=default_format)
    loader = sub.add_parser("loader", help="run only the DataLoader smoke test")
    add_arguments(loader)
    loader.set_defaults(handler=_cmd_check, default_format="text")

    sub.add_parser("rules", help="list the rule catalog, one line each").set_defaults(handler=_cmd_rules)
    explain = sub.add_parser("explain", help="show one rule's docs: what, why, example, fix")
    explain.add_argument("rule", metavar="RULE", help="a rule id (SYS002) or name (shm-too-small)")
    explain.set_defaults(handler=_cmd_explain)

    compare = sub.add_parser("compare", help="reports from several machines side by side: drift and stragglers")
    compare.add_argument("reports", nargs="+", metavar="REPORT", help="JSON reports, or folders holding them")
    add_arguments(compare, names=("format", "output", "fail_on"))
    compare.set_defaults(handler=_cmd_compare)
    return parser


def _config_from_args(args: argparse.Namespace) -> Config:
    from envdoctor.config import load_config, settings_from_args

    given = settings_from_args(args)
    scripts = tuple(getattr(args, "scripts", ()) or ())
    if scripts:
        given["scripts"] = scripts
    return load_config(given, defaults={"format": args.default_format})


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


def _cmd_rules(args: argparse.Namespace) -> int:
    from envdoctor.catalog import load_catalog

    catalog = load_catalog()
    width = max(len(m.name) for m in catalog.rules)
    for meta in catalog.rules:
        summary = " ".join(meta.summary.split())
        print(f"{meta.id}  {meta.name:<{width}}  {meta.severity.value:<7}  {summary}")
    return EXIT_OK


def _cmd_explain(args: argparse.Namespace) -> int:
    print(explain_text(args.rule))
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


def _cmd_check(args: argparse.Namespace) -> int:
    from envdoctor.engine import check_inputs, run_check

    config = _config_from_args(args)
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
    from envdoctor.config import Config, settings_from_args
    from envdoctor.fleet.compare import compare_paths

    config = Config(**settings_from_args(args))
    check_writable(config.output)
    report = compare_paths(args.reports)
    emit(report, config.format, config.output)
    return report.exit_code(config.fail_on)


def main(argv: Sequence[str] | None = None) -> int:
    from envdoctor.catalog import CatalogError
    from envdoctor.config import ConfigError
    from envdoctor.facts.target import TargetError

    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
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
