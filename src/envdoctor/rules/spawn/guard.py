"""SPW rules: the spawn guard and the start method of DataLoader workers.

SPW001 missing-main-guard: a script starts workers at import time, outside
`if __name__ == "__main__":` — under spawn or forkserver every worker
re-imports the script and dies bootstrapping.
SPW002 start-method: which start method the workers will use on the target
(from its Python version and platform, and what the script itself sets), what
spawn/forkserver cost, and CUDA initialised before forked workers.
SPW004 unparsable-script: a script given to check (or a project module it
imports, or a notebook cell) cannot be read or parsed.
SPW005 notebook-main-objects: a notebook defines a Dataset, sampler,
collate_fn or worker_init_fn that DataLoader workers must unpickle; spawn
does not re-run a notebook, so under spawn/forkserver the workers cannot find it.

They judge the "scripts" section (facts/scripts.py) and the target's Python
version and platform — or the ones asked about with `--platform` and
`--python-version`; SPW003 (unpicklable dataset) lives with the loader.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from typing import Any

from envdoctor.facts import Facts
from envdoctor.facts.scripts import MainObject, ScriptFile, StartMethodCall, WorkerStart
from envdoctor.model import Location, Severity
from envdoctor.rules import Hit

BOOTSTRAP_ERROR = ("An attempt has been made to start a new process before the current process "
                   "has finished its bootstrapping phase")
STARTS_PROCESSES = ("dataloader", "process-start", "pool", "manager", "process-pool", "torch-spawn", "lightning",
                    "loader-passed")
SPAWN_PLACES = "macOS, Windows and Linux with Python 3.14+"
WORKER_COST = ("each worker is a fresh interpreter that re-imports the main script and everything it "
               "imports (torch alone takes 1-3 s), and the dataset, collate_fn and worker_init_fn are "
               "pickled and sent to every worker each time an iterator is created (every epoch unless "
               "persistent_workers=True)")


_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*))?", re.IGNORECASE)


def suppressed(code: str, rule: str) -> bool:
    """`# noqa` or `# noqa: SPW001` on the line, the way flake8 and ruff read it."""
    match = _NOQA.search(code)
    if not match:
        return False
    codes = match.group("codes")
    return codes is None or rule in re.split(r"[\s,]+", codes.upper())


def default_start_method(python: str | None, platform: str | None) -> tuple[str | None, str]:
    """The start method multiprocessing (and so DataLoader) uses by default, and why.

    Linux: fork before Python 3.14, forkserver from 3.14; macOS (since 3.8)
    and Windows: spawn. `platform` is sys.platform or a conda subdir name.
    """
    plat = (platform or "").lower()
    version = _version_tuple(python)
    where = f"the target is Python {python or '?'} on {platform or '?'}"
    if plat.startswith(("win", "cygwin")):
        return "spawn", f"spawn is the only start method on Windows; {where}"
    if plat.startswith(("darwin", "osx", "mac")):
        return "spawn", f"spawn is the default on macOS since Python 3.8; {where}"
    if plat.startswith(("linux", "freebsd", "openbsd", "netbsd", "sunos", "aix")):
        if version is not None and version >= (3, 14):
            return "forkserver", f"forkserver is the default on POSIX from Python 3.14; {where}"
        if version is None:
            return None, f"the Python version of the target is unknown; {where}"
        return "fork", f"fork is the default on Linux before Python 3.14; {where}"
    return None, f"the platform is not one envdoctor knows; {where}"


def _newer(python: str | None, than: str | None) -> bool:
    """Is Python `python` (X.Y...) a newer minor version than `than`?"""
    a, b = _version_tuple(python), _version_tuple(than)
    return a is not None and b is not None and a > b


def _version_tuple(python: str | None) -> tuple[int, int] | None:
    try:
        major, minor = str(python).split(".")[:2]
        return int(major), int(minor)
    except (ValueError, AttributeError):
        return None


def _target(facts: Facts) -> tuple[str | None, str | None]:
    """The target's Python version and platform, or the ones `--python-version`/`--platform` ask about."""
    target = facts.get("target") or {}
    python = getattr(facts.config, "python_version", None) or target.get("python")
    platform = getattr(facts.config, "platform", None) or target.get("platform")
    return python, platform


def _default_method(facts: Facts) -> tuple[str | None, str]:
    """The target's default start method and why; says so when `--platform`/`--python-version` asked."""
    python, platform = _target(facts)
    method, reason = default_start_method(python, platform)
    asked = [f"--{flag.replace('_', '-')} {value}" for flag in ("platform", "python_version")
             if (value := getattr(facts.config, flag, None))]
    if asked:
        reason += f" (as asked with {' and '.join(asked)})"
    return method, reason


def _files(facts: Facts) -> list[ScriptFile]:
    section = facts["scripts"]
    return list(section["files"]) if section is not None else []


def path_followed(start: WorkerStart) -> list[str]:
    """file:line of each step from the module-level statement to the start itself."""
    def at(where: Mapping[str, object]) -> str:
        cell = f" (cell {where['cell']})" if where.get("cell") else ""
        return f"{where['path']}:{where['line']}{cell}"
    steps = [at(step) for step in start["via"]] + [at(start)]
    return [s for i, s in enumerate(steps) if i == 0 or s != steps[i - 1]]


def effective_method(start: WorkerStart, script: ScriptFile, default: str | None) -> tuple[str | None, str]:
    """The start method one worker start will use: its own context, the script's choice, the default."""
    context = start.get("context")
    if context:
        how = ("torch.multiprocessing.spawn" if start["kind"] == "torch-spawn"
               else f"{start['launcher']}(), which starts what it runs with fork" if start.get("launcher")
               else "its multiprocessing_context")
        cell = f"cell {start['cell']}, " if start.get("cell") else ""
        return context, f"set by {how} ({cell}line {start['line']})"
    chosen: StartMethodCall | None = None
    for call in script.get("start_method_calls", []):
        if call["seq"] < start["seq"] and call.get("method"):
            chosen = call
    if chosen is not None:
        cell = f"cell {chosen['cell']}, " if chosen.get("cell") else ""
        return chosen.get("method"), f"set by set_start_method({chosen.get('method')!r}) at {cell}line {chosen['line']}"
    return default, "the default"


def _via_text(start: WorkerStart, script_path: str) -> list[str]:
    steps = []
    for step in start["via"]:
        where = f"line {step['line']}" if step["path"] == script_path else f"{step['path']}:{step['line']}"
        steps.append(f"{step.get('function')}{'' if str(step.get('function')).startswith('import ') else '()'} "
                     f"{'at' if str(step.get('function')).startswith('import ') else 'called at'} {where}")
    return steps


def _guard_fix(script: ScriptFile, start: WorkerStart) -> str:
    name = script["path"]
    entry = start["entry"]
    guard = script.get("guard_lines") or []
    where = (f"the existing `if __name__ == \"__main__\":` block at line {guard[0]}" if guard
             else "a new `if __name__ == \"__main__\":` block at the end of the file")
    if start["kind"] == "loader-passed":
        return (f"Call `{entry['code']}` (line {entry['line']}) only from {where}, or make "
                f"{start.get('callee')} readable so envdoctor can tell whether it iterates the loader:\n"
                f"    if __name__ == \"__main__\":\n        {entry['code']}")
    if start["via"]:
        return (f"Call `{entry['code']}` (line {entry['line']}) only from {where}:\n"
                f"    if __name__ == \"__main__\":\n        {entry['code']}\n"
                f"so the workers, which re-import {name}, do not run it.")
    return (f"Move the code that starts the workers (line {start['line']}: `{start['code']}`) into a "
            f"function such as `def main():` and call it from {where}:\n"
            f"    if __name__ == \"__main__\":\n        main()\n"
            "Keep only imports, definitions and cheap constants at module level.")


def find_missing_main_guard(facts: Facts) -> Iterator[Hit]:
    """SPW001: workers or processes started at import time, outside the main guard.

    Never on a notebook: spawn does not re-run it, so a main guard is not the fix (SPW005 is).
    """
    default, default_reason = _default_method(facts)
    # The machine itself runs Windows: spawn is all there is, whatever --platform asks about.
    on_windows = str((facts.get("target") or {}).get("platform") or "").startswith("win")
    for script in _files(facts):
        if script["status"] != "ok" or script.get("kind") == "notebook":
            continue
        hits = []
        # One finding per start site: a module-level statement, pointing at the first start it
        # reaches (where a re-importing worker dies); the later ones it reaches go with it.
        sites: dict[tuple[str, int], list[WorkerStart]] = {}
        for start in script.get("worker_starts", []):
            if start["guarded"] or start["kind"] not in STARTS_PROCESSES:
                continue
            if start.get("only_with"):
                # num_workers from a flag or config entry whose default is 0: the script as run starts
                # no worker (the facts keep the start, with the option that would make it one).
                continue
            if suppressed(start["code"], "SPW001") or suppressed(start["entry"]["code"], "SPW001"):
                continue
            entry = start["entry"]
            sites.setdefault((str(entry.get("path", script["path"])), int(entry["line"])), []).append(start)
        for starts in sites.values():
            first, *rest = sorted(starts, key=lambda s: s["seq"])
            hit = _missing_guard_hit(script, first, default, default_reason, on_windows)
            if rest:
                hit = replace(hit, evidence={**hit.evidence, "then_starts": [
                    {"path": s["path"], "line": s["line"], "code": s["code"]} for s in rest]})
            hits.append((first, hit))
        if len(hits) > 1:
            # Every start of the script has the same fix: one guard around all of them.
            fix = _script_fix(script, [start for start, _ in hits])
            hits = [(start, replace(hit, fix=fix)) for start, hit in hits]
        for _, hit in hits:
            yield hit


def _script_fix(script: ScriptFile, starts: list[WorkerStart]) -> str:
    """One fix for a script with several starts: the module-level statements that reach them, under one guard."""
    entries: dict[tuple[str, int], str] = {}
    for start in starts:
        entry = start["entry"]
        entries.setdefault((str(entry.get("path", script["path"])), int(entry["line"])), str(entry["code"]))
    guard = script.get("guard_lines") or []
    where = (f"the existing `if __name__ == \"__main__\":` block at line {guard[0]}" if guard
             else "a new `if __name__ == \"__main__\":` block at the end of the file")
    lines = ", ".join(str(line) for _, line in sorted(entries))
    return (f"Move the module-level statements that start workers (lines {lines}) into a function such as "
            f"`def main():` and call it from {where}:\n"
            f"    def main():\n" + "".join(f"        {code}\n" for code in list(entries.values())[:6])
            + ("        ...\n" if len(entries) > 6 else "")
            + "    if __name__ == \"__main__\":\n        main()\n"
            f"so the workers, which re-import {script['path']}, run none of them.")


def _worker_death(start: WorkerStart) -> str:
    """How each spawned worker dies on this start, re-importing the script."""
    if start.get("built_under_guard"):
        built = (start.get("constructed_at") or {}).get("line")
        return ("every worker re-imports the script, skips `if __name__ == \"__main__\":`, where the loader is "
                f"built (line {built}), and dies here on a loader it never built")
    return f"every worker re-imports the script and fails with \"{BOOTSTRAP_ERROR}\""


def _where_it_dies(method: str | None, method_source: str, default_reason: str, forced_fork: bool,
                   on_windows: bool, when: str) -> str:
    """The message's last clause: where and with what the run dies, from the start method on this target."""
    with_it = f" with {when}" if when else ""
    if on_windows and method not in ("spawn", "forkserver"):
        return ("this machine runs Windows, where spawn is the only start method whatever the script or "
                "--platform asks for, so the run dies here" + with_it)
    if method in ("spawn", "forkserver"):
        source_text = default_reason if method_source == "the default" else method_source
        return f"this target uses {method} ({source_text}), so the run dies here" + with_it
    if method is None:
        return f"the start method on this target could not be worked out ({default_reason})"
    if forced_fork:
        return "it works only because the script forces fork, which Windows lacks and which macOS considers unsafe"
    return f"it runs on this target only because fork is the default here; it dies on {SPAWN_PLACES}" + with_it


# complexity: 22 — the message is worded from the worker count's source, the options a branch needs and the start
#   method (its last clause: _where_it_dies); the branches are the wording's.
def _missing_guard_hit(script: ScriptFile, start: WorkerStart, default: str | None, default_reason: str,
                       on_windows: bool = False) -> Hit:
    method, method_source = effective_method(start, script, default)
    forced_fork = method == "fork" and method_source != "the default" and not on_windows
    workers = start.get("num_workers")
    loaderish = start["kind"] in ("dataloader", "loader-passed")
    only_with = start.get("only_with")
    # A branch on an option that is off unless given: the start is real, but reached only with it.
    needs = start.get("needs")
    when = " and ".join(c for c in (only_with, needs) if c)
    if workers is not None:
        workers_text = f"num_workers={workers}" + (
            "" if start.get("num_workers_source") in (None, "literal") or "default" not in str(
                start.get("num_workers_source")) else f" from {start.get('num_workers_source')}")
    elif only_with:
        # An option or config entry that defaults to 0: workers start only when the user raises it.
        workers_text = (f"num_workers from {start.get('num_workers_source')}: workers start only with {only_with}")
    else:
        workers_text = f"num_workers={start.get('num_workers_source')} (not known before run time)"
    what = f"{start.get('starts')} ({workers_text})" if loaderish else str(start.get("starts"))
    via = _via_text(start, script["path"])
    followed = path_followed(start)
    here = _where_it_dies(method, method_source, default_reason, forced_fork, on_windows, when)
    where = f"{start['path']}:{start['line']}"
    if start["kind"] == "loader-passed":
        message = (f"{where}: at import time, outside `if __name__ == \"__main__\":`, the script {what}. "
                   f"If {start.get('callee')}() iterates the loader, every worker re-imports the script under "
                   f"spawn/forkserver and fails with \"{BOOTSTRAP_ERROR}\"; {here}.")
    else:
        message = (f"{where}: {what} at import time, outside `if __name__ == \"__main__\":`"
                   + (f" (reached through {' -> '.join(via)}; path followed: {' → '.join(followed)})"
                      if via else "")
                   + f". Under spawn/forkserver {_worker_death(start)}; {here}.")
    evidence: dict[str, Any] = {
        "path": start["path"],
        "script": script["path"],
        "line": start["line"],
        "code": start["code"],
        "starts": start.get("starts"),
        "kind": start["kind"],
        "via": via,
        "path_followed": followed,
        "module_level_statement": {"path": start["entry"].get("path", script["path"]),
                                   "line": start["entry"]["line"], "code": start["entry"]["code"]},
        "start_method": method,
        "start_method_source": method_source if method_source != "the default" else default_reason,
    }
    if needs:
        evidence["needs"] = needs
    if loaderish:
        evidence.update(num_workers=workers, num_workers_source=start.get("num_workers_source"))
        if only_with:
            evidence["only_with"] = only_with
        if start.get("trainer"):
            evidence["trainer"] = start.get("trainer")
    if start["kind"] == "loader-passed":
        evidence.update(callee=start.get("callee"), unreadable_because=start.get("reason"))
    return Hit(
        message=message,
        evidence=evidence,
        fix=_guard_fix(script, start),
        location=Location(start["path"], start["line"], start["column"]),
        # Forced fork works today; a worker count only known at run time (args.workers)
        # may be 0; a function envdoctor cannot read may not iterate the loader. Real
        # risks but not certain deaths: warnings, not errors.
        severity=Severity.WARNING if forced_fork or start["kind"] == "loader-passed"
        or (start["kind"] == "dataloader" and workers is None) else None,
    )


# complexity: 29 — the start method comes from the target's default or from each script's loaders and calls, and spawn
#   and forkserver each give their own finding; the branches follow those sources.
def find_start_method(facts: Facts) -> Iterator[Hit]:
    """SPW002: the start method DataLoader workers will use, its cost, and CUDA before fork."""
    python, platform = _target(facts)
    default, default_reason = _default_method(facts)
    section = facts["scripts"]
    if section is None:
        if default in ("spawn", "forkserver"):
            yield Hit(
                message=(f"DataLoader workers on this target start with {default}: {default_reason}. "
                         f"That means {WORKER_COST}."),
                evidence={"start_method": default, "python": python, "platform": platform,
                          "source": default_reason},
                fix=_cost_fix(default, persistent=False),
            )
        return
    for script in section["files"]:
        if script["status"] != "ok":
            continue
        loaders = [s for s in script.get("worker_starts", []) if s["kind"] == "dataloader"]
        if not loaders:
            continue
        set_calls = [{"method": c.get("method"), "line": c["line"]} for c in script.get("start_method_calls", [])]
        by_method: dict[str, list[tuple[WorkerStart, str]]] = {}
        for start in loaders:
            method, source = effective_method(start, script, default)
            by_method.setdefault(method or "unknown", []).append((start, source))
        for method in ("spawn", "forkserver"):
            starts = by_method.get(method)
            if not starts:
                continue
            first, source = starts[0]
            persistent = all(s.get("persistent_workers") for s, _ in starts)
            source_text = default_reason if source == "the default" else source
            yield Hit(
                message=(f"{script['path']}: the DataLoader workers started at "
                         f"{_lines(s for s, _ in starts)} use {method} ({source_text}): {WORKER_COST}."
                         + (" persistent_workers=True is already set, so workers start once."
                            if persistent else "")),
                evidence={"path": script["path"], "start_method": method, "source": source_text,
                          "set_by_script": set_calls, "python": python, "platform": platform,
                          "worker_starts": [s["line"] for s, _ in starts],
                          "persistent_workers": persistent},
                fix=_cost_fix(method, persistent),
                location=Location(script["path"], first["line"], first["column"]),
            )
        forked = []
        for start, source in by_method.get("fork", []):
            before = [c for c in script.get("cuda_inits", []) if c["seq"] < start["seq"]]
            if before:
                forked.append((start, source, before[0]))
        if forked:
            start, source, cuda = forked[0]
            uses = any(s.get("worker_uses_cuda") for s, _, _ in forked)
            source_text = default_reason if source == "the default" else source
            yield Hit(
                message=(f"{script['path']}: DataLoader workers started at {_lines(s for s, _, _ in forked)} "
                         f"are forked ({source_text}) after CUDA was initialised at line {cuda['line']} "
                         f"(`{cuda['code']}`). A forked worker cannot use CUDA: any CUDA call in the dataset, "
                         "collate_fn or worker_init_fn fails with \"Cannot re-initialize CUDA in forked "
                         "subprocess\""
                         + (", and this script's worker-side code does touch CUDA." if uses else
                            ". Nothing in this script's worker-side code touches CUDA, so this is safe "
                            "as long as it stays that way.")),
                evidence={"path": script["path"], "start_method": "fork", "source": source_text,
                          "cuda_init_line": cuda["line"], "cuda_init_code": cuda["code"],
                          "worker_starts": sorted({s["line"] for s, _, _ in forked}),
                          "worker_code_uses_cuda": uses, "python": python, "platform": platform},
                fix=("Keep CUDA out of the workers (return CPU tensors from the dataset and move batches to "
                     "the GPU in the training loop, with pin_memory=True), or start the workers without fork: "
                     "DataLoader(..., multiprocessing_context=\"spawn\") or \"forkserver\", "
                     "under `if __name__ == \"__main__\":`."),
                location=Location(script["path"], start["line"], start["column"]),
                # Forking after CUDA is the usual Linux GPU script and harmless while the workers
                # stay on the CPU: only worker code that touches CUDA makes it a warning.
                severity=Severity.WARNING if uses else None,
            )


def _lines(starts: Iterable[WorkerStart]) -> str:
    lines = sorted({s["line"] for s in starts})
    return ("line " if len(lines) == 1 else "lines ") + ", ".join(map(str, lines))


def _cost_fix(method: str, persistent: bool) -> str:
    steps = [] if persistent else ["pass persistent_workers=True so the workers start once, not every epoch"]
    steps += ["keep the dataset cheap to pickle (store paths, open files and load big arrays lazily in "
              "the worker, e.g. on the first __getitem__ or in worker_init_fn)",
              "keep the main script's import-time work small, since every worker repeats it"]
    if method == "forkserver":
        steps.append("where nothing in the parent uses CUDA or threads, multiprocessing_context=\"fork\" "
                     "avoids the re-import on Linux")
    text = "; ".join(steps)
    return text[0].upper() + text[1:] + "."


def find_unparsable_script(facts: Facts) -> Iterator[Hit]:
    """SPW004: a script given to check that cannot be read, decoded or parsed, or is not Python source."""
    target_python, _ = _target(facts)
    for script in _files(facts):
        status = script.get("status")
        if status == "ok":
            continue
        path = script["path"]
        error = script.get("error", "unknown problem")
        line, column = script.get("line"), script.get("column")
        if status == "unreadable":
            message = f"{path}: cannot be read ({error}); the other scripts are still checked."
            fix = f"Check the path and its permissions: `ls -l {path}`."
            location = Location(path, 1, 1)
        elif status == "not-python":
            message = f"{path}: {error}; the other scripts are still checked."
            fix = ("Give check the training script itself (a .py file or a notebook); a script without the suffix "
                   "needs a Python shebang on its first line (`#!/usr/bin/env python3`) to be read as one.")
            location = Location(path, 1, 1)
        elif "not valid" in error:
            message = f"{path}: cannot be decoded: {error}; the other scripts are still checked."
            fix = (f"Save {path} as UTF-8 (e.g. `iconv -f latin1 -t utf-8 {path} -o {path}.utf8`), or declare "
                   "its real encoding on the first or second line: `# -*- coding: latin-1 -*-`.")
            location = Location(path, line or 1, column or 1)
        elif _newer(target_python, script.get("parser_python")):
            # envdoctor's interpreter is older than the target's: newer syntax (`def f[T]()`,
            # `type X = ...`, `except*`) is no error for the interpreter that runs the script.
            message = (f"{path}:{line}:{column}: envdoctor's Python {script['parser_python']} cannot parse it "
                       f"({error}), but the target runs Python {target_python}, whose grammar may allow it; "
                       "the spawn guard of this file was not checked, the other scripts still are.")
            fix = (f"Run envdoctor with an interpreter at least as new as the target's (Python {target_python}), "
                   f"e.g. install it into the target environment; "
                   f"`python{'.'.join(str(target_python).split('.')[:2])} -m py_compile {path}` "
                   "tells whether the file really has a syntax error.")
            location = Location(path, line or 1, column or 1)
        else:
            message = (f"{path}:{line}:{column}: cannot be parsed: {error}; the spawn guard of this file "
                       "was not checked, the other scripts still are.")
            fix = f"Fix the syntax error at line {line}; `python -m py_compile {path}` shows it."
            location = Location(path, line or 1, column or 1)
        evidence: dict[str, Any] = {"path": path, "status": status, "error": error}
        if script.get("parser_python"):
            evidence.update(parser_python=script.get("parser_python"), target_python=target_python)
        for key in ("line", "column", "encoding"):  # never the line itself: the file may not be Python at all
            if script.get(key) is not None:
                evidence[key] = script.get(key)
        yield Hit(message=message, evidence=evidence, fix=fix, location=location)
    yield from _unreadable_modules_and_cells(facts)


def _unreadable_modules_and_cells(facts: Facts) -> Iterator[Hit]:
    """SPW004 for a project module a script imports, and for a notebook cell, that cannot be parsed."""
    seen: set[str] = set()
    for script in _files(facts):
        for problem in script.get("module_problems", []):
            if problem["path"] in seen:
                continue
            seen.add(problem["path"])
            yield Hit(
                message=(f"{problem['path']}:{problem['line']}: the project module {problem['module']}, imported by "
                         f"{script['path']}, cannot be read or parsed ({problem['error']}); what it does with "
                         "loaders was not followed, the rest still was."),
                evidence={"path": problem["path"], "module": problem["module"], "imported_by": script["path"],
                          "error": problem["error"], "line": problem["line"], "status": "unparsable"},
                fix=f"Fix {problem['path']}; `python -m py_compile {problem['path']}` shows what is wrong.",
                location=Location(problem["path"], problem["line"], 1),
            )
        for cell in script.get("skipped_cells", []):
            yield Hit(
                message=(f"{script['path']}: cell {cell['cell']}, line {cell['line']} cannot be parsed even with "
                         f"IPython's magics and shell escapes set aside ({cell['error']}); the other cells are "
                         "still checked."),
                evidence={"path": script["path"], "cell": cell["cell"], "line": cell["line"], "error": cell["error"],
                          "status": "unparsable"},
                fix="Fix the cell's syntax, or move IPython-only code into a line that starts with % or !.",
                location=Location(script["path"], cell["line"], 1, cell=cell["cell"]),
            )


# complexity: 23 — each worker start of each notebook is reported once, worded by the start method and the kind of
#   object (a lambda, a function or class local to a function, one of the notebook's own) the workers cannot unpickle.
def find_notebook_main_objects(facts: Facts) -> Iterator[Hit]:
    """SPW005: a notebook defines what DataLoader workers must unpickle; spawn cannot find it there."""
    python, platform = _target(facts)
    default, default_reason = _default_method(facts)
    for script in _files(facts):
        if script["status"] != "ok" or script.get("kind") != "notebook":
            continue
        reported: set[tuple[str, int | None, int, int]] = set()
        for start in script.get("worker_starts", []):
            objects = start.get("main_objects") or []
            if start["kind"] not in ("dataloader", "loader-passed") or not objects:
                continue
            # A helper's loop reached from several cells is one place the workers fail to unpickle; two cells'
            # loops at the same line of each cell are two (a notebook's lines count within their cell).
            place = (start["path"], start.get("cell") if start["path"] == script["path"] else None,
                     start["line"], start["column"])
            if place in reported:
                continue
            reported.add(place)
            method, source = effective_method(start, script, default)
            source_text = default_reason if source == "the default" else source
            names = ", ".join(f"{o['name']} ({o['role']}, cell {o.get('cell', '?')} line {o['line']})"
                              for o in objects)
            first = objects[0]
            lambdas = [o for o in objects if o["kind"] == "function" and o["name"] == "<lambda>"]
            local = next((o for o in objects if o.get("local_in")), None)
            if local is not None and not lambdas:
                # Pickled by a qualified name through a function's locals, which no module holds: the
                # notebook itself fails to start the workers (Python 3.11's words under spawn).
                failure = f"AttributeError: Can't pickle local object '{local.get('local_in')}.<locals>.{local['name']}'"
                cause = ("what a function defines is pickled by a name no module holds, so starting spawn/forkserver "
                         "workers fails in the notebook")
            elif lambdas:
                # Pickled by its name, which no module holds: the notebook itself fails to start the
                # workers (what Python 3.11 prints under spawn, the address elided).
                failure = ("_pickle.PicklingError: Can't pickle <function <lambda> at 0x…>: "
                           "attribute lookup <lambda> on __main__ failed")
                cause = ("a lambda is pickled by a name no module holds, so starting spawn/forkserver workers "
                         "fails in the notebook")
            else:
                failure = f"AttributeError: Can't get attribute '{first['name']}' on <module '__main__' (built-in)>"
                cause = "spawn/forkserver workers do not re-run it, so they cannot unpickle what it defines and fail"
            if method in ("spawn", "forkserver"):
                verdict = f"this target uses {method} ({source_text}), so the workers fail here"
            else:
                verdict = (f"works here under {method or 'an unknown start method'} ({source_text}); "
                           f"fails on {SPAWN_PLACES}")
            cell = start.get("cell")
            workers = start.get("num_workers")
            workers_text = workers if workers is not None else start.get("num_workers_source")
            where = (f"{script['path']}: cell {cell}, line {start['line']}" if start["path"] == script["path"] else
                     f"{start['path']}:{start['line']} (reached from {script['path']}: {' → '.join(path_followed(start))})")
            yield Hit(
                message=(f"{where}: {start.get('starts')} "
                         f"(num_workers={workers_text})"
                         f" hands the workers {names}, defined in the notebook. A notebook is `__main__` "
                         f"and {cause} with \"{failure}\"; {verdict}."),
                evidence={"path": script["path"], "cell": cell, "line": start["line"], "code": start["code"],
                          "start_path": start["path"], "path_followed": path_followed(start), "objects": objects,
                          "num_workers": start.get("num_workers"),
                          "num_workers_source": start.get("num_workers_source"),
                          "start_method": method, "start_method_source": source_text,
                          "python": python, "platform": platform},
                fix=(_notebook_fix(objects)
                     + " A main guard does not help in a notebook; num_workers=0 avoids the workers entirely."),
                location=Location(start["path"], start["line"], start["column"],
                                  cell=cell if start["path"] == script["path"] else None),
                severity=Severity.ERROR if method in ("spawn", "forkserver") else Severity.WARNING,
            )


def _notebook_fix(objects: list[MainObject]) -> str:
    """Move what the notebook defines into a module beside it; a lambda becomes a named function there."""
    named = [o["name"] for o in objects if o["name"] != "<lambda>"]
    lambdas = [o for o in objects if o["name"] == "<lambda>"]
    steps = []
    if lambdas:
        roles = ", ".join(sorted({o["role"] for o in lambdas}))
        steps.append(f"Replace the lambda ({roles}) with a function defined in a module next to the notebook "
                     "(e.g. `data_utils.py`) and import it in the notebook.")
    if named:
        outside = sorted({o["local_in"] for o in objects if o.get("local_in") and o["name"] != "<lambda>"})
        where = f", at its top level (out of {', '.join(outside)})," if outside else ""
        steps.append(f"Move {', '.join(named)} into a module next to the notebook (e.g. `data_utils.py`){where} and "
                     f"import it in the notebook: `from data_utils import {named[0]}`.")
    return " ".join(steps)


RULES = {
    "SPW001": find_missing_main_guard,
    "SPW002": find_start_method,
    "SPW004": find_unparsable_script,
    "SPW005": find_notebook_main_objects,
}
