"""README.md tells the truth: its two opening commands are the ones CI runs, and it stays short.

The rule table moved to docs/rules/index.md (tests/test_docs.py keeps it in step with the catalog).
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
CI = README.parent / ".ci" / "run"
#: The README is the first five minutes; the rest lives in docs/.
MAX_README_LINES = 250


def _fenced_blocks(text: str) -> list[tuple[str, str]]:
    """Every fenced block of a Markdown text, in order: (info string, body)."""
    return re.findall(r"^```([\w-]*)\n(.*?)^```$", text, re.MULTILINE | re.DOTALL)


def _readme_commands() -> tuple[list[str], list[str]]:
    """The steps of the README's two commands: install-and-run, and the tests."""
    blocks = _fenced_blocks(README.read_text(encoding="utf-8"))[:2]
    assert [info for info, _ in blocks] == ["sh", "sh"], "README.md must open with its two commands, as ```sh blocks"
    install_and_run, tests = ([step.strip() for step in body.strip().split("&&")] for _, body in blocks)
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


def test_readme_names_the_quick_tier_and_the_full_suite_in_its_development_section() -> None:
    text = README.read_text(encoding="utf-8")
    development = text.split("\n## Development\n", 1)[1].split("\n## ", 1)[0]
    _, tests = _readme_commands()
    commands = [body.strip() for _, body in _fenced_blocks(development)]
    assert any(c.startswith(".venv/bin/python -m pytest") and '-m "not slow"' in c for c in commands), commands
    assert f"`{tests[-1]}`" in development  # the full suite: the README's test command


def test_readme_stays_a_page_for_newcomers() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines: move the detail to docs/"


def test_development_names_the_quick_tier_as_the_test_command_less_the_slow_tests() -> None:
    """The quick loop is the README's test command with `-m "not slow"` (the tier conftest.py skips importing)."""
    _, tests = _readme_commands()
    quick = f'{tests[-1]} -m "not slow"'
    assert f"\n{quick}\n" in README.read_text(encoding="utf-8"), f"README.md does not show the quick tier as {quick!r}"


def test_the_cache_provider_is_on_so_last_failed_reruns_only_the_failures(pytestconfig) -> None:  # type: ignore[no-untyped-def]
    """`pytest --lf` reruns what failed last; with the cache provider off it silently ran everything."""
    assert pytestconfig.pluginmanager.has_plugin("cacheprovider")
    assert "no:cacheprovider" not in " ".join(pytestconfig.getini("addopts"))


def _readme_script():  # type: ignore[no-untyped-def]
    import importlib.util

    spec = importlib.util.spec_from_file_location("readme_commands", README.parent / "scripts" / "readme_commands.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ci_runs_every_command_most_people_need_on_the_fresh_venv() -> None:
    """Each line of "Commands most people need" is run by scripts/readme_commands.py, which reads them from the
    README itself, and CI runs it on the venv the README's install command made, right after that command,
    asking the fresh venv to be clean (`--clean`: no PKG or CHN finding, with and without --deep)."""
    readme_commands = _readme_script()
    commands = readme_commands.readme_commands()
    assert len(commands) >= 10 and all(c.startswith("envdoctor ") for c in commands), commands
    for command in commands:  # each has its real stand-ins (a training script, a data folder, reports)
        argv, _, allowed = readme_commands.concrete(command, Path("/venv"), Path("/work"))
        assert argv[0] == "/venv/bin/envdoctor" and 0 in allowed, command
        assert not {"train.py", "/data/train", "~/envs/train", "reports/"} & set(argv), argv
    ci = _ci_commands()
    run_them = ".venv/bin/python scripts/readme_commands.py .venv --clean"
    assert run_them in ci and ci.index(".venv/bin/envdoctor check") + 1 == ci.index(run_them), ci


@pytest.mark.slow
def test_every_command_most_people_need_runs_here(tmp_path: Path) -> None:
    """The same script CI runs on the README's fresh venv, here on the suite's own: every line ends with an exit
    code its docs allow and no traceback (the "clean venv" check is CI's: this venv holds the test extras)."""
    import os
    import sys

    ran = os.environ.get("ENVDOCTOR_README_COMMANDS_RAN")
    if ran:
        pytest.skip(f"every README command ran on the README's fresh venv ({ran}) just before the suite (.ci/run)")
    failures = _readme_script().run_all(Path(sys.prefix), clean=False)
    assert failures == [], "\n".join(failures)
