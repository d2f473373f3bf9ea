"""Markdown for $GITHUB_STEP_SUMMARY, checked by rendering it with a CommonMark parser (markdown-it, tables on).

HTML is left enabled in the parser, as GitHub leaves `<details>` working, so
any raw HTML that slipped through from a file or package name would show up.
"""
from __future__ import annotations

import html

from markdown_it import MarkdownIt

from envdoctor.model import Finding, Location, Report, Severity
from envdoctor.report.markdown import code_span, render
from envdoctor.verdict import settle
from reportfixtures import SCRIPTS, loader_section, make_train_repo
from support import run_envdoctor


def to_html(text: str) -> str:
    return MarkdownIt("commonmark").enable("table").render(text)


def _report(findings: list[Finding], **changes) -> Report:
    base = dict(tool={"name": "envdoctor", "version": "0.1.0"}, generated_at="2026-11-29T21:00:00Z",
                host={"hostname": "h", "platform": "linux-64"},
                target={"prefix": "/opt/env", "kind": "conda", "python": "3.11.7"}, facts={}, findings=findings,
                checked=["SPW001", "SYS001"])
    return settle(Report(**{**base, **changes}))


def test_main_guard_renders_as_code_fixes_as_code_blocks_evidence_in_details(tmp_path):
    repo = make_train_repo(tmp_path / "repo")
    proc = run_envdoctor("check", "--no-loader", "--select", "SPW001,SYS001", "--format", "markdown", *SCRIPTS,
                         cwd=str(repo), prefix_cmd=["prlimit", "--nofile=256:4096"])
    assert proc.returncode == 1, proc.stderr
    page = to_html(proc.stdout)
    assert "<code>if __name__ == &quot;__main__&quot;:</code>" in page
    assert "<strong>name</strong>" not in page and "<strong>main</strong>" not in page
    # Each multi-line fix is one code block, its lines kept.
    assert ('<pre><code>Call `main()` (line 11) only from a new `if __name__ == &quot;__main__&quot;:` block at '
            'the end of the file:\n    if __name__ == &quot;__main__&quot;:\n        main()\n') in page
    assert page.count("<pre><code>ulimit -n 4096") == 1
    assert page.count("<details><summary>Evidence</summary>") == 2
    assert "<pre><code class=\"language-text\">soft_limit: 256\n" in page
    # The checklist is a table, and the files are code.
    assert "<td>limits</td>" in page and "<td>scripts</td>" in page
    assert "<code>train/a.py:8:1</code>" in page


def test_pipes_newlines_and_html_from_outside_never_become_markup():
    evil = 'x|y\n<script>alert(1)</script> **bold** [link](http://e.vil) <img src=x onerror=alert(1)>'
    finding = Finding(rule="PKG002", name="duplicate-distribution", severity=Severity.ERROR,
                      message=f"two copies of {evil}", evidence={"package": evil},
                      fix=f"pip uninstall {evil}\n```\n<b>not closed</b>",
                      location=Location(f"dir|{evil}.py", 2, 1))
    report = _report([finding], errors=[{"probe": "storage", "message": evil}],
                     loader=loader_section(dataset=evil, skipped=[{"what": evil, "reason": evil}]))
    text = render(report)
    page = to_html(text)
    for tag in ("<script", "<img", "<b>", "<a ", "<strong>bold"):
        assert tag not in page, tag
    assert "\x1b" not in text
    # The checklist table keeps one row per area: no stray | or newline split it.
    checklist = page.split("<tbody>")[1].split("</tbody>")[0]
    assert checklist.count("<tr>") == 7 and all(row.count("<td>") == 2 for row in checklist.split("<tr>")[1:])
    # What the reader sees is the text itself, escaped, not lost.
    assert html.escape("<script>alert(1)</script>", quote=True) in page or "&lt;script&gt;" in page
    assert "pip uninstall x|y" in page  # inside the fix's code block, verbatim


def test_code_span_holds_backticks_and_pipes():
    span = code_span("a `b` c|d")
    page = to_html(f"| h |\n|---|\n| {span} |")
    assert "<code>a `b` c∣d</code>" in page and page.count("<td>") == 1
