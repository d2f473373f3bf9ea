"""`envdoctor fix` and `envdoctor fix --undo`: options, confirmation and exit codes.

Exit codes: 0 every planned finding is gone (or there was nothing to fix; for
--undo: everything restored), 1 some remain or a new one appeared, or the fix
failed its verification and was rolled back (undo: something could not be
restored), 2 nothing could run, the user declined, no terminal and no --yes,
or another fix holds the lock.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from envdoctor.config import Config
    from envdoctor.fix.execute import Outcome, StepResult
    from envdoctor.fix.lock import FixLock
    from envdoctor.fix.plan import Plan
    from envdoctor.fix.verify import Verification
    from envdoctor.model import Report

    #: The checker that plans and re-checks: the engine's run_check.
    Checker = Callable[[Config], Report]

EXIT_OK, EXIT_REMAIN, EXIT_NOTHING = 0, 1, 2


#: The checking settings `fix` takes, declared once in envdoctor.config.
FIX_SETTINGS = ("prefix", "env_name", "select", "ignore")


#: `fix --help`'s epilog (docs/fix.md#exit-codes).
FIX_EXIT_CODES = ("exit codes:\n"
                  "  0  every planned finding is gone, or nothing to fix (--undo: restored, tree hash equal)\n"
                  "  1  some remain or a new one appeared, or verification failed and the fix was rolled back "
                  "(--undo: some paths differ)\n"
                  "  2  nothing could run, declined, no terminal without --yes, or another fix holds the lock "
                  "(--undo: refused)")


def add_parser(sub: Any) -> None:
    """The `fix` subcommand (called by envdoctor.cli.build_parser)."""
    from envdoctor.config import add_arguments, help_formatter

    fix = sub.add_parser("fix", help="apply the fixes of the current findings, re-check, journal for undo",
                         description="Plan from a fresh static check, run each finding's fix steps with the tool "
                                     "that owns the files, move removed files into a journal, then check again.",
                         epilog=FIX_EXIT_CODES, formatter_class=help_formatter())
    add_arguments(fix, names=FIX_SETTINGS)
    fix.add_argument("--dry-run", action="store_true", help="print the plan and change nothing")
    fix.add_argument("--yes", "-y", action="store_true", help="run the plan without asking")
    fix.add_argument("--undo", action="store_true",
                     help="put back what the last fix of the target (the environment envdoctor runs in, or "
                          "--prefix/-n) changed, byte for byte; an interrupted undo is finished")
    fix.add_argument("--list", action="store_true", dest="list_journals",
                     help="with --undo: list the journals it would consider, and change nothing")
    fix.add_argument("--format", choices=("text", "json"), default="text", help="output format (default: text)")
    fix.set_defaults(handler=run)


def _say(lines: list[str], fmt: str) -> None:
    # With --format json, stdout carries only the JSON: the human lines go to stderr.
    stream = sys.stderr if fmt == "json" else sys.stdout
    for line in lines:
        print(line, file=stream)


def _confirm(count: int, prefix: str) -> bool | None:
    """True/False from a terminal user; None when there is no terminal to ask."""
    if not sys.stdin.isatty():
        return None
    try:
        answer = input(f"Run these {count} step(s) on {prefix}? [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


def run(args: argparse.Namespace, check: Checker | None = None) -> int:
    """Run `fix` as parsed; `check` is the checker that plans and re-checks (the engine's run_check)."""
    from envdoctor.fix.journal import JournalError
    from envdoctor.fix.lock import Locked

    try:
        return _run(args, check)
    except (JournalError, Locked) as exc:
        print(f"envdoctor: error: {exc}", file=sys.stderr)
        return EXIT_NOTHING


def _lock(args: argparse.Namespace) -> FixLock:
    """The journal folder's lock, held while a fix or an undo changes anything (the second one exits 2)."""
    from envdoctor.fix.journal import journal_root
    from envdoctor.fix.lock import FixLock

    what = ("fix --undo" if args.undo else "fix") + (f" --prefix {args.prefix}" if args.prefix else
                                                     f" -n {args.env_name}" if args.env_name else "")
    return FixLock(journal_root(), what)


def _run(args: argparse.Namespace, check: Checker | None) -> int:

    if args.undo:
        return _undo(args)
    if getattr(args, "list_journals", False):
        print("envdoctor: error: --list goes with --undo (`envdoctor fix --undo --list`)", file=sys.stderr)
        return EXIT_NOTHING
    if check is None:
        from envdoctor.engine import run_check

        check = run_check
    return _fix(args, check)


def _undo_config(args: argparse.Namespace) -> Config:
    """The target `fix` would take with these options (command line, then pyproject.toml), for undo."""
    from envdoctor.config import load_config, settings_from_args

    given = {k: v for k, v in settings_from_args(args).items() if k in FIX_SETTINGS}
    return load_config(given, defaults={"format": "text"})


def _undo(args: argparse.Namespace) -> int:
    from envdoctor.errors import TargetError
    from envdoctor.facts.target import resolve_prefix
    from envdoctor.fix import render
    from envdoctor.fix.undo import candidates, considered, undo_last

    config = _undo_config(args)
    try:
        prefix = resolve_prefix(config.prefix, config.env_name)
    except TargetError as exc:
        print(f"envdoctor: error: {exc}", file=sys.stderr)
        return EXIT_NOTHING
    if getattr(args, "list_journals", False):
        found = considered(candidates(prefix))
        if args.format == "json":
            print(json.dumps({"prefix": str(prefix), "journals": [c.to_dict() for c in found]}, indent=2))
        else:
            _say(render.journals_text(prefix, found), "text")
        return EXIT_OK

    def own_roots() -> list[str]:
        from envdoctor.facts import Facts
        from envdoctor.fix.state import write_roots

        return write_roots(dict(Facts(config)["target"]))

    with _lock(args):
        undone = undo_last(prefix, own_roots=own_roots)
    if args.format == "json":
        print(json.dumps(undone.to_dict(), indent=2))
    else:
        _say(render.undo_text(undone), "text")
    return undone.exit_code


def _fix(args: argparse.Namespace, run_check: Checker) -> int:
    if args.dry_run:  # changes nothing, so it waits for no one
        return _plan_and_run(args, run_check)
    with _lock(args):  # held from the check on: a second fix would plan from a state this one is changing
        return _plan_and_run(args, run_check)


def _plan_and_run(args: argparse.Namespace, run_check: Checker) -> int:
    from envdoctor.config import load_config, settings_from_args
    from envdoctor.fix import render
    from envdoctor.fix.plan import make_plan

    given = {k: v for k, v in settings_from_args(args).items() if k in FIX_SETTINGS}
    config = load_config(given, defaults={"format": "text"})
    config = config.with_overrides(no_loader=True, distributed=False, format="text", scripts=())
    before = run_check(config)
    plan = make_plan(before)
    fmt = args.format

    def finish(code: int, message: str, results: list[StepResult] | None = None, outcome: Outcome | None = None,
               journal: str | None = None, verification: Verification | None = None) -> int:
        if fmt == "json":
            sys.stdout.write(render.fix_json(plan, dry_run=args.dry_run, journal=journal, results=results or [],
                                             outcome=outcome, exit_code=code, message=message,
                                             verification=verification))
        else:
            _say(render.results_text(results or [], outcome, journal, verification) + ([message] if message else []),
                 "text")
        return code

    _say(render.plan_text(plan), fmt)
    if not plan.planned and before.errors:
        skipped = "; ".join(f"{e.get('rule')}: {e.get('message')}" for e in before.errors[:3])
        return finish(EXIT_NOTHING, f"the check could not run every selected rule, so nothing is planned ({skipped})")
    if not plan.planned:
        return finish(EXIT_OK if not plan.without_steps else EXIT_NOTHING,
                      "nothing to fix" if not plan.without_steps else "no finding has a fix envdoctor can run")
    if not plan.runnable:
        return finish(EXIT_NOTHING, "nothing could run: every step was skipped (reasons above)")
    if args.dry_run:
        return finish(EXIT_OK, "dry run: nothing was changed")
    if not args.yes:
        answer = _confirm(len(plan.runnable), str(plan.target.get("prefix")))
        if answer is None:
            return finish(EXIT_NOTHING, "envdoctor: error: fix changes the environment and there is no terminal "
                                        "to ask: pass --yes to run the plan (or --dry-run to only see it)")
        if not answer:
            return finish(EXIT_NOTHING, "nothing was changed")
    return _apply(plan, before, config, run_check, finish)


def _apply(plan: Plan, before: Report, config: Config, run_check: Checker, finish: Callable[..., int]) -> int:
    """Journal, before-state, steps, verification (rolled back when it fails), then the re-check."""
    from envdoctor.fix.execute import Executor, recheck
    from envdoctor.fix.journal import Journal, JournalError
    from envdoctor.fix.verify import verify_fix

    journal = Journal.create(dict(before.target))
    executor = Executor(plan, journal)
    try:
        results = executor.run()
    except JournalError as exc:
        if "before" not in journal.manifest:
            raise  # no step ran: the message says nothing was changed
        # A step may have run: the before-state is kept, so undo can still put everything back.
        raise JournalError(f"{exc}; a step may have changed the environment: `envdoctor fix --undo` restores it "
                           f"from {journal.path} (free some space first)") from None
    if not any(r.status == "done" for r in results):
        failed = any(r.status == "failed" for r in results)
        return finish(EXIT_NOTHING, "no step succeeded" + (": a failed step may have changed something, "
                                                            "`envdoctor fix --undo` puts it back" if failed else ""),
                      results, journal=str(journal.path) if failed else None)
    checked = verify_fix(plan, journal)
    if not checked.ok:
        from envdoctor.fix.undo import undo

        back = undo(journal, check_conflicts=False)
        said = "; ".join(checked.problems[:5]) + (f" (and {len(checked.problems) - 5} more)"
                                                  if len(checked.problems) > 5 else "")
        if back.refused or back.stopped:
            rolled = ("the rollback could not finish: " + "; ".join(back.refused + back.problems)
                      + f"; `envdoctor fix --undo` restores the before-state from {journal.path}")
        else:
            rolled = "rolled back: " + ("; ".join(back.restored) if not back.problems else
                                        "but these paths still differ from before the fix: " + "; ".join(back.problems))
        return finish(EXIT_REMAIN, f"the fix failed its verification, so it was undone ({said}); {rolled}",
                      results, journal=str(journal.path), verification=checked)
    if checked.removed:
        executor.record_after()
        journal.save()
    outcome = recheck(config, plan, before, run_check)
    code = EXIT_OK if not outcome.remaining and not outcome.new else EXIT_REMAIN
    summary = f"{len(outcome.fixed)} fixed, {len(outcome.remaining)} still there, {len(outcome.new)} new"
    return finish(code, summary, results, outcome, str(journal.path), verification=checked)
