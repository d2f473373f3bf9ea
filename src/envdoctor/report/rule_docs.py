"""A rule's docs, rendered once for the two places people read them.

`envdoctor explain RULE` prints the text form; `scripts/update_docs.py` writes the
Markdown form to `docs/rules/<ID>.md`, and the rule table to `docs/rules/index.md`.
Both forms come from the same blocks of the catalog entry (`render_rule_docs`), so
the page and the terminal say the same words; `tests/test_docs.py` fails when the
pages in docs/ drift from the catalog.

A doc part is paragraphs separated by blank lines. A paragraph whose lines are all
indented by four spaces is code and keeps its lines (the fix of SPW001 shows the
guard to write); other paragraphs are prose and are re-flowed. The example part is
verbatim as a whole: it is what a terminal shows.
"""
from __future__ import annotations

import re
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from envdoctor.catalog import DOC_PARTS, Catalog, RuleMeta

HEADINGS = {"what": "What it checks", "why": "Why it matters", "example": "Example", "fix": "Fix"}
#: `explain`'s width when it does not print to a terminal (and the MCP tool's).
WIDTH = 80
INDENT = "    "

Style = Literal["text", "markdown"]


@dataclass(frozen=True)
class Block:
    """A paragraph of prose (words, re-flowed) or of code (lines kept)."""

    code: bool
    text: str


def doc_blocks(body: str, verbatim: bool = False) -> list[Block]:
    """The blocks of one doc part, in order; neighbouring code paragraphs are one listing."""
    if verbatim:
        return [Block(code=True, text=body.strip("\n"))]
    blocks: list[Block] = []
    raw_code: list[str] = []
    for para in re.split(r"\n[ \t]*\n", body.strip("\n")):
        if all(line.startswith(INDENT) for line in para.splitlines() if line.strip()):
            raw_code.append(para)
            continue
        if raw_code:
            blocks.append(Block(code=True, text=textwrap.dedent("\n\n".join(raw_code))))
            raw_code = []
        blocks.append(Block(code=False, text=" ".join(para.split())))
    if raw_code:
        blocks.append(Block(code=True, text=textwrap.dedent("\n\n".join(raw_code))))
    return blocks


def render_rule_docs(meta: RuleMeta, style: Style = "text", width: int = WIDTH) -> str:
    """One rule's docs: `envdoctor explain`'s text (prose filled to `width` columns), or its page in docs/rules/."""
    summary = " ".join(meta.summary.split())
    sections = [(HEADINGS[part], doc_blocks(meta.docs()[part], verbatim=part == "example")) for part in DOC_PARTS]
    if style == "markdown":
        return _markdown(meta, summary, sections)
    out = [f"{meta.id} {meta.name} (default severity: {meta.severity.value})", "", _fill(summary, "", width), ""]
    for heading, blocks in sections:
        out.append(heading)
        for i, block in enumerate(blocks):
            if i:
                out.append("")
            if block.code:
                prefix = INDENT if heading == HEADINGS["example"] else INDENT * 2
                out += [(prefix + line).rstrip() for line in block.text.splitlines()]
            else:
                out.append(_fill(block.text, INDENT, width))
        out.append("")
    return "\n".join(out)


def _fill(text: str, indent: str, width: int = WIDTH) -> str:
    # Never inside a word: a kebab-case name or a path in a code span stays on one line.
    return textwrap.fill(text, width, initial_indent=indent, subsequent_indent=indent,
                         break_on_hyphens=False, break_long_words=False)


def _markdown(meta: RuleMeta, summary: str, sections: Iterable[tuple[str, list[Block]]]) -> str:
    out = [f"# {meta.id} {meta.name}", "",
           f"Default severity: **{meta.severity.value}** · `envdoctor explain {meta.id}` prints this page.", "",
           f"Fires when {markdown_prose(summary)}.", ""]
    for heading, blocks in sections:
        out += [f"## {heading}", ""]
        for block in blocks:
            if block.code:
                out += ["```text", block.text, "```", ""]
            else:
                out += [markdown_prose(block.text), ""]
    out += ["[All rules](index.md)", ""]
    return "\n".join(out)


GENERATED = "<!-- Generated from catalog/{source} by scripts/update_docs.py: edit the catalog, then run it. -->"

INDEX_INTRO = """\
# Rules

Every rule envdoctor ships: its id (stable, a family prefix and three digits), its
kebab-case name, its default severity (`--severity RULE=LEVEL` changes it) and when it
fires. `--select` and `--ignore` take ids, names or families (`SYS`). Each page holds the
rule's docs — what it checks, why it matters, an example, the fix — exactly as
`envdoctor explain RULE` prints them. What each family reads is told in
[What the checks read](../checks.md), the smoke test behind the DL rules in
[The DataLoader smoke test](../smoke-test.md), and the FLT rules, which compare several
machines, in [Clusters](../clusters.md).

Rules from other packages (the `envdoctor.rules` entry-point group, see
[CONTRIBUTING.md](../../CONTRIBUTING.md#rules-from-other-packages)) are listed by
`envdoctor rules` too, and have no page here.
"""


def shipped(catalog: Catalog) -> list[RuleMeta]:
    """The rules envdoctor ships (plugins have no page in its docs)."""
    return [meta for meta in catalog.rules if not meta.origin.startswith("plugin")]


def rule_table_markdown(catalog: Catalog) -> str:
    """The rule table: id (linked to its page), name, default severity, when it fires."""
    lines = ["| id | name | default | fires when |", "|---|---|---|---|"]
    for meta in shipped(catalog):
        summary = " ".join(meta.summary.split()).replace("|", "\\|")
        lines.append(f"| [{meta.id}]({meta.id}.md) | {meta.name} | {meta.severity.value} | {summary} |")
    return "\n".join(lines)


def rule_pages(catalog: Catalog) -> dict[str, str]:
    """Every file of docs/rules/ by name: one page per shipped rule, and index.md."""
    pages = {f"{meta.id}.md": GENERATED.format(source=meta.origin) + "\n" + render_rule_docs(meta, "markdown")
             for meta in shipped(catalog)}
    pages["index.md"] = "\n".join([GENERATED.format(source="*.toml"), INDEX_INTRO, rule_table_markdown(catalog), ""])
    return pages


_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.DOTALL)
#: Markup characters outside code spans; an underscore inside a word (num_workers) is no markup in GFM.
_SPECIAL = re.compile(r"([\\*<>\[\]|]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")


def markdown_prose(text: str) -> str:
    """Prose as Markdown that shows the same characters: code spans kept, markup escaped."""
    out, last = [], 0
    for match in _CODE_SPAN.finditer(text):
        out += [_SPECIAL.sub(r"\\\1", text[last:match.start()]), match.group(0)]
        last = match.end()
    out.append(_SPECIAL.sub(r"\\\1", text[last:]))
    escaped = "".join(out)
    # A paragraph that opens like a heading, a list or a quote is still a paragraph.
    escaped = re.sub(r"^(\d+)([.)]\s)", r"\1\\\2", escaped)
    return re.sub(r"^(#|[-+]\s)", r"\\\1", escaped)
