"""Regenerate the parts of docs/ that are made from code: the rule pages and the options table.

Run after changing the catalog (catalog/*.toml) or a setting (envdoctor.config.Config):
`python scripts/update_docs.py`. It writes docs/rules/<ID>.md for every shipped rule and
the table in docs/rules/index.md (removing the page of a rule the catalog no longer has),
and the table of options between the `options` markers in docs/reference.md. A rule's
page is the text `envdoctor explain ID` prints (both come from envdoctor.report.rule_docs).
tests/test_docs.py fails while docs/ and the code disagree.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RULE_DOCS = ROOT / "docs" / "rules"
REFERENCE = ROOT / "docs" / "reference.md"
OPTIONS_START, OPTIONS_END = "<!-- options:start -->", "<!-- options:end -->"


def options_table() -> str:
    """Every setting of the checking commands, from its one declaration in Config, grouped as --help groups them."""
    from envdoctor.config import SETTINGS

    lines = ["| option | `[tool.envdoctor]` key | default | what it does |", "|---|---|---|---|"]
    groups = list(dict.fromkeys(setting.group for setting in SETTINGS))
    for group in groups:
        lines.append(f"| ***{group}*** | | | |")
        for s in (setting for setting in SETTINGS if setting.group == group):
            value = "{" + ",".join(s.choices) + "}" if s.choices else s.metavar
            if s.kind in ("rules", "severity"):
                value = f"{value} ..."  # one or more, with commas or spaces
            option = ", ".join(f"`{flag}{' ' + value if value else ''}`" for flag in s.flags)
            option += "".join(f" (`{flag}`: `{s.flag} {const}`)" for flag, const in s.shortcuts.items())
            key = f"`{s.pyproject_key}`" if s.in_pyproject else "flag only"
            lines.append(f"| {option} | {key} | {_default(s.kind, s.default)} | {s.help.replace('|', chr(92) + '|')} |")
    return "\n".join(lines)


def _default(kind: str, default: object) -> str:
    if kind == "switch":
        return "off"
    if default in (None, (), {}):
        return ""
    if isinstance(default, float) and default.is_integer():
        default = int(default)
    return f"`{default}`"


def with_options(text: str, table: str) -> str:
    pattern = re.compile(re.escape(OPTIONS_START) + r".*?" + re.escape(OPTIONS_END), re.DOTALL)
    if not pattern.search(text):
        raise SystemExit(f"{REFERENCE.relative_to(ROOT)} has no {OPTIONS_START} … {OPTIONS_END} block")
    return pattern.sub(lambda _: f"{OPTIONS_START}\n{table}\n{OPTIONS_END}", text)


def main() -> int:
    from envdoctor.catalog import load_catalog
    from envdoctor.report.rule_docs import rule_pages

    RULE_DOCS.mkdir(parents=True, exist_ok=True)
    pages = rule_pages(load_catalog(plugins=False))
    changed = 0
    for name, text in pages.items():
        path = RULE_DOCS / name
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            changed += 1
    stale = [path for path in RULE_DOCS.glob("*.md") if path.name not in pages]
    for path in stale:
        path.unlink()
    reference = REFERENCE.read_text(encoding="utf-8")
    REFERENCE.write_text(with_options(reference, options_table()), encoding="utf-8")
    sys.stdout.write(f"docs/rules: {len(pages)} pages, {changed} written, {len(stale)} removed; "
                     f"{REFERENCE.relative_to(ROOT)}: options table\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
