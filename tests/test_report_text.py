"""The concise text report: verdict, checklist by area, one block per rule with its fix, at 80 columns.

The issue's case is run for real: three scripts that start workers unguarded
(SPW001) under `prlimit --nofile=256` (SYS001), printed by the real command
into a pipe 80 columns wide.
"""
from __future__ import annotations

import re
from pathlib import Path

from envdoctor.model import Finding, Location, Report, Severity
from envdoctor.report.text import render, svg_text
from envdoctor.verdict import settle
from reportfixtures import SCRIPTS, loader_section, make_train_repo, recommendation
from support import run_cli, run_envdoctor

SPAWN = Path(__file__).resolve().parents[1] / "fixtures" / "spawn"


def _check(repo: Path, *extra: str, columns: int = 80) -> list[str]:
    proc = run_envdoctor("check", "--no-loader", "--select", "SPW001,SYS001", *extra, *SCRIPTS, cwd=str(repo),
                         prefix_cmd=["prlimit", "--nofile=256:4096"], env={**_env(), "COLUMNS": str(columns)})
    assert proc.returncode == 1, proc.stderr
    assert "\x1b" not in proc.stdout
    return proc.stdout.splitlines()


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}


def test_three_spw001_and_one_sys001_fit_in_40_lines_of_80_columns_with_every_fix(tmp_path):
    lines = _check(make_train_repo(tmp_path / "repo"))
    text = "\n".join(lines)
    # 41: SYS001's fix holds its command whole on its own line, the note beside it wrapped below.
    assert len(lines) <= 41, text
    assert max(len(line) for line in lines) <= 80
    # The verdict, then the checklist: what is wrong per area, and what was not checked.
    assert lines[1].startswith("✗ 4 errors, 0 warnings, 0 info")
    assert "  limits    ✗ SYS001 nofile-limit-low" in lines
    assert "  scripts   ✗ SPW001 missing-main-guard (3 findings)" in lines
    assert "  not checked (not selected): packages, channels, storage, GPU, loader" in lines
    # One block per rule, the files grouped under it, every fix shown.
    assert "✗ SPW001 missing-main-guard in 3 files" in lines
    assert "✗ SYS001 nofile-limit-low" in lines
    for where in ("train/a.py:8:1", "train/b.py:7:5", "train/c.py:8:8"):
        assert sum(line.startswith(f"  {where}  ") for line in lines) == 1, where
    assert text.count("fix: ") == 4
    assert "fix: Move the code that starts the workers (line 8: `for (batch,) in" in text
    assert "fix: Call `main()` (line 11) only from a new" in text
    assert "(line 8: `pool = mp.Pool(2)`)" in text
    assert "  fix: ulimit -n 4096" in lines
    # The shared explanation is not repeated per finding; the file name never leads the message twice.
    assert text.count("Under spawn/forkserver") <= 1
    assert "train/a.py:8: " not in text
    # Wrapped lines keep an indent: after the header, only verdict and block heads start at column 0.
    for line in lines[2:]:
        assert not line or line.startswith(" ") or re.match(r"[✗!i] [A-Z]+\d{3} |-v: ", line), line


def test_verbose_adds_the_evidence_as_indented_key_value_lines(tmp_path):
    lines = _check(make_train_repo(tmp_path / "repo"), "-v")
    text = "\n".join(lines)
    assert "      soft_limit: 256" in lines
    assert "      sharing_strategy: file_descriptor" in lines
    assert "      code: for (batch,) in loader:" in lines
    assert "      module_level_statement:" in lines and "        code: main()" in lines
    assert "evidence=" not in text and "{'" not in text  # readable, not a debug dump
    assert max(len(line) for line in lines) <= 80
    assert text.count("Under spawn/forkserver") == 1  # the explanation, once


def test_findings_of_one_rule_are_grouped_under_one_head_with_one_fix(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    for name in ("x.py", "y.py", "z.py"):
        (repo / name).write_bytes((SPAWN / "main_unguarded.py").read_bytes())
    proc = run_cli("check", "--no-loader", "--select", "SPW001", "x.py", "y.py", "z.py", cwd=str(repo),
                   env={**_env(), "COLUMNS": "80"})
    lines = proc.stdout.splitlines()
    assert "✗ SPW001 missing-main-guard in 3 files" in lines
    assert [line[:12] for line in lines if re.match(r"  [xyz]\.py", line)] == ["  x.py:10:5 ", "  y.py:10:5 ",
                                                                           "  z.py:10:5 "]
    # The messages name their own file (the path followed), so each is shown; the fix is one, named generically.
    assert proc.stdout.count("fix: ") == 1 and "which re-import each file" in proc.stdout


def _report(**changes) -> Report:
    base = dict(tool={"name": "envdoctor", "version": "0.1.0"}, generated_at="2026-11-29T21:00:00Z",
                host={"hostname": "h", "platform": "linux-64"},
                target={"prefix": "/opt/env", "kind": "conda", "python": "3.11.7"},
                facts={"system": {}, "packages": {}, "scripts": {}, "storage": {}, "gpu": {}, "torch": {}},
                findings=[], checked=["PKG001", "CHN001", "SYS001", "SPW001", "DSK001", "GPU001", "DL001"])
    return settle(Report(**{**base, **changes}))


def test_checklist_says_not_checked_when_a_probe_failed_and_the_verdict_says_so():
    report = _report(errors=[{"probe": "storage", "message": "statvfs timed out after 5 s"},
                             {"rule": "GPU001", "message": "skipped: probe 'gpu' failed: NVML error"}],
                     loader=loader_section())
    lines = render(report).splitlines()
    assert lines[1] == "! 0 errors, 0 warnings, 0 info — not checked: storage, GPU"  # not an all-clear
    assert "  storage   not checked: storage probe failed: statvfs timed out after 5 s" in lines
    assert "  GPU       not checked: GPU001: skipped: probe 'gpu' failed: NVML error" in lines
    assert "  packages  ✓" in lines and "  loader    ✓" in lines


def test_loader_that_did_not_run_is_not_a_tick():
    lines = render(_report()).splitlines()
    assert "  loader    not checked (the smoke test did not run)" in lines


def test_loader_table_marks_are_not_cut_at_80_columns():
    loader = loader_section(runs=[
        {"num_workers": 0, "samples_per_s": 495.4, "first_batch_s": 0.066, "spread": 0.02},
        {"num_workers": 8, "samples_per_s": 123867.9, "first_batch_s": 10.144, "spread": 0.24}],
        recommendation=recommendation(8, 123867.9), current={"num_workers": 8})
    text = render(_report(loader=loader), width=80)
    assert "◀ knee, current" in text
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 80


def test_svg_is_recorded_at_a_fixed_width_whatever_stdout_is(tmp_path):
    report = _report(findings=[Finding(rule="SYS001", name="nofile-limit-low", severity=Severity.WARNING,
                                       message="the open-file limit is 256", evidence={"soft_limit": 256},
                                       fix="ulimit -n 4096")])
    (tmp_path / "a.svg").write_text(svg_text(report))
    first = (tmp_path / "a.svg").read_text(encoding="utf-8")
    for columns in ("40", "200"):
        out = tmp_path / f"cli-{columns}.svg"
        proc = run_cli("check", "--no-loader", "--select", "SPW001", "--svg", str(out),
                       str(SPAWN / "main_unguarded.py"), env={**_env(), "COLUMNS": columns})
        assert proc.returncode == 1, proc.stderr
        svg = out.read_text(encoding="utf-8")
        assert re.search(r'viewBox="0 0 ([\d.]+) ', svg).group(1) == re.search(r'viewBox="0 0 ([\d.]+) ', first).group(1)


def test_a_finding_with_a_multi_line_fix_keeps_its_lines_indented():
    finding = Finding(rule="SPW001", name="missing-main-guard", severity=Severity.ERROR, message="loop at import",
                      fix="Wrap it:\n    if __name__ == \"__main__\":\n        main()",
                      location=Location("t.py", 3, 1))
    lines = render(_report(findings=[finding])).splitlines()
    i = lines.index("  fix: Wrap it:")
    # Continuation lines start under the fix's first word, then keep their own indentation.
    assert lines[i + 1:i + 3] == ['           if __name__ == "__main__":', "               main()"]


def test_files_after_a_rule_list_are_scripts_as_pre_commit_passes_them(tmp_path):
    repo = make_train_repo(tmp_path / "repo")
    # The command, pre-commit's `entry args FILE...`, and `--` ending the options.
    for argv in (["--select", "SPW001", "train/a.py"],
                 ["--select", "SPW001", "SPW004", "--fail-on", "error", "--select", "SPW001", "train/a.py", "train/b.py"],
                 ["--select", "SPW001,SPW004", "--", "train/a.py", "train/b.py"]):
        proc = run_cli("check", "--no-loader", *argv, cwd=str(repo), env={**_env(), "COLUMNS": "80"})
        assert proc.returncode == 1, (argv, proc.stderr)
        assert "  train/a.py:8:1  for-loop over DataLoader" in proc.stdout, argv
        assert ("train/b.py:7:5" in proc.stdout) == ("train/b.py" in argv), argv
    proc = run_cli("check", "--no-loader", "--select", "SPW001", "--bogus", "train/a.py", cwd=str(repo))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--bogus" in proc.stderr


def test_fix_commands_and_paths_stay_whole_on_their_own_lines_at_80_columns():
    """A doubled package's fix moves two long dist-info folders aside (the real remedy builds it): each step is
    one line, whole, as the shell takes it pasted (`&&` ending all but the last); the note and the prose wrap at
    80 around them; a command in backticks inside advice stands on its own line too."""
    from envdoctor.remedies.install_commands import fix_of, move_aside

    site = "/home/someone/miniforge3/envs/train-2026/lib/python3.11/site-packages"
    moves = [move_aside(f"{site}/numpy-1.26.4.dist-info"), move_aside(f"{site}/numpy-2.1.3.dist-info")]
    fix = fix_of(*moves, note="both copies are incomplete: pip and conda wrote over each other; reinstall next")
    doubled = Finding(rule="PKG002", name="duplicate-distribution", severity=Severity.ERROR,
                      message=f"numpy is installed 2 times in {site}", **fix.hit())
    venv = "/home/someone/.local/share/virtualenvs/project-with-a-long-name/bin/python3"
    advice = Finding(rule="PKG003", name="broken-requirement", severity=Severity.WARNING,
                     message="PyGObject 3.42.2 requires pycairo>=1.16.0, which is not installed",
                     fix="install 'pycairo>=1.16.0' with the system package manager, or create a venv "
                         f"(`{venv} -m venv --system-site-packages ~/venvs/train`) and install it there")
    lines = render(_report(findings=[doubled, advice]), width=80).splitlines()
    stripped = [line.strip() for line in lines]
    assert f"fix: {moves[0].text} &&" in stripped and moves[1].text in stripped
    assert f"{venv} -m venv --system-site-packages ~/venvs/train" in stripped
    whole = (moves[0].text, moves[1].text, venv)
    for line in lines:  # every other line fits; no line holds a piece of a path
        if not any(part in line for part in whole):
            assert len(line) <= 80, line
            assert "dist-info" not in line or "numpy is installed" in line, line
    assert "both copies are incomplete: pip and conda wrote over each other; reinstall next" in " ".join(stripped)


def test_fix_blocks_tell_what_to_paste_from_the_words_around_it():
    from envdoctor.report.text import fix_blocks

    assert fix_blocks("ulimit -n 4096   # the hard limit") == [("code", "ulimit -n 4096"), ("prose", "the hard limit")]
    assert fix_blocks("a && b", runs_steps=True) == [("code", "a &&"), ("code", "b")]
    assert fix_blocks("re-run `envdoctor loader` later; keep `num_workers=0`") == [
        ("prose", "re-run"), ("code", "envdoctor loader"), ("prose", "later; keep `num_workers=0`")]
    assert fix_blocks("Move `for (batch,) in loader:` into main") == [("prose", "Move `for (batch,) in loader:` "
                                                                                "into main")]


def _on_a_terminal(columns: int, *args: str) -> str:
    """`envdoctor ARGS` with its standard output on a real pseudo-terminal `columns` wide."""
    import fcntl
    import os
    import pty
    import struct
    import subprocess
    import sys
    import termios

    from support import envdoctor_argv

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {**_env(), "NO_COLOR": "1", "TERM": "dumb"}
    proc = subprocess.Popen(envdoctor_argv(*args), stdout=follower, stderr=subprocess.PIPE, env=env)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert proc.wait(timeout=60) == 0, proc.stderr.read() if proc.stderr else ""
    assert sys.platform.startswith("linux")
    return b"".join(chunks).decode().replace("\r\n", "\n")


def _widest(text: str) -> int:
    """The widest line of the text, less the verbatim lines of `explain` (the example, a terminal's output, and
    code to type), which are shown as they are."""
    from envdoctor.catalog import DOC_PARTS, load_catalog
    from envdoctor.report.rule_docs import doc_blocks

    verbatim = {line.strip() for meta in load_catalog().rules for part in DOC_PARTS
                for block in doc_blocks(meta.docs()[part], verbatim=part == "example") if block.code
                for line in block.text.splitlines()}
    return max(len(line) for line in text.splitlines() if line.strip() not in verbatim)


def test_rules_and_explain_follow_the_terminals_width_and_80_without_one():
    import pytest

    if not __import__("sys").platform.startswith("linux"):
        pytest.skip("a pseudo-terminal of a given width is set up the Linux way here")
    for columns in (60, 120):
        for args in (("rules",), ("explain", "SPW001")):
            shown = _on_a_terminal(columns, *args)
            assert columns - 25 < _widest(shown) <= columns, (args, columns)
    for args in (("rules",), ("explain", "PKG012")):
        piped = run_cli(*args, env={**_env(), "COLUMNS": "200"}).stdout  # not a terminal: plain 80
        assert 70 < _widest(piped) <= 80, args


def test_one_set_of_numbers_each_saying_what_it_is_and_no_header_cut():
    """The table's samples/s are the sweep's medians and say so; the recommendation says whether its figure is
    the sweep's or the paired windows' median; at 60 columns no column header is cut and the title never
    splits a figure from its unit."""
    runs = [{"num_workers": 0, "samples_per_s": 5801.2, "first_batch_s": 0.066, "spread": 0.02},
            {"num_workers": 1, "samples_per_s": 6725.0, "first_batch_s": 0.51, "spread": 0.2}]
    paired = {**recommendation(1, 6120.0), "paired_windows": 3, "gain": 1.21, "gain_interval": [1.05, 1.4]}
    loader = loader_section(runs=runs, recommendation=paired, dataset="synthetic 3x64x64 images with a blur",
                            batch_size=32, start_method="fork", wall_s=14.1)
    for width in (60, 80):
        lines = render(_report(loader=loader), width=width).splitlines()
        text = "\n".join(lines)
        assert "samples/s: sweep median" in text and "6,120\u00a0samples/s (paired median" in text, text
        assert "6,725" in text and "6725" not in text
        header = next(line for line in lines if "workers" in line and "samples/s" in line)
        assert "first s" in header and "…" not in header, header
        title = next(i for i, line in enumerate(lines) if line.startswith("DataLoader smoke test"))
        joined = " ".join(lines[title:title + 3])
        assert "14.1\u00a0s" in joined and "batch_size\u00a032" in joined, lines[title:title + 3]
    unpaired = loader_section(runs=runs, recommendation=recommendation(1, 6725.0))
    assert "6,725\u00a0samples/s (sweep median)" in render(_report(loader=unpaired))


def test_the_explanation_is_told_once_per_report():
    """The bottleneck's reason and the paired windows' verdict, which DL003 and DL005 already give in full, are
    not told again under the curve: the summary points at the finding instead."""
    reason = ("__getitem__ takes 24% of the 4.37 ms each sample costs with num_workers=0: the time goes into "
              "collating and moving batches of 1.5 MiB, not into making samples")
    noisy = {**recommendation(0, 229.0), "trust": "too-noisy", "candidate_num_workers": 1, "paired_windows": 3,
             "gain": 1.91, "gain_interval": [0.44, 8.29], "basis": "current"}
    loader = loader_section(bottleneck="ipc", bottleneck_reason=reason, recommendation=noisy)
    dl003 = Finding(rule="DL003", name="getitem-slow", severity=Severity.INFO, message=f"workers do not help ({reason})")
    dl005 = Finding(rule="DL005", name="loader-settings", severity=Severity.INFO,
                    message="num_workers=1 measured best in the sweep, but re-measured in 3 interleaved paired "
                            "windows against your setting: 1.91× (95% interval 0.44–8.29); keep your settings")
    text = " ".join(line.strip() for line in render(_report(findings=[dl003, dl005], loader=loader)).splitlines())
    assert text.count("collating and moving batches of 1.5 MiB") == 1, text
    assert "bottleneck: ipc (DL003 above says why)" in text
    assert text.count("95% interval 0.44–8.29") == 1 and "DL005 above says why" in text
    alone = " ".join(line.strip() for line in render(_report(loader=loader)).splitlines())
    assert reason in alone and "0.44–8.29" in alone  # without the findings, the summary tells it all
