"""PKG012 import-fails: a distribution with compiled extensions that does not import (`--deep`).

Reads the `imports` section, where each such distribution was imported in the target's
interpreter (facts/imports.py). A failure is classified from what the import raised:
numpy-abi (an extension built against the other NumPy ABI: "compiled using NumPy 1.x",
"numpy.dtype size changed"), cxx-runtime-too-old (a libstdc++ older than the one the extension
was built with loaded first: "version `GLIBCXX_3.4.30' not found"), missing-shared-library, undefined-symbol (often two channels'
builds of one stack mixed) or other; the finding names the culprit and its fix by owner.
"""
from __future__ import annotations

import re
from collections.abc import Iterator

from envdoctor.facts import Facts
from envdoctor.facts.cxx_runtime import NOT_FOUND, CxxRuntime
from envdoctor.facts.distributions import Distribution
from envdoctor.facts.packages import PackagesFacts
from envdoctor.remedies.install_commands import advice, pip_own
from envdoctor.rules import Hit
from envdoctor.rules.packages.states import owner_text, owner_tool, visible_distributions
from envdoctor.rules.packages.torch_import import NUMPY_ABI_PATTERNS

#: (kind, pattern) after the NumPy ABI messages (one list, torch_import's), in the order they are tried.
_KINDS = (
    # The loader's "version `GLIBCXX_3.4.30' not found" for a C++ runtime (facts.cxx_runtime's pattern).
    ("cxx-runtime-too-old", NOT_FOUND),
    ("missing-shared-library", re.compile(r"(?P<lib>[\w.+-]+\.(?:so[.\d]*|dylib|dll)): cannot open shared object file|"
                                          r"Library not loaded: (?P<mac>\S+)|DLL load failed")),
    ("undefined-symbol", re.compile(r"undefined symbol: (?P<symbol>\S+)|Symbol not found: (?P<macsym>\S+)")),
)


def classify(error: str) -> tuple[str, str | None]:
    """(kind, the library, symbol or symbol version named, if any) for what an import raised."""
    if any(pattern.search(error) for _, pattern in NUMPY_ABI_PATTERNS):
        return "numpy-abi", None
    for kind, pattern in _KINDS:
        match = pattern.search(error)
        if match:
            groups = match.groupdict()
            named = groups.get("version") or next((v for v in groups.values() if v), None)
            return kind, named
    return "other", None


def _numpy(facts: Facts) -> Distribution | None:
    return visible_distributions(facts["packages"]).get("numpy")


def _commands(packages: PackagesFacts, verb: str, *args: str) -> str:
    """The target's own installer command line(s) (its pip, `uv pip --python PREFIX` in a uv venv)."""
    return " && ".join(c.text for c in pip_own(packages, verb, *args))


def _fix(kind: str, dist: Distribution | None, name: str, numpy: Distribution | None, named: str | None,
         packages: PackagesFacts) -> str:
    tool = owner_tool(dist) if dist is not None else "unknown"
    who = owner_text(dist) if dist is not None else "its installer"
    if kind == "numpy-abi" and numpy is not None:
        major = numpy["version"].split(".", 1)[0]
        numpy_tool = owner_tool(numpy)
        if tool in ("dpkg", "rpm") and numpy_tool not in ("dpkg", "rpm"):
            return (f"{name} comes from {who}, built for the system's NumPy, but {owner_text(numpy)} put NumPy "
                    f"{numpy['version']} in front of it: remove that copy (`{_commands(packages, 'uninstall', '-y', 'numpy')}`"
                    f" removes the first one on sys.path, {owner_text(numpy)}'s), or move this stack into a venv")
        if tool in ("conda", "pixi"):
            return f"reinstall {name} and numpy together with {tool} (`{tool} install {name} numpy`), so both come from one build"
        poetry = (f"; in this poetry project: `poetry update {name}` or `poetry add \"numpy<{major}\"`"
                  if "poetry" in (tool, numpy_tool) else "")
        if major == "2":
            return (f"install a build of {name} made for NumPy 2 (`{_commands(packages, 'install', '--upgrade', name)}`), "
                    f"or keep NumPy 1 for it (`{_commands(packages, 'install', 'numpy<2')}`){poetry} — {name} comes "
                    f"from {who}, numpy {numpy['version']} from {owner_text(numpy)}")
        return (f"{name} was built for a newer NumPy than {numpy['version']}: upgrade numpy "
                f"(`{_commands(packages, 'install', '--upgrade', 'numpy')}`) or install a {name} built for NumPy {major}"
                f"{poetry}")
    if kind == "missing-shared-library":
        lib = f" ({named})" if named else ""
        if tool in ("conda", "pixi"):
            return f"the library{lib} should come from the same channel: `{tool} install --force-reinstall {name}`"
        return f"reinstall {name} with {who} so its libraries{lib} come with it, or install the system library it needs"
    if kind == "undefined-symbol":
        symbol = f" {named}" if named else ""
        if tool in ("conda", "pixi"):
            return (f"the symbol{symbol} is missing from a library of another build: packages from different channels "
                    f"are mixed (see CHN001); reinstall {name} and its libraries from one channel")
        return f"{name} and a library it links were built apart (the symbol{symbol} is missing): reinstall both with {who}"
    return f"read the error above; reinstalling {name} with {who} is the usual fix"


def _version_key(version: str | None) -> tuple[int, ...]:
    tail = (version or "").rpartition("_")[2]
    return tuple(int(p) for p in tail.split(".") if p.isdigit())


def provides(runtime: CxxRuntime, version: str) -> bool:
    """Whether a runtime defines `version` (GLIBCXX_/CXXABI_ versions only grow: the newest covers older ones)."""
    newest = runtime["newest_cxxabi"] if version.startswith("CXXABI_") else runtime["newest_glibcxx"]
    return newest is not None and _version_key(newest) >= _version_key(version)


def cxx_runtime_fix(error: str, runtimes: list[CxxRuntime], name: str) -> tuple[str, dict[str, object]]:
    """The fix and evidence for a C++ runtime too old: the environment's own one if it has a new enough one."""
    match = NOT_FOUND.search(error)
    loaded_path, version = (match["path"], match["version"]) if match else (None, None)
    loaded = next((r for r in runtimes if r["path"] == loaded_path), None)
    own = [r for r in runtimes if r["role"] == "environment"]
    good = next((r for r in own if version and provides(r, version)), None)
    evidence: dict[str, object] = {
        "needs": version, "loaded_runtime": loaded_path,
        "loaded_newest": loaded["newest_glibcxx"] if loaded else None,
        "environment_runtimes": [{"path": r["path"], "newest_glibcxx": r["newest_glibcxx"],
                                  "newest_cxxabi": r["newest_cxxabi"]} for r in own]}
    if good is not None:
        return (f"the environment's own C++ runtime {good['path']} provides {version} (up to "
                f"{good['newest_glibcxx']}), but {loaded_path} was loaded first: remove its folder from "
                f"LD_LIBRARY_PATH, or start Python with `LD_PRELOAD={good['path']}`; in a conda environment keep "
                "the runtime in step with `conda install -c conda-forge libstdcxx-ng`"), evidence
    newest = loaded["newest_glibcxx"] if loaded else None
    return (f"no C++ runtime here provides {version} ({loaded_path} stops at {newest or 'an unknown version'}): "
            f"install a {name} built for this system's runtime (an older release, or a wheel of a lower "
            "manylinux tag), or a newer runtime into the environment (`conda install -c conda-forge "
            "libstdcxx-ng`)"), evidence


def find_import_failures(facts: Facts) -> Iterator[Hit]:
    imports = facts["imports"]
    if not imports["ran"]:
        return
    by_path = {d["path"]: d for d in facts["packages"]["distributions"]}
    numpy = _numpy(facts)
    for trial in imports["trials"]:
        if trial["result"] in ("passed", "skipped"):
            continue
        dist = by_path.get(trial["path"])
        error = trial["error"] or ""
        kind, named = ("timed-out", None) if trial["result"] == "timed-out" else classify(error)
        module = trial["module"] or (trial["modules"][0] if trial["modules"] else trial["distribution"])
        last = error.strip().splitlines()[-1] if error.strip() else trial["result"]
        where = f" from {owner_text(dist)}" if dist is not None else ""
        culprit = trial["distribution"]
        if kind == "numpy-abi" and numpy is not None:
            culprit_text = (f"{trial['distribution']} {trial['version']}{where} was built against another NumPy ABI "
                            f"than the installed numpy {numpy['version']} (from {owner_text(numpy)})")
        else:
            culprit_text = f"{trial['distribution']} {trial['version']}{where}"
        fix = _fix(kind, dist, trial["distribution"], numpy, named, facts["packages"])
        runtime: dict[str, object] = {}
        if kind == "cxx-runtime-too-old":
            fix, runtime = cxx_runtime_fix(error, imports.get("cxx_runtimes", []), trial["distribution"])
        yield Hit(
            message=f"`import {module}` fails ({kind}): {culprit_text}: {last[:300]}",
            evidence={"package": trial["distribution"], "version": trial["version"], "module": module,
                      "kind": kind, "named": named, "error": error[-1200:], "result": trial["result"],
                      "culprit": culprit, "owner": owner_text(dist) if dist is not None else None,
                      "numpy_version": numpy["version"] if numpy is not None else None,
                      "numpy_owner": owner_text(numpy) if numpy is not None else None,
                      "path": trial["path"], **runtime},
            **advice(fix).hit(),
        )


RULES = {"PKG012": find_import_failures}
