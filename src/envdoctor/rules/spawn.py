"""SPW rules: the spawn guard and the start method of DataLoader workers.

SPW001 missing-main-guard: a script starts workers at import time, outside
`if __name__ == "__main__":` — under spawn or forkserver every worker
re-imports the script and dies bootstrapping.
SPW002 start-method: which start method the workers will use on the target
(from its Python version and platform, and what the script itself sets), what
spawn/forkserver cost, and CUDA initialised before forked workers.
SPW004 unparsable-script: a script given to check cannot be read or parsed.

They judge the "scripts" section (facts/scripts.py) and the target's Python
version and platform; SPW003 (unpicklable dataset) lives with the loader.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from envdoctor.facts import Facts
from envdoctor.model import Location, Severity
from envdoctor.rules import Hit

BOOTSTRAP_ERROR = ("An attempt has been made to start a new process before the current process "
                   "has finished its bootstrapping phase")
STARTS_PROCESSES = ("dataloader", "process-start", "pool", "manager", "process-pool", "torch-spawn", "lightning")
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
    target = facts.get("target") or {}
    return target.get("python"), target.get("platform")


def _files(facts: Facts) -> list[dict[str, Any]]:
    section = facts["scripts"]
    return list((section or {}).get("files", []))


def effective_method(start: dict[str, Any], script: dict[str, Any], default: str | None) -> tuple[str | None, str]:
    """The start method one worker start will use: its own context, the script's choice, the default."""
    if start.get("context"):
        how = "torch.multiprocessing.spawn" if start["kind"] == "torch-spawn" else "its multiprocessing_context"
        return start["context"], f"set by {how} (line {start['line']})"
    chosen = None
    for call in script.get("start_method_calls", []):
        if call["seq"] < start["seq"] and call.get("method"):
            chosen = call
    if chosen is not None:
        return chosen["method"], f"set by set_start_method({chosen['method']!r}) at line {chosen['line']}"
    return default, "the default"


def _via_text(start: dict[str, Any]) -> list[str]:
    return [f"{step['function']}() called at line {step['line']}" for step in start.get("via", [])]


def _guard_fix(script: dict[str, Any], start: dict[str, Any]) -> str:
    name = script["path"]
    entry = start["entry"]
    guard = script.get("guard_lines") or []
    where = (f"the existing `if __name__ == \"__main__\":` block at line {guard[0]}" if guard
             else "a new `if __name__ == \"__main__\":` block at the end of the file")
    if start.get("via"):
        return (f"Call `{entry['code']}` (line {entry['line']}) only from {where}:\n"
                f"    if __name__ == \"__main__\":\n        {entry['code']}\n"
                f"so the workers, which re-import {name}, do not run it.")
    return (f"Move the code that starts the workers (line {start['line']}: `{start['code']}`) into a "
            f"function such as `def main():` and call it from {where}:\n"
            f"    if __name__ == \"__main__\":\n        main()\n"
            "Keep only imports, definitions and cheap constants at module level.")


def find_missing_main_guard(facts: Facts) -> Iterator[Hit]:
    """SPW001: workers or processes started at import time, outside the main guard."""
    python, platform = _target(facts)
    default, default_reason = default_start_method(python, platform)
    for script in _files(facts):
        if script.get("status") != "ok":
            continue
        for start in script.get("worker_starts", []):
            if start["guarded"] or start["kind"] not in STARTS_PROCESSES:
                continue
            if suppressed(start["code"], "SPW001") or suppressed(start["entry"]["code"], "SPW001"):
                continue
            method, method_source = effective_method(start, script, default)
            forced_fork = method == "fork" and method_source != "the default"
            workers = start.get("num_workers")
            workers_text = (f"num_workers={workers}" if workers is not None
                            else f"num_workers={start.get('num_workers_source')} (not known before run time)")
            what = (f"{start['starts']} ({workers_text})" if start["kind"] == "dataloader" else start["starts"])
            via = _via_text(start)
            if method in ("spawn", "forkserver"):
                here = f"this target uses {method} ({method_source}), so the run dies here"
            elif method is None:
                here = f"the start method on this target could not be worked out ({default_reason})"
            elif forced_fork:
                here = ("it works only because the script forces fork, which Windows lacks and which "
                        "macOS considers unsafe")
            else:
                here = ("it runs on this target only because fork is the default here; it dies on macOS, "
                        "Windows and Linux with Python 3.14+")
            message = (f"{script['path']}:{start['line']}: {what} at import time, outside "
                       f"`if __name__ == \"__main__\":`"
                       + (f" (reached through {' -> '.join(via)})" if via else "")
                       + f". Under spawn/forkserver every worker re-imports the script and fails with "
                       f"\"{BOOTSTRAP_ERROR}\"; {here}.")
            yield Hit(
                message=message,
                evidence={
                    "path": script["path"],
                    "line": start["line"],
                    "code": start["code"],
                    "starts": start["starts"],
                    "kind": start["kind"],
                    **({"num_workers": workers, "num_workers_source": start.get("num_workers_source")}
                       if start["kind"] == "dataloader" else {}),
                    "via": via,
                    "module_level_statement": {"line": start["entry"]["line"], "code": start["entry"]["code"]},
                    "start_method": method,
                    "start_method_source": method_source if method_source != "the default" else default_reason,
                },
                fix=_guard_fix(script, start),
                location=Location(script["path"], start["line"], start["column"]),
                # Forced fork works today; a worker count only known at run time (args.workers)
                # may be 0. Both are real risks but not certain deaths: warnings, not errors.
                severity=Severity.WARNING if forced_fork or (start["kind"] == "dataloader" and workers is None)
                else None,
            )


def find_start_method(facts: Facts) -> Iterator[Hit]:
    """SPW002: the start method DataLoader workers will use, its cost, and CUDA before fork."""
    python, platform = _target(facts)
    default, default_reason = default_start_method(python, platform)
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
    for script in section.get("files", []):
        if script.get("status") != "ok":
            continue
        loaders = [s for s in script.get("worker_starts", []) if s["kind"] == "dataloader"]
        if not loaders:
            continue
        set_calls = [{"method": c.get("method"), "line": c["line"]} for c in script.get("start_method_calls", [])]
        by_method: dict[str, list[tuple[dict[str, Any], str]]] = {}
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


def _lines(starts: Any) -> str:
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
    """SPW004: a script given to check that cannot be read, decoded or parsed."""
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
        evidence = {"path": path, "status": status, "error": error}
        if script.get("parser_python"):
            evidence.update(parser_python=script["parser_python"], target_python=target_python)
        for key in ("line", "column", "code", "encoding"):
            if script.get(key) is not None:
                evidence[key] = script[key]
        yield Hit(message=message, evidence=evidence, fix=fix, location=location)


RULES = {
    "SPW001": find_missing_main_guard,
    "SPW002": find_start_method,
    "SPW004": find_unparsable_script,
}
