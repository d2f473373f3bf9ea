"""Hostile strings in every format: no control character from the input reaches the output, markup stays text.

Terminal escapes (ESC, CSI, OSC 8 links and titles, C1 controls), bidi
overrides, rich markup and Markdown/HTML arrive through file names, package
names, evidence and the strings of other people's reports. Each is put into a
real run (a script with such a name, a compared report with such a package and
host) and into a saved report rendered in every format; a huge report renders
in bounded size (its time is this machine's speed: rendering enforces no limit).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from envdoctor.model import Finding, Location, Report, Severity
from envdoctor.report import FORMATS, RenderOptions, render
from envdoctor.report.safe import has_unsafe
from envdoctor.verdict import settle
from reportfixtures import loader_section
from support import run_cli, run_envdoctor

SPAWN = Path(__file__).resolve().parents[1] / "fixtures" / "spawn"

HOSTILE = {
    "osc-title": "\x1b]0;owned\x07",
    "osc8-link": "\x1b]8;;http://e.vil\x1b\\click\x1b]8;;\x1b\\",
    "clear-screen": "\x1b[2J\x1b[H",
    "csi-c1": "\x9b31m",
    "bidi-override": "safe\u202eyp.exe",
    "bidi-isolate": "\u2066x\u2069",
    "rich-close": "[/bold]x",
    "rich-link": "[link=http://e.vil]y[/link]",
    "nul-and-bell": "a\x00b\x07",
    "markdown-html": "<script>alert(1)</script>|x\ny",
}
#: What the human and CI formats must never contain (JSON keeps the exact string, escaped as JSON).
HUMAN_FORMATS = [f for f in FORMATS if f != "json"]


def _assert_clean(text: str, where: str) -> None:
    assert not has_unsafe(text), (where, [c for c in text if has_unsafe(c)][:5])
    assert "\x1b" not in text and "\u202e" not in text, where


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_script_with_a_hostile_name_in_every_format(tmp_path, name):
    hostile = HOSTILE[name]
    script = tmp_path / f"t{hostile.replace('/', '_').replace(chr(0), '_')}.py"  # no file name holds / or NUL
    script.write_bytes((SPAWN / "main_unguarded.py").read_bytes())
    saved = tmp_path / "saved.json"
    proc = run_cli("report", "--no-loader", "--select", "SPW001", "-o", str(saved), "--", str(script),
                   cwd=str(tmp_path))
    assert proc.returncode == 1, proc.stderr
    data = json.loads(saved.read_text(encoding="utf-8"))
    assert data["findings"][0]["location"]["path"] == str(script)  # JSON keeps the exact name
    for fmt in HUMAN_FORMATS:
        out = run_cli("render", str(saved), "--format", fmt, "-v", cwd=str(tmp_path))
        assert out.returncode == 1, (fmt, out.stderr)
        assert "SPW001" in out.stdout, fmt
        _assert_clean(out.stdout, fmt)
        assert out.stderr == "", fmt  # rich did not trip over markup


def _hostile_report() -> Report:
    findings = []
    for i, (name, hostile) in enumerate(sorted(HOSTILE.items())):
        findings.append(Finding(
            rule="PKG002", name="duplicate-distribution", severity=Severity.ERROR,
            message=f"{hostile} is installed twice ({name})", fix=f"pip uninstall -y {hostile}\n{hostile}",
            evidence={"package": hostile, hostile: {"paths": [hostile, f"/x/{hostile}"]}},
            location=Location(f"{hostile}.py", i + 1, 1) if i % 2 else None))
    return settle(Report(tool={"name": "envdoctor", "version": HOSTILE["osc-title"]}, generated_at=HOSTILE["clear-screen"],
                  host={"hostname": HOSTILE["rich-close"], "platform": HOSTILE["csi-c1"]},
                  target={"prefix": HOSTILE["osc8-link"], "kind": HOSTILE["rich-link"], "python": HOSTILE["bidi-isolate"]},
                  facts={}, findings=findings, checked=None,
                  loader=loader_section(dataset=HOSTILE["osc8-link"], bottleneck=HOSTILE["rich-close"],
                                        bottleneck_reason=HOSTILE["clear-screen"],
                                        skipped=[{"what": HOSTILE["rich-link"], "reason": HOSTILE["bidi-override"]}]),
                  errors=[{"probe": HOSTILE["nul-and-bell"], "message": HOSTILE["osc-title"]}]))


@pytest.mark.parametrize("fmt", HUMAN_FORMATS)
def test_every_string_of_a_saved_report_is_escaped(tmp_path, fmt):
    text = render(_hostile_report(), fmt, RenderOptions(verbose=True))
    _assert_clean(text, fmt)
    assert "PKG002" in text


def test_rich_markup_in_a_compared_report_is_text_not_markup(tmp_path):
    base = run_envdoctor("report", "--no-loader", "--select", "PKG002,SYS001", "-o", str(tmp_path / "a.json"))
    assert base.returncode in (0, 1), base.stderr
    data = json.loads((tmp_path / "a.json").read_text(encoding="utf-8"))
    other = json.loads(json.dumps(data))
    other["host"]["hostname"] = "[/bold]x" + HOSTILE["osc-title"]
    other["facts"]["packages"]["distributions"][0].update(name="[link=http://e.vil]torch[/link]\x1b[2J",
                                                          version="[/red]1.0\x9b")
    (tmp_path / "b.json").write_text(json.dumps(other), encoding="utf-8")
    for fmt in HUMAN_FORMATS:
        proc = run_cli("compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--format", fmt,
                       env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
        assert proc.returncode in (0, 1), (fmt, proc.stderr)
        assert "Traceback" not in proc.stderr and "MarkupError" not in proc.stderr, fmt
        _assert_clean(proc.stdout, fmt)
        if fmt == "text":  # shown as the text it is
            assert "[/bold]x" in proc.stdout and "[link=http://e" in proc.stdout


@pytest.mark.slow  # a stress test: about 6 s of CPU, the quick tier's largest in-process test
def test_a_million_findings_and_a_10_mib_string_render_in_bounded_time_and_size():
    one = Finding(rule="SPW001", name="missing-main-guard", severity=Severity.ERROR, message="loop at import",
                  fix="guard it", location=Location("t.py", 1, 1))
    huge = Finding(rule="PKG002", name="duplicate-distribution", severity=Severity.ERROR,
                   message="x" * (10 * 2**20), evidence={"blob": "y" * (10 * 2**20)}, fix="z" * (10 * 2**20))
    report = settle(Report(tool={"version": "0.1.0"}, generated_at="t", host={"hostname": "h", "platform": "p"},
                           target={"prefix": "/p", "kind": "venv", "python": "3.11"}, facts={},
                           findings=[huge] + [one] * 1_000_000))
    for fmt in ("text", "markdown", "github", "sarif"):
        # Rendering enforces no time limit, so none is asserted (how long it takes is this machine's speed):
        # that it returns, and the size below, are what is checked.
        text = render(report, fmt, RenderOptions(verbose=True))
        if fmt == "sarif":  # GitHub takes 25,000 results a run: the rest are counted in a notification
            run = json.loads(text)["runs"][0]
            assert len(run["results"]) == 25_000
            assert "975001 more findings are not in this log" in run["invocations"][0]["toolExecutionNotifications"][-1][
                "message"]["text"]
        elif fmt == "github":  # GitHub shows 50 annotations a job: 200 are written, then a count of the rest
            lines = text.splitlines()
            assert len(lines) == 202 and "999801 more findings are not annotated" in lines[-2]
            assert "title=envdoctor verdict%3A problems::packages: problem" in lines[-1]
            assert max(len(line) for line in lines) < 20_000
        else:
            assert len(text) < 200_000, (fmt, len(text))
            assert "more characters)" in text and "999990 more SPW001 findings" in text.replace(",", "")


def test_json_keeps_every_string_exact_but_writes_no_control_or_bidi_character_raw():
    report = _hostile_report()
    text = render(report, "json")
    _assert_clean(text, "json")
    back = json.loads(text)
    assert back["host"]["hostname"] == HOSTILE["rich-close"] and back["target"]["python"] == HOSTILE["bidi-isolate"]
    assert {f["evidence"]["package"] for f in back["findings"]} == set(HOSTILE.values())


def test_a_long_array_is_one_compact_element_a_line_and_reads_back_the_same():
    from envdoctor.report.json import LONG_ARRAY, dumps

    rows = [{"rule": "PKG003", "evidence": {"package": f"p{i}", "hostile": HOSTILE["osc-title"]}, "n": [i, None]}
            for i in range(LONG_ARRAY + 1)]
    # A string spelled like the placeholder (without its per-render nonce) stays the string it is.
    data = {"facts": {"deep": {"rows": rows, "short": list(range(3))}}, "findings": rows[:5],
            "spoof": "\0envdoctor-rows-0000000000000000-0\0", "other": [{"x": i} for i in range(LONG_ARRAY + 2)]}
    text = dumps(data)
    assert json.loads(text) == data
    lines = text.splitlines()
    first = lines.index('      "rows": [') + 1
    assert lines[first] == "        " + json.dumps(rows[0], ensure_ascii=False) + ","
    assert lines[first + LONG_ARRAY] == "        " + json.dumps(rows[-1], ensure_ascii=False)
    assert lines[first + LONG_ARRAY + 1] == "      ],"
    assert '    "x": 0' not in text and '    {"x": 0},' in text  # the second long array too
    assert text.count("\n") < 3 * LONG_ARRAY  # short arrays are indented as before: a few lines each
    # At the limit an array is still indented element by element, exactly as json.dumps(indent=2) writes it.
    short = {"findings": rows[:LONG_ARRAY]}
    assert dumps(short) == json.dumps(short, indent=2, ensure_ascii=False)


def test_json_escapes_del_in_ascii_text_and_leaves_plain_ascii_alone():
    from envdoctor.report.json import escape_surrogates

    assert escape_surrogates('{"a": "x\x7fy"}') == '{"a": "x\\u007fy"}'
    plain = '{"a": "only ascii"}'
    assert escape_surrogates(plain) is plain


@pytest.mark.parametrize("value", [[], {"a": 1}, 3, "bogus", None])
def test_a_severity_that_is_not_one_is_a_value_error_whatever_its_type(value):
    assert Severity.parse("WARNING") is Severity.WARNING and Severity.parse("error") is Severity.ERROR
    with pytest.raises(ValueError, match="unknown severity"):
        Severity.parse(value)
