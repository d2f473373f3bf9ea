"""SPW001, SPW002 and SPW004: rule ids, evidence and fixes, on real scripts and on fixed facts.

The scripts are real files (fixtures, or written to tmp_path); the target's
Python version and platform are set with `Facts.from_dict` where a test needs
another platform than this one, in the exact format the target probe emits.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from envdoctor.config import Config
from envdoctor.engine import run_check
from envdoctor.facts import Facts
from envdoctor.facts.scripts import analyse_script, gather_scripts
from envdoctor.model import Severity
from envdoctor.rules.spawn.guard import default_start_method
from support import findings, json_report, run_cli
from test_spawn_fixtures import FIXTURE_DIR, check_scripts

LINUX_311 = {"python": "3.11.7", "platform": "linux", "prefix": "/opt/env", "kind": "venv"}
LINUX_314 = {"python": "3.14.0", "platform": "linux", "prefix": "/opt/env", "kind": "venv"}
MACOS = {"python": "3.12.4", "platform": "darwin", "prefix": "/opt/env", "kind": "conda"}
WINDOWS = {"python": "3.12.4", "platform": "win32", "prefix": "C:/env", "kind": "conda"}


def fixture(name: str) -> str:
    return str(FIXTURE_DIR / name)


def run_on(target: dict, *scripts: str, select: tuple[str, ...] = ("SPW",)):
    """The rules against real script analysis, with the target's version and platform fixed."""
    config = Config(scripts=tuple(scripts), select=select, no_loader=True)
    probe = Facts(config)
    section = gather_scripts(probe)
    facts = Facts.from_dict({"target": target, "scripts": section}, config=config)
    return run_check(config, facts=facts)


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("target, method", [
    (("3.11.7", "linux"), "fork"), (("3.13.1", "linux"), "fork"), (("3.14.0", "linux"), "forkserver"),
    (("3.12.4", "darwin"), "spawn"), (("3.8.10", "darwin"), "spawn"), (("3.12.4", "win32"), "spawn"),
    (("3.14.0", "linux-64"), "forkserver"), (("3.11.0", "osx-arm64"), "spawn"), ((None, "linux"), None),
    (("3.12.0", "plan9"), None),
])
def test_default_start_method_by_python_version_and_platform(target, method):
    assert default_start_method(*target)[0] == method


def test_default_start_method_matches_this_interpreter():
    import multiprocessing

    here = default_start_method("%d.%d.%d" % sys.version_info[:3], sys.platform)[0]
    assert here == multiprocessing.get_start_method(allow_none=False)


# -- SPW001 ---------------------------------------------------------------------

def test_spw001_through_main_names_the_call_chain_and_the_statement_to_move():
    report = check_scripts(fixture("main_unguarded.py"), select=("SPW001",))
    [finding] = report.by_rule("SPW001")
    assert finding.severity is Severity.ERROR and finding.name == "missing-main-guard"
    assert (finding.location.line, finding.location.column) == (10, 5)
    evidence = finding.evidence
    assert evidence["code"] == "for (batch,) in loader:"
    assert evidence["num_workers"] == 1 and evidence["num_workers_source"] == "literal"
    assert evidence["via"] == ["main() called at line 14"]
    assert evidence["module_level_statement"] == {"path": str(FIXTURE_DIR / "main_unguarded.py"), "line": 14, "code": "main()"}
    assert evidence["path_followed"] == [f"{FIXTURE_DIR / 'main_unguarded.py'}:14", f"{FIXTURE_DIR / 'main_unguarded.py'}:10"]
    assert evidence["start_method"] == default_start_method("%d.%d.%d" % sys.version_info[:3], sys.platform)[0]
    assert "Call `main()` (line 14) only from a new `if __name__ == \"__main__\":`" in finding.fix
    assert "bootstrapping phase" in finding.message


def test_spw001_num_workers_from_a_name_and_from_run_time_values():
    named = check_scripts(fixture("workers_from_name.py"), select=("SPW001",)).by_rule("SPW001")
    assert [(f.location.line, f.evidence["num_workers"], f.evidence["num_workers_source"]) for f in named] == [
        (12, 2, "NUM_WORKERS = 2 (line 6)"), (16, 2, "NUM_WORKERS = 2 (line 6)")]
    unknown = check_scripts(fixture("workers_unknown.py"), select=("SPW001",)).by_rule("SPW001")
    # An argparse option's default is what runs unless the user passes it: --workers defaults to 4.
    assert [(f.evidence["num_workers"], f.evidence["num_workers_source"]) for f in unknown] == [
        (4, "--workers (default 4)"), (None, "os.cpu_count()")]
    assert "not known before run time" in unknown[1].message
    # The count may be 0 at run time: a warning, where a known count of 2 is an error.
    assert [f.severity for f in unknown] == [Severity.ERROR, Severity.WARNING]
    assert {f.severity for f in named} == {Severity.ERROR}


def test_spw001_on_macos_says_the_run_dies_and_on_linux_311_that_it_only_works_by_luck():
    mac = run_on(MACOS, fixture("unguarded_loop.py"), select=("SPW001",)).by_rule("SPW001")[0]
    assert mac.evidence["start_method"] == "spawn"
    assert "this target uses spawn" in mac.message and "so the run dies here" in mac.message
    linux = run_on(LINUX_311, fixture("unguarded_loop.py"), select=("SPW001",)).by_rule("SPW001")[0]
    assert linux.evidence["start_method"] == "fork" and linux.severity is Severity.ERROR
    assert "only because fork is the default here" in linux.message
    new_linux = run_on(LINUX_314, fixture("unguarded_loop.py"), select=("SPW001",)).by_rule("SPW001")[0]
    assert new_linux.evidence["start_method"] == "forkserver"
    assert "forkserver is the default on POSIX from Python 3.14" in new_linux.evidence["start_method_source"]


def test_spw001_is_a_warning_when_the_script_forces_fork_but_not_on_windows_defaults():
    [finding] = run_on(MACOS, fixture("start_method_fork.py"), select=("SPW001",)).by_rule("SPW001")
    assert finding.severity is Severity.WARNING
    assert finding.evidence["start_method"] == "fork"
    assert finding.evidence["start_method_source"] == "set by set_start_method('fork') at line 7"


def test_spw001_torch_spawn_always_uses_spawn_even_on_linux():
    [finding] = run_on(LINUX_311, fixture("torch_mp_spawn.py"), select=("SPW001",)).by_rule("SPW001")
    assert finding.evidence["kind"] == "torch-spawn" and finding.evidence["start_method"] == "spawn"
    assert "so the run dies here" in finding.message


def test_spw001_for_processes_pools_executors_and_lightning():
    kinds = {}
    for name in ("mp_process_unguarded.py", "mp_pool_unguarded.py", "process_pool_executor.py",
                 "lightning_fit.py"):
        [finding] = check_scripts(fixture(name), select=("SPW001",)).by_rule("SPW001")
        kinds[name] = (finding.evidence["kind"], finding.evidence["starts"])
    assert kinds["mp_process_unguarded.py"] == ("process-start", "Process.start() starts a process (created at line 11)")
    assert kinds["mp_pool_unguarded.py"][0] == "pool"
    assert kinds["process_pool_executor.py"] == ("process-pool", "ProcessPoolExecutor.map() starts worker processes")
    # Lightning's fit iterates the loader it is given: a loader start at the call, named after the trainer.
    assert kinds["lightning_fit.py"] == ("dataloader", "Lightning Trainer.fit() over DataLoader built at line 11")


def test_spw001_direct_code_fix_points_at_the_existing_guard(tmp_path):
    path = write(tmp_path, "train.py", (
        "from torch.utils.data import DataLoader\n"
        "loader = DataLoader(range(4), num_workers=2)\n"
        "for batch in loader:\n"
        "    pass\n"
        "if __name__ == '__main__':\n"
        "    print('done')\n"))
    [finding] = check_scripts(path, select=("SPW001",)).by_rule("SPW001")
    assert "the existing `if __name__ == \"__main__\":` block at line 5" in finding.fix
    assert "Move the code that starts the workers (line 3: `for batch in loader:`)" in finding.fix


def test_an_unguarded_function_called_from_both_places_fires_once_for_the_unguarded_call(tmp_path):
    path = write(tmp_path, "both.py", (
        "from torch.utils.data import DataLoader\n"
        "def run():\n"
        "    for b in DataLoader(range(4), num_workers=2):\n"
        "        pass\n"
        "run()\n"
        "if __name__ == '__main__':\n"
        "    run()\n"))
    found = check_scripts(path, select=("SPW001",)).by_rule("SPW001")
    assert [(f.location.line, f.evidence["module_level_statement"]["line"]) for f in found] == [(3, 5)]


def test_a_helper_called_twice_with_the_same_arguments_names_both_statements() -> None:
    """The second `evaluate()` repeats the first one's walk (memoised), and is a start site of its own: a fix
    that names only the first leaves the second to crash the run."""
    found = check_scripts(fixture("helper_called_twice.py"), select=("SPW001",)).by_rule("SPW001")
    assert [(f.location.line, f.evidence["module_level_statement"]["line"]) for f in found] == [(12, 17), (12, 18)]
    assert [f.evidence["via"] for f in found] == [["evaluate() called at line 17"], ["evaluate() called at line 18"]]
    assert "(lines 17, 18)" in found[0].fix


def test_nothing_after_sys_exit_or_a_raise_runs_but_what_comes_before_it_does(tmp_path):
    # Checked under spawn by hand: `sys.exit(0)` before the loop runs clean; the
    # loop reached through `sys.exit(main())` outside the guard dies bootstrapping.
    quiet = write(tmp_path, "quiet.py", (
        "import sys\n"
        "from torch.utils.data import DataLoader\n"
        "loader = DataLoader(range(4), num_workers=2)\n"
        "def fail():\n"
        "    raise SystemExit('unsupported')\n"
        "    for b in loader:\n"
        "        pass\n"
        "if '--version' in sys.argv:\n"
        "    fail()\n"
        "sys.exit(0)\n"
        "for b in loader:\n"
        "    pass\n"))
    assert check_scripts(quiet, select=("SPW001",)).by_rule("SPW001") == []
    loud = write(tmp_path, "loud.py", (
        "import sys\n"
        "from torch.utils.data import DataLoader\n"
        "def main():\n"
        "    for b in DataLoader(range(4), num_workers=2):\n"
        "        pass\n"
        "    return 0\n"
        "sys.exit(main())\n"))
    [finding] = check_scripts(loud, select=("SPW001",)).by_rule("SPW001")
    assert (finding.location.line, finding.evidence["module_level_statement"]) == (
        4, {"path": str(loud), "line": 7, "code": "sys.exit(main())"})


_CHOICES = (
    "import sys\n"
    "from torch.utils.data import DataLoader\n"
    "def serial():\n"
    "    return DataLoader(range(4))\n"
    "def parallel():\n"
    "    return DataLoader(range(4), num_workers=2)\n"
    "class Serial:\n"
    "    def setup(self, stage):\n"
    "        self.workers = 0\n"
    "    def train_dataloader(self):\n"
    "        return DataLoader(range(4), num_workers=self.workers)\n"
    "class Parallel(Serial):\n"
    "    def setup(self, stage):\n"
    "        self.workers = 2\n"
    "debug = len(sys.argv) > 1\n")


@pytest.mark.parametrize("choice, line", [
    ("make = serial if debug else parallel\nfor b in make():\n    pass\n", 17),
    ("import functools\nmake = functools.partial(serial if debug else parallel)\nfor b in make():\n    pass\n", 18),
    ("cls = Serial if debug else Parallel\nmodule = cls()\nmodule.setup('fit')\n"
     "for b in module.train_dataloader():\n    pass\n", 19),
    ("from lightning.pytorch import Trainer\nif debug:\n    module = Serial()\nelse:\n    module = Parallel()\n"
     "Trainer().fit(module)\n", 21),
])
def test_a_name_branches_leave_one_of_two_functions_classes_or_objects_is_each_one(tmp_path, choice, line):
    """Either of two functions, classes or data modules: the call, construction or trainer run is each one's
    (the trainer runs each data module's `setup` before asking for its loaders); the one with workers starts."""
    script = write(tmp_path, "train.py", _CHOICES + choice)
    [finding] = check_scripts(script, select=("SPW001",)).by_rule("SPW001")
    assert finding.location.line == line and finding.evidence["num_workers"] == 2


def test_a_flag_changed_inside_a_loop_is_not_read_as_a_constant(tmp_path):
    # `if DEBUG:` with DEBUG = False at module level never runs; but a loop walks its body
    # once, and `first` is False from the second pass on: the loader below it does start.
    path = write(tmp_path, "first_pass.py", (
        "from torch.utils.data import DataLoader\n"
        "loader = DataLoader(range(4), num_workers=2)\n"
        "first = True\n"
        "for epoch in range(3):\n"
        "    if first:\n"
        "        first = False\n"
        "        continue\n"
        "    for batch in loader:\n"
        "        pass\n"
        "done = False\n"
        "while not done:\n"
        "    done = True\n"
        "else:\n"
        "    warm = next(iter(loader))\n"))
    found = check_scripts(path, select=("SPW001",)).by_rule("SPW001")
    assert [f.location.line for f in found] == [8, 14]


def test_the_column_counts_characters_not_utf8_bytes(tmp_path):
    # ast's col_offset counts UTF-8 bytes; editors, the text report and SARIF count characters.
    line = "étiquettes = 'données'; premier = next(iter(loader))"
    path = write(tmp_path, "accents.py", (
        "from torch.utils.data import DataLoader\n"
        "loader = DataLoader(range(4), num_workers=2)\n"
        f"{line}\n"))
    [finding] = check_scripts(path, select=("SPW001",)).by_rule("SPW001")
    assert (finding.location.line, finding.location.column) == (3, line.index("iter(loader)") + 1)


# -- SPW002 ---------------------------------------------------------------------

def test_spw002_without_scripts_reports_the_targets_default_only_when_it_is_not_fork():
    config = Config(select=("SPW002",), no_loader=True)
    mac = run_check(config, facts=Facts.from_dict({"target": MACOS}, config=config)).by_rule("SPW002")
    assert len(mac) == 1 and mac[0].severity is Severity.INFO and mac[0].location is None
    assert mac[0].evidence["start_method"] == "spawn" and mac[0].evidence["platform"] == "darwin"
    assert "persistent_workers=True" in mac[0].fix
    linux = run_check(config, facts=Facts.from_dict({"target": LINUX_311}, config=config)).by_rule("SPW002")
    assert linux == []


def test_spw002_info_for_a_script_under_forkserver_with_its_worker_lines():
    [finding] = run_on(LINUX_314, fixture("main_guarded.py"), select=("SPW002",)).by_rule("SPW002")
    assert finding.severity is Severity.INFO
    assert finding.evidence["start_method"] == "forkserver"
    assert finding.evidence["worker_starts"] == [10]
    assert finding.location.line == 10
    assert "pickled" in finding.message and "re-imports the main script" in finding.message
    assert run_on(LINUX_311, fixture("main_guarded.py"), select=("SPW002",)).by_rule("SPW002") == []


def test_spw002_sees_the_start_method_the_script_sets_and_the_loaders_own_context(tmp_path):
    path = write(tmp_path, "ctx.py", (
        "import torch.multiprocessing as mp\n"
        "from torch.utils.data import DataLoader\n"
        "def main():\n"
        "    mp.set_start_method('spawn')\n"
        "    for b in DataLoader(range(4), num_workers=2, persistent_workers=True):\n"
        "        pass\n"
        "    for b in DataLoader(range(4), num_workers=2, multiprocessing_context='forkserver'):\n"
        "        pass\n"
        "if __name__ == '__main__':\n"
        "    main()\n"))
    found = {f.evidence["start_method"]: f for f in run_on(LINUX_311, path, select=("SPW002",)).by_rule("SPW002")}
    assert set(found) == {"spawn", "forkserver"}
    assert found["spawn"].evidence["source"] == "set by set_start_method('spawn') at line 4"
    assert found["spawn"].evidence["set_by_script"] == [{"method": "spawn", "line": 4}]
    assert found["spawn"].evidence["persistent_workers"] is True
    assert "persistent_workers=True is already set" in found["spawn"].message
    assert found["forkserver"].evidence["source"] == "set by its multiprocessing_context (line 7)"


def test_spw002_warns_when_cuda_is_initialised_before_forked_workers():
    [finding] = run_on(LINUX_311, fixture("cuda_before_workers.py"), select=("SPW002",)).by_rule("SPW002")
    assert finding.severity is Severity.WARNING
    evidence = finding.evidence
    assert evidence["start_method"] == "fork"
    assert evidence["cuda_init_line"] == 16 and evidence["cuda_init_code"] == "model = torch.nn.Linear(2, 2).cuda()"
    assert evidence["worker_starts"] == [18]
    assert evidence["worker_code_uses_cuda"] is True  # OnDevice.__getitem__ calls .cuda()
    assert "Cannot re-initialize CUDA in forked subprocess" in finding.message
    assert "multiprocessing_context=\"spawn\"" in finding.fix
    # The same script on macOS: spawn, so the CUDA warning does not apply; the cost info does.
    [mac] = run_on(MACOS, fixture("cuda_before_workers.py"), select=("SPW002",)).by_rule("SPW002")
    assert mac.severity is Severity.INFO and mac.evidence["start_method"] == "spawn"


def test_spw002_cuda_before_fork_is_only_info_when_the_workers_stay_on_the_cpu(tmp_path):
    path = write(tmp_path, "usual.py", (
        "import torch\n"
        "from torch.utils.data import DataLoader\n"
        "def main():\n"
        "    model = torch.nn.Linear(2, 2).cuda()\n"
        "    for b in DataLoader(range(4), num_workers=2, pin_memory=True):\n"
        "        model(b.float().cuda())\n"
        "if __name__ == '__main__':\n"
        "    main()\n"))
    [finding] = run_on(LINUX_311, path, select=("SPW002",)).by_rule("SPW002")
    assert finding.severity is Severity.INFO
    assert finding.evidence["worker_code_uses_cuda"] is False
    assert finding.evidence["cuda_init_line"] == 4 and finding.evidence["worker_starts"] == [5]
    assert "safe as long as it stays that way" in finding.message


def test_spw002_no_warning_when_cuda_comes_after_the_workers_or_is_only_queried(tmp_path):
    path = write(tmp_path, "late.py", (
        "import torch\n"
        "from torch.utils.data import DataLoader\n"
        "def main():\n"
        "    ok = torch.cuda.is_available() and torch.cuda.device_count() > 0\n"
        "    for b in DataLoader(range(4), num_workers=2):\n"
        "        b.to('cuda')\n"
        "if __name__ == '__main__':\n"
        "    main()\n"))
    assert run_on(LINUX_311, path, select=("SPW002",)).by_rule("SPW002") == []
    info = analyse_script(path)
    assert [c["line"] for c in info["cuda_inits"]] == [6]


# -- SPW004 ---------------------------------------------------------------------

def test_spw004_syntax_error_with_position_and_no_traceback():
    [finding] = check_scripts(fixture("syntax_error.py"), select=("SPW004",)).by_rule("SPW004")
    assert finding.severity is Severity.WARNING and finding.name == "unparsable-script"
    assert finding.evidence["status"] == "unparsable"
    assert finding.evidence["error"] == "SyntaxError: expected ':'"
    assert (finding.evidence["line"], finding.evidence["column"]) == (7, 20)
    assert "code" not in finding.evidence  # the position and the parser's message, never the line
    assert "py_compile" in finding.fix


def test_spw004_quotes_no_line_of_a_file_that_does_not_parse(tmp_path):
    """Its first lines parse, line 3 is a credentials line: position and message only, in every format."""
    path = write(tmp_path, "settings.py", "import os\n\nmachine api.example.com login alice password hunter2\n")
    report = check_scripts(path, select=("SPW004",))
    [finding] = report.by_rule("SPW004")
    assert finding.evidence == {"path": path, "status": "unparsable", "error": "SyntaxError: invalid syntax",
                                "line": 3, "column": 9, "encoding": "utf-8",
                                "parser_python": "{}.{}".format(*sys.version_info[:2]),
                                "target_python": finding.evidence["target_python"]}
    assert "hunter2" not in json.dumps(report.to_dict()) and "login alice" not in json.dumps(report.to_dict())


def test_spw004_a_file_that_is_not_python_source_is_said_to_be_so_and_not_read(tmp_path):
    netrc = write(tmp_path, "netrc", "machine api.example.com login alice password hunter2\n")
    shebang = write(tmp_path, "train", "#!/usr/bin/env python3\nprint('hi')\n")
    report = check_scripts(netrc, shebang, select=("SPW004",))
    [finding] = report.by_rule("SPW004")
    assert finding.evidence == {"path": netrc, "status": "not-python",
                                "error": "not Python source (no .py or .ipynb suffix and no Python shebang), so it "
                                         "was not parsed and nothing of it is shown"}
    assert "Python shebang" in finding.fix and "hunter2" not in json.dumps(report.to_dict())
    assert [f["status"] for f in report.facts["scripts"]["files"]] == ["not-python", "ok"]
    shown = run_cli("check", "--no-loader", "-v", "--select", "SPW004", "--", netrc)
    assert "not Python source" in shown.stdout and "hunter2" not in shown.stdout + shown.stderr


def test_spw004_newer_syntax_than_envdoctors_python_is_not_called_a_syntax_error(tmp_path):
    # PEP 695 generics parse on Python 3.12+ only. Seen on torch's own
    # torch/testing/_internal/py312_intrinsics.py with envdoctor on 3.11.
    path = write(tmp_path, "generic.py", "def first[T](items: list[T]) -> T:\n    return items[0]\n")
    if sys.version_info >= (3, 12):
        pytest.skip("this interpreter parses PEP 695")
    newer = dict(LINUX_314)
    [finding] = run_on(newer, path, select=("SPW004",)).by_rule("SPW004")
    assert finding.evidence["parser_python"] == "{}.{}".format(*sys.version_info[:2])
    assert finding.evidence["target_python"] == "3.14.0"
    assert "cannot be parsed" not in finding.message and "whose grammar may allow it" in finding.message
    assert "Python 3.14.0" in finding.fix
    # Same file, a target no newer than envdoctor's Python: a real syntax error there.
    [same] = run_on(LINUX_311, path, select=("SPW004",)).by_rule("SPW004")
    assert "cannot be parsed: SyntaxError" in same.message


def test_spw004_undecodable_bytes_name_the_byte_and_its_position():
    [finding] = check_scripts(fixture("latin1_undeclared.py"), select=("SPW004",)).by_rule("SPW004")
    assert finding.evidence["error"] == ("byte 0xe9 at line 4, column 13 is not valid utf-8 and the file "
                                         "declares no other encoding")
    assert (finding.location.line, finding.location.column) == (4, 13)
    assert "coding: latin-1" in finding.fix


def test_spw004_missing_file_and_an_unreadable_file(tmp_path):
    missing = str(tmp_path / "nope.py")
    [finding] = check_scripts(missing, select=("SPW004",)).by_rule("SPW004")
    assert finding.evidence == {"path": missing, "status": "unreadable", "error": "no such file or directory"}
    folder_as_file = tmp_path / "dir.py"
    folder_as_file.mkdir()
    (folder_as_file / "inner.py").write_text("x = 1\n", encoding="utf-8")
    report = check_scripts(str(folder_as_file))
    assert report.findings == [] and report.facts["scripts"]["files"][0]["status"] == "ok"


def test_spw004_null_bytes_and_a_bom(tmp_path):
    nul = tmp_path / "nul.py"
    nul.write_bytes(b"x = 1\x00\n")
    [finding] = check_scripts(str(nul), select=("SPW004",)).by_rule("SPW004")
    assert finding.evidence["status"] == "unparsable"
    bom = tmp_path / "bom.py"
    bom.write_bytes(b"\xef\xbb\xbffrom torch.utils.data import DataLoader\nlist(DataLoader([1], num_workers=1))\n")
    [guard] = check_scripts(str(bom)).by_rule("SPW001")
    assert guard.location.line == 2


def test_directories_skip_hidden_folders_caches_and_virtual_environments(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "train.py").write_text("x = 1\n", encoding="utf-8")
    for skipped in (".git", "__pycache__", "venv"):
        (tmp_path / skipped).mkdir()
        (tmp_path / skipped / "bad.py").write_text("def (:\n", encoding="utf-8")
    (tmp_path / "venv" / "pyvenv.cfg").write_text("home = /usr\n", encoding="utf-8")
    (tmp_path / "notes.txt").write_text("not python", encoding="utf-8")
    report = check_scripts(str(tmp_path))
    assert [Path(f["path"]).relative_to(tmp_path).as_posix() for f in report.facts["scripts"]["files"]] == [
        "pkg/train.py"]


def test_no_scripts_means_no_scripts_section():
    report = run_check(Config(select=("SPW001", "SPW004"), no_loader=True))
    assert "scripts" not in report.facts and report.findings == []


# -- through the command line ---------------------------------------------------------

def test_cli_report_on_scripts_and_a_directory_validates_and_exits_1(tmp_path):
    proc = run_cli("report", "--no-loader", "--select", "SPW001", "SPW004", "--",
                   fixture("main_unguarded.py"), fixture("syntax_error.py"), str(FIXTURE_DIR),
                   cwd=str(tmp_path))
    report = json_report(proc)
    assert proc.returncode == 1, proc.stderr
    guard = [f for f in findings(report, "SPW001") if f["location"]["path"].endswith("main_unguarded.py")]
    assert guard and guard[0]["location"]["line"] == 10 and guard[0]["evidence"]["via"] == ["main() called at line 14"]
    assert any(f["evidence"]["error"] == "SyntaxError: expected ':'" for f in findings(report, "SPW004"))
    assert "Traceback" not in proc.stderr


def test_cli_check_text_output_shows_file_line_and_column(tmp_path):
    proc = run_cli("check", "--no-loader", "--select", "SPW001", "--", fixture("iter_next.py"),
                   cwd=str(tmp_path))
    assert proc.returncode == 1
    assert f"{fixture('iter_next.py')}:10:14" in proc.stdout.replace("\n", "")


def test_the_analysis_never_imports_or_runs_the_script(tmp_path):
    marker = tmp_path / "ran"
    path = write(tmp_path, "side_effect.py", f"open({str(marker)!r}, 'w').write('x')\nimport torch\n")
    report = check_scripts(path)
    assert report.facts["scripts"]["files"][0]["status"] == "ok"
    assert not marker.exists()
    probe = subprocess.run([sys.executable, "-c", (
        "import sys; from envdoctor.facts.scripts import analyse_script; "
        f"analyse_script({path!r}); print('torch' in sys.modules)")], capture_output=True, text=True, timeout=60)
    assert probe.stdout.strip() == "False", probe.stderr


# -- a large generated file ------------------------------------------------------------

def generate_large_script(path: Path, lines: int = 50_000) -> int:
    """A script of `lines` lines: many functions, classes and calls; one unguarded start near the end.

    Returns the line where the workers start.
    """
    out = ["from torch.utils.data import DataLoader", "import multiprocessing as mp", ""]
    i = 0
    while len(out) < lines - 20:
        out += [f"def step_{i}(x, scale={i % 7}):",
                f"    value = x * scale + {i}",
                "    if value > 3:",
                "        value -= 1",
                "    return value",
                "",
                f"class Block{i}:",
                f"    size = step_{i}({i})",
                "",
                f"RESULT_{i} = step_{i}({i}) + Block{i}.size",
                f"CONFIG_{i} = {{'num_workers': {i % 3}, 'name': 'block{i}'}}",
                ""]
        i += 1
    out += ["def never_called():",
            "    for b in DataLoader(range(4), num_workers=8):",
            "        pass",
            "",
            "def main(workers=2):",
            "    loader = DataLoader(range(4), num_workers=workers)",
            "    for batch in loader:",
            "        pass",
            "",
            "main()"]
    while len(out) < lines:
        out.append(f"TAIL_{len(out)} = {len(out)}")
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return out.index("    for batch in loader:") + 1


@pytest.mark.slow
def test_a_50000_line_generated_file_is_analysed_completely(tmp_path):
    path = tmp_path / "generated.py"
    start_line = generate_large_script(path)
    report = check_scripts(str(path), select=("SPW001",))
    [info] = report.facts["scripts"]["files"]
    assert info["status"] == "ok" and info["lines"] == 50_000
    assert info["truncated"] is False
    [finding] = report.by_rule("SPW001")
    assert finding.location.line == start_line
    main_call = path.read_text(encoding="utf-8").splitlines().index("main()") + 1
    assert finding.evidence["via"] == [f"main() called at line {main_call}"]
    assert finding.evidence["num_workers"] == 2


@pytest.mark.parametrize("test, polarity", [
    ('__name__ == "__main__"', True), ("'__main__' == __name__", True), ('__name__ != "__main__"', False),
    ('__name__ in ("__main__",)', True), ('__name__ not in ["__main__"]', False),
    ('__name__ == "__main__" and not DEBUG', True), ('__name__ == "__main__" or FORCE', None),
    ('__name__ == "__mp_main__"', None), ('name == "__main__"', None), ('not __name__ != "__main__"', None),
    # Spawned workers import the script as __mp_main__: a test that admits it guards nothing.
    ('__name__ in ("__main__", "__mp_main__")', None), ("__name__ in {'__mp_main__', '__main__'}", None),
])
def test_guard_forms(test, polarity):
    import ast

    from envdoctor.analysis.spawn import guard_polarity

    assert guard_polarity(ast.parse(test, mode="eval").body) is polarity


def test_spw001_when_the_targets_start_method_cannot_be_worked_out():
    unknown = {"python": None, "platform": "linux", "prefix": "/opt/env", "kind": "system"}
    [finding] = run_on(unknown, fixture("unguarded_loop.py"), select=("SPW001",)).by_rule("SPW001")
    assert finding.severity is Severity.ERROR and finding.evidence["start_method"] is None
    assert "could not be worked out" in finding.message


def test_manager_and_a_process_subclass_start_processes(tmp_path):
    path = write(tmp_path, "managers.py", (
        "import multiprocessing\n"
        "class Worker(multiprocessing.Process):\n"
        "    def run(self):\n"
        "        print('hi')\n"
        "shared = multiprocessing.Manager()\n"
        "Worker().start()\n"))
    found = check_scripts(path, select=("SPW001",)).by_rule("SPW001")
    assert [(f.location.line, f.evidence["kind"]) for f in found] == [(5, "manager"), (6, "process-start")]
