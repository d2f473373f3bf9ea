"""The spawn-guard fixtures: each script says in its header which lines must fire.

A fixture's header holds `# expect: SPW001@12 SPW001@20:5 SPW004@7` (rule,
line, optionally column) or `# expect: nothing`, the way ruff and pylint
fixtures declare their expected messages; near-misses in the same files must
stay quiet. Every fixture is checked with only SPW001 and SPW004 selected,
through the real engine, and the findings must match the header exactly.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from envdoctor.config import Config
from envdoctor.engine import run_check

FIXTURE_DIR = Path(__file__).resolve().parent.parent / "fixtures" / "spawn"
FIXTURES = sorted(FIXTURE_DIR.glob("*.py"))
_EXPECT = re.compile(r"^#\s*expect:\s*(.+)$", re.MULTILINE)
_GROUND_TRUTH = re.compile(r"^#\s*ground-truth:\s*(fails|runs)\b", re.MULTILINE)
_TOKEN = re.compile(r"^(?P<rule>[A-Z]{3}\d{3})@(?P<line>\d+)(?::(?P<column>\d+))?$")


def header(path: Path) -> str:
    # Latin-1 reads any bytes, so the undecodable fixture's header is readable too.
    return "\n".join(path.read_bytes().decode("latin-1").splitlines()[:6])


def expected(path: Path) -> list[tuple[str, int, int | None]]:
    """The (rule, line, column-or-None) the header of a fixture asks for."""
    text = header(path)
    match = _EXPECT.search(text)
    if path.stat().st_size == 0:
        return []  # the empty file cannot carry a header, and must stay quiet
    assert match, f"{path.name} has no `# expect:` header"
    spec = match.group(1).strip()
    if spec == "nothing":
        return []
    wanted = []
    for token in spec.split():
        parsed = _TOKEN.match(token)
        assert parsed, f"{path.name}: bad expect token {token!r}"
        column = parsed.group("column")
        wanted.append((parsed.group("rule"), int(parsed.group("line")), int(column) if column else None))
    return wanted


def ground_truth(path: Path) -> str | None:
    match = _GROUND_TRUTH.search(header(path))
    return match.group(1) if match else None


def check_scripts(*paths: str | Path, select: tuple[str, ...] = ("SPW001", "SPW004")):
    return run_check(Config(scripts=tuple(str(p) for p in paths), select=select, no_loader=True))


def test_there_are_enough_fixtures_and_each_declares_its_expectation():
    assert len(FIXTURES) >= 25
    for path in FIXTURES:
        expected(path)  # raises when a header is missing or malformed
    assert sum(1 for p in FIXTURES if expected(p)) >= 12, "too few fixtures that fire"
    assert sum(1 for p in FIXTURES if not expected(p)) >= 10, "too few near-misses"


@pytest.mark.parametrize("path", FIXTURES, ids=[p.name for p in FIXTURES])
def test_fixture_fires_exactly_where_its_header_says(path: Path):
    report = check_scripts(path)
    got = sorted((f.rule, f.location.line, f.location.column) for f in report.findings)
    want = expected(path)
    assert [(r, ln) for r, ln, _ in got] == sorted((r, ln) for r, ln, _ in want), (
        f"{path.name}: findings {got}, header wants {want}\n"
        + "\n".join(f.message for f in report.findings))
    for (rule, line, column), finding in zip(sorted(want), sorted(report.findings,
                                                                  key=lambda f: (f.rule, f.location.line))):
        assert finding.location.path == str(path)
        if column is not None:
            assert finding.location.column == column, f"{path.name}:{line}: column {finding.location.column}"
        if rule == "SPW001":
            # The evidence quotes the very line of code that starts the workers.
            source_line = path.read_bytes().decode("latin-1").splitlines()[line - 1].strip()
            assert finding.evidence["code"] == source_line
            assert finding.evidence["line"] == line
            assert "if __name__ == \"__main__\":" in finding.fix
    assert report.errors == []


def test_a_directory_expands_to_every_fixture_and_one_bad_file_does_not_stop_the_others():
    report = check_scripts(FIXTURE_DIR)
    checked = report.facts["scripts"]["files"]
    assert sorted(Path(f["path"]).name for f in checked) == sorted(p.name for p in FIXTURES)
    by_file: dict[str, list[tuple[str, int]]] = {}
    for finding in report.findings:
        by_file.setdefault(Path(finding.location.path).name, []).append((finding.rule, finding.location.line))
    for path in FIXTURES:
        assert sorted(by_file.get(path.name, [])) == sorted((r, ln) for r, ln, _ in expected(path)), path.name
    assert {f.rule for f in report.findings} == {"SPW001", "SPW004"}


SHEBANG_DIR = FIXTURE_DIR.parent / "spawn_shebang"
SHEBANG_SCRIPTS = sorted(p for p in SHEBANG_DIR.iterdir() if b"python" in p.read_bytes().split(b"\n", 1)[0])


def test_a_directory_expands_to_scripts_without_a_suffix_that_start_with_a_python_shebang():
    """`train` run as `./train` (`#!/usr/bin/env python3`) is a script like train.py; a shell script
    and a text file without a suffix are not read at all."""
    assert [p.name for p in SHEBANG_SCRIPTS] == ["evaluate", "train"]
    report = check_scripts(SHEBANG_DIR)
    assert sorted(Path(f["path"]).name for f in report.facts["scripts"]["files"]) == ["evaluate", "train"]
    for path in SHEBANG_SCRIPTS:
        got = sorted((f.rule, f.location.line) for f in report.findings if Path(f.location.path) == path)
        assert got == sorted((r, ln) for r, ln, _ in expected(path)), path.name


def test_a_start_behind_an_option_off_by_default_says_it_needs_the_option():
    """`if args.test_only:` (store_true): the loop in it is a finding, worded "dies here with --test-only" and
    with the option in its evidence; the training loop after it is the one a plain run dies at."""
    found = sorted(check_scripts(FIXTURE_DIR / "option_branch.py", select=("SPW001",)).by_rule("SPW001"),
                   key=lambda f: f.location.line)
    assert [(f.location.line, f.evidence.get("needs")) for f in found] == [(17, "--test-only"), (22, None)]
    assert found[0].message.endswith("with --test-only."), found[0].message
    assert "with --" not in found[1].message
    assert "lines 17, 22" in found[0].fix


def test_the_hooks_selection_skips_only_a_guard_that_ends_the_script_and_finds_the_same_starts():
    """SPW001 and SPW004 read only what runs at import time, so a check of only them (the pre-commit hook)
    does not walk the code under a main guard that ends a script; every fixture keeps the same import-time
    starts, findings and fixes as the check that walks it (the whole SPW family, whose SPW002 reads it)."""
    hook = check_scripts(FIXTURE_DIR)
    whole = check_scripts(FIXTURE_DIR, select=("SPW",))

    def import_time(report):
        return {f["path"]: [{k: v for k, v in s.items() if k != "seq"} for s in f.get("worker_starts", [])
                            if not s["guarded"]] for f in report.facts["scripts"]["files"]}

    assert import_time(hook) == import_time(whole)
    assert ([(f.location.path, f.location.line, f.message, f.fix) for f in hook.by_rule("SPW001")]
            == [(f.location.path, f.location.line, f.message, f.fix) for f in whole.by_rule("SPW001")])
    hook_files = {f["path"]: f for f in hook.facts["scripts"]["files"]}
    skipped = {path: f["skipped_guard_lines"] for path, f in hook_files.items() if f.get("skipped_guard_lines")}
    assert len(skipped) >= 5
    for info in whole.facts["scripts"]["files"]:
        assert "skipped_guard_lines" not in info
        # What the whole walk found under a skipped guard, the hook's facts do not hold; the rest they do.
        guarded = [{k: v for k, v in s.items() if k != "seq"} for s in info.get("worker_starts", []) if s["guarded"]]
        kept = [{k: v for k, v in s.items() if k != "seq"}
                for s in hook_files[info["path"]].get("worker_starts", []) if s["guarded"]]
        assert all(s in guarded for s in kept), info["path"]
        if info["path"] not in skipped:
            assert len(kept) == len(guarded), info["path"]
        elif guarded:
            assert len(kept) < len(guarded), info["path"]
    assert any(s["guarded"] for f in whole.facts["scripts"]["files"] if f["path"] in skipped
               for s in f.get("worker_starts", []))
    # A guard that code follows is walked: what it binds, that code reads (the loop dies in every worker).
    after = str(FIXTURE_DIR / "loader_after_guard.py")
    assert "skipped_guard_lines" not in hook_files[after]
    found = [f for f in hook.by_rule("SPW001") if f.location.path == after]
    assert [f.location.line for f in found] == [13]
    # It is no bootstrapping error there: the worker never built the loader it iterates.
    assert "where the loader is built (line 10), and dies here on a loader it never built" in found[0].message
    assert [s.get("built_under_guard") for s in hook_files[after]["worker_starts"]] == [True]
    assert not any(s.get("built_under_guard") for path, f in hook_files.items() if path != after
                   for s in f.get("worker_starts", []))


def test_which_selections_read_the_code_under_the_main_guard():
    from envdoctor.catalog import load_catalog, reads_main_guard

    assert [m.id for m in load_catalog().rules if m.scripts == "import-time"] == ["SPW001", "SPW004"]
    assert [m.id for m in load_catalog().rules if m.scripts == "notebooks"] == ["PKG013", "SPW005"]
    assert not reads_main_guard(("SPW001,SPW004",))
    # Windows and macOS readiness: the hook's rules and the notebooks' (which are walked whole).
    assert not reads_main_guard(("SPW001", "SPW004", "SPW005"))
    assert not reads_main_guard(("SPW005", "PKG013"))
    assert not reads_main_guard(("missing-main-guard",))
    assert not reads_main_guard(iter(["SPW001"]))  # any iterable, read once
    assert load_catalog() is load_catalog()  # loaded once per process: the engine and the scripts probe share it
    assert not reads_main_guard(("SPW",), ignore=("SPW002", "SPW003", "SPW005"))
    # Every rule, the family, one that reads the guarded starts (SYS007: cv2's threads times the workers),
    # a rule that reads no script at all (not declared: walked), and a selection the catalog cannot resolve.
    for select in ((), ("SPW",), ("SPW001", "SYS007"), ("SPW001", "PKG001"), ("NOPE001",)):
        assert reads_main_guard(select), select
