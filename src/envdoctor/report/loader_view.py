"""How the DataLoader smoke test is shown: the throughput curve and the recommendation.

One table of the runs with a bar per num_workers (samples/s), the knee and
the recommendation marked, then the bottleneck with its reason, the
recommended settings with their measured gain, and what was skipped. The same
content as rich renderables (the text report, and the SVG rich exports from
it) and as Markdown (CI job summaries).
"""
from __future__ import annotations

from typing import Any

BAR_WIDTH = 20


def _runs(loader: dict[str, Any]) -> list[dict[str, Any]]:
    return sorted(loader.get("runs") or [], key=lambda r: r.get("num_workers", 0))


def _bar(value: float | None, best: float, width: int = BAR_WIDTH) -> str:
    if not value or not best:
        return ""
    cells = value / best * width
    full = int(cells)
    partial = " ▏▎▍▌▋▊▉"[int((cells - full) * 8)]
    return ("█" * full + (partial if full < width else "")).rstrip()


def _fmt_rate(value: Any) -> str:
    return f"{value:,.0f}" if isinstance(value, (int, float)) else "—"


def _fmt_s(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, (int, float)) else "—"


def _spread(run: dict[str, Any]) -> str:
    spread = run.get("spread")
    return f"±{spread * 50:.0f}%" if isinstance(spread, (int, float)) else "—"


def _marks(loader: dict[str, Any], run: dict[str, Any]) -> str:
    marks = []
    rec = loader.get("recommendation") or {}
    current = loader.get("current") or {}
    if rec.get("num_workers") == run.get("num_workers"):
        marks.append("◀ knee")
    if current.get("num_workers") == run.get("num_workers"):
        marks.append("current")
    return ", ".join(marks)


def _rows(loader: dict[str, Any]) -> list[tuple[str, ...]]:
    runs = _runs(loader)
    best = max((r.get("samples_per_s") or 0 for r in runs), default=0)
    rows = []
    for run in runs:
        rows.append((str(run.get("num_workers")), _fmt_rate(run.get("samples_per_s")), _spread(run),
                     _fmt_s(run.get("first_batch_s")), _bar(run.get("samples_per_s"), best), _marks(loader, run)))
    return rows


def settings_line(rec: dict[str, Any]) -> str:
    parts = [f"num_workers={rec['num_workers']}"]
    if rec.get("num_workers"):
        parts += [f"prefetch_factor={rec.get('prefetch_factor')}", f"persistent_workers={rec.get('persistent_workers')}"]
    parts.append(f"pin_memory={rec.get('pin_memory')}")
    return ", ".join(parts)


def _summary_lines(loader: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, text) pairs shown under the curve."""
    lines: list[tuple[str, str]] = []
    failure = loader.get("failure")
    if failure:
        at = f" at index {failure['index']}" if failure.get("index") is not None else ""
        lines.append(("failure", f"{failure.get('kind')}{at}: {failure.get('message')}"))
    getitem = loader.get("getitem") or {}
    if getitem.get("per_sample_s") is not None:
        text = f"{getitem['per_sample_s'] * 1e3:.2f} ms a sample in the main process"
        if getitem.get("read_s") is not None:
            text += f" (read {getitem['read_s'] * 1e3:.2f} ms, decode {getitem['decode_s'] * 1e3:.2f} ms)"
        if getitem.get("blocked_fraction") is not None:
            text += f", blocked {getitem['blocked_fraction']:.0%} of the time"
        lines.append(("__getitem__", text))
    if loader.get("bottleneck") is not None:
        reason = loader.get("bottleneck_reason")
        lines.append(("bottleneck", f"{loader['bottleneck']}" + (f" — {reason}" if reason else "")))
    rec = loader.get("recommendation")
    if rec:
        gain = rec.get("gain")
        text = settings_line(rec) + f" → {_fmt_rate(rec.get('samples_per_s'))} samples/s"
        if gain:
            text += f" ({gain:.2f}× your settings)"
        lines.append(("recommended", text))
    if loader.get("batch_bytes"):
        from envdoctor.units import human_bytes

        text = f"{human_bytes(loader['batch_bytes'])} in {loader.get('tensors_per_batch')} tensor(s)"
        if loader.get("worker_rss_bytes"):
            text += f"; peak worker memory {human_bytes(loader['worker_rss_bytes'])}"
        lines.append(("batch", text))
    persistent = loader.get("persistent") or {}
    if persistent.get("saving_s") is not None:
        first = persistent.get("epoch2_first_batch_s") or {}
        if persistent.get("measured", True) and first:
            lines.append(("persistent", f"second epoch's first batch {_fmt_s(first.get('false'))} s without, "
                                        f"{_fmt_s(first.get('true'))} s with persistent_workers"))
        else:
            lines.append(("persistent", f"about {_fmt_s(persistent['saving_s'])} s saved each epoch "
                                        "(estimated from the measured start-up)"))
    for skipped in loader.get("skipped") or []:
        lines.append(("skipped", f"{skipped.get('what')}: {skipped.get('reason')}"))
    return lines


def _title(loader: dict[str, Any]) -> str:
    extra = []
    if loader.get("batch_size"):
        extra.append(f"batch_size {loader['batch_size']}")
    if loader.get("start_method"):
        extra.append(loader["start_method"])
    if loader.get("wall_s") is not None:
        extra.append(f"{loader['wall_s']:.1f} s")
    return f"DataLoader smoke test: {loader.get('dataset', '?')}" + (f" ({', '.join(extra)})" if extra else "")


def loader_renderables(loader: dict[str, Any]) -> list[Any]:
    """The smoke test for a rich console: the curve as a table, then the summary."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    table = Table(title=_title(loader), title_justify="left", expand=False, box=box.SIMPLE_HEAD,
                  caption="◀ knee: the fewest workers within 95% of the best, the recommendation",
                  caption_justify="left")
    table.add_column("workers", justify="right", no_wrap=True)
    table.add_column("samples/s", justify="right", no_wrap=True)
    table.add_column("±", justify="right", no_wrap=True)
    table.add_column("first s", justify="right", no_wrap=True)
    table.add_column("throughput", justify="left", no_wrap=True)
    table.add_column("", justify="left", no_wrap=True)
    rec = (loader.get("recommendation") or {}).get("num_workers")
    for row in _rows(loader):
        style = "bold green" if row[0] == str(rec) else None
        table.add_row(*row[:4], Text(row[4], style="green" if style else "blue"), row[5], style=style)
    out: list[Any] = [table] if loader.get("runs") else []
    for label, text in _summary_lines(loader):
        styled = Text()
        styled.append(f"{label}: ", style="bold red" if label == "failure" else "bold")
        styled.append(text)
        out.append(styled)
    return out


def loader_markdown(loader: dict[str, Any]) -> str:
    """The smoke test as Markdown: the curve as a table with bars, then the summary as a list."""
    lines = [f"## {_title(loader)}", ""]
    if loader.get("runs"):
        lines += ["| num_workers | samples/s | spread | first batch (s) | throughput | |",
                  "|---:|---:|---:|---:|:---|:---|"]
        for row in _rows(loader):
            bar = f"`{row[4]}`" if row[4] else ""
            mark = f"**{row[5]}**" if row[5] else ""
            lines.append(f"| {row[0]} | {row[1]} | {row[2]} | {row[3]} | {bar} | {mark} |")
        lines += ["", "◀ knee: the fewest workers within 95% of the best throughput, the recommendation.", ""]
    for label, text in _summary_lines(loader):
        # Dunder names in code spans: Markdown reads __getitem__ as bold "getitem".
        label = "`__getitem__`" if label == "__getitem__" else label
        text = text.replace("|", "/").replace("__getitem__", "`__getitem__`")
        lines.append(f"- **{label}**: {text}")
    return "\n".join(lines)
