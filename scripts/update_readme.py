"""Regenerate the rule table in README.md from the catalog (catalog/*.toml).

Run after changing the catalog: `python scripts/update_readme.py`.
tests/test_readme.py fails while README and catalog disagree.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

START, END = "<!-- rules:start -->", "<!-- rules:end -->"
README = Path(__file__).resolve().parents[1] / "README.md"


def table() -> str:
    from envdoctor.catalog import load_catalog, rule_table_markdown

    return rule_table_markdown(load_catalog(plugins=False))


def with_table(text: str, rendered: str) -> str:
    pattern = re.compile(re.escape(START) + r".*?" + re.escape(END), re.DOTALL)
    if not pattern.search(text):
        raise SystemExit(f"README.md has no {START} … {END} block")
    return pattern.sub(lambda _: f"{START}\n{rendered}\n{END}", text)


if __name__ == "__main__":
    README.write_text(with_table(README.read_text(encoding="utf-8"), table()), encoding="utf-8")
    sys.stdout.write("README.md rule table updated\n")
