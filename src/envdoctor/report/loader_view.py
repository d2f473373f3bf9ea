"""How the DataLoader smoke test is shown: the throughput curve and the recommendation."""
from __future__ import annotations

from typing import Any


def _runs_table_rows(loader: dict[str, Any]) -> list[tuple[str, ...]]:
    rows = []
    for run in loader.get("runs", []):
        rows.append((str(run.get("num_workers")), f"{run.get('samples_per_s', 0):.1f}",
                     f"{run.get('first_batch_s', 0):.3f}"))
    return rows


def loader_renderables(loader: dict[str, Any]) -> list[Any]:
    from rich.table import Table

    table = Table(title=f"DataLoader smoke test: {loader.get('dataset', '?')}")
    for column in ("num_workers", "samples/s", "first batch (s)"):
        table.add_column(column, justify="right")
    for row in _runs_table_rows(loader):
        table.add_row(*row)
    return [table, f"bottleneck: {loader.get('bottleneck')}  recommendation: {loader.get('recommendation')}"]


def loader_markdown(loader: dict[str, Any]) -> str:
    lines = [f"## DataLoader smoke test: {loader.get('dataset', '?')}", "",
             "| num_workers | samples/s | first batch (s) |", "|---|---|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in _runs_table_rows(loader)]
    lines += ["", f"Bottleneck: **{loader.get('bottleneck')}**; recommendation: `{loader.get('recommendation')}`"]
    return "\n".join(lines)
