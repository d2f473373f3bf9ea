"""`envdoctor run [options] -- CMD ...`: options, the report and the exit code.

Exit codes: the command's own (128 + N when a signal N ended it; 127 when it
cannot be found, 126 when it cannot be started) — envdoctor observes, it
does not judge the command. With `--stop` envdoctor itself ends the command
once the window closed, so the exit code is then the report's: 0, or 1 for a
finding at or above `--fail-on` (a command that ended on its own before the
window still gives its own code).

The report is written when the window closes in every observed process
(training then goes on untouched), or when the command ends, whichever comes
first: text goes to standard error, so the command's standard output stays
its own; `--output FILE` takes any format; JSON (or another format) without
`--output` goes to standard output once the command has ended.
"""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from envdoctor.config import Config
    from envdoctor.facts.loop import LoopFacts, LoopProof, LoopProofWindow
    from envdoctor.loop.supervisor import CommandRun
    from envdoctor.model import Report

#: The window after warm-up when neither --steps nor --seconds is given: whichever closes first.
DEFAULT_STEPS, DEFAULT_SECONDS, DEFAULT_WARMUP = 200, 30.0, 10
#: --prove: pairs of bounded runs (candidate, then the user's settings, in alternating order).
PROVE_PAIRS = 3
#: --prove: each bounded run's window, in steps.
PROVE_STEPS = 60
#: The settings of the checking options `run` takes, declared once in envdoctor.config.
#: --budget is the time budget of --tune's smoke test.
RUN_SETTINGS = ("format", "output", "fail_on", "verbose", "budget")


#: `run --help`'s epilog (the module docstring says why).
RUN_EXIT_CODES = ("exit codes:\n"
                  "  N    the command's own: 128 + S when signal S ended it, 127 when it cannot be found, 126 when "
                  "it cannot be started\n"
                  "  0/1  with --stop or --prove, once the window closed: the report's (1 for findings at or above "
                  "--fail-on)\n"
                  "  2    a usage error")


def add_parser(sub: Any, handler: Callable[[argparse.Namespace], int]) -> None:
    """The `run` subcommand (called by envdoctor.cli.build_parser, whose `handler` calls `handle`)."""
    from envdoctor.config import add_arguments, help_formatter

    run = sub.add_parser(
        "run", help="run your own training command unchanged and measure how long its loop waits for data",
        description="Run CMD as it is (its output, signals and exit code are its own), observe every DataLoader "
                    "it and its child processes iterate, and report the share of each step that waits for data "
                    "(DL009) with the settings that remove the wait.",
        epilog=RUN_EXIT_CODES, formatter_class=help_formatter())
    run.add_argument("--steps", type=_positive_int, metavar="N", help="steps in the window after warm-up "
                     f"(default: {DEFAULT_STEPS}, or {DEFAULT_SECONDS:g} s, whichever closes first)")
    run.add_argument("--seconds", type=_positive_float, metavar="S", help="seconds in the window after warm-up")
    run.add_argument("--warmup", type=_non_negative_int, metavar="N", default=DEFAULT_WARMUP,
                     help=f"steps left out before the window (default: {DEFAULT_WARMUP})")
    run.add_argument("--stop", action="store_true", help="end the command once the window closed (for CI)")
    run.add_argument("--tune", action="store_true",
                     help="after the window, run the smoke test on the very same loader (dataset, sampler, "
                          "collate_fn, pickled on rank 0), with the measured step as its consumer")
    run.add_argument("--prove", action="store_true",
                     help=f"measure the recommended settings in your loop: {PROVE_PAIRS} pairs of bounded runs of "
                          "the command, the candidate injected against your own settings")
    add_arguments(run, names=RUN_SETTINGS)
    run.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD ...", help="the training command")
    run.set_defaults(handler=handler, default_format="text")


def _positive_int(raw: str) -> int:
    value = int(raw)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {raw}")
    return value


def _non_negative_int(raw: str) -> int:
    value = int(raw)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {raw}")
    return value


def _positive_float(raw: str) -> float:
    value = float(raw)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, not {raw}")
    return value


def window_plan(steps: int | None, seconds: float | None, warmup: int) -> dict[str, object]:
    if steps is None and seconds is None:
        steps, seconds = DEFAULT_STEPS, DEFAULT_SECONDS
    return {"steps": steps, "seconds": seconds, "warmup_steps": warmup}


def exit_status(returncode: int | None) -> int:
    """The shell's convention: a command a signal ended exits 128 + the signal."""
    if returncode is None:
        return 1
    return 128 - returncode if returncode < 0 else returncode


def handle(args: argparse.Namespace, check_writable: Callable[[str | None], None],
           emit: Callable[..., None]) -> int:
    """Run the parsed command; `check_writable` and `emit` are the command line's own report writers."""
    from envdoctor.config import Config
    from envdoctor.errors import UsageError

    argv = list(args.command or [])
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        raise UsageError("nothing to run: give the training command after `--` (envdoctor run -- python train.py)")
    config = Config(format=args.format or "text", output=args.output, fail_on=args.fail_on or "error",
                    verbose=bool(args.verbose), select=RULES, no_loader=True)
    check_writable(config.output)
    plan = window_plan(args.steps, args.seconds, args.warmup)
    if args.tune:
        plan["tune"] = True
    return run_and_report(argv, plan, config, emit, stop=args.stop, prove=args.prove)


#: What `run` says of the loop: the wait (DL009, from the window) and the workers' memory (DL010, from the
#: whole run: said again at the end when the window's report already went out to the terminal).
RULES = ("DL009", "DL010")
LATE_RULES = ("DL010",)


def run_and_report(argv: Sequence[str], plan: dict[str, object], config: Config, emit: Callable[..., None], *,
                   stop: bool = False, prove: bool = False) -> int:
    """Run the command observed, write the report, and return the exit code (see the module docstring)."""
    from envdoctor.facts.loop import loop_facts
    from envdoctor.loop.supervisor import run_command

    usable = _usable_cpus()
    written: list[bool] = []

    def on_window(partial: CommandRun) -> None:
        if _report_now(config) and not prove:
            section = loop_facts(partial, plan)
            _emit(build_report(section, config), config, emit)
            written.append(True)

    tune = bool(plan.get("tune"))
    run = run_command(argv, plan, stop=stop or prove, usable_cpus=usable,
                      on_window=None if tune else on_window)
    section = loop_facts(run, plan)
    if tune and section["outcome"] == "measured":
        config = tuning_config(config, section, run.tune)
    if section["outcome"] == "measured" and prove:
        section["proof"] = prove_in_loop(argv, section, usable)
    say = problem_line(section)
    if say:
        print(f"envdoctor run: {say}", file=sys.stderr)
    report = build_report(section, config)
    # A command that ended before the window closed still gets the judgement of the steps it measured.
    judged = section["outcome"] == "measured" or (report.loop or {}).get("waits_for_data") is not None
    # A file written when the window closed is written again, whole, with how the command ended.
    if (not written or config.output) and (judged or config.output):
        _emit(report, config, emit)
    elif written:  # the window's report went out to the terminal while the command ran: what only the whole
        late = build_report(section, config.with_overrides(select=LATE_RULES))  # run shows, said now
        if late.findings:
            from envdoctor.report.text import make_console, write_findings

            write_findings(late, make_console(file=sys.stderr), "envdoctor run — over the whole run",
                           verbose=config.verbose)
    if section["outcome"] == "measured" and (stop or prove) and run.stopped:
        return int(report.exit_code(config.fail_on))
    return exit_status(run.returncode)


def tuning_config(config: Config, section: LoopFacts, tune: dict[str, Any] | None) -> Config:
    """--tune: the settings that make the report's smoke test measure the loader the observer pickled."""
    from envdoctor.judge.loop import speaker

    lead = speaker(section)
    step = lead["step_s"] if lead else None
    if tune is None or not tune.get("path"):
        section["tune"] = {"skipped": (tune or {}).get("error") or "rank 0 closed no window"}
        return config
    needs = main_names(tune["path"])
    # The script is imported only when the pickled loader holds something of `__main__` that must unpickle.
    main_path = tune.get("main_path") if needs else None
    refusal = needs_unreadable(needs)
    runs_code = None if refusal else script_runs_at_import(main_path)
    if runs_code:
        refusal = f"the pickled DataLoader needs {', '.join(needs)} from the training script (__main__): {runs_code}"
    if refusal:
        os.unlink(tune["path"])
        section["tune"] = {"skipped": refusal}
        return config
    section["tune"] = {"step_time_s": step, "interpreter": tune.get("executable"), "main_path": main_path}
    source = {"kind": "pickle", "path": tune["path"], "sys_path": tune.get("sys_path") or [],
              "main_path": main_path, "description": f"your DataLoader in {section['command'][-1]}"}
    return config.with_overrides(no_loader=False, select=("DL",), step_time=step, prefix=tune.get("prefix"),
                                 loader_source=source)


#: The module names a pickle's globals may carry for the training script run as a program.
_MAIN_MODULES = ("__main__", "__mp_main__")
_STRING_OPS = ("SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "SHORT_BINSTRING", "BINSTRING", "STRING")


def main_names(path: str) -> list[str]:
    """The names of `__main__` the pickled loader refers to (classes, functions defined in the training script),
    read from the pickle's opcodes without running any of it; ["<unreadable: ...>"] when it cannot be read.

    Only these make unpickling need the script: a loader built from a library's Dataset and collate_fn (an
    ImageFolder with transforms, a `datasets.Dataset` with the default collator) holds none, whatever else the
    script does at import.
    """
    import pickletools

    names: list[str] = []
    memo: dict[int, str | None] = {}
    pushed: list[str | None] = []  # what the last opcodes pushed (a string, or None for anything else)
    try:
        with open(path, "rb") as handle:
            for op, arg, _pos in pickletools.genops(handle):
                module: str | None
                name: str | None
                if op.name == "GLOBAL" or op.name == "INST":
                    module, _, name = str(arg).partition(" ")
                    pushed.append(None)
                elif op.name == "STACK_GLOBAL":
                    module, name = (pushed[-2], pushed[-1]) if len(pushed) >= 2 else (None, None)
                    pushed.append(None)
                else:
                    _track(op.name, arg, pushed, memo)
                    continue
                if module in _MAIN_MODULES and name not in names:
                    names.append(str(name))
    except (OSError, ValueError, EOFError) as exc:
        return [f"<unreadable: {type(exc).__name__}: {exc}>"]
    return names


def _track(op: str, arg: object, pushed: list[str | None], memo: dict[int, str | None]) -> None:
    """The few opcodes that carry a STACK_GLOBAL's module and name: strings, and the memo they go through."""
    if op in _STRING_OPS:
        pushed.append(arg if isinstance(arg, str) else None)
    elif op == "MEMOIZE":
        memo[len(memo)] = pushed[-1] if pushed else None
    elif op in ("PUT", "BINPUT", "LONG_BINPUT") and isinstance(arg, int):  # pickletools reads the index as an int
        memo[arg] = pushed[-1] if pushed else None
    elif op in ("GET", "BINGET", "LONG_BINGET") and isinstance(arg, int):
        pushed.append(memo.get(arg))
    elif op not in ("FRAME", "PROTO"):
        pushed.append(None)
    del pushed[:-2]


def needs_unreadable(needs: list[str]) -> str | None:
    if needs and needs[0].startswith("<unreadable"):
        return f"the pickled DataLoader cannot be read for --tune: {needs[0][len('<unreadable: '):-1]}"
    return None


#: Statements a training script may hold at module level for --tune to import it (as `__mp_main__`).
_QUIET_STATEMENTS = ("Import", "ImportFrom", "FunctionDef", "AsyncFunctionDef", "ClassDef", "Assign", "AnnAssign",
                     "Expr", "If", "Pass")


def script_runs_at_import(main_path: str | None) -> str | None:
    """Why the training script cannot be imported for --tune (it would start training), or None.

    Classes defined in the script unpickle only with the script imported; the smoke test imports it
    under `__mp_main__`, as spawn does, which is safe only when its module level defines and guards:
    imports, definitions, assignments of literals and names, and `if __name__ == "__main__":`.
    """
    import ast

    if not main_path:
        return None
    try:
        tree = ast.parse(open(main_path, "rb").read())
    except (OSError, SyntaxError, ValueError) as exc:
        return f"the training script {main_path} cannot be read for --tune: {exc}"
    for node in tree.body:
        kind = type(node).__name__
        if kind not in _QUIET_STATEMENTS:
            return (f"{main_path}:{node.lineno} runs code at import ({kind}); --tune would start it again: move the "
                    "Dataset into a module, or guard the training with if __name__ == \"__main__\":")
        if isinstance(node, ast.Expr) and not isinstance(node.value, ast.Constant):
            return (f"{main_path}:{node.lineno} calls code at import; --tune would run it again: guard it with "
                    "if __name__ == \"__main__\":")
        if isinstance(node, ast.If) and "__name__" not in ast.unparse(node.test):
            return f"{main_path}:{node.lineno} runs code at import (an if that is not the main guard)"
    return None


def _usable_cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))  # type: ignore[attr-defined,unused-ignore]  # Linux only; the except covers the rest
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _report_now(config: Config) -> bool:
    """Whether the report may be written while the command still runs (not into its standard output)."""
    return config.output is not None or config.format == "text"


def _emit(report: Report, config: Config, emit: Callable[..., None]) -> None:
    if config.output is None and config.format == "text":
        from envdoctor.report.text import make_console, write

        write(report, make_console(file=sys.stderr), verbose=config.verbose)
        return
    emit(report, config.format, config.output)


def build_report(section: LoopFacts, config: Config) -> Report:
    from envdoctor.engine import run_check
    from envdoctor.facts import Facts

    return run_check(config, facts=Facts(config, preset={"loop": section}))


def problem_line(section: LoopFacts) -> str | None:
    """One clear line when the run measured nothing, or less than it should have."""
    code = section["returncode"]
    ended = f"the command exited with status {exit_status(code)}" if code not in (0, None) else "the command ended"
    outcome = section["outcome"]
    if outcome == "start-failed":
        return f"could not start the command: {section['start_error']}"
    if outcome == "no-bootstrap":
        return (f"{ended} and no Python process of it loaded the observer (a command that is not Python, or "
                "python -I / -E / -S, which ignore PYTHONPATH): nothing measured")
    if outcome == "no-loader":
        return (f"{ended} without iterating a torch DataLoader ({section['python_processes']} Python "
                "process(es) observed): nothing measured")
    if outcome == "too-short":
        most = max((row["steps"] for row in section["loaders"]), default=0)
        plan = section["plan"]
        want = f"{plan['steps']} steps" if plan.get("steps") else f"{plan.get('seconds')} s"
        from envdoctor.judge.loop import MIN_STEPS

        return (f"{ended} before the window closed: {most} step(s) measured of {want} after "
                f"{plan.get('warmup_steps')} warm-up steps "
                + ("(judged from those)" if most >= MIN_STEPS else "(try a smaller --steps or --warmup)"))
    if code not in (0, None) and not section["stopped"]:
        return f"{ended} (after the window was measured)"
    return None


def prove_in_loop(argv: Sequence[str], section: LoopFacts, usable: int) -> LoopProof:
    """Pairs of bounded runs of the command: the candidate settings injected, and the user's own.

    The candidate is the loop judgement of the window measured so far (the report's, decided with the proof,
    judges the same window); each bounded run is read for its speaking process's batches/s alone.
    """
    from envdoctor.facts.loop import loop_facts
    from envdoctor.judge.loop import judge_loop, speaker
    from envdoctor.loop.supervisor import run_command

    judged = judge_loop(section)
    rec, settings = judged["recommendation"], judged["settings"] or {}
    if not rec:
        return {"skipped": "nothing to prove: no setting is predicted to remove the wait"}
    plan = {"steps": PROVE_STEPS, "seconds": None, "warmup_steps": section["plan"].get("warmup_steps") or 0}
    candidate = {"num_workers": rec["num_workers"], "prefetch_factor": rec["prefetch_factor"],
                 "persistent_workers": rec["persistent_workers"], "dataset": settings.get("dataset"),
                 "batch_size": settings.get("batch_size")}
    windows: list[LoopProofWindow] = []
    for pair in range(PROVE_PAIRS):
        order = ("candidate", "current") if pair % 2 == 0 else ("current", "candidate")
        rates: dict[str, float] = {}
        for which in order:
            shown = dict(plan, inject=candidate) if which == "candidate" else plan
            run = run_command(argv, shown, stop=True, usable_cpus=usable)
            lead = speaker(loop_facts(run, shown))
            rate = lead["batches_per_s"] if lead else None
            if not rate:
                return {"current": int(settings.get("num_workers") or 0), "candidate": rec["num_workers"],
                        "windows": windows, "cut": f"a bounded run ({which} settings) measured no window"}
            rates[which] = float(rate)
        # Steps of the real loop, a batch each: batches per second, not samples.
        windows.append({"order": "candidate-first" if order[0] == "candidate" else "current-first",
                        "current_batches_per_s": rates["current"], "candidate_batches_per_s": rates["candidate"]})
    return {"current": int(settings.get("num_workers") or 0), "candidate": int(rec["num_workers"]),
            "windows": windows, "cut": None, "steps": PROVE_STEPS}
