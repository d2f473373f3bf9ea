"""Regenerate the rule pages in docs/rules/ from the catalog (catalog/*.toml).

Run after changing the catalog: `python scripts/update_docs.py`. It writes
docs/rules/<ID>.md for every shipped rule and the table in docs/rules/index.md,
and removes the page of a rule the catalog no longer has. The text is what
`envdoctor explain ID` prints (both come from `envdoctor.report.rule_docs`);
tests/test_docs.py fails while docs/rules/ and the catalog disagree.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    from envdoctor.catalog import load_catalog
    from envdoctor.report.rule_docs import rule_pages

    folder = ROOT / "docs" / "rules"
    folder.mkdir(parents=True, exist_ok=True)
    pages = rule_pages(load_catalog(plugins=False))
    changed = 0
    for name, text in pages.items():
        path = folder / name
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            changed += 1
    stale = [path for path in folder.glob("*.md") if path.name not in pages]
    for path in stale:
        path.unlink()
    sys.stdout.write(f"docs/rules: {len(pages)} pages, {changed} written, {len(stale)} removed\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
