"""`--format github`: workflow commands that annotate files, escaped the way GitHub's toolkit does."""
from __future__ import annotations

import re

from envdoctor.model import Finding, Location, Report, Severity
from envdoctor.report.github import annotation, escape_data, escape_property, render
from envdoctor.report.locations import Anchor
from reportfixtures import make_train_repo
from support import run_envdoctor

_COMMAND = re.compile(r"^::(error|warning|notice) ([^:]*)::(.*)$")


def _parse(line: str) -> tuple[str, dict[str, str], str]:
    match = _COMMAND.match(line)
    assert match, line
    props = dict(part.split("=", 1) for part in match.group(2).split(","))
    return match.group(1), props, match.group(3)


def _unescape(text: str) -> str:
    return text.replace("%0A", "\n").replace("%0D", "\r").replace("%3A", ":").replace("%2C", ",").replace("%25", "%")


def test_cli_annotates_train_a_line_8_and_the_sys001_finding_from_a_subfolder(tmp_path):
    repo = make_train_repo(tmp_path / "repo")
    proc = run_envdoctor("check", "--no-loader", "--select", "SPW001,SYS001", "--format", "github", "a.py", "b.py",
                         "c.py", cwd=str(repo / "train"), prefix_cmd=["prlimit", "--nofile=256:4096"])
    assert proc.returncode == 1, proc.stderr
    *lines, verdict = proc.stdout.splitlines()
    assert len(lines) == 4 and all(line.startswith("::") for line in lines)
    # The report's verdict, last: problems found, the unselected areas named as not checked.
    assert verdict == ("::notice file=pyproject.toml,line=1,title=envdoctor verdict%3A problems::packages: not-checked, "
                       "channels: not-checked, limits: problem, scripts: problem, storage: not-checked, "
                       "GPU: not-checked, loader: not-checked")
    parsed = [_parse(line) for line in lines]
    by_title = {props["title"].split()[0] + props.get("file", ""): (level, props, msg) for level, props, msg in parsed}
    level, props, message = by_title["SPW001train/a.py"]
    assert level == "error" and props == {"file": "train/a.py", "line": "8", "col": "1",
                                          "title": "SPW001 missing-main-guard"}
    assert _unescape(message).startswith("for-loop over DataLoader built at line 6 (num_workers=2) at import time")
    assert "\nfix: Move the code that starts the workers (line 8" in _unescape(message)
    level, props, message = by_title["SYS001pyproject.toml"]
    assert props == {"file": "pyproject.toml", "line": "1", "title": "SYS001 nofile-limit-low"}
    assert "the open-file limit is 256" in _unescape(message) and "\nfix: ulimit -n" in _unescape(message)


def test_environment_findings_go_on_the_against_file_first(tmp_path, monkeypatch):
    repo = make_train_repo(tmp_path / "repo")
    (repo / "env.yml").write_text("name: train\n", encoding="utf-8")
    monkeypatch.chdir(repo)
    shm = Finding(rule="SYS002", name="shm-too-small", severity=Severity.ERROR, message="/dev/shm is 64 MiB",
                  fix="docker run --shm-size=8g")
    report = Report(tool={"version": "0.1.0"}, generated_at="x", host={}, target={}, facts={}, findings=[shm])
    assert render(report, against="env.yml").startswith("::error file=env.yml,line=1,title=SYS002 shm-too-small::")
    assert render(report).startswith("::error file=pyproject.toml,line=1,")


def test_escaping_follows_githubs_rules_and_no_input_can_start_a_command(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert escape_data("50% done\r\nnext") == "50%25 done%0D%0Anext"
    assert escape_property("a,b:c%") == "a%2Cb%3Ac%25"
    hostile = Finding(rule="SPW004", name="unparsable-script", severity=Severity.WARNING,
                      message="cannot parse\n::error::forged\x1b]0;title\x07",
                      fix="rename it,\r\nthen: retry", location=Location("dir,x/a:b%.py", 3, 2))
    line = annotation(hostile, tmp_path.resolve(), Anchor("pyproject.toml"))
    assert "\n" not in line and "\r" not in line and "\x1b" not in line and "\x07" not in line
    level, props, message = _parse(line)
    assert props["file"] == "dir%2Cx/a%3Ab%25.py" and _unescape(props["file"]) == "dir,x/a:b%.py"
    assert props["line"] == "3" and props["col"] == "2"
    assert _unescape(message) == "cannot parse\n::error::forged\\x1b]0;title\\x07\nfix: rename it,\nthen: retry"
