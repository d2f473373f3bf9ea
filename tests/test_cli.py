"""The command line: formats, exit codes, settings files, and bad input as one clear line."""
from __future__ import annotations

import argparse
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from support import envdoctor_argv, findings, json_report, run_cli, run_envdoctor

STATIC = ("--no-loader", "--select", "SYS")


def assert_one_line_error(proc, *fragments: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("envdoctor: error:")
    for fragment in fragments:
        assert fragment in lines[0]


def write_pyproject(folder: Path, body: str) -> Path:
    (folder / "pyproject.toml").write_text(body)
    return folder


def test_unknown_key_in_pyproject(tmp_path: Path) -> None:
    cwd = write_pyproject(tmp_path, "[tool.envdoctor]\nfail-on = 'warning'\nbudgett = 3\n")
    assert_one_line_error(run_cli("check", *STATIC, cwd=str(cwd)), "unknown key 'budgett'")


def test_wrong_type_in_pyproject(tmp_path: Path) -> None:
    cwd = write_pyproject(tmp_path, "[tool.envdoctor]\nbudget = 'fast'\n")
    assert_one_line_error(run_cli("check", *STATIC, cwd=str(cwd)), "budget must be a number")


def test_invalid_toml_in_pyproject(tmp_path: Path) -> None:
    cwd = write_pyproject(tmp_path, "[tool.envdoctor\nbudget = \n")
    assert_one_line_error(run_cli("check", *STATIC, cwd=str(cwd)), "not valid TOML")


def test_unknown_rule_in_select() -> None:
    assert_one_line_error(run_cli("check", "--no-loader", "--select", "SYS999"), "unknown rule 'SYS999'")


def test_unwritable_output(tmp_path: Path) -> None:
    target = tmp_path / "no" / "such" / "folder" / "report.json"
    assert_one_line_error(run_cli("report", *STATIC, "--output", str(target)), "cannot write the report")


def test_missing_prefix(tmp_path: Path) -> None:
    assert_one_line_error(run_cli("check", *STATIC, "--prefix", str(tmp_path / "gone")), "does not exist")


def test_explain_unknown_rule() -> None:
    assert_one_line_error(run_cli("explain", "NOPE123"), "unknown rule")


def test_bad_severity_pair_is_a_usage_error() -> None:
    proc = run_cli("check", "--no-loader", "--severity", "SYS003")
    assert proc.returncode == 2 and "RULE=LEVEL" in proc.stderr and "Traceback" not in proc.stderr


def test_pyproject_settings_apply_and_flags_beat_them(tmp_path: Path) -> None:
    cwd = write_pyproject(tmp_path, "[tool.envdoctor]\nselect = ['SYS003']\nno-loader = true\n"
                                    "severity = {SYS003 = 'error'}\nformat = 'json'\n")
    proc = run_envdoctor("check", cwd=str(cwd), prefix_cmd=["taskset", "-c", "0"])
    [finding] = findings(json_report(proc), "SYS003")
    assert finding["severity"] == "error"  # the file's override
    assert proc.returncode == 1
    flag = run_envdoctor("check", "--severity", "SYS003=info", "--fail-on", "info", cwd=str(cwd),
                         prefix_cmd=["taskset", "-c", "0"])
    [finding] = findings(json_report(flag), "SYS003")
    assert finding["severity"] == "info" and flag.returncode == 1


def test_text_report_is_plain_without_a_terminal() -> None:
    proc = run_envdoctor("check", "-v", "--no-loader", "--select", "SYS003", prefix_cmd=["taskset", "-c", "0"])
    assert proc.returncode == 0
    assert "\x1b[" not in proc.stdout
    assert "1 warning" in proc.stdout.splitlines()[1]
    assert "SYS003 cpu-quota" in proc.stdout
    assert "      usable_cpus: 1\n" in proc.stdout
    assert "fix: use num_workers=1" in proc.stdout


def test_markdown_and_output_file(tmp_path: Path) -> None:
    out = tmp_path / "report.md"
    proc = run_envdoctor("check", "--no-loader", "--select", "SYS003", "--format", "markdown",
                         "--output", str(out), prefix_cmd=["taskset", "-c", "0"])
    assert proc.returncode == 0 and proc.stdout == ""
    text = out.read_text()
    assert text.startswith("# envdoctor report")
    assert "### ! SYS003 `cpu-quota` — warning\n" in text


def test_report_json_output_file_is_valid(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    proc = run_cli("report", *STATIC, "-o", str(out))
    from support import validate_report

    report = validate_report(json.loads(out.read_text()))
    # The exit code the report calls for (--fail-on error): 1 for an error, or for a rule that could not run.
    not_checked = any(e.get("rule") and e.get("probe") for e in report["errors"])
    assert proc.returncode == (1 if report["summary"]["error"] or not_checked else 0), (proc.returncode, report)
    assert report["target"]["kind"] in ("venv", "conda", "pixi", "system")
    assert report["target"]["python"].count(".") == 2


def test_rules_and_explain() -> None:
    listing = run_cli("rules")
    assert listing.returncode == 0
    ids = [line.split()[0] for line in listing.stdout.splitlines()]
    assert {"SYS001", "SYS002", "SYS003", "SYS006"} <= set(ids)
    explained = run_cli("explain", "shm-too-small")
    assert explained.returncode == 0
    for heading in ("What it checks", "Why it matters", "Example", "Fix"):
        assert f"\n{heading}\n" in explained.stdout
    assert explained.stdout.startswith("SYS002 shm-too-small (default severity: error)")


def test_secrets_in_the_environment_are_redacted() -> None:
    env = dict(os.environ, HF_TOKEN="hf_supersecretvalue", WANDB_API_KEY="wandbsecret123",
               OMP_NUM_THREADS="3")
    proc = run_cli("report", *STATIC, env=env)
    assert "supersecretvalue" not in proc.stdout and "wandbsecret123" not in proc.stdout
    environ = json_report(proc)["facts"]["system"]["environ"]
    assert environ["HF_TOKEN"] == "[redacted]" and environ["WANDB_API_KEY"] == "[redacted]"
    assert environ["OMP_NUM_THREADS"] == "3"


@pytest.mark.parametrize("fail_on,code", [("error", 0), ("warning", 1), ("info", 1), ("never", 0)])
def test_fail_on_levels(fail_on: str, code: int) -> None:
    proc = run_envdoctor("report", "--no-loader", "--select", "SYS003", "--fail-on", fail_on,
                         prefix_cmd=["taskset", "-c", "0"])
    assert findings(json_report(proc), "SYS003")
    assert proc.returncode == code


def test_the_api_refuses_a_missing_data_path_too(tmp_path: Path) -> None:
    import envdoctor
    from envdoctor.config import ConfigError

    with pytest.raises(ConfigError, match="does not exist"):
        envdoctor.check(no_loader=True, data=str(tmp_path / "typo"))


# --- settings declared once: flags, pyproject keys and the API all come from Config --------------

@pytest.mark.parametrize("args,fragments", [
    (("--prefix", ""), ("--prefix", "empty string")),
    (("--budget", "nan"), ("--budget", "positive, finite", "'nan'")),
    (("--budget", "inf"), ("--budget", "positive, finite", "'inf'")),
    (("--budget", "-3"), ("--budget", "positive, finite", "'-3'")),
    (("--step-time", "0"), ("--step-time", "positive, finite")),
    (("--severity", "SYS=loud"), ("SYS", "unknown severity 'loud'")),
    (("--severity", "NOPE9=info"), ("--severity", "unknown rule 'NOPE9'")),
])
def test_hostile_setting_values_are_one_line_refusals(args: tuple[str, ...], fragments: tuple[str, ...]) -> None:
    assert_one_line_error(run_cli("report", "--no-loader", "--select", "SYS003", *args), *fragments)


@pytest.mark.parametrize("body,fragment", [
    ("budget = nan", "budget must be a positive, finite number"),
    ("budget = -inf", "budget must be a positive, finite number"),
    ("prefix = ''", "prefix must not be empty"),
    ("fail-on = 'sometimes'", "must be one of error, warning, info, never"),
    ("select = 'SYS'", "select must be a list of strings"),
    ("output = 'x.json'", "unknown key 'output'"),
])
def test_hostile_pyproject_values_are_refused(tmp_path: Path, body: str, fragment: str) -> None:
    cwd = write_pyproject(tmp_path, f"[tool.envdoctor]\n{body}\n")
    assert_one_line_error(run_cli("check", *STATIC, cwd=str(cwd)), fragment)


def test_missing_against_file_is_refused_not_skipped(tmp_path: Path) -> None:
    proc = run_cli("report", "--no-loader", "--select", "PKG007", "--against", str(tmp_path / "env.yml"))
    assert_one_line_error(proc, "env.yml", "does not exist", "--against")
    assert proc.stdout == ""


def test_against_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "requirements.txt"
    os.mkfifo(fifo)
    proc = run_envdoctor("report", "--no-loader", "--select", "PKG007", "--against", str(fifo), timeout=60)
    assert_one_line_error(proc, "not a regular file")


def test_severity_resolves_families_and_names_like_select() -> None:
    base = ("report", "--no-loader", "--select", "SYS", "--fail-on", "never")
    family = json_report(run_envdoctor(*base, "--severity", "SYS=info", prefix_cmd=["taskset", "-c", "0"]))
    assert [f["severity"] for f in findings(family, "SYS003")] == ["info"]
    # One rule, by its name, beats its family whatever the order.
    named = json_report(run_envdoctor(*base, "--severity", "cpu-quota=error,SYS=info",
                                      prefix_cmd=["taskset", "-c", "0"]))
    assert [f["severity"] for f in findings(named, "SYS003")] == ["error"]


def test_every_setting_has_its_flag_and_pyproject_key() -> None:
    from envdoctor.cli import build_parser
    from envdoctor.config import FORMATS, SETTINGS, Config
    from envdoctor.model import FAIL_ON_CHOICES
    from envdoctor.report import FORMAT_MODULES

    parser = build_parser()
    check = parser._subparsers._group_actions[0].choices["check"]
    by_flag = {flag: action for action in check._actions for flag in action.option_strings}
    for setting in SETTINGS:
        assert all(by_flag[flag].dest == setting.name for flag in setting.flags), setting.name
        assert setting.default == getattr(Config(), setting.name)
    assert by_flag["--json"].const == "json" and by_flag["--json"].dest == "format"
    assert tuple(by_flag["--fail-on"].choices) == FAIL_ON_CHOICES
    assert tuple(by_flag["--format"].choices) == FORMATS == tuple(FORMAT_MODULES)


def test_a_run_builds_only_its_own_command_and_parses_it_as_the_whole_parser_does() -> None:
    from envdoctor.cli import COMMANDS, _parse, build_parser

    def commands(parser: argparse.ArgumentParser) -> list[str]:
        return list(parser._subparsers._group_actions[0].choices)

    assert commands(build_parser()) == list(COMMANDS)
    for name in COMMANDS:
        assert commands(build_parser(name)) == [name]
    assert commands(build_parser("nope")) == list(COMMANDS)  # argparse must name the choices
    for argv in (["check", "--no-loader", "--select", "SPW001,SPW004", "a.py", "--", "-b.py"],
                 ["report", "--json", "-v", "--severity", "SYS=info"], ["compare", "a.json", "--format", "markdown"],
                 ["render", "r.json", "--format", "sarif"], ["explain", "SYS002"], ["fix", "--dry-run"]):
        assert vars(_parse(build_parser(argv[0]), argv)) == vars(_parse(build_parser(), argv)), argv
    # The top-level help still lists every command: it is built whole when no command comes first.
    listing = run_cli("--help").stdout
    assert all(f"    {name}" in listing for name in COMMANDS), listing


def test_api_check_takes_the_settings_by_name(tmp_path: Path) -> None:
    import envdoctor
    from envdoctor.config import ConfigError

    with pytest.raises(ConfigError, match="unknown setting 'budgett'"):
        envdoctor.check(budgett=3)
    with pytest.raises(ConfigError, match="budget must be a positive, finite number"):
        envdoctor.check(no_loader=True, budget_s=float("nan"))
    with pytest.raises(ConfigError, match="prefix must not be empty"):
        envdoctor.check(no_loader=True, prefix="")


# --- where the report goes: whole or not at all, never into the inspected environment ------------

def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if "envdoctor-tmp" in p.name)


def test_a_failed_run_leaves_the_previous_report_unchanged(tmp_path: Path) -> None:
    keep = tmp_path / "keep.json"
    keep.write_text('{"previous": "report"}\n')
    proc = run_cli("report", "--prefix", "/nonexistent", "-o", str(keep))
    assert_one_line_error(proc, "/nonexistent", "does not exist")
    assert keep.read_text() == '{"previous": "report"}\n'
    assert _leftovers(tmp_path) == []


def test_a_full_file_system_is_exit_2_and_the_previous_report_stays(tmp_path: Path) -> None:
    keep = tmp_path / "keep.json"
    keep.write_text('{"previous": "report"}\n')
    # RLIMIT_FSIZE makes every write past 2 KiB fail with EFBIG, as a full disk fails with ENOSPC;
    # the report of this machine is several times larger.
    proc = run_envdoctor("report", *STATIC, "-o", str(keep), prefix_cmd=["prlimit", "--fsize=2048"])
    assert_one_line_error(proc, "cannot write the report to", "File too large", "unchanged")
    assert keep.read_text() == '{"previous": "report"}\n'
    assert _leftovers(tmp_path) == []


def test_dev_full_as_output_or_standard_output_is_exit_2() -> None:
    assert_one_line_error(run_cli("report", *STATIC, "-o", "/dev/full"),
                          "cannot write the report to /dev/full", "No space left")
    for command in ("report", "check"):
        with open("/dev/full", "w") as full:
            proc = subprocess.run(envdoctor_argv(command, *STATIC), stdout=full, stderr=subprocess.PIPE,
                                  text=True, timeout=120, env=dict(os.environ, NO_COLOR="1"))
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.strip() == "envdoctor: error: cannot write the report to standard output: " \
                                      "No space left on device"


def test_output_into_the_inspected_environment_is_refused(tmp_path: Path) -> None:
    venv = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    cfg = venv / "pyvenv.cfg"
    before = cfg.read_bytes()
    for flag in ("-o", "--svg"):
        proc = run_cli("check", *STATIC, "--prefix", str(venv), flag, str(cfg))
        assert_one_line_error(proc, "will not write", "inside the inspected environment", str(venv))
        assert cfg.read_bytes() == before
    # Through a symlink from outside, too.
    link = tmp_path / "looks-outside"
    link.symlink_to(venv / "lib")
    proc = run_cli("check", *STATIC, "--prefix", str(venv), "-o", str(link / "r.json"))
    assert_one_line_error(proc, "inside the inspected environment")
    assert not (venv / "lib" / "r.json").exists()


def test_a_report_written_over_an_old_one_keeps_its_permissions(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    out.write_text("old")
    out.chmod(0o640)
    proc = run_cli("report", *STATIC, "-o", str(out))
    assert proc.returncode in (0, 1), proc.stderr
    assert json.loads(out.read_text())["schema_version"] == 1
    assert stat.S_IMODE(out.stat().st_mode) == 0o640
    assert _leftovers(tmp_path) == []


def test_a_python_that_cannot_start_is_not_an_all_clear(tmp_path: Path) -> None:
    env = tmp_path / "broken"
    (env / "bin").mkdir(parents=True)
    (env / "pyvenv.cfg").write_text("home = /usr/bin\n")
    python = env / "bin" / "python"
    python.write_text("#!/bin/sh\necho 'error while loading shared libraries: libpython3.11.so.1.0' >&2\nexit 127\n")
    python.chmod(0o755)
    (env / "bin" / "python3").symlink_to("python")
    for command in ("check", "report"):
        proc = run_cli(command, "--no-loader", "--prefix", str(env))
        assert_one_line_error(proc, "Python cannot start", "exited with status 127")
        assert "0 errors" not in proc.stdout


def test_a_requirements_file_that_includes_itself_is_read_once(tmp_path: Path) -> None:
    import time

    bomb = tmp_path / "bomb.txt"
    bomb.write_text("".join(f"-r bomb.txt\n-r {tmp_path / 'other.txt'}\n" for _ in range(50)) + "numpy==1.26.4\n")
    (tmp_path / "other.txt").write_text("-r bomb.txt\nrich>=13\n")
    from bounds import static_check_s

    started = time.monotonic()
    proc = run_envdoctor("report", "--no-loader", "--select", "PKG007", "--against", str(bomb),
                         timeout=2 * static_check_s())
    assert time.monotonic() - started < static_check_s()  # the limits a static report enforces; a loop never ends
    spec = json_report(proc)["facts"]["spec"]
    assert [p["name"] for p in spec["pip"]] == ["rich", "numpy"]
    reasons = [s["reason"] for s in spec["skipped"]]
    assert reasons and set(reasons) == {"already read"}


def test_every_command_help_has_a_description_its_own_options_and_the_exit_codes() -> None:
    from envdoctor.cli import COMMANDS, build_parser

    for name in COMMANDS:
        command = build_parser(name)._subparsers._group_actions[0].choices[name]
        assert command.description and len(command.description) > 40, name
        assert command.epilog and "exit codes:" in command.epilog, name
        undocumented = [a.option_strings or a.dest for a in command._actions if not a.help]
        assert undocumented == [], (name, undocumented)
    loader = build_parser("loader")._subparsers._group_actions[0].choices["loader"]
    offered = {flag for action in loader._actions for flag in action.option_strings}
    assert not offered & {"--no-loader", "--deep", "--distributed", "--distributed-timeout", "--against"}, offered
    assert {"--dataset", "--data", "--budget", "--step-time", "--prefix"} <= offered
    shown = run_cli("loader", "--help", env={**os.environ, "COLUMNS": "80"}).stdout
    assert "--no-loader" not in shown and "exit codes:" in shown and "not checked" in shown
    assert max(map(len, shown.splitlines())) <= 80
    top = run_cli("--help", env={**os.environ, "COLUMNS": "80"}).stdout
    assert "exit codes:" in top and "--fail-\n" not in top


def test_a_check_left_not_checked_exits_1_as_the_docs_say(tmp_path: Path) -> None:
    """docs/reference.md#exit-codes: a verdict that says "not checked: …" is no all-clear, exit 1 (unless
    --fail-on never). A venv without torch: the smoke test is skipped as a whole, nothing is found."""
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    proc = run_cli("check", "--prefix", str(venv), "--select", "DL", "--budget", "5")
    assert "not checked: loader" in proc.stdout and "0 errors, 0 warnings" in proc.stdout, proc.stdout
    assert proc.returncode == 1, proc.stdout
    report = json.loads(run_cli("report", "--prefix", str(venv), "--select", "DL", "--budget", "5").stdout)
    assert report["verdict"]["result"] == "unchecked" and report["findings"] == []
    assert run_cli("check", "--prefix", str(venv), "--select", "DL", "--budget", "5", "--fail-on",
                   "never").returncode == 0
