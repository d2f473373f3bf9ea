"""README.md tells the truth: its rule table is the catalog's, its commands are the ones CI runs."""
from __future__ import annotations

import re
from pathlib import Path

from envdoctor.catalog import load_catalog, rule_table_markdown

README = Path(__file__).resolve().parents[1] / "README.md"
CI = README.parent / ".ci" / "run"


def _readme_commands() -> tuple[list[str], list[str]]:
    """The steps of the README's two commands: install-and-run, and the tests."""
    blocks = re.findall(r"```(?:sh|bash|console)?\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)[:2]
    assert len(blocks) == 2, "README.md lost its two opening commands"
    install_and_run, tests = ([step.strip() for step in block.strip().split("&&")] for block in blocks)
    return install_and_run, tests


def _ci_commands() -> list[str]:
    """The commands .ci/run runs, with its venv spelt as the README's `.venv`."""
    commands = []
    for line in CI.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "set ", "cd ", "venv=")):
            continue
        command = line.replace('"$venv/', ".venv/").replace('"$venv"', ".venv").replace('/bin/pip"', "/bin/pip")
        command = re.sub(r'(\.venv/bin/[a-z]+)"', r"\1", command)
        commands.append(command.split(" || ")[0].replace(" --quiet", ""))
    return commands


def test_readme_rule_table_matches_the_catalog() -> None:
    text = README.read_text(encoding="utf-8")
    block = re.search(r"<!-- rules:start -->\n(.*?)\n<!-- rules:end -->", text, re.DOTALL)
    assert block, "README.md lost its rules block"
    expected = rule_table_markdown(load_catalog(plugins=False))
    assert block.group(1) == expected, "run `python scripts/update_readme.py`"


def test_readme_starts_with_install_and_check_then_the_tests() -> None:
    install_and_run, tests = _readme_commands()
    assert install_and_run[0] == tests[0] == "python3 -m venv .venv"
    assert install_and_run[-1] == ".venv/bin/envdoctor check"
    assert tests[-1].startswith(".venv/bin/python -m pytest")


def test_ci_runs_the_readme_commands_and_the_gates_in_order() -> None:
    install_and_run, tests = _readme_commands()
    ci = _ci_commands()
    for step in [*install_and_run, *tests]:
        assert step in ci, f"README step {step!r} is not what .ci/run runs: {ci}"
    # Install first; the gates before the tests; the README's test command last, exactly.
    assert ci[0] == "python3 -m venv .venv"
    assert ci.index(".venv/bin/ruff check .") < ci.index(".venv/bin/mypy") < len(ci) - 1
    # Windows and macOS as the type checker sees them: platform code behind sys.platform checks.
    assert ".venv/bin/mypy --platform win32" in ci and ".venv/bin/mypy --platform darwin" in ci
    assert ci[-1] == tests[-1]
