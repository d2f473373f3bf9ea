"""README.md tells the truth: its rule table is the catalog's, its commands are the real ones."""
from __future__ import annotations

import re
from pathlib import Path

from envdoctor.catalog import load_catalog, rule_table_markdown

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_rule_table_matches_the_catalog() -> None:
    text = README.read_text(encoding="utf-8")
    block = re.search(r"<!-- rules:start -->\n(.*?)\n<!-- rules:end -->", text, re.DOTALL)
    assert block, "README.md lost its rules block"
    expected = rule_table_markdown(load_catalog(plugins=False))
    assert block.group(1) == expected, "run `python scripts/update_readme.py`"


def test_readme_starts_with_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    first_blocks = re.findall(r"```(?:sh|bash|console)?\n(.*?)```", text, re.DOTALL)[:2]
    assert len(first_blocks) == 2
    install_and_run, tests = first_blocks
    assert "pip install" in install_and_run and "envdoctor check" in install_and_run
    assert "pytest" in tests


def test_ci_runs_the_readme_test_command() -> None:
    ci = (README.parent / ".ci" / "run").read_text(encoding="utf-8")
    tests_block = re.findall(r"```(?:sh|bash|console)?\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)[1]
    pytest_line = next(line for line in tests_block.splitlines() if "pytest" in line)
    assert pytest_line.strip().split("pytest", 1)[1].strip() in ci or "python -m pytest" in ci
