"""Notebooks: objects defined in `__main__` that DataLoader workers must unpickle (SPW005).

Each notebook in fixtures/notebooks/ says in its metadata (`envdoctor.expect`)
which findings must come out, as RULE@CELL:LINE, and whether its code really
fails under spawn (`envdoctor.ground_truth`). The slow tests run the code
cells for real as a `__main__` without a file — joined and fed on standard
input to `python -c` that execs them, so `__main__` has no file, as in a kernel — with spawn
forced, and check that the failure is the one the finding names, raised from
the cell and line it points at.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from envdoctor.cli import main as cli_main
from envdoctor.config import Config
from envdoctor.engine import run_check
from envdoctor.model import Severity
from test_spawn_ground_truth import run_with_start_method

pytestmark = [pytest.mark.standalone]

NOTEBOOKS = Path(__file__).resolve().parent.parent / "fixtures" / "notebooks"
ALL = sorted(NOTEBOOKS.glob("*.ipynb"))
_TOKEN = re.compile(r"^(?P<rule>[A-Z]{3}\d{3})@(?P<cell>\d+):(?P<line>\d+)$")


def metadata(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))["metadata"]["envdoctor"]


def expected(path: Path) -> set[tuple[str, int, int]]:
    spec = metadata(path)["expect"]
    if spec == "nothing":
        return set()
    return {(m["rule"], int(m["cell"]), int(m["line"])) for m in (_TOKEN.match(t) for t in spec.split())}


def check(*paths: Path | str, select=("SPW001", "SPW004", "SPW005"), **config):
    return run_check(Config(scripts=tuple(map(str, paths)), select=select, no_loader=True, **config))


def cells_as_main(path: Path) -> tuple[str, list[tuple[int, int]]]:
    """The code cells joined the way a kernel would run them (this test's own, simple reading of
    IPython syntax: magic and shell lines dropped, cell magics other than %%time skipped), and for
    each joined line its (cell, line)."""
    lines: list[str] = []
    origin: list[tuple[int, int]] = []
    for number, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"], start=1):
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"]).splitlines()
        if source and source[0].startswith("%%"):
            if not source[0].startswith("%%time"):
                continue
            source[0] = ""
        for i, line in enumerate(source, start=1):
            text = line.strip()
            # `%(a, b))` continuing a `print('%d %d'` of the line above is Python: a magic's name is a word.
            if re.match(r"^(%{1,2}[A-Za-z]|!)", text) or re.match(r"^\w+\s*=\s*!", text) or text.endswith("?"):
                line = line[:len(line) - len(line.lstrip())] + "pass" if line[:1].isspace() else ""
            lines.append(line)
            origin.append((number, i))
    return "\n".join(lines) + "\n", origin


@pytest.mark.parametrize("path", ALL, ids=[p.name for p in ALL])
def test_findings_match_the_notebooks_metadata(path: Path):
    report = check(path)
    assert {(f.rule, f.location.cell, f.location.line) for f in report.findings} == expected(path)
    assert report.errors == []


def test_spw005_names_the_object_its_cell_and_the_failure_and_is_a_warning_under_fork():
    report = check(NOTEBOOKS / "dataset_in_notebook.ipynb", python_version="3.11", platform="linux")
    [finding] = report.by_rule("SPW005")
    assert finding.severity is Severity.WARNING and finding.name == "notebook-main-objects"
    assert finding.evidence["objects"] == [{"role": "dataset", "name": "Frames", "kind": "class", "line": 1, "cell": 3}]
    assert finding.evidence["cell"] == 4 and finding.evidence["line"] == 2 and finding.evidence["num_workers"] == 1
    assert finding.evidence["start_method"] == "fork"
    assert "works here under fork" in finding.message and "fails on macOS, Windows and Linux with Python 3.14+" in finding.message
    assert "Can't get attribute 'Frames' on <module '__main__' (built-in)>" in finding.message
    assert "from data_utils import Frames" in finding.fix
    assert finding.location.to_dict() == {"path": str(NOTEBOOKS / "dataset_in_notebook.ipynb"), "line": 2,
                                          "column": 1, "cell": 4}


@pytest.mark.parametrize("config, method", [
    ({"platform": "darwin"}, "spawn"), ({"platform": "win32"}, "spawn"),
    ({"platform": "linux", "python_version": "3.14"}, "forkserver")])
def test_spw005_is_an_error_where_spawn_or_forkserver_is_effective(config, method):
    [finding] = check(NOTEBOOKS / "collate_in_notebook.ipynb", **config).by_rule("SPW005")
    assert finding.severity is Severity.ERROR and finding.evidence["start_method"] == method
    assert finding.evidence["objects"][0]["name"] == "pad_collate" and finding.evidence["objects"][0]["role"] == "collate_fn"
    assert "as asked with --" in finding.evidence["start_method_source"]


def test_spw005_is_an_error_when_the_notebook_forces_spawn_even_on_linux_311():
    [finding] = check(NOTEBOOKS / "forced_spawn.ipynb", python_version="3.11", platform="linux").by_rule("SPW005")
    assert finding.severity is Severity.ERROR
    assert finding.evidence["start_method_source"] == "set by its multiprocessing_context (cell 3, line 4)"
    assert finding.evidence["objects"][0]["name"] == "Frames"  # reached through Subset(...)


def test_spw005_for_a_lambda_names_the_pickling_error_the_notebook_raises_and_a_named_function_as_the_fix():
    [finding] = check(NOTEBOOKS / "lambda_collate.ipynb", platform="darwin").by_rule("SPW005")
    assert finding.evidence["objects"] == [{"role": "collate_fn", "name": "<lambda>", "kind": "function",
                                            "line": 2, "cell": 3}]
    assert ("_pickle.PicklingError: Can't pickle <function <lambda> at 0x…>: attribute lookup <lambda> on "
            "__main__ failed") in finding.message
    assert "Can't get attribute" not in finding.message
    assert finding.fix.startswith("Replace the lambda (collate_fn) with a function defined in a module")
    assert "from data_utils import <lambda>" not in finding.fix


def test_spw001_never_fires_on_a_notebook_even_with_module_level_workers():
    report = check(NOTEBOOKS / "dataset_in_notebook.ipynb", NOTEBOOKS / "imported_dataset.ipynb",
                   select=("SPW001",), platform="darwin")
    assert report.findings == []


def test_a_check_of_the_notebooks_rules_skips_the_scripts_guards_and_finds_what_the_whole_walk_finds():
    """SPW005 and PKG013 read only the notebooks, which are walked whole, so a check of them with SPW001 and
    SPW004 (Windows and macOS readiness) does not walk the code under a .py script's closing guard. The .py
    scripts come first: the modules their walks share with the notebooks' are in whatever state they left."""
    scripts = Path(__file__).resolve().parent.parent / "fixtures" / "spawn"
    mine = check(scripts, NOTEBOOKS, platform="darwin")
    whole = check(scripts, NOTEBOOKS, select=("SPW", "PKG013"), platform="darwin")

    def notebooks(report):
        return {f["path"]: f for f in report.facts["scripts"]["files"] if f.get("kind") == "notebook"}

    def found(report):
        return [(f.location.path, f.location.cell, f.location.line, f.message, f.fix)
                for f in report.findings if f.rule == "SPW005"]

    assert len(notebooks(mine)) == len(ALL) and notebooks(mine) == notebooks(whole)
    assert found(mine) == found(whole) and len(found(mine)) >= 5
    skipped = [f["path"] for f in mine.facts["scripts"]["files"] if f.get("skipped_guard_lines")]
    assert len(skipped) >= 5 and all(path.endswith(".py") for path in skipped)
    assert not any(f.get("skipped_guard_lines") for f in whole.facts["scripts"]["files"])


def test_a_folder_is_expanded_to_its_notebooks_and_scripts(tmp_path: Path):
    (tmp_path / "nb.ipynb").write_bytes((NOTEBOOKS / "dataset_in_notebook.ipynb").read_bytes())
    (tmp_path / ".ipynb_checkpoints").mkdir()
    (tmp_path / ".ipynb_checkpoints" / "nb-checkpoint.ipynb").write_bytes((tmp_path / "nb.ipynb").read_bytes())
    report = check(tmp_path)
    assert [(f.rule, Path(f.location.path).name) for f in report.findings] == [("SPW005", "nb.ipynb")]


def test_a_file_that_is_not_a_notebook_is_spw004(tmp_path: Path):
    bad = tmp_path / "bad.ipynb"
    bad.write_text('{"cells": 3', encoding="utf-8")
    [finding] = check(bad).by_rule("SPW004")
    assert finding.evidence["path"] == str(bad) and "not a notebook" in finding.evidence["error"]


def test_cli_json_carries_the_cell_and_exits_by_severity(tmp_path: Path, capsys):
    code = cli_main(["report", "--no-loader", "--select", "SPW005", "--platform", "darwin",
                     str(NOTEBOOKS / "dataset_in_notebook.ipynb")])
    report = json.loads(capsys.readouterr().out)
    assert code == 1
    [finding] = report["findings"]
    assert finding["location"]["cell"] == 4 and finding["location"]["line"] == 2 and finding["severity"] == "error"


def test_unknown_platform_is_a_usage_error():
    proc = subprocess.run([sys.executable, "-m", "envdoctor", "check", "--no-loader", "--platform", "beos"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--platform" in proc.stderr and "Traceback" not in proc.stderr


GROUND_TRUTH = [p for p in ALL if metadata(p).get("ground_truth")]


@pytest.mark.slow
@pytest.mark.parametrize("path", GROUND_TRUTH, ids=[p.name for p in GROUND_TRUTH])
def test_the_cells_really_fail_under_spawn_exactly_where_spw005_points(path: Path, tmp_path: Path):
    code, origin = cells_as_main(path)
    outcome, output = run_with_start_method(None, "spawn", tmp_path, extra_path=(NOTEBOOKS,), stdin=code.encode())
    assert outcome == metadata(path)["ground_truth"], output[-3000:]
    findings = check(path).by_rule("SPW005")
    assert bool(findings) == (outcome == "fails")
    if outcome == "fails":
        lines = {origin[int(n) - 1] for n in re.findall(r'File "<cells>", line (\d+)', output)}
        for finding in findings:
            assert (finding.location.cell, finding.location.line) in lines, (finding.location, lines)
            names = [o["name"] for o in finding.evidence["objects"]]
            local = [o for o in finding.evidence["objects"] if o.get("local_in")]
            if local:  # pickled in the notebook itself by `f.<locals>.name`, which no module holds
                text = f"Can't pickle local object '{local[0]['local_in']}.<locals>.{local[0]['name']}'"
                assert text in output, output[-3000:]
                assert text in finding.message
            elif "<lambda>" in names:  # pickled in the notebook itself, before any worker starts
                assert re.search(r"PicklingError: Can't pickle <function <lambda> at 0x[0-9a-f]+>: "
                                 r"attribute lookup <lambda> on __main__ failed", output), output[-3000:]
                assert "Can't pickle <function <lambda> at 0x…>: attribute lookup <lambda>" in finding.message
            else:
                assert f"Can't get attribute '{names[0]}' on <module '__main__'" in output


def test_a_comment_ending_in_a_question_mark_is_python_and_help_is_not():
    from envdoctor.analysis.spawn.notebook import python_of_cell

    cell = ["loader = DataLoader(data,", "    batch_size=1,  # how many samples per batch?", "    num_workers=1)",
            "DataLoader?", "np.mean??"]
    assert python_of_cell(cell) == [*cell[:3], "", ""]


def test_a_percent_line_inside_open_brackets_a_string_or_after_a_backslash_is_python():
    from envdoctor.analysis.spawn.notebook import python_of_cell

    cell = ["print('epoch %d of %d'", "      %(epoch, n))", "%matplotlib inline", "text = '''", "%not a magic",
            "'''", "total = 1 + \\", "    2", "# a comment's ( is no bracket", "!echo done"]
    assert python_of_cell(cell) == [*cell[:2], "", *cell[3:9], ""]


def test_an_indented_magic_is_a_statement_of_its_block():
    from envdoctor.analysis.spawn.notebook import python_of_cell

    cell = ["if in_notebook:", "    %load_ext autoreload", "    %autoreload 2", "loader = make_loader()"]
    assert python_of_cell(cell) == ["if in_notebook:", "    pass", "    pass", "loader = make_loader()"]
