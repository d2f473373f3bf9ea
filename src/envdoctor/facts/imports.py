"""The `imports` section (`--deep` only): every distribution with compiled extensions, imported for real.

The static check reads files and runs none of the environment's code. A NumPy ABI break
(an extension built for NumPy 1.x under NumPy 2: "compiled using NumPy 1.x", "numpy.dtype
size changed"), a missing shared library or an undefined symbol only shows when the
extension is loaded, so with `--deep` each distribution whose RECORD lists a compiled
extension (`.so`, `.pyd`) is imported in the target's interpreter: one child process per
distribution, several at once, each with a time limit and all within a total one, started
in an empty temporary folder with bytecode writing off, its whole process group killed when
it ends or runs out of time, so nothing is left behind. That runs the environment's own
code: it is what `--deep` means, and the docs of PKG012 say so.
"""
from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING, TypedDict

from envdoctor.facts.cxx_runtime import CxxRuntime, read_cxx_runtimes

if TYPE_CHECKING:  # pragma: no cover
    from envdoctor.config import FactsReader
    from envdoctor.facts.distributions import Distribution

#: Seconds one distribution's import may take, and all of them together.
IMPORT_TIMEOUT_S = 60.0
TOTAL_TIMEOUT_S = 240.0
#: Imports run at once (each is its own interpreter).
PARALLEL = 4
#: Characters of a failed import's message kept.
ERROR_CHARS = 1200
#: Only this much of a RECORD is read looking for extensions.
MAX_RECORD_BYTES = 32 << 20

_EXTENSION_ENDINGS = (".so", ".pyd")

# Imports the distribution's top-level modules in turn; the first failure is the answer.
_IMPORT_ONE = r"""
import importlib, json, sys, traceback
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except BaseException as exc:
        text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        print(json.dumps({"ok": False, "module": name, "error": text[-%d:]}))
        sys.exit(0)
print(json.dumps({"ok": True, "module": sys.argv[1] if len(sys.argv) > 1 else "", "error": None}))
""" % ERROR_CHARS


class ImportTrial(TypedDict):
    """One distribution imported in the target interpreter."""

    distribution: str
    version: str
    #: the metadata folder (its owner is the distribution's in the packages section)
    path: str
    modules: list[str]
    #: passed, failed, timed-out, crashed, skipped (the total time limit was spent)
    result: str
    #: the module that failed, and the last lines of what it raised (or how the child ended)
    module: str | None
    error: str | None
    seconds: float


class ImportsFacts(TypedDict):
    """What `--deep` imported: every distribution with compiled extensions, one child each."""

    ran: bool
    #: why nothing was imported (no --deep, no interpreter), or None
    reason: str | None
    trials: list[ImportTrial]
    #: The C++ runtimes a failure's "version `GLIBCXX_…' not found" names, and the environment's own
    #: (facts.cxx_runtime); empty when no failure names one.
    cxx_runtimes: list[CxxRuntime]


#: Entries looked at, per distribution without a RECORD, for an extension file on disk.
MAX_SCAN_ENTRIES = 20_000


def ships_extensions(dist_path: str, import_names: list[str]) -> bool:
    """Does this distribution install a compiled extension module?

    Its RECORD says; an OS package's egg-info has none (Debian's python3-numexpr), so then its
    import packages on disk are looked through (bounded).
    """
    from envdoctor.facts.readfile import read_bytes

    try:
        data = read_bytes(os.path.join(dist_path, "RECORD"), MAX_RECORD_BYTES)
    except OSError:
        return _extensions_on_disk(os.path.dirname(dist_path), import_names)
    endings = tuple(e.encode() for e in _EXTENSION_ENDINGS)
    return any(line.split(b",", 1)[0].strip().strip(b'"').endswith(endings) for line in data.splitlines())


def _extensions_on_disk(site: str, import_names: list[str]) -> bool:
    seen = 0
    try:
        if any(n.split(".", 1)[0] in import_names and n.endswith(_EXTENSION_ENDINGS) for n in os.listdir(site)):
            return True
    except OSError:
        return False
    for name in import_names:
        for _folder, dirs, files in os.walk(os.path.join(site, name)):
            if any(f.endswith(_EXTENSION_ENDINGS) for f in files):
                return True
            seen += len(dirs) + len(files)
            if seen > MAX_SCAN_ENTRIES:
                return False
    return False


def importable_names(import_names: list[str]) -> list[str]:
    """The names a distribution's probe imports: modules and packages only.

    A RECORD's top-level entries are not all modules: auditwheel puts the shared libraries a
    manylinux wheel vendors in a `<dist>.libs` folder beside the package (`numpy.libs`), and
    delvewheel does the same on Windows. `import numpy.libs` fails for every healthy numpy, so a
    name that is not a Python identifier is never imported.
    """
    return [name for name in import_names if name.isidentifier()]


def _made(dist: Distribution, result: str, seconds: float, module: str | None = None,
          error: str | None = None) -> ImportTrial:
    return {"distribution": dist["name"], "version": dist["version"], "path": dist["path"],
            "modules": importable_names(dist["import_names"]), "result": result, "module": module, "error": error,
            "seconds": seconds}


def _trial(interpreter: str, dist: Distribution, cwd: str, deadline: float) -> ImportTrial:
    from envdoctor.process import quiet_python_env, run_bounded

    left = deadline - time.monotonic()
    if left <= 1.0:
        return _made(dist, "skipped", 0.0, error=f"the {TOTAL_TIMEOUT_S:.0f} s for all imports were spent")
    limit = min(IMPORT_TIMEOUT_S, left)
    run = run_bounded([interpreter, "-B", "-c", _IMPORT_ONE, *importable_names(dist["import_names"])], limit, env=quiet_python_env(),
                      cwd=cwd)
    seconds = round(run.seconds, 3)
    if run.timed_out:
        return _made(dist, "timed-out", seconds, error=f"the import did not finish within {limit:.0f} s")
    try:
        answer = json.loads(run.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        answer = None
    if not isinstance(answer, dict):
        tail = (run.stderr or run.stdout).strip()[-ERROR_CHARS:]
        return _made(dist, "crashed", seconds, error=f"the import {run.describe_failure()}: {tail}".rstrip(": "))
    if answer.get("ok"):
        return _made(dist, "passed", seconds)
    return _made(dist, "failed", seconds, module=str(answer.get("module")), error=str(answer.get("error")))


def gather_imports(facts: FactsReader) -> ImportsFacts:
    if not facts.config.deep:
        return {"ran": False, "reason": "imports run only with --deep (they run the environment's code)", "trials": [],
                "cxx_runtimes": []}
    target = facts["target"]
    interpreter = target.get("interpreter")
    if not interpreter or not target.get("python"):
        return {"ran": False, "reason": "the target has no interpreter that runs", "trials": [], "cxx_runtimes": []}
    packages = facts["packages"]
    seen: set[str] = set()
    candidates = []
    for dist in sorted(packages["distributions"], key=lambda d: d.get("order", 0)):
        if dist["key"] in seen or dist.get("location") == "stdlib":
            continue
        seen.add(dist["key"])  # the copy import finds first
        if importable_names(dist["import_names"]) and ships_extensions(dist["path"], dist["import_names"]):
            candidates.append(dist)
    import tempfile
    from concurrent.futures import ThreadPoolExecutor  # only here: the packages probe imports this module too

    deadline = time.monotonic() + TOTAL_TIMEOUT_S
    with tempfile.TemporaryDirectory(prefix="envdoctor-imports-") as cwd:
        with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
            trials = list(pool.map(lambda d: _trial(str(interpreter), d, cwd, deadline), candidates))
    runtimes = read_cxx_runtimes((t["error"] or "" for t in trials), str(target.get("prefix") or ""))
    return {"ran": True, "reason": None, "trials": trials, "cxx_runtimes": runtimes}
