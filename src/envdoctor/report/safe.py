"""Strings from outside, made safe to show: no control characters, bounded length.

File names, package names, evidence and the strings of compared reports come
from the inspected machine or from other people's files. Written raw, an ESC
sequence clears the reader's terminal or sets its title, an OSC 8 sequence
plants a link, a bidi override reorders what the reader sees, and a 10 MiB
string makes the report unreadable. Every formatter passes such strings
through `printable` (one line) or `printable_block` (newlines kept) before it
writes them; the escapes are visible (`\\x1b`, `\\u202e`) so nothing is hidden
either. Markup (rich's `[bold]`, Markdown, HTML) is each format's own concern.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from envdoctor.model import Report

#: The longest string any human format shows whole; longer ones are cut with a note.
MAX_CHARS = 2000
#: Items of one list or table shown before "… N more".
MAX_ITEMS = 50

# C0 controls, DEL, C1 controls; the bidi embeddings, overrides, isolates and marks;
# line/paragraph separators; zero-width characters that hide text; BOM; lone surrogates.
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ud800-\udfff]"
)
_UNSAFE_BUT_NEWLINE = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ud800-\udfff]"
)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def clip(text: str, limit: int = MAX_CHARS) -> str:
    """`text` cut to `limit` characters, with a note saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit:,} more characters)"


def printable(value: object, limit: int = MAX_CHARS) -> str:
    """One line to show: control and invisible characters escaped, newlines too, cut at `limit`."""
    text = value if isinstance(value, str) else str(value)
    # Cut before escaping, so a 10 MiB string costs no more than a short one.
    text = clip(text, limit)
    text = text.replace("\r\n", "\n").replace("\n", " ⏎ ").replace("\t", " ")
    return _UNSAFE.sub(_escape, text)


def printable_block(value: object, limit: int = MAX_CHARS) -> str:
    """Several lines to show (a fix, a message): newlines kept, every other control escaped."""
    text = value if isinstance(value, str) else str(value)
    text = clip(text, limit).replace("\r\n", "\n").replace("\t", "    ")
    return _UNSAFE_BUT_NEWLINE.sub(_escape, text)


def has_unsafe(text: str) -> bool:
    """Whether `text` holds a character `printable` would escape (tests use it on every format)."""
    return _UNSAFE_BUT_NEWLINE.search(text) is not None


def clean_tree(value: object, depth: int = 0, limit: int = MAX_CHARS,
               clean: Callable[[str], str] | None = None) -> Any:
    """A copy of a JSON-like tree with every string (keys too) made printable and every list cut.

    For views that draw nested data they did not make (the loader table, the
    fleet view): they get the same content, minus what a terminal would obey.
    `clean` replaces `printable_block` for values (Markdown escapes them too).
    """
    if isinstance(value, str):
        return clean(value) if clean else printable_block(value, limit)
    if depth > 12:
        return "…"
    if isinstance(value, Mapping):
        items = list(value.items())[:MAX_ITEMS * 20]
        return {printable(k, 200): clean_tree(v, depth + 1, limit, clean) for k, v in items}
    if isinstance(value, (list, tuple)):
        return [clean_tree(v, depth + 1, limit, clean) for v in value[:MAX_ITEMS * 20]]
    return value


def clean_report(report: Report, clean: Callable[[str], str] | None = None) -> Report:
    """A copy of a report for views that draw it whole (the fleet view): every string cleaned, lists cut."""
    def text(value: str) -> str:
        return clean(value) if clean else printable_block(value)

    findings = [
        replace(f, name=printable(f.name, 80), message=text(f.message), fix=text(f.fix),
                evidence=clean_tree(dict(f.evidence), clean=clean),
                location=replace(f.location, path=printable(f.location.path, 500)) if f.location else None)
        for f in report.findings[:MAX_ITEMS * 20]
    ]
    return replace(report, findings=findings, facts=clean_tree(report.facts, clean=clean),
                   host=clean_tree(report.host, clean=clean), tool=clean_tree(report.tool, clean=clean),
                   target=clean_tree(report.target, clean=clean), errors=clean_tree(report.errors, clean=clean))
