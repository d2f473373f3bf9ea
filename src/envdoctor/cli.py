"""The `envdoctor` command: argument parsing and exit codes, nothing else.

Exit codes: 0 nothing at or above --fail-on, 1 findings at or above it (or a
selected rule that could not run), 2 a usage error or envdoctor itself could
not run.

Each command is a sub-parser in `build_parser` whose `handler` takes the
parsed arguments and returns the exit code; adding a command is its name in
`COMMANDS`, a sub-parser and its handler (`add_arguments(parser)` gives it the
checking options, all of them or the ones named). The options themselves are
declared once, in `envdoctor.config.Config`.
"""
from __future__ import annotations

import argparse
import contextlib
import errno
import os
import stat
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from envdoctor import __version__
from envdoctor.config import FORMATS, help_formatter
from envdoctor.errors import UsageError
from envdoctor.model import FAIL_ON_CHOICES

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable

    from envdoctor.config import Config
    from envdoctor.model import Report
    from envdoctor.report import RenderOptions

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
#: The commands, in the order `--help` lists them (tests/test_cli.py checks build_parser makes exactly these).
COMMANDS = ("check", "report", "loader", "rules", "explain", "render", "compare", "fix", "run", "mcp", "health")


#: What each command does, its `--help` description (fix and run declare theirs beside their code).
DESCRIPTIONS = {
    "check": "Inspect the environment (the one envdoctor runs in, or --prefix / -n): packages and channels, "
             "limits, the spawn guard on the SCRIPTs given, storage, the GPU and the torch build, then run the "
             "DataLoader smoke test. Each finding comes with its evidence (-v) and its fix.",
    "report": "The same checks as `check`, printed as the JSON report (schema version 1) for CI and scripts; "
              "--format picks another format.",
    "loader": "Run only the DataLoader smoke test: num_workers=0 against N on the built-in synthetic dataset, "
              "your --dataset or the files under --data; it names the bottleneck and the settings to use.",
    "rules": "List every rule of the catalog: id, name, default severity and what it checks, one line each.",
    "explain": "Print one rule's docs: what it checks, why it matters, an example and the fix (the text of "
               "docs/rules/RULE.md).",
    "render": "Show a report saved by `envdoctor report` in another format, without running the checks again.",
    "compare": "Line up reports from several machines (files or folders of them): version drift, stragglers "
               "and missing nodes.",
    "health": "A node's fast check for a scheduler's health check, Prolog or pre-flight step: the static checks "
              "only (no smoke test, no threshold taken from a measurement), one short line per problem fit for a "
              "drain reason; --expect checks this node against the fleet's agreed values.",
    "mcp": "Serve the checks to AI coding agents over the Model Context Protocol on standard input and output; "
           "paths resolve inside the client's roots (or --root).",
}
_EXIT = "exit codes:\n"
CHECK_EXIT_CODES = (_EXIT + "  0  nothing at or above --fail-on (default error)\n"
                    "  1  findings at or above --fail-on, or a check that could not run (the verdict says "
                    "\"not checked\")\n"
                    "  2  a usage error, or envdoctor itself could not run")
LIST_EXIT_CODES = _EXIT + "  0  printed\n  2  a usage error (an unknown rule)"
RENDER_EXIT_CODES = (_EXIT + "  0  nothing in the saved report at or above --fail-on\n"
                     "  1  saved findings at or above --fail-on, or a check that could not run\n"
                     "  2  a usage error, or REPORT is not a readable report")
COMPARE_EXIT_CODES = (_EXIT + "  0  nothing at or above --fail-on (default error)\n"
                      "  1  findings (drift, stragglers, a missing node, a node's own) at or above it\n"
                      "  2  no file given is a readable report, or a path does not exist")
HEALTH_EXIT_CODES = (_EXIT + "  0  healthy: nothing at or above --fail-on (default error)\n"
                     "  1  a problem at or above --fail-on, or a check that could not run\n"
                     "  2  a usage error (an unreadable --expect file)")
MCP_EXIT_CODES = (_EXIT + "  0  the client closed its input\n  2  a usage error\n"
                  "  143  ended by SIGTERM (its children first)")
#: The checking settings `envdoctor loader` does not take: it runs the smoke test on this machine, alone.
LOADER_LEAVES_OUT = ("no_loader", "deep", "distributed", "distributed_timeout", "against")


def _add(sub: Any, name: str, help_text: str, description: str, epilog: str) -> argparse.ArgumentParser:
    """A command's sub-parser: its one-line help, its description and its exit codes."""
    parser: argparse.ArgumentParser = sub.add_parser(name, help=help_text, description=description, epilog=epilog,
                                                     formatter_class=help_formatter())
    return parser


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one clear line, exit 2, like every other usage error
        self.exit(EXIT_ERROR, f"envdoctor: error: {message} (see `{self.prog} --help`)\n")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser: one sub-parser a command; the checking options come from config.SETTINGS.

    Given the `command` a command line starts with, only that command's sub-parser
    is built: argparse hands everything after the command to it, so no other could
    be reached, and building them all (three of them with every checking option,
    and importing `fix` and `run`) would cost each run more than parsing does.
    """
    from envdoctor.config import add_arguments

    def wanted(name: str) -> bool:
        return command not in COMMANDS or name == command

    parser = _Parser(prog="envdoctor", description="A doctor for PyTorch training environments.",
                     epilog=CHECK_EXIT_CODES + "\n\n`envdoctor COMMAND --help` gives each command's options and "
                            "exit codes.", formatter_class=help_formatter())
    parser.add_argument("--version", action="version", version=f"envdoctor {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    for name, help_text, default_format in (("check", "run all checks and print a human report", "text"),
                                            ("report", "run all checks and print the JSON report (for CI)", "json")):
        if wanted(name):
            checking = _add(sub, name, help_text, DESCRIPTIONS[name], CHECK_EXIT_CODES)
            checking.add_argument("scripts", nargs="*", metavar="SCRIPT",
                                  help="training scripts or folders to check for the spawn guard")
            add_arguments(checking, defaults={"format": default_format})
            checking.set_defaults(handler=_cmd_check, default_format=default_format)
    if wanted("loader"):
        loader = _add(sub, "loader", "run only the DataLoader smoke test", DESCRIPTIONS["loader"], CHECK_EXIT_CODES)
        add_arguments(loader, leave_out=LOADER_LEAVES_OUT)
        loader.set_defaults(handler=_cmd_check, default_format="text")

    if wanted("rules"):
        _add(sub, "rules", "list the rule catalog, one line each", DESCRIPTIONS["rules"],
             LIST_EXIT_CODES).set_defaults(handler=_cmd_rules)
    if wanted("explain"):
        explain = _add(sub, "explain", "show one rule's docs: what, why, example, fix", DESCRIPTIONS["explain"],
                       LIST_EXIT_CODES)
        explain.add_argument("rule", metavar="RULE", help="a rule id (SYS002) or name (shm-too-small)")
        explain.set_defaults(handler=_cmd_explain)

    if wanted("render"):
        rendered = _add(sub, "render", "show a saved JSON report in another format (one run, many outputs)",
                        DESCRIPTIONS["render"], RENDER_EXIT_CODES)
        rendered.add_argument("report", metavar="REPORT", help="a JSON report written by `envdoctor report`")
        rendered.add_argument("--format", choices=FORMATS, default="text", help="output format (default: text)")
        rendered.add_argument("--output", "-o", metavar="FILE",
                              help="write the rendered report to FILE instead of standard output")
        rendered.add_argument("--against", metavar="FILE",
                              help="the file environment findings are shown on (github, sarif)")
        rendered.add_argument("-v", "--verbose", action="store_true", help="show each finding's evidence")
        rendered.add_argument("--fail-on", choices=FAIL_ON_CHOICES, default="error",
                              help="lowest severity of the saved findings that makes the exit code 1 "
                                   "(default: error)")
        rendered.set_defaults(handler=_cmd_render)

    if wanted("compare"):
        compare = _add(sub, "compare", "reports from several machines side by side: drift and stragglers",
                       DESCRIPTIONS["compare"], COMPARE_EXIT_CODES)
        compare.add_argument("reports", nargs="+", metavar="REPORT", help="JSON reports, or folders holding them")
        add_arguments(compare, names=("format", "output", "fail_on"))
        compare.add_argument("--expect", type=int, metavar="N",
                             help="the number of nodes that should have reported (a missing one is FLT010)")
        compare.add_argument("--nodes", metavar="HOSTLIST",
                             help="the nodes that should have reported, in Slurm's host-list syntax "
                                  "(node[01-03,07]); default inside a Slurm job: SLURM_JOB_NODELIST")
        compare.set_defaults(handler=_cmd_compare)

    if wanted("fix"):
        from envdoctor.fix.command import add_parser as add_fix_parser

        add_fix_parser(sub)

    if wanted("run"):
        from envdoctor.loop.command import add_parser as add_run_parser

        add_run_parser(sub, _cmd_run)

    if wanted("mcp"):
        served = _add(sub, "mcp", "serve the checks as tools for AI coding agents (Model Context Protocol, stdio)",
                      DESCRIPTIONS["mcp"], MCP_EXIT_CODES)
        served.add_argument("--root", action="append", default=[], metavar="DIR",
                            help="a folder the tools may read when the client declares no roots (repeatable; "
                                 "default: the working directory)")
        served.set_defaults(handler=_cmd_mcp)
    if wanted("health"):
        from envdoctor.fleet.health import add_arguments as add_health_arguments

        health = _add(sub, "health", "a node's fast, loader-free check for a scheduler's health check, prolog or "
                      "pre-flight", DESCRIPTIONS["health"], HEALTH_EXIT_CODES)
        add_health_arguments(health)
        health.set_defaults(handler=_cmd_health)
    return parser


def _config_from_args(args: argparse.Namespace) -> Config:
    from envdoctor.config import load_config, settings_from_args

    given = settings_from_args(args)
    scripts = tuple(getattr(args, "scripts", ()) or ())
    if scripts:
        given["scripts"] = scripts
    return load_config(given, defaults={"format": args.default_format})


def check_writable(path: str | None, target_prefix: Path | None = None) -> None:
    """Fail before the checks run, not after, when the report cannot be written there.

    Nothing is opened for writing: the file the user has stays as it is until
    the new report is complete (see `write_report`). A path inside the
    inspected environment is refused: envdoctor never writes into its patient.
    """
    if path is None:
        return
    where = Path(path)
    if target_prefix is not None and target_prefix != Path(target_prefix.anchor):
        for candidate in (where.parent.resolve() / where.name, where.resolve()):
            if candidate == target_prefix or target_prefix in candidate.parents:
                raise UsageError(f"will not write {path} inside the inspected environment {target_prefix} "
                                 "(envdoctor never changes the environment it checks): choose a path outside it")
    if where.exists() and not where.is_file():
        if where.is_dir():
            raise UsageError(f"cannot write the report to {path}: it is a folder")
        return  # /dev/stdout, a FIFO a reader waits on: written in place at the end
    folder = where.parent if str(where.parent) else Path(".")
    if not folder.is_dir():
        raise UsageError(f"cannot write the report to {path}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK) or (where.exists() and not os.access(where, os.W_OK)):
        raise UsageError(f"cannot write the report to {path}: permission denied")


def write_report(path: str, text: str, what: str = "the report") -> None:
    """Write `text` to `path` whole or not at all.

    A regular file is written beside its destination under a temporary name
    and renamed over it only when every byte is on disk, so a run that fails
    (or a full disk) leaves the previous file as it was. A device or FIFO
    (`-o /dev/stdout`) is written in place.
    """
    import tempfile  # only a run that writes a file pays for it (shutil, random)

    # A file name that is not UTF-8 must not stop the report being written.
    data = text.encode("utf-8", errors="backslashreplace")
    where = Path(path)
    try:
        if where.exists() and not where.is_file():
            with open(where, "wb") as handle:
                handle.write(data)
            return
        fd, tmp = tempfile.mkstemp(dir=where.parent if str(where.parent) else ".", prefix=f".{where.name}.",
                                   suffix=".envdoctor-tmp")
    except OSError as exc:
        raise UsageError(f"cannot write {what} to {path}: {exc.strerror or exc}") from None
    try:
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                if written <= 0:  # pragma: no cover - os.write raises rather than return 0
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                view = view[written:]
            os.fsync(fd)
            if sys.platform != "win32":
                os.fchmod(fd, _mode_for(where))
        finally:
            os.close(fd)
        if sys.platform == "win32":  # no fchmod; only the read-only bit means anything there
            os.chmod(tmp, _mode_for(where))
        os.replace(tmp, where)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise UsageError(f"cannot write {what} to {path}: {exc.strerror or exc} (the previous file, if any, "
                         "is unchanged)") from None


def _mode_for(where: Path) -> int:
    """The permissions the file keeps (or would get from a plain open)."""
    try:
        return stat.S_IMODE(where.stat().st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _write_stdout(text: str) -> None:
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise UsageError(f"cannot write the report to standard output: {exc.strerror or exc}") from None


def emit(report: Report, fmt: str, output: str | None, svg: str | None = None, options: RenderOptions | None = None) -> None:
    """Render the report to standard output or a file (and an SVG, always the same width, when asked)."""
    from envdoctor.report import RenderOptions, render

    options = options or RenderOptions()
    if fmt == "text" and output is None:
        from envdoctor.report.text import make_console, write

        # A terminal gets its width; a pipe or log gets 80 columns (or $COLUMNS).
        try:
            write(report, make_console(), verbose=options.verbose)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise UsageError(f"cannot write the report to standard output: {exc.strerror or exc}") from None
    else:
        text = render(report, fmt, options)
        if output is None:
            _write_stdout(text)
        else:
            write_report(output, text)
    if svg:
        from envdoctor.report.text import svg_text

        write_report(svg, svg_text(report, verbose=options.verbose), "the SVG")


def _cmd_rules(args: argparse.Namespace) -> int:
    import textwrap

    from envdoctor.catalog import load_catalog

    catalog = load_catalog()
    width = max(len(m.name) for m in catalog.rules)
    columns = terminal_width()
    for meta in catalog.rules:
        summary = " ".join(meta.summary.split())
        head = f"{meta.id}  {meta.name:<{width}}  {meta.severity.value:<7}  "
        # The summary in a column of its own where the terminal is wide enough, else below the rule, indented.
        if columns - len(head) < 40:
            print(head.rstrip())
            head = "    "
        print(textwrap.fill(summary, columns, initial_indent=head, subsequent_indent=" " * len(head),
                            break_on_hyphens=False, break_long_words=False))
    return EXIT_OK


def terminal_width() -> int:
    """The columns `rules` and `explain` fill: the terminal's (or $COLUMNS) on a terminal, else 80."""
    import shutil

    if not sys.stdout.isatty():
        return 80
    return max(40, shutil.get_terminal_size((80, 24)).columns)


def _cmd_explain(args: argparse.Namespace) -> int:
    print(explain_text(args.rule, terminal_width()))
    return EXIT_OK


def explain_text(rule: str, width: int | None = None) -> str:
    """One rule's docs as `envdoctor explain` prints them (docs/rules/<ID>.md shows the same text)."""
    from envdoctor.catalog import load_catalog
    from envdoctor.report.rule_docs import render_rule_docs

    catalog = load_catalog()
    matched = [m for m in catalog.rules if m.id == rule.upper() or m.name == rule.lower()]
    if not matched:
        raise UsageError(f"unknown rule {rule!r} (see `envdoctor rules`)")
    return render_rule_docs(matched[0], "text", **({"width": width} if width else {}))


def _cmd_check(args: argparse.Namespace) -> int:
    from envdoctor.engine import check_inputs, run_check
    from envdoctor.facts.target import resolve_prefix

    config = _config_from_args(args)
    if args.command == "loader":
        config = config.with_overrides(select=config.select or ("DL", "SPW003", "SYS005", "SYS007"), no_loader=False)
    check_inputs(config)
    claim = None
    if config.output:
        from envdoctor.fleet.placement import output_for_task

        output, claim = output_for_task(config.output, single_writer=config.distributed)
        config = config.with_overrides(output=output)
    prefix = resolve_prefix(config.prefix, config.env_name).resolve()
    check_writable(config.output, prefix)
    check_writable(config.svg, prefix)
    if config.distributed:
        from envdoctor.fleet.distributed import run_distributed

        report = run_distributed(config)
        if isinstance(report, int):  # not rank 0: the fleet view is rank 0's to print, its exit code everyone's
            return report
    else:
        report = _run_with_progress(config, run_check)
    if claim is not None:  # one of several tasks: its file is created exclusively (fleet.placement)
        from envdoctor.report import render

        claim.write(render(report, config.format, _render_options(args, config)))
        if config.svg:
            from envdoctor.report.text import svg_text

            write_report(config.svg, svg_text(report, verbose=config.verbose), "the SVG")
    else:
        emit(report, config.format, config.output, config.svg, _render_options(args, config))
    return report.exit_code(config.fail_on)


def _render_options(args: argparse.Namespace, config: Config) -> RenderOptions:
    from envdoctor.report import RenderOptions

    return RenderOptions(verbose=config.verbose, against=config.against,
                         scripts=tuple(config.scripts))


def _run_with_progress(config: Config, run_check: Callable[[Config], Report]) -> Report:
    """Run the checks; a text report bound for a terminal shows the loader stage live on stderr."""
    if config.no_loader or config.format != "text" or not sys.stderr.isatty():
        return run_check(config)
    from envdoctor.loader.progress import showing_progress

    with showing_progress(config.budget):
        return run_check(config)


def _cmd_render(args: argparse.Namespace) -> int:
    from envdoctor.collector import collector_paused
    from envdoctor.report import RenderOptions, load_report
    from envdoctor.verdict import settle

    check_writable(args.output)
    # A million-finding report: the collector walking it again and again was a third of render's CPU
    # (JSON: 22.8 s against 15.5 s without).
    with collector_paused():
        report = settle(load_report(args.report))  # a report saved before the verdict was carried gets one
        emit(report, args.format, args.output, options=RenderOptions(verbose=args.verbose, against=args.against))
    return report.exit_code(args.fail_on)


def _cmd_run(args: argparse.Namespace) -> int:
    from envdoctor.loop.command import handle

    return handle(args, check_writable, emit)


def _cmd_health(args: argparse.Namespace) -> int:
    from envdoctor.fleet.health import handle
    from envdoctor.report import render

    return handle(args, check_writable, write_report, lambda report: render(report, "json"))


def _cmd_mcp(args: argparse.Namespace) -> int:
    from envdoctor.integrations.mcp import serve

    return serve(args.root)


def _cmd_compare(args: argparse.Namespace) -> int:
    from envdoctor.config import Config, settings_from_args
    from envdoctor.fleet.compare import compare_paths

    config = Config(**settings_from_args(args))
    check_writable(config.output)
    report = compare_paths(args.reports, output=config.output, expect=args.expect, nodes=args.nodes,
                           fail_on=config.fail_on)
    emit(report, config.format, config.output)
    return report.exit_code(config.fail_on)


def _looks_like_path(token: str) -> bool:
    """Rule ids, names and families never hold `/` or `.`; a file name nearly always does."""
    return "/" in token or "." in token or os.sep in token


# complexity: 22 — argv is walked once, by hand, to split rule lists and take trailing file names; argparse cannot
#   express both.
def _take_scripts(parser: argparse.ArgumentParser, args: argparse.Namespace, extra: list[str]) -> None:
    """Rule lists split at commas; file names after the options become scripts.

    pre-commit runs `entry args FILE...`, so with `args: [--select, SPW001]` the
    file names follow a rule list; `--` ends the options for any other tool.
    """
    from envdoctor.config import parse_severity_pairs

    scripts: list[str] = list(getattr(args, "scripts", None) or [])
    for key in ("select", "ignore", "severity"):
        values = getattr(args, key, None)
        if not values:
            continue
        kept: list[str | list[tuple[str, str]]] = []
        for token in values:
            parts = [part.strip() for part in token.split(",") if part.strip()]
            if key != "severity" and _looks_like_path(token):
                scripts.append(token)
            elif key == "severity" and "=" not in token and _looks_like_path(token):
                scripts.append(token)
            elif key == "severity":
                try:
                    kept.append(parse_severity_pairs(token))
                except ValueError as exc:
                    parser.error(f"argument --severity: {exc}")
            else:
                kept += parts
        setattr(args, key, kept)
    if "--" in extra:  # everything after it is a file, whatever it looks like
        cut = extra.index("--")
        extra, after = extra[:cut], extra[cut + 1:]
    else:
        after = []
    options = [item for item in extra if item.startswith("-") and item != "-"]
    if options:
        parser.error(f"unrecognized arguments: {' '.join(options)}")
    scripts += extra + after
    if scripts and not hasattr(args, "scripts"):
        parser.error(f"unrecognized arguments: {' '.join(scripts)}")
    if hasattr(args, "scripts"):
        args.scripts = scripts


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    args, extra = parser.parse_known_args(argv)
    _take_scripts(parser, args, extra)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    from envdoctor.catalog import CatalogError
    from envdoctor.config import ConfigError
    from envdoctor.errors import TargetError

    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parse(build_parser(argv[0] if argv else None), argv)
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
