"""OpenCV in the scripts given to check (SYS007 from static facts), and its default thread count in the target.

For each script or notebook, and the project modules its analysis followed,
the parsed source says whether it imports `cv2`, where it calls
`cv2.setNumThreads(...)` (module level, or the function the call is in, with
the argument when it is a literal) and which names it passes as
`worker_init_fn=`. Only when some script imports cv2 is the target
interpreter asked, once and bounded, for `cv2.getNumThreads()` and
`cv2.__version__`: the pool OpenCV gives every DataLoader worker unless the
code limits it. The rule (rules/system/opencv.py) judges; nothing here does.
"""
from __future__ import annotations

import ast
import bisect
import json
import os
import stat
from typing import TypedDict

#: Project modules read for OpenCV at most per script, and the largest read.
MAX_MODULES = 50
MAX_MODULE_BYTES = 1024 * 1024
#: Calls and imports kept per script.
MAX_KEPT = 10
#: Seconds the target may take to import cv2 and answer.
PROBE_TIMEOUT_S = 20.0


class _Place(TypedDict):
    path: str
    line: int


class OpenCVImport(_Place, total=False):
    #: In a notebook: the code cell, `line` then counting within it.
    cell: int


class OpenCVCall(_Place, total=False):
    """A `cv2.setNumThreads(...)` call: where ("module level" or the enclosing function), the literal value."""

    where: str
    value: int | None
    cell: int


class ScriptOpenCV(TypedDict):
    """OpenCV in one script and the project modules it imports."""

    imports: list[OpenCVImport]
    set_num_threads_calls: list[OpenCVCall]
    #: The names passed as `worker_init_fn=` (a function the workers run first).
    worker_init_fns: list[str]


class TargetOpenCV(TypedDict):
    """cv2 as the target interpreter has it: its version and default thread count, or why not known."""

    version: str | None
    threads: int | None
    error: str | None


def scan(tree: ast.AST, path: str, found: ScriptOpenCV, marked: list[int] | None = None) -> None:
    """Add what one parsed file says about OpenCV to `found`.

    `marked`: the (sorted) lines of the file that spell one of the names looked for (see marked_lines),
    or None to walk every node. A node whose lines spell none of them holds nothing to find, and is
    not walked.
    """

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            if marked is not None:
                first, last = getattr(child, "lineno", None), getattr(child, "end_lineno", None)
                decorators = getattr(child, "decorator_list", None)
                if first is not None and decorators:  # a def's or class's lines start at `def`/`class`
                    first = min(first, *(getattr(d, "lineno", first) for d in decorators))
                if first is not None and last is not None:
                    at = bisect.bisect_left(marked, first)
                    if at == len(marked) or marked[at] > last:
                        continue
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else where
            if isinstance(child, ast.Import) and any(a.name.split(".")[0] == "cv2" for a in child.names) \
                    or isinstance(child, ast.ImportFrom) and not child.level \
                    and (child.module or "").split(".")[0] == "cv2":
                found["imports"].append({"path": path, "line": child.lineno})
            elif isinstance(child, ast.Call):
                _call(child, where, path, found)
            visit(child, inner)

    visit(tree, "module level")


def _call(call: ast.Call, where: str, path: str, found: ScriptOpenCV) -> None:
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    if name == "setNumThreads":
        value = call.args[0] if call.args else None
        literal = value.value if isinstance(value, ast.Constant) and isinstance(value.value, int) else None
        found["set_num_threads_calls"].append({"where": where, "path": path, "line": call.lineno,
                                               "value": literal})
    for keyword in call.keywords:
        if keyword.arg == "worker_init_fn":
            target = keyword.value
            named = target.attr if isinstance(target, ast.Attribute) else \
                target.id if isinstance(target, ast.Name) else None
            if named and named not in found["worker_init_fns"]:
                found["worker_init_fns"].append(named)


#: Names `scan` looks for: source that spells none of them gives it nothing to find.
_MARKERS = ("cv2", "setNumThreads", "worker_init_fn")


def begin(tree: ast.AST, path: str, text: str | None = None) -> ScriptOpenCV:
    """OpenCV in the script's own tree (read before the spawn analysis releases it).

    With the source `text` the tree is walked only when the text spells one of the names looked for
    (ASCII text: other text may spell an identifier in characters the parser normalises), which
    most scripts do not: walking every node of every file cost more than a tenth of the check.
    """
    found: ScriptOpenCV = {"imports": [], "set_num_threads_calls": [], "worker_init_fns": []}
    if text is not None and text.isascii() and not any(marker in text for marker in _MARKERS):
        return found
    scan(tree, path, found, marked_lines(text))
    return found


def marked_lines(text: str | None) -> list[int] | None:
    """The lines (1-based, as the parser numbers them) of `text` that spell one of the names looked for, or
    hold a character outside ASCII (an identifier the parser normalises may spell one there), or None
    (walk every node) without the text."""
    if text is None:
        return None
    from envdoctor.analysis.spawn.syntax import source_lines

    return [number for number, line in enumerate(source_lines(text), 1)
            if not line.isascii() or any(m in line for m in _MARKERS)]


#: Project modules read that spell neither cv2 nor setNumThreads, by path: (device, inode, size, mtime) when
#: read. Every script of a repository checked whole imports the same modules: one stat each instead of a read.
_QUIET: dict[str, tuple[int, int, int, int]] = {}
_MAX_QUIET = 20_000


def _stamp(path: str) -> tuple[int, int, int, int] | None:
    """What identifies the regular file's content as read (None: not a regular file, or no answer)."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) if stat.S_ISREG(st.st_mode) else None


def finish(found: ScriptOpenCV, path: str, modules: list[str], quiet: set[str] | None = None) -> ScriptOpenCV | None:
    """Add the project modules the script imports (read again, only those that mention cv2); None when
    nothing imports cv2 nor calls setNumThreads.

    `quiet`: the modules that spell neither, as found by this check for an earlier script (asked again
    without a stat: the scripts of one check read each module once); those found now are added."""
    from envdoctor.analysis.spawn.reading import decode_source, read_bytes

    for module in modules[:MAX_MODULES]:
        if module == path or quiet is not None and module in quiet:
            continue
        stamp = _stamp(module)
        if stamp is not None and _QUIET.get(module) == stamp:
            if quiet is not None:
                quiet.add(module)
            continue
        data, _ = read_bytes(module)
        if data is None or len(data) > MAX_MODULE_BYTES or b"cv2" not in data and b"setNumThreads" not in data:
            if data is not None and stamp is not None:
                if len(_QUIET) >= _MAX_QUIET:
                    _QUIET.clear()
                _QUIET[module] = stamp
                if quiet is not None:
                    quiet.add(module)
            continue
        text = decode_source(data)[0]
        try:
            scan(ast.parse(text or "", filename=module), module, found, marked_lines(text))
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue  # the spawn analysis reports the module's own problem
    if not found["imports"] and not found["set_num_threads_calls"]:
        return None
    found["imports"] = found["imports"][:MAX_KEPT]
    found["set_num_threads_calls"] = found["set_num_threads_calls"][:MAX_KEPT]
    return found


_PROBE = ("import json, sys\n"
          "try:\n"
          "    import cv2\n"
          "    print(json.dumps({'version': getattr(cv2, '__version__', None), 'threads': int(cv2.getNumThreads())}))\n"
          "except Exception as exc:\n"
          "    print(json.dumps({'error': type(exc).__name__ + ': ' + str(exc)[:300]}))\n")


def target_opencv(interpreter: str | None) -> TargetOpenCV:
    """Ask the target interpreter for cv2's version and default thread count (bounded; never raises)."""
    from envdoctor.process import quiet_python_env, run_bounded

    if not interpreter:
        return {"version": None, "threads": None, "error": "the target interpreter is not known"}
    done = run_bounded([interpreter, "-B", "-I", "-c", _PROBE], PROBE_TIMEOUT_S, env=quiet_python_env())
    if done.timed_out:
        return {"version": None, "threads": None, "error": f"importing cv2 took over {PROBE_TIMEOUT_S:.0f} s"}
    try:
        answer: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"version": None, "threads": None,
                "error": f"the target's interpreter answered nothing readable (exit {done.returncode})"}
    threads, version, error = answer.get("threads"), answer.get("version"), answer.get("error")
    return {"version": version if isinstance(version, str) else None,
            "threads": threads if isinstance(threads, int) else None,
            "error": error if isinstance(error, str) else None}
