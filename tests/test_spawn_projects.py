"""The spawn guard across a project: factories, containers and loaders passed between modules.

Each folder under fixtures/spawn_projects/ is a small project whose main
script (train.py, or scripts/train.py) says in its header which findings
must come out, in which file and at which line (`# expect: SPW001@utils.py:6`,
paths relative to the project folder), and whether it really fails under
spawn (`# ground-truth: fails|runs`). The slow tests run each script for real
with spawn (and one with forkserver) forced, and check that the tracebacks of
the failure pass through exactly the file and line the finding points at —
and through the module-level statement it names.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from envdoctor.config import Config
from envdoctor.engine import run_check
from test_spawn_ground_truth import BOOTSTRAP, run_with_start_method

pytestmark = [pytest.mark.standalone]

PROJECTS = Path(__file__).resolve().parent.parent / "fixtures" / "spawn_projects"
_EXPECT = re.compile(r"^#\s*expect:\s*(.+)$", re.MULTILINE)
_GROUND_TRUTH = re.compile(r"^#\s*ground-truth:\s*(fails|runs)\b", re.MULTILINE)
_TOKEN = re.compile(r"^(?P<rule>[A-Z]{3}\d{3})@(?P<file>[\w./-]+\.py):(?P<line>\d+)$")


def main_script(project: Path) -> Path:
    for candidate in (project / "train.py", project / "scripts" / "train.py"):
        if candidate.is_file():
            return candidate
    raise AssertionError(f"{project.name} has no train.py")


MAINS = sorted(main_script(p) for p in PROJECTS.iterdir() if p.is_dir())
IDS = [p.relative_to(PROJECTS).parts[0] for p in MAINS]


def project_of(script: Path) -> Path:
    return PROJECTS / script.relative_to(PROJECTS).parts[0]


def expected(script: Path) -> set[tuple[str, str, int]]:
    spec = _EXPECT.search(script.read_text(encoding="utf-8"))
    assert spec, f"{script} has no `# expect:` header"
    if spec.group(1).strip() == "nothing":
        return set()
    wanted = set()
    for token in spec.group(1).split():
        parsed = _TOKEN.match(token)
        assert parsed, f"{script}: bad expect token {token!r}"
        wanted.add((parsed.group("rule"), parsed.group("file"), int(parsed.group("line"))))
    return wanted


def ground_truth(script: Path) -> str | None:
    match = _GROUND_TRUTH.search(script.read_text(encoding="utf-8"))
    return match.group(1) if match else None


def check(script: Path, select: tuple[str, ...] = ("SPW001", "SPW004")):
    return run_check(Config(scripts=(str(script),), select=select, no_loader=True))


def found(report, project: Path) -> set[tuple[str, str, int]]:
    return {(f.rule, Path(f.location.path).resolve().relative_to(project).as_posix(), f.location.line)
            for f in report.findings}


def test_every_pattern_of_the_issue_has_a_project():
    assert {"factory_tuple", "factory_class", "passed_into", "package_roots", "import_time_start",
            "unreadable_module", "guarded_quiet", "imported_guard_quiet"} <= set(IDS)
    outcomes = {ground_truth(m) for m in MAINS}
    assert {"fails", "runs"} <= outcomes


@pytest.mark.parametrize("script", MAINS, ids=IDS)
def test_findings_match_the_header_exactly(script: Path):
    project = project_of(script)
    assert found(check(script), project) == expected(script)


def test_the_finding_names_the_path_it_followed_across_files():
    script = PROJECTS / "passed_into" / "train.py"
    [finding] = check(script, ("SPW001",)).by_rule("SPW001")
    evidence = finding.evidence
    assert evidence["path_followed"] == [f"{script}:12", f"{PROJECTS / 'passed_into' / 'utils.py'}:6"]
    assert evidence["module_level_statement"]["line"] == 12
    assert evidence["script"] == str(script) and evidence["num_workers"] == 1
    assert "utils.py:6" in finding.message and "train_epoch() called at line 12" in finding.message
    assert "built at " in evidence["starts"] and "train.py:9" in evidence["starts"]


def test_an_import_that_starts_workers_points_at_the_import_statement():
    script = PROJECTS / "import_time_start" / "train.py"
    [finding] = check(script, ("SPW001",)).by_rule("SPW001")
    assert finding.evidence["module_level_statement"]["code"] == "import warmup"
    assert finding.evidence["via"] == ["import warmup at line 4"]
    assert "Call `import warmup` (line 4)" in finding.fix


def test_an_unparsable_module_is_a_warning_for_it_and_the_loader_passed_to_it_is_a_warning_saying_why():
    script = PROJECTS / "unreadable_module" / "train.py"
    report = check(script)
    [guard] = report.by_rule("SPW001")
    assert guard.severity.value == "warning"
    assert guard.evidence["kind"] == "loader-passed" and guard.evidence["callee"] == "helpers.train_epoch"
    assert "cannot be parsed" in guard.evidence["unreadable_because"]
    assert "If helpers.train_epoch() iterates the loader" in guard.message
    [module] = report.by_rule("SPW004")
    assert module.evidence["module"] == "helpers" and module.evidence["imported_by"] == str(script)
    assert module.evidence["error"].startswith("SyntaxError")
    assert report.errors == []


def test_a_missing_relative_module_degrades_to_a_warning(tmp_path: Path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "run.py").write_text(
        "from torch.utils.data import DataLoader\n"
        "from .gone import consume\n"
        "consume(DataLoader(range(4), num_workers=2))\n", encoding="utf-8")
    report = check(package / "run.py")
    [guard] = report.by_rule("SPW001")
    assert guard.severity.value == "warning" and "no module pkg.gone in the project" in guard.evidence["unreadable_because"]
    assert report.errors == []


def test_a_module_importing_itself_in_a_cycle_is_read_once(tmp_path: Path):
    (tmp_path / "a.py").write_text("import b\nfrom torch.utils.data import DataLoader\n"
                                   "def make():\n    return DataLoader(range(4), num_workers=2)\n", encoding="utf-8")
    (tmp_path / "b.py").write_text("import a\n", encoding="utf-8")
    (tmp_path / "train.py").write_text("import a\nfor x in a.make():\n    pass\n", encoding="utf-8")
    report = check(tmp_path / "train.py")
    assert [(f.rule, f.location.line) for f in report.findings] == [("SPW001", 2)]


def _cycle_of_names(folder: Path) -> Path:
    """A library where `inner` reaches the loader only through `outer`, which names `inner` back."""
    (folder / "lib.py").write_text(
        "from torch.utils.data import DataLoader\n"
        "def outer(mode):\n"
        "    if mode == 'again':\n"
        "        return inner(mode)\n"
        "    return epoch()\n"
        "def inner(mode):\n"
        "    return outer(mode)\n"
        "def epoch():\n"
        "    loader = DataLoader(range(8), num_workers=2)\n"
        "    for batch in loader:\n"
        "        pass\n", encoding="utf-8")
    (folder / "train.py").write_text("import lib\n\nlib.outer('train')\nlib.inner('train')\n", encoding="utf-8")
    return folder / "train.py"


def test_a_library_function_that_reaches_the_loader_through_a_cycle_of_names_is_walked(tmp_path: Path):
    """Each module-level call is its own finding; `lib.inner` was skipped as "cannot start workers"
    whenever `inner` was first met while `outer`'s answer was still open (which the hash seed decided)."""
    findings = check(_cycle_of_names(tmp_path), ("SPW001",)).by_rule("SPW001")
    assert sorted((f.location.line, f.evidence["module_level_statement"]["line"]) for f in findings) == [(10, 3), (10, 4)]


@pytest.mark.parametrize("call", ["Feeder(n)", "[Feeder][0](n)", "functools.partial(Feeder, n)()", "Feeder.build(n)"])
def test_a_library_function_that_makes_an_object_of_a_class_it_names_is_walked(tmp_path: Path, call: str):
    """`make()` names no loader; the class it calls does (its constructor or a static method builds one). Asked
    whether `make` may start workers, the walk reads the class it names too, not only the functions."""
    (tmp_path / "lib.py").write_text(
        "from torch.utils.data import DataLoader\n"
        "class Feeder:\n"
        "    def __init__(self, n):\n"
        "        self.batches = DataLoader(range(n), num_workers=2)\n"
        "    @staticmethod\n"
        "    def build(n):\n"
        "        return Feeder(n)\n"
        f"import functools\ndef make(n):\n    return {call}\n", encoding="utf-8")
    (tmp_path / "train.py").write_text("import lib\n\nfor batch in lib.make(8).batches:\n    pass\n", encoding="utf-8")
    [finding] = check(tmp_path / "train.py", ("SPW001",)).by_rule("SPW001")
    assert finding.location.line == 3 and finding.evidence["num_workers"] == 2


@pytest.mark.parametrize("given", ["Feeder", "feeder", "[Feeder]"])
def test_a_library_function_given_a_class_or_function_that_builds_a_loader_is_walked(tmp_path: Path, given: str):
    """`run(factory, n)` names nothing it could start workers with: what it is given does."""
    (tmp_path / "lib.py").write_text(
        "def run(factory, n):\n"
        "    if isinstance(factory, list):\n"
        "        factory = factory[0]\n"
        "    return factory(n)\n", encoding="utf-8")
    (tmp_path / "train.py").write_text(
        "import lib\nfrom torch.utils.data import DataLoader\n\n"
        "class Feeder:\n    def __init__(self, n):\n        self.batches = DataLoader(range(n), num_workers=2)\n\n"
        "def feeder(n):\n    return Feeder(n)\n\n"
        f"for batch in lib.run({given}, 8).batches:\n    pass\n", encoding="utf-8")
    [finding] = check(tmp_path / "train.py", ("SPW001",)).by_rule("SPW001")
    assert finding.location.line == 11 and finding.evidence["num_workers"] == 2


@pytest.mark.slow
def test_what_the_walk_follows_does_not_depend_on_the_hash_seed(tmp_path: Path):
    import os
    import subprocess
    import sys

    script = _cycle_of_names(tmp_path)
    code = ("import sys\nfrom envdoctor.config import Config\nfrom envdoctor.engine import run_check\n"
            "report = run_check(Config(scripts=(sys.argv[1],), select=('SPW001',), no_loader=True))\n"
            "print(sorted(f.evidence['module_level_statement']['line'] for f in report.findings))\n")
    for seed in range(8):
        proc = subprocess.run([sys.executable, "-c", code, str(script)], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONHASHSEED": str(seed)}, check=True)
        assert proc.stdout.strip() == "[3, 4]", (seed, proc.stdout, proc.stderr[-2000:])


@pytest.mark.slow
@pytest.mark.parametrize("script", [m for m in MAINS if ground_truth(m)], ids=[i for m, i in zip(MAINS, IDS)
                                                                              if ground_truth(m)])
def test_spawn_really_fails_exactly_where_the_finding_points(script: Path, tmp_path: Path):
    project = project_of(script)
    outcome, output = run_with_start_method(script, "spawn", tmp_path, extra_path=(project,))
    assert outcome == ground_truth(script), f"{script} {outcome} under spawn; output:\n{output[-3000:]}"
    findings = check(script, ("SPW001",)).by_rule("SPW001")
    assert bool(findings) == (outcome == "fails")
    if outcome == "fails":
        assert BOOTSTRAP in output
        passed = {(Path(f).resolve(), int(n)) for f, n in re.findall(r'File "([^"]+)", line (\d+)', output)}
        for finding in findings:
            assert (Path(finding.location.path).resolve(), finding.location.line) in passed, (finding.location, passed)
            statement = finding.evidence["module_level_statement"]
            assert (Path(statement["path"]).resolve(), statement["line"]) in passed


@pytest.mark.slow
def test_forkserver_fails_the_same_way_across_modules(tmp_path: Path):
    script = PROJECTS / "passed_into" / "train.py"
    outcome, output = run_with_start_method(script, "forkserver", tmp_path, extra_path=(project_of(script),))
    assert outcome == "fails" and BOOTSTRAP in output
    assert f'File "{PROJECTS / "passed_into" / "utils.py"}", line 6' in output


def test_a_module_shared_by_two_scripts_is_walked_once_and_its_import_time_start_reported_for_both(tmp_path: Path):
    (tmp_path / "warm.py").write_text("from torch.utils.data import DataLoader\n"
                                      "first = next(iter(DataLoader(range(4), num_workers=2)))\n", encoding="utf-8")
    (tmp_path / "a.py").write_text("import warm\n", encoding="utf-8")
    (tmp_path / "b.py").write_text("import os\n\nimport warm\n", encoding="utf-8")
    findings = run_check(
        Config(scripts=(str(tmp_path / "a.py"), str(tmp_path / "b.py")), select=("SPW001",), no_loader=True)).findings
    assert sorted((f.evidence["script"], f.location.line, f.evidence["module_level_statement"]["line"])
                  for f in findings) == [(str(tmp_path / "a.py"), 2, 1), (str(tmp_path / "b.py"), 2, 3)]


def shared_settings_scripts(folder: Path) -> list[str]:
    """A project module scripts write into (a name, a `global`, an attribute of an object it made, a class
    attribute, a dict and a list it holds), scripts that write into it before their own loader, and one that
    only reads it (0 workers, or no loader, where each is defined)."""
    (folder / "settings.py").write_text(
        "NUM_WORKERS = 0\nLOADER_KW = {\"num_workers\": 0}\nEXTRA = []\n\n\n"
        "def use(n):\n    global NUM_WORKERS\n    NUM_WORKERS = n\n\n\n"
        "class Config:\n    def __init__(self):\n        self.workers = 0\n\n\ncfg = Config()\n\n\n"
        "class Defaults:\n    workers = 0\n", encoding="utf-8")
    (folder / "tune.py").write_text(
        "import settings\n\nsettings.NUM_WORKERS = 4\nsettings.cfg.workers = 8\nsettings.Defaults.workers = 8\n"
        "settings.LOADER_KW[\"num_workers\"] = 4\n", encoding="utf-8")
    (folder / "tune_global.py").write_text("import settings\n\nsettings.use(2)\n", encoding="utf-8")
    (folder / "tune_calls.py").write_text(
        "from torch.utils.data import DataLoader\n\nimport settings\n\nsettings.LOADER_KW.update(num_workers=2)\n"
        "settings.EXTRA.append(DataLoader(range(4), num_workers=2))\n", encoding="utf-8")
    (folder / "own.py").write_text(
        "from torch.utils.data import DataLoader\n\nimport settings\n\nsettings.use(1)\n"
        "for batch in DataLoader(range(4), num_workers=settings.NUM_WORKERS):\n    pass\n", encoding="utf-8")
    (folder / "own_kw.py").write_text(
        "from torch.utils.data import DataLoader\n\nimport settings\n\nsettings.LOADER_KW[\"num_workers\"] = 1\n"
        "for batch in DataLoader(range(4), **settings.LOADER_KW):\n    pass\n", encoding="utf-8")
    (folder / "train.py").write_text(
        "from torch.utils.data import DataLoader\n\nimport settings\n\n"
        "for batch in DataLoader(range(4), num_workers=settings.NUM_WORKERS):\n    pass\n"
        "for batch in DataLoader(range(4), num_workers=settings.cfg.workers):\n    pass\n"
        "for batch in DataLoader(range(4), num_workers=settings.Defaults.workers):\n    pass\n"
        "for batch in DataLoader(range(4), **settings.LOADER_KW):\n    pass\n"
        "for loader in settings.EXTRA:\n    for batch in loader:\n        pass\n", encoding="utf-8")
    return ["tune.py", "tune_global.py", "tune_calls.py", "own.py", "own_kw.py", "train.py"]


def test_what_one_script_assigns_into_a_shared_module_is_not_seen_by_the_next(tmp_path: Path):
    """Each script runs in a process of its own: `settings.NUM_WORKERS = 4`, `settings.cfg.workers = 8`,
    `settings.Defaults.workers = 8`, `settings.LOADER_KW["num_workers"] = 4`, `.update()` or `.append()` in one,
    or a `global` its call sets, is not what the next one imports. Checked together (a folder, the pre-commit
    hook), the later script was a false SPW001 (for the containers and the class, even one pointing at a loader
    built in another script); alone it is quiet."""
    names = shared_settings_scripts(tmp_path)
    for order in (names, names[::-1]):
        findings = run_check(Config(scripts=tuple(str(tmp_path / n) for n in order), select=("SPW001",),
                                    no_loader=True)).findings
        # A script's own write is its own (1 worker, which no other script writes): own.py and own_kw.py start
        # it at import time; train.py starts none.
        assert sorted((Path(f.location.path).name, f.location.line, f.evidence["num_workers"]) for f in findings) \
            == [("own.py", 6, 1), ("own_kw.py", 6, 1)], order


def import_time_writes_scripts(folder: Path) -> None:
    """A module whose import sets another's names and dict (a `global` by a call, an attribute of an object
    it made, `.update()`): two scripts import it and loop with those counts; one imports only the settings
    (0 workers)."""
    (folder / "settings.py").write_text(
        "NUM_WORKERS = 0\nLOADER_KW = {\"num_workers\": 0}\n\n\n"
        "def use(n):\n    global NUM_WORKERS\n    NUM_WORKERS = n\n\n\n"
        "class Config:\n    def __init__(self):\n        self.workers = 0\n\n\ncfg = Config()\n", encoding="utf-8")
    (folder / "setup_workers.py").write_text(
        "import settings\n\nsettings.use(1)\nsettings.cfg.workers = 3\nsettings.LOADER_KW.update(num_workers=4)\n",
        encoding="utf-8")
    loops = ("for batch in DataLoader(range(4), num_workers=settings.NUM_WORKERS):\n    pass\n"
             "for batch in DataLoader(range(4), num_workers=settings.cfg.workers):\n    pass\n"
             "for batch in DataLoader(range(4), **settings.LOADER_KW):\n    pass\n")
    for name in ("a.py", "b.py"):
        (folder / name).write_text("from torch.utils.data import DataLoader\n\nimport settings\nimport setup_workers\n\n"
                                   + loops, encoding="utf-8")
    (folder / "quiet.py").write_text("from torch.utils.data import DataLoader\n\nimport settings\n\n\n" + loops,
                                     encoding="utf-8")


def test_what_an_import_writes_into_another_module_every_importer_sees(tmp_path: Path):
    """setup_workers.py's import sets settings.NUM_WORKERS (by a `global`), settings.cfg.workers and
    settings.LOADER_KW. Undone after the first script that imported it, the writes were not made again for
    the next, whose import is replayed: b.py was quiet while a.py was found, and both die under spawn. The
    dict's change was never undone: quiet.py, which never imports setup_workers, had a false SPW001."""
    import_time_writes_scripts(tmp_path)
    for order in (("a.py", "b.py", "quiet.py"), ("quiet.py", "a.py", "b.py"), ("b.py", "quiet.py", "a.py")):
        findings = run_check(Config(scripts=tuple(str(tmp_path / n) for n in order), select=("SPW001",),
                                    no_loader=True)).findings
        assert sorted((Path(f.location.path).name, f.location.line, f.evidence["num_workers"]) for f in findings) \
            == [("a.py", 6, 1), ("a.py", 8, 3), ("a.py", 10, 4), ("b.py", 6, 1), ("b.py", 8, 3), ("b.py", 10, 4)], order


@pytest.mark.slow
def test_what_an_import_writes_into_another_module_dies_and_runs_under_spawn_where_the_analysis_says(tmp_path):
    import_time_writes_scripts(tmp_path)
    outcome, output = run_with_start_method(tmp_path / "b.py", "spawn", tmp_path)
    assert outcome == "fails" and BOOTSTRAP in output and f'File "{tmp_path / "b.py"}", line 6' in output
    outcome, output = run_with_start_method(tmp_path / "quiet.py", "spawn", tmp_path)
    assert outcome == "runs", output[-2000:]


def own_containers_scripts(folder: Path) -> None:
    """A module whose import fills its own dict (directly, and by a function its top level calls) with 1
    worker; two scripts that loop over a loader built from it; one that empties it for itself."""
    (folder / "defaults.py").write_text(
        "KW = {\"num_workers\": 0}\n\n\ndef setup():\n    KW.update(num_workers=1)\n\n\n"
        "setup()\nKW[\"persistent_workers\"] = True\n", encoding="utf-8")
    for name in ("a.py", "b.py"):
        (folder / name).write_text("from torch.utils.data import DataLoader\n\nimport defaults\n\n"
                                   "for batch in DataLoader(range(4), **defaults.KW):\n    pass\n", encoding="utf-8")
    (folder / "c.py").write_text("import defaults\n\ndefaults.KW.clear()\ndefaults.KW[\"num_workers\"] = 0\n",
                                 encoding="utf-8")


def test_what_a_module_does_to_its_own_containers_on_import_every_importer_sees(tmp_path: Path):
    """Undoing a script's writes must not undo the module's own: what its import put in its dict is there for
    every script that imports it, first or later. (`setup()` was skipped as a function that could start
    nothing before its mention of num_workers made it one to walk: a.py was quiet, and died under spawn.)"""
    own_containers_scripts(tmp_path)
    for order in (("c.py", "a.py", "b.py"), ("a.py", "c.py", "b.py")):
        findings = run_check(Config(scripts=tuple(str(tmp_path / n) for n in order), select=("SPW001",),
                                    no_loader=True)).findings
        assert sorted((Path(f.location.path).name, f.location.line, f.evidence["num_workers"]) for f in findings) \
            == [("a.py", 5, 1), ("b.py", 5, 1)], order


@pytest.mark.slow
def test_a_module_filling_its_own_containers_dies_under_spawn_where_the_analysis_says(tmp_path: Path):
    own_containers_scripts(tmp_path)
    outcome, output = run_with_start_method(tmp_path / "a.py", "spawn", tmp_path)
    assert outcome == "fails" and BOOTSTRAP in output and f'File "{tmp_path / "a.py"}", line 5' in output


@pytest.mark.slow
def test_a_shared_module_assigned_into_dies_and_runs_under_spawn_where_the_analysis_says(tmp_path: Path):
    shared_settings_scripts(tmp_path)
    outcome, output = run_with_start_method(tmp_path / "own.py", "spawn", tmp_path)
    assert outcome == "fails" and BOOTSTRAP in output and f'File "{tmp_path / "own.py"}", line 6' in output
    outcome, output = run_with_start_method(tmp_path / "own_kw.py", "spawn", tmp_path)
    assert outcome == "fails" and BOOTSTRAP in output and f'File "{tmp_path / "own_kw.py"}", line 6' in output
    outcome, output = run_with_start_method(tmp_path / "train.py", "spawn", tmp_path)
    assert outcome == "runs", output[-2000:]


def test_a_module_function_body_dropped_after_import_is_read_again_where_it_was(tmp_path):
    """strip_bodies frees an imported module's function bodies; calling one parses it again from
    the module's lines with the same line and column numbers (tabs, decorators, methods in an if)."""
    import ast

    from envdoctor.analysis.spawn.syntax import body_of, strip_bodies

    source = ("import functools\n"
              "if True:\n"
              "\tclass Loaders:\n"
              "\t\t@functools.cache\n"
              "\t\tdef run(self, loader):\n"
              "\t\t\tfor batch in loader:\n"
              "\t\t\t\tpass\n"
              "def top():\n"
              "    return [x for x in range(3)]\n")
    tree = ast.parse(source)
    before = ast.dump(tree, include_attributes=True)
    strip_bodies(tree)
    method = tree.body[1].body[0].body[0]
    assert method.body == [] and tree.body[2].body == []
    lines = source.splitlines()
    assert body_of(method, lines)[0].lineno == 6 and body_of(method, lines)[0].col_offset == 3
    body_of(tree.body[2], lines)
    assert ast.dump(tree, include_attributes=True) == before


def test_source_lines_break_where_python_does() -> None:
    """Form feeds, \x1c-\x1e, \x85 and U+2028 end a line for str.splitlines, never for Python's tokenizer."""
    from envdoctor.analysis.spawn.syntax import source_lines

    assert source_lines("a\x0cb\nc\u2028d\r\ne\rf\x85g\n") == ["a\x0cb", "c\u2028d", "e", "f\x85g"]
    assert source_lines("plain\nlines\n") == "plain\nlines\n".splitlines() == ["plain", "lines"]
    assert source_lines("no end\x0c") == ["no end\x0c"]


def test_a_kept_module_s_lines_read_as_the_list_they_are_made_from() -> None:
    """SourceLines holds a kept module's lines as one text (NeMo's: 39 MiB as lists of strings, about half
    that as text): every index, slice and step reads what the list would, odd line breaks, empty lines and
    non-ASCII text included, and an index past either end raises as a list's does."""
    from envdoctor.analysis.spawn.syntax import SourceLines, source_lines

    texts = ["", "\n", "one", "a\n\nb\n", "x = 1\r\ny = 'é'\rz\x0c\n\n", "\u2028\n\t\n  tail"]
    for text in texts:
        lines = source_lines(text)
        held = SourceLines(lines)
        assert len(held) == len(lines) and list(held) == lines and held[:] == lines
        for i in range(-len(lines), len(lines)):
            assert held[i] == lines[i]
        for start in range(-5, 7):
            for stop in (*range(-5, 7), None):
                for step in (None, 1, 2, -1, -3):
                    assert held[start:stop:step] == lines[start:stop:step], (text, start, stop, step)
        for outside in (len(lines), -len(lines) - 1):
            with pytest.raises(IndexError):
                held[outside]


def test_a_script_imported_by_the_next_is_parsed_once_and_every_script_gets_the_facts_it_gets_alone(tmp_path):
    """Speed of issue 29: a script's tree is kept for the next scripts that import it (SharedModules.keep_recent),
    and an imported module's bodies stay whole until the importing script's walk is over (strip_later).
    Neither may change a fact: each script's facts checked together are the ones it gets checked alone."""
    import os

    from envdoctor.analysis.spawn.project import SharedModules
    from envdoctor.facts.scripts import analyse_script

    (tmp_path / "model.py").write_text(
        "from torch.utils.data import DataLoader\n"
        "import torch\n\n"
        "def make(workers=2):\n"
        "    return DataLoader(range(8), num_workers=workers)\n\n"
        "def run(loader):\n"
        "    for batch in loader:\n"
        "        torch.zeros(1, device='cuda')\n\n"
        "class Net:\n"
        "    def __init__(self):\n"
        "        self.loader = make(4)\n\n"
        "if __name__ == '__main__':\n"
        "    run(make())\n", encoding="utf-8")
    (tmp_path / "train.py").write_text("import model\n\nnet = model.Net()\nmodel.run(net.loader)\n", encoding="utf-8")
    (tmp_path / "eval.py").write_text("from model import make, run\n\n"
                                      "def main():\n    run(make(3))\n\nif __name__ == '__main__':\n    main()\n",
                                      encoding="utf-8")
    scripts = [str(tmp_path / name) for name in ("model.py", "train.py", "eval.py")]

    def facts(info):
        return {key: value for key, value in info.items() if key != "calls_followed"}

    alone = [facts(analyse_script(path, shared=SharedModules())) for path in scripts]
    shared = SharedModules()
    together = []
    for path in scripts:
        together.append(facts(analyse_script(path, shared=shared)))
        if path.endswith("model.py"):
            kept = shared.recent[os.path.realpath(path)][1]
    assert together == alone
    assert [len(f["worker_starts"]) for f in together] == [1, 1, 1] and together[1]["cuda_inits"]
    assert shared.parsed[os.path.realpath(scripts[0])][1] is kept  # the script's own tree, not a second parse
    net = next(node for node in kept.body if getattr(node, "name", "") == "Net")
    assert not shared.unstripped and net.body[0].body == []  # Net.__init__: stripped once train.py's walk ended


def test_a_call_skipped_through_a_replayed_import_still_sees_what_its_callees_start(tmp_path):
    """A module imported by an earlier script is replayed, not walked again, for the next: the functions its
    import defined must be known again, or the check that lets a library call with plain arguments be skipped
    (nothing it reaches by name starts workers or CUDA) cannot follow `g()` into `helper()`. The second
    script's facts were then those of a script checked after the first, not its own (1 CUDA initialisation
    alone, 0 after a.py)."""
    from envdoctor.analysis.spawn.project import SharedModules
    from envdoctor.facts.scripts import analyse_script

    (tmp_path / "m.py").write_text("import torch\n\ndef helper():\n    torch.cuda.init()\n\ndef g():\n    helper()\n",
                                   encoding="utf-8")
    for name in ("a.py", "b.py"):
        (tmp_path / name).write_text("import m\n\nif __name__ == '__main__':\n    m.g()\n", encoding="utf-8")
    alone = analyse_script(str(tmp_path / "b.py"), shared=SharedModules())
    shared = SharedModules()
    first = analyse_script(str(tmp_path / "a.py"), shared=shared)
    second = analyse_script(str(tmp_path / "b.py"), shared=shared)
    assert [c["line"] for c in alone["cuda_inits"]] == [4]
    assert [c["line"] for c in first["cuda_inits"]] == [c["line"] for c in second["cuda_inits"]] == [4]
    assert {k: v for k, v in second.items() if k not in ("calls_followed", "path")} == \
        {k: v for k, v in alone.items() if k not in ("calls_followed", "path")}


def made_during_import_scripts(folder: Path) -> None:
    """A module whose import gets an object from another module's function (whose class's __init__ sets its
    count); scripts that loop with that count, one after writing 0 into it."""
    (folder / "settings.py").write_text(
        "class Config:\n    def __init__(self, num_workers):\n        self.workers = num_workers\n\n\n"
        "def make(num_workers):\n    return Config(num_workers)\n", encoding="utf-8")
    (folder / "made.py").write_text("import settings\n\ncfg = settings.make(2)\n", encoding="utf-8")
    loop = "for batch in DataLoader(range(4), num_workers=made.cfg.workers):\n    pass\n"
    for name in ("a.py", "c.py"):
        (folder / name).write_text("from torch.utils.data import DataLoader\n\nimport made\n\n" + loop,
                                   encoding="utf-8")
    (folder / "b.py").write_text("from torch.utils.data import DataLoader\n\nimport made\n\nmade.cfg.workers = 0\n"
                                 + loop, encoding="utf-8")


def test_an_object_made_while_a_module_is_imported_is_that_import_s_whatever_code_made_it(tmp_path: Path):
    """`cfg = settings.make(2)` runs settings' code while made.py is imported: the object it returns is made.py's,
    as one its own top level made would be. What its __init__ wrote is no change to another module's object
    to undo after the script and make again for each script that imports made (NeMo's formatters and types:
    127,738 such writes in one check of the tree, replayed one by one); what a script writes into it is still
    that script's alone. An object a script's code makes (settings' code or its own) is the script's: only a
    write into a shared module, put back after the script, can hand it to another."""
    from envdoctor.analysis.spawn.project import SharedModules
    from envdoctor.facts.scripts import analyse_script

    made_during_import_scripts(tmp_path)
    for order in (("a.py", "b.py", "c.py"), ("b.py", "a.py", "c.py"), ("b.py", "c.py", "a.py")):
        findings = run_check(Config(scripts=tuple(str(tmp_path / n) for n in order), select=("SPW001",),
                                    no_loader=True)).findings
        assert sorted((Path(f.location.path).name, f.location.line, f.evidence["num_workers"]) for f in findings) \
            == [("a.py", 5, 2), ("c.py", 5, 2)], order
    shared = SharedModules()
    analyse_script(str(tmp_path / "a.py"), shared=shared)
    (made,) = [m for m in shared.modules.values() if m.name == "made"]
    assert made.import_writes == [] and made.import_changes == []


def test_bodies_parsed_again_for_calls_are_stripped_again_beyond_the_bound_with_the_same_facts(
        tmp_path: Path, monkeypatch):
    """A kept module's function body is parsed again when a script calls it, and kept whole for the next
    scripts' calls: up to RESTORED_LINES lines, the least recently used stripped again between scripts (every
    body any script called stayed whole before: on NeMo half the memory of its kept trees). What a later script
    finds is the same whether the body was kept or read again; and the annotations of a kept module's
    functions are dropped (the walk never reads one, and one naming `torch.cuda` touches no CUDA)."""
    import ast
    import os

    from envdoctor.analysis.spawn import project
    from envdoctor.facts.scripts import analyse_script

    (tmp_path / "m.py").write_text(
        "import torch\nfrom torch.utils.data import DataLoader\n\n"
        "def helper(n: int) -> torch.cuda.FloatTensor:\n    x = n + 1\n    return x\n\n"
        "def cuda_setup(flag):\n    if flag:\n        def inner():\n            torch.cuda.init()\n"
        "        inner()\n    return flag\n\n"
        "def loader(workers: 'torch.cuda.Tensor'):\n    helper(1)\n"
        "    return DataLoader(range(4), num_workers=workers)\n\n"
        "class Data:\n    def __getitem__(self, i) -> torch.cuda.FloatTensor:\n        return i\n\n"
        "    def __len__(self):\n        return 4\n", encoding="utf-8")
    calls = ("m.cuda_setup(True)\n    for b in m.loader(2):\n        pass\n",
             "for b in DataLoader(m.Data(), num_workers=2):\n        pass\n    m.cuda_setup(1)\n",
             "m.helper(3)\n    m.cuda_setup(True)\n    for b in m.loader(3):\n        pass\n")
    scripts = []
    for i, body in enumerate(calls * 2):
        path = tmp_path / f"s{i}.py"
        path.write_text("from torch.utils.data import DataLoader\n\nimport m\n\n"
                        f"if __name__ == '__main__':\n    {body}", encoding="utf-8")
        scripts.append(str(path))

    def check(limit: int) -> tuple[list[dict], project.SharedModules]:
        monkeypatch.setattr(project, "RESTORED_LINES", limit)
        shared = project.SharedModules()
        found = []
        for path in scripts:
            found.append({k: v for k, v in analyse_script(path, shared=shared).items() if k != "path"})
            assert shared.restored.lines <= limit
        return found, shared

    def functions(shared: project.SharedModules) -> dict[str, ast.FunctionDef]:
        tree = shared.parsed[os.path.realpath(tmp_path / "m.py")][1]
        return {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}

    kept, whole = check(10_000)
    bounded, shared = check(4)
    assert bounded == kept
    assert [len(f["cuda_inits"]) for f in kept] == [1, 1, 1] * 2
    assert [s["worker_uses_cuda"] for s in kept[1]["worker_starts"]] == [False]  # only its annotation names CUDA
    assert all(functions(whole)[name].body for name in ("helper", "cuda_setup", "loader", "__getitem__"))
    assert not any(f.body for f in functions(shared).values() if (f.end_lineno or 0) - f.lineno >= 4)
    assert functions(shared)["helper"].returns is None and functions(shared)["loader"].args.args[0].annotation is None
    # A script's own tree keeps its annotations; one that names CUDA touches none there either.
    (tmp_path / "own.py").write_text(
        "import torch\nfrom torch.utils.data import DataLoader, Dataset\n\n"
        "class Data(Dataset):\n    def __getitem__(self, i) -> torch.cuda.FloatTensor:\n        return i\n\n"
        "    def __len__(self):\n        return 4\n\n"
        "for b in DataLoader(Data(), num_workers=2):\n    pass\n", encoding="utf-8")
    [start] = analyse_script(str(tmp_path / "own.py"))["worker_starts"]
    assert start["worker_uses_cuda"] is False


def test_project_files_answer_what_the_file_system_says(tmp_path: Path, monkeypatch):
    """ProjectFiles reads a folder's listing once for the names it lacks and resolves each folder once;
    what it answers is what a stat per path and os.path.realpath answer: links to files and folders, a
    broken link, a loop of links, a FIFO, a file where a folder is looked for, a folder it cannot list."""
    import os

    from envdoctor.analysis.spawn import project

    root = tmp_path / "repo"
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "sub" / "__init__.py").write_text("")
    (root / "pkg" / "sub" / "mod.py").write_text("")
    (root / "ns" / "inner").mkdir(parents=True)
    (root / "ns" / "a.py").write_text("")
    (root / "plain").write_text("")
    (root / "linked.py").symlink_to(root / "pkg" / "sub" / "mod.py")
    (root / "broken.py").symlink_to(root / "missing.py")
    (root / "alias").symlink_to(root / "pkg", target_is_directory=True)
    (root / "loop_a.py").symlink_to(root / "loop_b.py")
    (root / "loop_b.py").symlink_to(root / "loop_a.py")
    os.mkfifo(root / "fifo.py")
    (root / "locked").mkdir()
    (root / "locked" / "hidden.py").write_text("")
    names = ["pkg", "pkg.sub", "pkg.sub.mod", "pkg.nothing", "ns", "ns.a", "ns.inner", "plain", "plain.x", "linked",
             "broken", "alias", "alias.sub.mod", "loop_a", "fifo", "missing", "locked.hidden", "nothing.deeper"]
    scandir = os.scandir

    def unlistable(folder):
        if str(folder).endswith("locked"):
            raise PermissionError(13, "Permission denied", str(folder))
        return scandir(folder)

    monkeypatch.setattr(os, "scandir", unlistable)
    roots = (str(root),)
    monkeypatch.setattr(project, "_LISTED", False)
    stat_only = [project.ProjectFiles().locate(roots, name) for name in names]
    monkeypatch.setattr(project, "_LISTED", True)
    assert [project.ProjectFiles().locate(roots, name) for name in names] == stat_only
    monkeypatch.setattr(project, "MAX_LISTED", 3)  # more names than a listing is read for: a stat each
    assert [project.ProjectFiles().locate(roots, name) for name in names] == stat_only
    assert stat_only[names.index("locked.hidden")] == (str(root / "locked" / "hidden.py"), "locked", False)
    assert stat_only[names.index("broken")] is None and stat_only[names.index("fifo")] is not None
    monkeypatch.chdir(root / "pkg")
    paths = [str(root / "alias" / "sub" / "mod.py"), str(root / "linked.py"), str(root / "broken.py"),
             str(root / "loop_a.py"), str(root / "pkg" / ".." / "alias" / "sub"), "sub/mod.py", "../alias/sub",
             "__init__.py", str(root / "missing" / "deeper.py"), str(root / "pkg" / "sub") + "/"]
    files = project.ProjectFiles()
    assert [files.real(path) for path in paths] == [os.path.realpath(path) for path in paths]


def test_what_a_function_mentions_and_calls_is_what_the_plain_patterns_find():
    """mentions_of reads a function's text faster than the two patterns would (a word test before
    RELEVANT, a possessive CALLED, the names only when nothing is mentioned), and finds the same:
    checked on every function of envdoctor's own source and on texts made to trip each difference."""
    import ast
    from types import SimpleNamespace

    import envdoctor
    from envdoctor.analysis.spawn.bodies import RELEVANT, mentions_of

    def plain(text: str) -> tuple[bool, frozenset[str]]:
        mentions = RELEVANT.search(text) is not None
        return mentions, frozenset() if mentions else frozenset(re.findall(r"\b([^\W\d]\w*)\s*[(.,)\]]", text))

    crafted = ["def f():\n    print (x)\n    g\n    (1)\n    h2o(3); _x9 (4)\n    ab.cd  (5)\n",
               "def f():\n    données(1)\n    x = 1(2)\n    self.run_it()\n    a.fitness()\n",
               "def f():\n    return helper(1) + other\t(2)\n", "def f():\n    pass\n"]
    texts = list(crafted)
    for path in sorted(Path(envdoctor.__file__).parent.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        lines = source.splitlines()
        texts += ["\n".join(lines[n.lineno - 1:n.end_lineno]) for n in ast.walk(ast.parse(source))
                  if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    assert len(texts) > 1000
    for text in texts:
        lines = text.splitlines()  # a node of the function's own lines (methods keep their indentation)
        assert mentions_of(SimpleNamespace(lineno=1, end_lineno=len(lines)), lines) == plain(text), text[:200]
    first = crafted[0].splitlines()
    assert mentions_of(SimpleNamespace(lineno=1, end_lineno=len(first)), first)[1] == {"f", "print", "x", "g", "h2o", "_x9",
                                                                                      "ab", "cd"}


def test_every_branch_of_the_relevant_pattern_holds_a_word_the_quick_test_looks_for():
    """A text without any of RELEVANT_WORDS is never searched by RELEVANT: each branch of the pattern must
    hold one, or adding a branch would silently never match."""
    from envdoctor.analysis.spawn.bodies import RELEVANT, RELEVANT_WORDS

    for branch in RELEVANT.pattern.split("|"):
        sample = (branch.replace("[Ll]", "L").replace("\\b", "").replace("\\s", " ")
                  .replace("\\.", ".").replace("\\(", "("))
        assert re.fullmatch(branch, sample), branch
        assert any(word in sample for word in RELEVANT_WORDS), branch
