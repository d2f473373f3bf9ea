"""The command line: formats, exit codes, settings files, and bad input as one clear line."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from support import findings, json_report, run_envdoctor

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
    assert_one_line_error(run_envdoctor("check", *STATIC, cwd=str(cwd)), "unknown key 'budgett'")


def test_wrong_type_in_pyproject(tmp_path: Path) -> None:
    cwd = write_pyproject(tmp_path, "[tool.envdoctor]\nbudget = 'fast'\n")
    assert_one_line_error(run_envdoctor("check", *STATIC, cwd=str(cwd)), "budget must be a number")


def test_invalid_toml_in_pyproject(tmp_path: Path) -> None:
    cwd = write_pyproject(tmp_path, "[tool.envdoctor\nbudget = \n")
    assert_one_line_error(run_envdoctor("check", *STATIC, cwd=str(cwd)), "not valid TOML")


def test_unknown_rule_in_select() -> None:
    assert_one_line_error(run_envdoctor("check", "--no-loader", "--select", "SYS999"), "unknown rule 'SYS999'")


def test_unwritable_output(tmp_path: Path) -> None:
    target = tmp_path / "no" / "such" / "folder" / "report.json"
    assert_one_line_error(run_envdoctor("report", *STATIC, "--output", str(target)), "cannot write the report")


def test_missing_prefix(tmp_path: Path) -> None:
    assert_one_line_error(run_envdoctor("check", *STATIC, "--prefix", str(tmp_path / "gone")), "does not exist")


def test_explain_unknown_rule() -> None:
    assert_one_line_error(run_envdoctor("explain", "NOPE123"), "unknown rule")


def test_bad_severity_pair_is_a_usage_error() -> None:
    proc = run_envdoctor("check", "--no-loader", "--severity", "SYS003")
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
    proc = run_envdoctor("report", *STATIC, "-o", str(out))
    assert proc.returncode in (0, 1)
    from support import validate_report

    report = validate_report(json.loads(out.read_text()))
    assert report["target"]["kind"] in ("venv", "conda", "pixi", "system")
    assert report["target"]["python"].count(".") == 2


def test_rules_and_explain() -> None:
    listing = run_envdoctor("rules")
    assert listing.returncode == 0
    ids = [line.split()[0] for line in listing.stdout.splitlines()]
    assert {"SYS001", "SYS002", "SYS003", "SYS006"} <= set(ids)
    explained = run_envdoctor("explain", "shm-too-small")
    assert explained.returncode == 0
    for heading in ("What it checks", "Why it matters", "Example", "Fix"):
        assert f"\n{heading}\n" in explained.stdout
    assert explained.stdout.startswith("SYS002 shm-too-small (default severity: error)")


def test_secrets_in_the_environment_are_redacted() -> None:
    env = dict(os.environ, HF_TOKEN="hf_supersecretvalue", WANDB_API_KEY="wandbsecret123",
               OMP_NUM_THREADS="3")
    proc = run_envdoctor("report", *STATIC, env=env)
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
