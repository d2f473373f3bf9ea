"""docs/ tells the truth: a page per rule, generated from the catalog, saying what `explain` says.

The rule pages (docs/rules/<ID>.md and the table in docs/rules/index.md) are written by
scripts/update_docs.py with the renderer `envdoctor explain` uses; these tests fail when a
page drifts from the catalog, when a rule `envdoctor rules` lists has no page, and when a
link between the Markdown pages of the repository points at nothing.
"""
from __future__ import annotations

import importlib.util
import re
from html import unescape
from pathlib import Path
from types import ModuleType

import pytest

from envdoctor.catalog import load_catalog
from envdoctor.cli import main
from envdoctor.report.rule_docs import HEADINGS, render_rule_docs, rule_pages

ROOT = Path(__file__).resolve().parents[1]
RULE_DOCS = ROOT / "docs" / "rules"
REGENERATE = "run `python scripts/update_docs.py`"


def test_rule_pages_are_what_the_catalog_generates() -> None:
    expected = rule_pages(load_catalog(plugins=False))
    on_disk = {path.name: path.read_text(encoding="utf-8") for path in RULE_DOCS.glob("*.md")}
    assert sorted(on_disk) == sorted(expected), REGENERATE
    drifted = [name for name, text in expected.items() if on_disk[name] != text]
    assert not drifted, f"{', '.join(drifted)} differ from the catalog: {REGENERATE}"


def _update_docs() -> ModuleType:  # scripts/ is no package: load the generator by its path
    spec = importlib.util.spec_from_file_location("update_docs", ROOT / "scripts" / "update_docs.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_options_table_is_the_one_config_declares() -> None:
    update_docs = _update_docs()
    reference = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
    assert update_docs.with_options(reference, update_docs.options_table()) == reference, REGENERATE
    from envdoctor.config import SETTINGS

    for setting in SETTINGS:
        assert f"`{setting.flag}" in reference, setting.flag


def test_every_rule_envdoctor_rules_lists_has_a_page_headed_with_its_id(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rules"]) == 0
    listed = re.findall(r"^\s*([A-Z]{2,4}\d{3})\b", capsys.readouterr().out, re.MULTILINE)
    shipped = {meta.id for meta in load_catalog(plugins=False).rules}
    assert shipped <= set(listed)
    index = (RULE_DOCS / "index.md").read_text(encoding="utf-8")
    for rule_id in sorted(set(listed) & shipped):
        page = RULE_DOCS / f"{rule_id}.md"
        assert page.is_file(), f"{rule_id} has no page: {REGENERATE}"
        assert re.search(rf"^# {rule_id} ", page.read_text(encoding="utf-8"), re.MULTILINE), page
        assert f"[{rule_id}]({rule_id}.md)" in index


def _seen(page: str) -> str:
    """What a reader of the rendered page sees, as text (markdown-it-py comes with rich)."""
    from markdown_it import MarkdownIt

    html = MarkdownIt("commonmark").render(page)
    assert not re.search(r"<(em|a|ul|ol|h3|blockquote)\b", html), "prose rendered as markup: escape it"
    html = re.sub(r"</?(code|strong)>", "", html)  # inline: part of the word they wrap
    return unescape(re.sub(r"<[^>]+>", " ", html))


def _sections(text: str) -> dict[str, list[str]]:
    """Each doc part's words, by its heading (backquotes aside: the page renders them as code)."""
    names = "|".join(map(re.escape, HEADINGS.values()))
    parts = re.split(rf"^\s*({names})\s*$", text, flags=re.MULTILINE)
    found = dict(zip(parts[1::2], parts[2::2]))
    return {heading: found[heading].replace("`", "").split() for heading in HEADINGS.values()}


def test_explain_prints_the_words_a_reader_sees_on_the_page(capsys: pytest.CaptureFixture[str]) -> None:
    for meta in load_catalog(plugins=False).rules:
        assert main(["explain", meta.id]) == 0
        shown = capsys.readouterr().out
        assert shown.rstrip("\n") == render_rule_docs(meta, "text").rstrip("\n")
        page = render_rule_docs(meta, "markdown").split("[All rules]")[0]
        seen = _sections(_seen(page))
        for heading, words in _sections(shown).items():
            assert seen[heading] == words, f"{meta.id}: {heading}"


def test_a_code_paragraph_keeps_its_lines_in_explain_and_on_the_page() -> None:
    [spw001] = [meta for meta in load_catalog(plugins=False).rules if meta.id == "SPW001"]
    text = render_rule_docs(spw001, "text")
    assert '\n        if __name__ == "__main__":\n            main()\n' in text
    page = render_rule_docs(spw001, "markdown")
    assert '```text\ndef main():\n' in page and '\nif __name__ == "__main__":\n    main()\n```' in page
    # Prose is escaped so Markdown shows it as written (`__getitem__` is not bold, `[0]` no link).
    [dl002] = [meta for meta in load_catalog(plugins=False).rules if meta.id == "DL002"]
    assert r"\_\_getitem\_\_" in render_rule_docs(dl002, "markdown")


_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    headings = re.findall(r"^#+ (.+)$", re.sub(r"```.*?```", "", markdown, flags=re.DOTALL), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}


def test_links_between_the_pages_point_at_files_and_headings_that_exist() -> None:
    pages = [ROOT / "README.md", *ROOT.glob("*.md"), *(ROOT / "docs").rglob("*.md")]
    broken = []
    for page in sorted(set(pages)):
        for target in _LINK.findall(page.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target):
                continue  # a URL
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            if not resolved.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
            elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved.read_text(encoding="utf-8")):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, broken


def test_no_page_holds_a_merge_conflict() -> None:
    pages = [*ROOT.glob("*.md"), *(ROOT / "docs").rglob("*.md")]
    marked = [str(page.relative_to(ROOT)) for page in pages
              if re.search(r"^(<{7} |>{7} |={7}$)", page.read_text(encoding="utf-8"), re.MULTILINE)]
    assert not marked, f"conflict markers left in {marked}"
