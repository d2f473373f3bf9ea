"""The engine: a rule that raises, a probe that fails, plugin rules through entry points."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from envdoctor.catalog import CatalogError, _assemble, _check_meta, load_catalog
from envdoctor.config import Config, ConfigError
from envdoctor.engine import run_check, select_rules
from envdoctor.rules import Hit
from support import findings, json_report, run_envdoctor

PLUGIN = '''
from envdoctor.rules import Hit

DOC = {
    "summary": "a test rule that always finds one thing",
    "what": "Yields a single finding so the test can see it beside a crash.",
    "why": "Proves that one broken rule never hides the others.",
    "example": "envdoctor check --select ZZT001 ZZT002",
    "fix": "Nothing to fix: this rule exists for the test suite only.",
}
CATALOG = [
    {"id": "ZZT001", "name": "always-finds", "severity": "warning", **DOC},
    {"id": "ZZT002", "name": "always-raises", "severity": "error", **DOC},
]

def always_finds(facts):
    yield Hit(message="found the thing", evidence={"usable": facts["system"]["cpu"]["usable"]}, fix="none")

def always_raises(facts):
    raise RuntimeError("this rule is broken")
    yield

RULES = {"ZZT001": always_finds, "ZZT002": always_raises}
'''


@pytest.fixture
def plugin_path(tmp_path: Path) -> dict[str, str]:
    """A real third-party package that adds rules through the envdoctor.rules entry points."""
    (tmp_path / "zzt_rules.py").write_text(PLUGIN)
    dist = tmp_path / "zzt_rules-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: zzt-rules\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[envdoctor.rules]\nzzt = zzt_rules\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path), env.get("PYTHONPATH")]))
    return env


def test_a_raising_rule_is_an_error_and_the_others_still_report(plugin_path: dict[str, str]) -> None:
    proc = run_envdoctor("report", "--json", "--no-loader", "--select", "ZZT001", "ZZT002", "SYS003",
                         env=plugin_path)
    report = json_report(proc)
    [found] = findings(report, "ZZT001")
    assert found["evidence"]["usable"] == report["facts"]["system"]["cpu"]["usable"]
    [error] = [e for e in report["errors"] if e.get("rule") == "ZZT002"]
    assert error["message"] == "RuntimeError: this rule is broken"
    assert proc.returncode == 0  # a warning, and the crash does not make it 2
    listing = run_envdoctor("rules", env=plugin_path)
    assert "ZZT001  always-finds" in listing.stdout


def test_a_failing_probe_skips_only_the_rules_that_need_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from envdoctor import facts as facts_module

    catalog = load_catalog()

    def needs_gpu(facts):
        facts["gpu"]
        yield Hit("unreachable")

    doc = "long enough for the catalog"
    metas = [_check_meta({"id": "ZZT003", "name": "needs-gpu", "severity": "info", "summary": doc,
                          "what": doc, "why": doc, "example": doc, "fix": doc}, "ZZT", "test")]
    combined = _assemble([("shipped", list(catalog.rules), dict(catalog.functions)),
                          ("test", metas, {"ZZT003": needs_gpu})])
    monkeypatch.setitem(facts_module.PROBES, "gpu", facts_module.Probe("envdoctor.no_such_module:gather_gpu"))
    config = Config(no_loader=True, select=("ZZT003", "SYS003"))
    report = run_check(config, catalog=combined)
    [skipped] = [e for e in report.errors if e.get("rule") == "ZZT003"]
    assert skipped["message"].startswith("skipped: probe 'gpu' failed: ModuleNotFoundError")
    assert skipped["probe"] == "gpu"
    [probe] = [e for e in report.errors if e.get("probe") == "gpu" and "rule" not in e]
    assert "envdoctor.no_such_module" in probe["message"]
    assert not [e for e in report.errors if e.get("rule") == "SYS003"]
    # Not checked is not clean: the verdict says so and the exit code is not 0.
    from envdoctor.report.text import render

    assert report.not_checked() == {"gpu": ["ZZT003"]}
    assert report.exit_code("error") == 1 and report.exit_code("never") == 0
    assert render(report).splitlines()[1].startswith("! 0 errors, 0 warnings, 0 info")  # not a ✓
    from envdoctor.api import PreflightError

    assert "  not checked: ZZT003 (the gpu probe failed: ModuleNotFoundError: No module named 'envdoctor.no_such_module'" \
        in str(PreflightError(report, "error"))


def test_select_and_ignore_by_id_name_and_family() -> None:
    catalog = load_catalog()
    assert [m.id for m in select_rules(catalog, ["SYS"], ["SYS002"])] == [
        m.id for m in catalog.rules if m.family == "SYS" and m.id != "SYS002"]
    assert [m.id for m in select_rules(catalog, ["cpu-quota"])] == ["SYS003"]
    with pytest.raises(ConfigError, match="unknown rule 'NOPE001'"):
        select_rules(catalog, ["NOPE001"])


def test_catalog_rejects_duplicates_and_placeholders() -> None:
    entry = {"id": "ZZT001", "name": "a-rule", "severity": "info", "summary": "long enough text",
             "what": "long enough text", "why": "long enough text", "example": "long enough text",
             "fix": "long enough text"}
    meta = _check_meta(entry, "ZZT", "test")
    with pytest.raises(CatalogError, match="defined twice"):
        _assemble([("a", [meta], {"ZZT001": lambda f: ()}), ("b", [meta], {"ZZT001": lambda f: ()})])
    with pytest.raises(CatalogError, match="placeholder"):
        _check_meta({**entry, "fix": "TODO write the fix"}, "ZZT", "test")
    with pytest.raises(CatalogError, match="missing or too short"):
        _check_meta({**entry, "why": ""}, "ZZT", "test")
    with pytest.raises(CatalogError, match="kebab-case"):
        _check_meta({**entry, "name": "Bad_Name"}, "ZZT", "test")
    with pytest.raises(CatalogError, match="has no function"):
        _assemble([("a", [meta], {})])


@pytest.mark.parametrize("text", ["TODO write the fix", "see FixMe below, soon", "tbd: the whole paragraph",
                                  "XXX fill this in later", "lorem ipsum dolor sit amet",
                                  "lorem ıpsum dolor sit amet", "lorem ipſum dolor sit amet", "İpsum? no: LOREM İPSUM"])
def test_catalog_finds_placeholders_however_they_are_cased(text: str) -> None:
    entry = {"id": "ZZT001", "name": "a-rule", "severity": "info", "summary": "long enough text",
             "what": "long enough text", "why": "long enough text", "example": "long enough text",
             "fix": "long enough text"}
    with pytest.raises(CatalogError, match="placeholder"):
        _check_meta({**entry, "what": text}, "ZZT", "test")
    # Words that only contain one are no placeholder.
    _check_meta({**entry, "what": "todos and a mixxxer, lorem ipsums"}, "ZZT", "test")


def test_every_catalog_entry_has_a_function() -> None:
    catalog = load_catalog(plugins=False)
    functions = dict(catalog.functions)  # imports every family's module, checking each table whole
    assert sorted(functions) == sorted(meta.id for meta in catalog.rules)
    assert all(callable(func) for func in functions.values())


def test_a_family_module_missing_a_function_or_an_entry_is_a_catalog_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The functions are looked up when a run needs them: a broken table still stops the run, exit 2."""
    doc = "long enough for the catalog"
    entry = {"severity": "info", "summary": doc, "what": doc, "why": doc, "example": doc, "fix": doc}
    metas = [_check_meta({**entry, "id": rule_id, "name": name}, "ZZT", "ZZT.toml")
             for rule_id, name in (("ZZT001", "first-rule"), ("ZZT002", "second-rule"))]
    (tmp_path / "zzt_missing.py").write_text("RULES = {'ZZT001': lambda facts: ()}\n")
    (tmp_path / "zzt_extra.py").write_text("RULES = {'ZZT001': lambda facts: (), 'ZZT002': lambda facts: (),\n"
                                           "         'ZZT003': lambda facts: ()}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    missing = _assemble([("ZZT.toml", metas, "zzt_missing")])
    assert "ZZT002" in missing.functions and "zzt_missing" not in sys.modules  # nothing imported yet
    with pytest.raises(CatalogError, match=r"ZZT.toml: rule ZZT002 has no function in zzt_missing.RULES"):
        missing.functions["ZZT001"]  # the family's table is checked whole, whichever rule is asked for
    with pytest.raises(CatalogError, match=r"functions without catalog entries in zzt_extra.RULES: ZZT003"):
        _assemble([("ZZT.toml", metas, "zzt_extra")]).functions["ZZT002"]
    with pytest.raises(KeyError):
        missing.functions["ZZT009"]
    # In a run it is the catalog's error, before any rule runs, not one rule's error in the report.
    with pytest.raises(CatalogError, match="ZZT002 has no function"):
        run_check(Config(no_loader=True, select=("ZZT001",)), catalog=_assemble([("ZZT.toml", metas, "zzt_missing")]))


def _families_imported(*argv: str) -> list[str]:
    """The rule family modules a real `envdoctor` run imports (in a child, where nothing is imported yet)."""
    code = ("import json, sys\n"
            "from envdoctor.cli import main\n"
            f"code = main({list(argv)!r})\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('envdoctor.rules.') and m.count('.') == 2)"
            " + sorted(m for m in ('importlib.metadata', 'envdoctor.analysis.spawn', 'packaging') if m in sys.modules)))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def test_a_run_imports_only_the_families_it_selects(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    assert _families_imported("check", "--no-loader", "--select", "PKG,CHN", "--prefix", sys.prefix,
                              "--format", "json", "-o", str(report), "--fail-on", "never") \
        == ["envdoctor.rules.channels", "envdoctor.rules.packages", "packaging"]
    assert {f["rule"][:3] for f in json.loads(report.read_text())["findings"]} <= {"PKG", "CHN"}
    # A bare venv (the hostile corpus's target): no requirement to parse, so no packaging either.
    bare = tmp_path / "bare"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", str(bare)],
                   check=True, timeout=120)
    assert _families_imported("check", "--no-loader", "--select", "PKG,CHN", "--prefix", str(bare), "-o",
                              str(report)) == ["envdoctor.rules.channels", "envdoctor.rules.packages"]
    # The pre-commit hook's run: the spawn guard and nothing else (no plugin in this environment to scan for).
    script = tmp_path / "train.py"
    script.write_text("print('hello')\n")
    assert _families_imported("check", "--no-loader", "--select", "SPW001,SPW004", str(script), "-o",
                              str(report)) == ["envdoctor.rules.spawn", "envdoctor.analysis.spawn"]
    assert _families_imported("rules") == []


def test_the_plugin_prescan_never_misses_a_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`_may_declare_plugins` answers False only where importlib.metadata finds no envdoctor.rules entry point."""
    from importlib.metadata import entry_points

    from envdoctor.catalog import ENTRY_POINT_GROUP, _may_declare_plugins

    def agrees(expected: bool) -> None:
        found = bool(list(entry_points(group=ENTRY_POINT_GROUP)))
        assert found == expected
        assert _may_declare_plugins() == expected

    # This environment (many distributions, entry points of other groups; no plugin in the test extras).
    agrees(bool(list(entry_points(group=ENTRY_POINT_GROUP))))
    # The rest on a sys.path of one folder, whatever this environment holds.
    site = tmp_path / "site"
    other = site / "other_tool-1.0.dist-info"
    other.mkdir(parents=True)
    (other / "entry_points.txt").write_text("[console_scripts]\nother = other_tool:main\n")
    monkeypatch.setattr(sys, "path", [str(site)])
    agrees(False)
    for name, folder, metadata in (("zzt-rules", site / "zzt_rules-1.0.dist-info", "METADATA"),
                                   ("zzt-legacy", site / "zzt_legacy.egg-info", "PKG-INFO"),
                                   ("zzt-egg", site / "zzt_egg-1.0-py3.11.egg" / "EGG-INFO", "PKG-INFO")):
        folder.mkdir(parents=True)
        (folder / metadata).write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        if folder.name == "EGG-INFO":  # an egg on sys.path is its own entry
            monkeypatch.setattr(sys, "path", [str(folder.parent), *sys.path])
        (folder / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nzzt = zzt_rules\n")
        agrees(True)
        (folder / "entry_points.txt").unlink()
        agrees(False)
    # What it cannot read as importlib.metadata would, it leaves to importlib.metadata.
    (other / "entry_points.txt").write_bytes(b"[console_scripts]\nother = other_tool:m\xff\n")
    assert _may_declare_plugins()
    (other / "entry_points.txt").write_text("[console_scripts]\n")
    assert not _may_declare_plugins()
    zipped = tmp_path / "bundle.zip"
    zipped.write_bytes(b"PK\x05\x06" + bytes(18))  # an empty zip archive
    monkeypatch.setattr(sys, "path", [str(zipped), *sys.path])
    assert _may_declare_plugins()


def test_catalog_doc_parts_are_literal_strings() -> None:
    """A family file writes its multi-line texts as TOML literal strings: every run parses the catalog,
    and tomllib reads a basic string (\"\"\"…\"\"\") a character at a time, three times slower."""
    from envdoctor.catalog import _family_files, catalog_dir

    for path in _family_files(catalog_dir()):
        assert '"""' not in path.read_text(encoding="utf-8"), path.name


def test_every_rule_function_has_a_catalog_entry() -> None:
    import importlib
    import pkgutil

    import envdoctor.rules as rules_pkg

    catalog = load_catalog(plugins=False)
    for info in pkgutil.iter_modules(rules_pkg.__path__):
        module = importlib.import_module(f"envdoctor.rules.{info.name}")
        for rule_id, func in getattr(module, "RULES", {}).items():
            assert catalog.functions.get(rule_id) is func, f"{rule_id} in {info.name} is not in the catalog"


def test_explain_prints_every_doc_part_of_every_rule() -> None:
    from envdoctor.cli import explain_text

    def squeezed(text: str) -> str:  # explain wraps and indents; the words must all be there
        return "".join(text.split())

    for meta in load_catalog(plugins=False).rules:
        shown = squeezed(explain_text(meta.id))
        for part, text in meta.docs().items():
            assert len(text) > 40, (meta.id, part)
            assert squeezed(text) in shown, (meta.id, part)
        # Four different texts, not one pasted four times.
        assert len({squeezed(t) for t in meta.docs().values()}) == 4, meta.id


def test_only_the_command_line_imports_the_cli_module() -> None:
    import ast

    import envdoctor
    from sourcetree import parsed  # each file parsed once for the source checks (tests/sourcetree.py)

    src = Path(envdoctor.__file__).parent
    importers = set()
    for path in src.rglob("*.py"):
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):  # `from envdoctor.cli import x` and `from envdoctor import cli`
                names = [node.module or "", *(f"{node.module}.{a.name}" for a in node.names)]
            else:
                continue
            if "envdoctor.cli" in names:
                importers.add(path.relative_to(src).as_posix())
    # Exactly the entry point: an empty set (a scan that found nothing) fails too.
    assert importers == {"__main__.py"}, importers


def test_probe_dependencies_are_declared_known_and_free_of_cycles() -> None:
    from envdoctor.facts import PROBES

    for name, probe in PROBES.items():
        assert set(probe.reads) <= set(PROBES) - {name}, name
        for key, receiver in probe.hands_over.items():
            assert name in PROBES[receiver].reads, f"{receiver} must read {name} to receive {key}"
    # Depth-first search: a probe can never wait, through other probes, for itself.
    state: dict[str, str] = {}

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert state.get(name) != "open", f"cycle: {' -> '.join((*path, name))}"
        if state.get(name) == "done":
            return
        state[name] = "open"
        for read in PROBES[name].reads:
            visit(read, (*path, name))
        state[name] = "done"

    for name in PROBES:
        visit(name, ())


def test_what_a_probe_hands_over_reaches_its_section_and_leaves_the_report() -> None:
    from envdoctor.facts import Facts

    shared = {"probe_version": 1, "torch_preimported": False, "sharing_strategy": "file_system"}
    facts = Facts(Config(), preset={"loader": {"dataset": "synthetic", "runs": [], "torch_probe": shared}})
    assert facts.handed_over("torch") == {"torch_probe": shared}
    assert facts.handed_over("system") == {}
    assert facts.gathered()["loader"] == {"dataset": "synthetic", "runs": []}
