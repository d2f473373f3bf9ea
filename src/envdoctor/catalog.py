"""The rule catalog: metadata and docs for every rule, read from data files.

The catalog lives in the top-level ``catalog/`` folder of the source tree and is
shipped inside the wheel as ``envdoctor/_catalog``. Each rule family is one TOML
file named after its prefix (``SYS.toml``, ``PKG.toml`` …) that names the Python
module holding the family's rule functions and lists its rules with their id,
kebab-case name, default severity and four doc parts: what, why, example, fix.
A family whose rules compare several machines says `scope = "fleet"`: its rules
run in `compare` and `check --distributed` only, never in a single-machine check.
A rule that reads only what the given scripts do when imported says
`scripts = "import-time"` (SPW001, SPW004), one that reads only the notebooks given
`scripts = "notebooks"` (SPW005, PKG013): a check whose every rule says one or the other
skips the walk of the code under each .py script's `if __name__ == "__main__":`, most
of the walk's work on a framework's example scripts (`reads_main_guard`).
A rule that reads only what the loader smoke test observes before its first timed
run says `loader = "checks"` (DL007, DL008, DL011, SPW003), one that reads the worker
memory run too says `loader = "memory"` (DL010, SYS007): a check whose every rule says
so skips the sweep, the paired windows and the persistent_workers and pin_memory runs
(`loader_reads`).
Lower-case TOML files beside them hold data the rules use (known conflicts,
channel families, the CUDA driver table …).

The catalog is checked when it loads: ids unique and well-formed, names
kebab-case, every doc part present and free of placeholder text. Every rule
must be backed by a function and every function by a catalog entry; that half
of the check runs when a family's module is imported, which is the first time
one of its rules is looked up (`RuleFunctions`): a run imports only the families
it selects. tests/test_engine.py looks up every rule, so a missing function
fails the suite, not only the run that selects it.
"""
from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

from envdoctor.model import Severity

DOC_PARTS = ("what", "why", "example", "fix")
#: The order families are listed in (`rules`, docs/rules/, explain); unknown families come last.
FAMILY_ORDER = ("PKG", "CHN", "SYS", "SPW", "DSK", "GPU", "DL", "FLT")
ENTRY_POINT_GROUP = "envdoctor.rules"

_ID_RE = re.compile(r"^[A-Z]{2,4}\d{3}$")
_NAME_RE = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")
_PLACEHOLDER_RE = re.compile(r"\b(TODO|TBD|FIXME|XXX|lorem ipsum)\b", re.IGNORECASE)
#: The placeholder words in lower case, and the non-ASCII letters IGNORECASE also reads as one of
#: their letters (İ and ı as i, ſ as s): a text with neither cannot match `_PLACEHOLDER_RE`.
_PLACEHOLDER_WORDS = ("todo", "tbd", "fixme", "xxx", "lorem ipsum")
_FOLDED_LETTERS = ("\u0130", "\u0131", "\u017f")


class CatalogError(Exception):
    """The catalog (shipped or from a plugin) is inconsistent."""


@dataclass(frozen=True)
class RuleMeta:
    """A rule's metadata and docs, exactly as the catalog states them."""

    id: str
    name: str
    severity: Severity
    family: str
    summary: str
    what: str
    why: str
    example: str
    fix: str
    origin: str = "envdoctor"
    #: "node" (one machine's facts) or "fleet" (several nodes' reports, see fleet_report).
    scope: str = "node"
    #: What of the given scripts' code the rule reads: "whole" (the code under `if __name__ ==
    #: "__main__":` too), "import-time" (only what runs when a script is imported) or "notebooks" (only what
    #: the notebooks do, which are walked whole: nothing of the .py scripts).
    scripts: str = "whole"
    #: What of the loader smoke test the rule reads: "timed" (everything: the sweep, the paired windows and
    #: the runs after them too), "memory" (the checks and the worker memory run, without the timed runs) or
    #: "checks" (only what the runner observes before its first timed run: the dataset as built, pickling,
    #: open handles, `__getitem__` in one process, repeated samples, cloned randomness).
    loader: str = "timed"

    def docs(self) -> dict[str, str]:
        return {part: getattr(self, part) for part in DOC_PARTS}


#: A rule: the Facts (named in a later layer, so not here) to its hits; the engine checks each is a Hit.
RuleFunction = Callable[[Any], Iterable[object] | None]
#: Where one origin's rule functions come from: a table of them (a plugin), or the module whose
#: `RULES` holds them (a shipped family), imported when one of its rules is first looked up.
FunctionSource = Mapping[str, RuleFunction] | str


class RuleFunctions(Mapping[str, RuleFunction]):
    """Each rule's function by id; a family's module is imported the first time one of its rules is.

    Importing every family's module, and the facts and analysis modules they
    import, cost more than most runs' work: the pre-commit hook's spawn guard
    needs no package rules, `--select PKG` no syntax-tree walker, and `rules`,
    `explain` and `render` no rule at all. When a family's module arrives its
    table is checked whole, as an eager load would: every rule of the family
    has a callable in the module's `RULES`, and every function there has a
    catalog entry; otherwise the lookup raises CatalogError.
    """

    def __init__(self, loaded: Mapping[str, RuleFunction], modules: Mapping[str, tuple[str, str]]) -> None:
        #: Rule id -> its function, for the origins loaded so far.
        self._loaded = dict(loaded)
        #: Rule id -> (origin, module) of a shipped family, in catalog order.
        self._modules = dict(modules)

    def __getitem__(self, rule_id: str) -> RuleFunction:
        func = self._loaded.get(rule_id)
        if func is None:
            origin, module = self._modules[rule_id]  # KeyError: no such rule
            self._import_family(origin, module)
            func = self._loaded[rule_id]
        return func

    def __contains__(self, rule_id: object) -> bool:  # without importing anything
        return rule_id in self._loaded or rule_id in self._modules

    def __iter__(self) -> Iterator[str]:
        yield from self._loaded
        yield from (rule_id for rule_id in self._modules if rule_id not in self._loaded)

    def __len__(self) -> int:
        return len(self._loaded.keys() | self._modules.keys())

    def _import_family(self, origin: str, module: str) -> None:
        table = getattr(importlib.import_module(module), "RULES", {})
        ids = [rule_id for rule_id, (_, name) in self._modules.items() if name == module]
        for rule_id in ids:
            if not callable(table.get(rule_id)):
                raise CatalogError(f"{origin}: rule {rule_id} has no function in {module}.RULES")
        extra = sorted(set(table) - set(ids))
        if extra:
            raise CatalogError(f"{origin}: functions without catalog entries in {module}.RULES: {', '.join(extra)}")
        self._loaded.update((rule_id, table[rule_id]) for rule_id in ids)


@dataclass(frozen=True)
class Catalog:
    """Every known rule, in catalog order, with the function that implements it."""

    rules: tuple[RuleMeta, ...]
    functions: RuleFunctions

    def ids(self) -> list[str]:
        return [meta.id for meta in self.rules]

    def select(self, select: Iterable[str] = (), ignore: Iterable[str] = ()) -> list[RuleMeta]:
        """The rules `--select` and `--ignore` leave, in catalog order. Unknown ids or families are a ConfigError."""
        from envdoctor.config import ConfigError

        def expand(tokens: Iterable[str], flag: str) -> set[str]:
            ids: set[str] = set()
            for token in tokens:
                for part in str(token).split(","):
                    if not part.strip():
                        continue
                    matched = self.resolve(part)
                    if not matched:
                        raise ConfigError(f"{flag}: unknown rule {part.strip()!r} (see `envdoctor rules`)")
                    ids.update(m.id for m in matched)
            return ids

        selected = expand(select, "--select")
        ignored = expand(ignore, "--ignore")
        return [m for m in self.rules if (not selected or m.id in selected) and m.id not in ignored]

    def resolve(self, token: str) -> list[RuleMeta]:
        """Rules matched by an id, a kebab-case name or a family prefix (`SYS`)."""
        wanted = token.strip()
        upper = wanted.upper()
        exact = [m for m in self.rules if m.id == upper or m.name == wanted.lower()]
        if exact:
            return exact
        return [m for m in self.rules if m.family == upper]


def catalog_dir() -> Path:
    """Where the catalog data lives: inside the installed wheel, else the source tree."""
    packaged = Path(__file__).resolve().parent / "_catalog"
    if packaged.is_dir():
        return packaged
    source = Path(__file__).resolve().parents[2] / "catalog"
    if source.is_dir():
        return source
    raise CatalogError(f"the rule catalog is missing (looked in {packaged} and {source})")


def _read_toml(path: Path) -> dict[str, Any]:
    """One TOML file of the catalog. tomllib is imported here, not with the module: `render` and the
    command line's error handling import this module and read no catalog file."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib
    with open(path, "rb") as fh:
        return tomllib.load(fh)


@cache
def load_data(name: str) -> dict[str, Any]:
    """A data table shipped beside the rules (`conflicts`, `channels`, …)."""
    return _read_toml(catalog_dir() / f"{name}.toml")


SCOPES = ("node", "fleet")
#: The values of a rule's `scripts` key (RuleMeta.scripts).
SCRIPT_READS = ("whole", "import-time", "notebooks")
#: The values of a rule's `loader` key (RuleMeta.loader), from the least the smoke test measures to the most.
LOADER_READS = ("checks", "memory", "timed")


def _check_meta(entry: Mapping[str, Any], family: str, origin: str, scope: str = "node") -> RuleMeta:
    rule_id = str(entry.get("id", ""))
    where = f"{origin}: rule {rule_id or '<no id>'}"
    if not _ID_RE.match(rule_id):
        raise CatalogError(f"{where}: id must be a family prefix and three digits")
    if not rule_id.startswith(family):
        raise CatalogError(f"{where}: id does not start with its family {family}")
    name = str(entry.get("name", ""))
    if not _NAME_RE.match(name):
        raise CatalogError(f"{where}: name {name!r} is not kebab-case")
    try:
        severity = Severity.parse(entry.get("severity", ""))
    except ValueError as exc:
        raise CatalogError(f"{where}: {exc}") from None
    texts = {}
    for part in ("summary", *DOC_PARTS):
        text = entry.get(part)
        if not isinstance(text, str) or len(text.strip()) < 10:
            raise CatalogError(f"{where}: doc part {part!r} is missing or too short")
        if _has_placeholder(text):
            raise CatalogError(f"{where}: doc part {part!r} holds placeholder text")
        texts[part] = text.strip()
    if scope not in SCOPES:
        raise CatalogError(f"{origin}: scope must be one of {', '.join(SCOPES)}, not {scope!r}")
    scripts = entry.get("scripts", "whole")
    if scripts not in SCRIPT_READS:
        raise CatalogError(f"{where}: scripts must be one of {', '.join(SCRIPT_READS)}, not {scripts!r}")
    loader = entry.get("loader", "timed")
    if loader not in LOADER_READS:
        raise CatalogError(f"{where}: loader must be one of {', '.join(LOADER_READS)}, not {loader!r}")
    return RuleMeta(id=rule_id, name=name, severity=severity, family=family, origin=origin, scope=scope,
                    scripts=scripts, loader=loader, **texts)


def _has_placeholder(text: str) -> bool:
    """Whether `_PLACEHOLDER_RE` finds placeholder text, testing the few texts that could hold it.

    Every run checks the catalog's hundred-odd kilobytes of docs; the case-blind
    search is four times slower than a look for the words in the lowered text.
    """
    lowered = text.lower()
    if not any(word in lowered for word in _PLACEHOLDER_WORDS) and not any(c in text for c in _FOLDED_LETTERS):
        return False
    return _PLACEHOLDER_RE.search(text) is not None


def _family_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.glob("*.toml") if p.stem.isupper())


def _load_family(path: Path) -> tuple[str, list[RuleMeta], FunctionSource]:
    """One family file: its checked metadata and the module it names.

    The module is the family's package (or module), whose `RULES` table gathers
    the rule functions of its modules; `RuleFunctions` imports it when needed.
    """
    data = _read_toml(path)
    family = data.get("family", path.stem)
    module_name = data.get("module")
    scope = data.get("scope", "node")
    metas = [_check_meta(entry, family, path.name, scope) for entry in data.get("rule", [])]
    if metas and not module_name:
        raise CatalogError(f"{path.name}: names no module")
    return path.name, metas, str(module_name or "")


def _load_plugins() -> Iterable[tuple[str, list[RuleMeta], FunctionSource]]:
    if not _may_declare_plugins():
        return
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        plugin = ep.load()
        origin = f"plugin {ep.name} ({ep.value})"
        entries = getattr(plugin, "CATALOG", None)
        functions = getattr(plugin, "RULES", None)
        if not isinstance(entries, list) or not isinstance(functions, dict):
            raise CatalogError(f"{origin}: must provide CATALOG (a list) and RULES (a dict)")
        metas = []
        for entry in entries:
            rule_id = str(entry.get("id", ""))
            family = re.sub(r"\d+$", "", rule_id)
            metas.append(_check_meta(entry, family, origin))
        extra = set(functions) - {m.id for m in metas}
        if extra:
            raise CatalogError(f"{origin}: functions without catalog entries: {', '.join(sorted(extra))}")
        yield origin, metas, dict(functions)


def _may_declare_plugins() -> bool:
    """False only when no distribution `importlib.metadata` would find declares an `envdoctor.rules` entry point.

    Importing importlib.metadata (email, zipfile, csv …) and scanning costs a
    fifth of a small run, and nearly every environment has no plugin. This
    looks where importlib.metadata's path finder looks (each `sys.path` folder's
    `*.dist-info`, `*.egg-info` and an egg's `EGG-INFO`) for an `entry_points.txt`
    that so much as names the group; anything it cannot read as that finder
    would (a zip on `sys.path`, another metadata finder, a file it could not
    decode) answers True, and the real scan decides.
    """
    import importlib.machinery

    if any(getattr(finder, "find_distributions", None) is not None and finder is not importlib.machinery.PathFinder
           for finder in sys.meta_path):
        return True
    group = ENTRY_POINT_GROUP.encode()
    for entry in sys.path:
        if not isinstance(entry, str):
            return True
        root = entry or "."
        try:
            children = os.listdir(root)
        except OSError:
            if os.path.exists(root):
                return True  # a zip importlib.metadata would open
            continue
        egg = os.path.basename(entry).lower().endswith(".egg")
        for child in children:
            low = child.lower()
            if not (low.endswith((".dist-info", ".egg-info")) or (egg and low == "egg-info")):
                continue
            try:
                with open(os.path.join(root, child, "entry_points.txt"), "rb") as fh:
                    data = fh.read()
            except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError):
                continue  # what importlib.metadata skips too
            except OSError:
                return True
            if group in data:
                return True
            try:
                data.decode("utf-8")
            except UnicodeDecodeError:
                return True
    return False


def _assemble(parts: Iterable[tuple[str, list[RuleMeta], FunctionSource]]) -> Catalog:
    rules: list[RuleMeta] = []
    functions: dict[str, RuleFunction] = {}
    modules: dict[str, tuple[str, str]] = {}
    seen: dict[str, str] = {}
    for origin, metas, source in parts:
        for meta in metas:
            if meta.id in seen:
                raise CatalogError(f"rule id {meta.id} is defined twice ({seen[meta.id]} and {origin})")
            seen[meta.id] = origin
            if isinstance(source, str):
                modules[meta.id] = (origin, source)
            else:
                func = source.get(meta.id)
                if not callable(func):
                    raise CatalogError(f"{origin}: rule {meta.id} has no function")
                functions[meta.id] = func
            rules.append(meta)
    rank = {family: i for i, family in enumerate(FAMILY_ORDER)}
    rules.sort(key=lambda m: (m.origin.startswith("plugin"), rank.get(m.family, len(rank)), m.family, m.id))
    names = [m.name for m in rules]
    doubled = {n for n in names if names.count(n) > 1}
    if doubled:
        raise CatalogError(f"rule names used twice: {', '.join(sorted(doubled))}")
    return Catalog(rules=tuple(rules), functions=RuleFunctions(functions, modules))


def _selected(select: Iterable[str], ignore: Iterable[str]) -> list[RuleMeta] | None:
    """The rules a check with this selection runs, plugins' rules included; None for every rule (no selection,
    one that leaves no rule, one the catalog cannot resolve: the check itself reports that). What is skipped on
    the strength of the catalog is skipped only when it surely says so."""
    from envdoctor.config import ConfigError

    select = tuple(select)
    if not select:
        return None
    try:
        rules = load_catalog().select(select, ignore)
    except (CatalogError, ConfigError):
        return None
    return rules or None


def reads_main_guard(select: Iterable[str], ignore: Iterable[str] = ()) -> bool:
    """Whether a check with this selection has a rule that reads what the code under a .py script's main
    guard does: any rule but those whose catalog entry says `scripts = "import-time"` (the pre-commit hook's
    SPW001 and SPW004) or `scripts = "notebooks"` (SPW005, PKG013: a notebook is always walked whole)."""
    rules = _selected(select, ignore)
    return rules is None or any(rule.scripts == "whole" for rule in rules)


def loader_reads(select: Iterable[str], ignore: Iterable[str] = ()) -> str:
    """How far the loader smoke test must go for a check with this selection (one of LOADER_READS): the
    furthest any of its rules reads, "timed" (everything) for every rule."""
    rules = _selected(select, ignore)
    if rules is None:
        return LOADER_READS[-1]
    return LOADER_READS[max(LOADER_READS.index(rule.loader) for rule in rules)]


@lru_cache(maxsize=2)
def load_catalog(plugins: bool = True) -> Catalog:
    """Load and check the shipped catalog (and, by default, plugin rules)."""
    parts = [_load_family(p) for p in _family_files(catalog_dir())]
    if plugins:
        parts.extend(_load_plugins())
    return _assemble(parts)

