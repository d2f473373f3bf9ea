"""How the DataLoader smoke test is shown: the throughput curve and the recommendation.

One table of the runs with a bar per num_workers (samples/s), the knee and
the recommendation marked, then the bottleneck with its reason, the
recommended settings with their measured gain, and what was skipped. The same
content as rich renderables (the text report, and the SVG rich exports from
it) and as Markdown (CI job summaries).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, cast

from envdoctor.facts.loader import LoaderReport, Recommendation, RunFacts

if TYPE_CHECKING:  # rich is imported where a report is drawn, not with this module
    from rich.console import RenderableType

BAR_WIDTH = 20
#: Between a figure and what it counts: a no-break space, so a wrapped line never splits them.
NO_BREAK = "\u00a0"
#: What the table's samples/s are (the recommendation's may be the paired windows' instead).
SWEEP_MEDIAN = "sweep median"
#: Under the table, wrapped as prose (a table's caption is cut at its width).
CAPTION = f"samples/s: {SWEEP_MEDIAN}; ◀ knee: the fewest workers within 95% of the best"


def _runs(loader: LoaderReport) -> list[RunFacts]:
    return sorted(loader.get("runs", []), key=lambda r: r["num_workers"])


def _bar(value: float | None, best: float, width: int = BAR_WIDTH) -> str:
    if not value or not best:
        return ""
    cells = value / best * width
    full = int(cells)
    partial = " ▏▎▍▌▋▊▉"[int((cells - full) * 8)]
    return ("█" * full + (partial if full < width else "")).rstrip()


def _fmt_rate(value: object) -> str:
    return f"{value:,.0f}" if isinstance(value, (int, float)) else "—"


def _fmt_s(value: object) -> str:
    return f"{value:.3f}" if isinstance(value, (int, float)) else "—"


def _spread(run: RunFacts) -> str:
    spread = run.get("spread")
    return f"±{spread * 50:.0f}%" if isinstance(spread, (int, float)) else "—"


def _marks(loader: LoaderReport, run: RunFacts) -> str:
    marks = []
    rec = loader.get("recommendation")
    current = loader.get("current")
    if rec is not None and rec["num_workers"] == run["num_workers"]:
        marks.append("◀ knee" if rec.get("basis") != "current" else "◀ kept")
    if current is not None and current.get("num_workers") == run["num_workers"]:
        marks.append("current")
    return ", ".join(marks)


def _rows(loader: LoaderReport) -> list[tuple[str, str, str, str, str, str]]:
    runs = _runs(loader)
    best = max((r["samples_per_s"] or 0 for r in runs), default=0)
    rows = []
    for run in runs:
        rows.append((str(run["num_workers"]), _fmt_rate(run["samples_per_s"]), _spread(run),
                     _fmt_s(run["first_batch_s"]), _bar(run["samples_per_s"], best), _marks(loader, run)))
    return rows


def settings_line(rec: Recommendation) -> str:
    parts = [f"num_workers={rec['num_workers']}"]
    if rec["num_workers"]:
        parts += [f"prefetch_factor={rec['prefetch_factor']}", f"persistent_workers={rec['persistent_workers']}"]
    parts.append(f"pin_memory={rec['pin_memory']}")
    return ", ".join(parts)


def _recommendation_line(rec: Recommendation) -> str:
    text = settings_line(rec) + f" → {_fmt_rate(rec.get('samples_per_s'))}{NO_BREAK}samples/s ({_which_median(rec)})"
    interval = rec.get("gain_interval")
    # Reports written before the paired windows (schema 1 allows them) carry no trust.
    trust = rec.get("trust")
    if trust == "incomplete" and rec.get("basis") == "current":
        return (f"keep your settings ({settings_line(rec)}): the budget ended before num_workers="
                f"{', '.join(str(n) for n in rec['unmeasured'])} could be measured; raise --budget")
    if trust in ("too-noisy", "loss"):
        verdict = "too noisy to tell" if trust == "too-noisy" else "it lost"
        text = (f"keep your settings ({settings_line(rec)}): num_workers={rec['candidate_num_workers']} was "
                f"re-measured against them in {rec['paired_windows']} paired windows and {verdict}"
                if rec.get("paired_windows") else
                f"keep your settings ({settings_line(rec)}): whether num_workers={rec['candidate_num_workers']} "
                "beats them cannot be told from one stretch of time each on CPUs other processes hold")
        if interval and rec.get("gain"):
            text += f" ({rec['gain']:.2f}×, 95% interval {interval[0]:.2f}–{interval[1]:.2f})"
        return text
    if rec.get("gain"):
        text = text[:-1] + f", {rec['gain']:.2f}× your settings"
        if interval:
            text += f", 95% interval {interval[0]:.2f}–{interval[1]:.2f} over {rec.get('paired_windows')} paired windows"
        text += ")"
    if trust == "incomplete":
        text += (f"; the budget ended before num_workers={', '.join(str(n) for n in rec['unmeasured'])} could be "
                 "measured: more may gain more (raise --budget)")
    return text


def _said_by(text: str | None, said: Mapping[str, str]) -> str | None:
    """The rule whose finding, shown above, already holds `text` word for word (the explanation, once)."""
    if not text:
        return None
    return next((rule for rule, message in said.items() if text in message), None)


def _getitem_line(loader: LoaderReport) -> str | None:
    """The main process's time a sample (and its read/decode split, its blocked share), or None unmeasured."""
    getitem = loader.get("getitem", {})
    if "per_sample_s" not in getitem:
        return None
    text = f"{getitem['per_sample_s'] * 1e3:.2f} ms a sample in the main process"
    if "read_s" in getitem and "decode_s" in getitem:
        text += f" (read {getitem['read_s'] * 1e3:.2f} ms, decode {getitem['decode_s'] * 1e3:.2f} ms)"
    blocked = getitem.get("blocked_fraction")
    if blocked is not None:
        text += f", blocked {blocked:.0%} of the time"
    return text


def _persistent_line(loader: LoaderReport) -> str | None:
    """What persistent_workers saves each epoch, measured or estimated, or None when not known."""
    persistent = loader.get("persistent", {})
    saving = persistent.get("saving_s")
    if saving is None:
        return None
    first = persistent.get("epoch2_first_batch_s", {})
    if persistent.get("measured", True) and first:
        return (f"second epoch's first batch {_fmt_s(first.get('false'))} s without, "
                f"{_fmt_s(first.get('true'))} s with persistent_workers")
    return f"about {_fmt_s(saving)} s saved each epoch (estimated from the measured start-up)"


def _summary_lines(loader: LoaderReport, said: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """(label, text) pairs shown under the curve; `said` (rule → the messages shown above) keeps an explanation
    a finding already gave from being told again."""
    said = said or {}
    lines: list[tuple[str, str]] = []
    failure = loader.get("failure")
    if failure:
        at = f" at index {failure['index']}" if failure.get("index") is not None else ""
        lines.append(("failure", f"{failure.get('kind')}{at}: {failure.get('message')}"))
    getitem = _getitem_line(loader)
    if getitem:
        lines.append(("__getitem__", getitem))
    bottleneck = loader.get("bottleneck")
    if bottleneck is not None:
        reason = loader.get("bottleneck_reason")
        told = _said_by(reason, said)
        lines.append(("bottleneck", f"{bottleneck}" + (f" — {reason}" if reason and not told else
                                                      f" ({told} above says why)" if told else "")))
    rec = loader.get("recommendation")
    if rec:
        told = "DL005" if rec.get("trust") in ("too-noisy", "loss") and "DL005" in said else None
        lines.append(("recommended", f"keep your settings ({settings_line(rec)}): DL005 above says why" if told
                      else _recommendation_line(rec)))
    if loader.get("procs_per_node", 1) > 1:
        lines.append(("cpus", f"{loader.get('usable_cpus')} usable CPU(s) per training process "
                              f"({loader.get('procs_per_node')} processes share the node)"))
    batch_bytes = loader.get("batch_bytes")
    if batch_bytes:
        from envdoctor.units import human_bytes

        text = f"{human_bytes(batch_bytes)} in {loader.get('tensors_per_batch')} tensor(s)"
        if loader.get("worker_rss_bytes"):
            text += f"; peak worker memory {human_bytes(loader['worker_rss_bytes'])}"
        lines.append(("batch", text))
    persistent = _persistent_line(loader)
    if persistent:
        lines.append(("persistent", persistent))
    for skipped in loader.get("skipped", []):
        lines.append(("skipped", f"{skipped['what']}: {skipped['reason']}"))
    return lines


def _title(loader: LoaderReport, space: str = " ") -> str:
    extra = []
    if loader.get("batch_size"):
        extra.append(f"batch_size{space}{loader.get('batch_size')}")
    start_method = loader.get("start_method")
    if start_method:
        extra.append(start_method)
    wall = loader.get("wall_s")
    if wall is not None:
        extra.append(f"{wall:.1f}{space}s")
    return f"DataLoader smoke test: {loader.get('dataset', '?')}" + (f" ({', '.join(extra)})" if extra else "")


def _which_median(rec: Recommendation) -> str:
    """What the recommendation's samples/s is: its setting's median over the paired windows when they ran,
    else the sweep's (the table's figure)."""
    return "paired median" if rec.get("paired_windows") else SWEEP_MEDIAN


def loader_renderables(report_loader: LoaderReport | dict[str, object], said: Mapping[str, str] | None = None
                       ) -> list[RenderableType]:
    """The smoke test for a rich console: the curve as a table, then the summary (`said`: see _summary_lines)."""
    loader = cast(LoaderReport, report_loader)  # the report's `loader` object: the facts and the verdict
    from rich import box
    from rich.table import Table
    from rich.text import Text

    # The title is a line of its own (wrapped by the writer, never inside a figure), not the table's.
    table = Table(expand=False, box=box.SIMPLE_HEAD)
    # A header is never cut ("first…"): each column is at least as wide as its header.
    table.add_column("workers", justify="right", no_wrap=True, min_width=len("workers"))
    table.add_column("samples/s", justify="right", no_wrap=True, min_width=len("samples/s"))
    table.add_column("±", justify="right", no_wrap=True)
    table.add_column("first s", justify="right", no_wrap=True, min_width=len("first s"))
    # At 80 columns the bar gives way (cropped), never the marks beside it.
    table.add_column("throughput", justify="left", no_wrap=True, overflow="crop")
    table.add_column("", justify="left", no_wrap=True, min_width=len("◀ knee, current"))
    chosen = loader.get("recommendation")
    rec = chosen["num_workers"] if chosen else None
    for row in _rows(loader):
        style = "bold green" if row[0] == str(rec) else None
        table.add_row(*row[:4], Text(row[4], style="green" if style else "blue"), row[5], style=style)
    out: list[RenderableType] = [Text(_title(loader, NO_BREAK), style="bold"), table, Text(CAPTION)] if loader.get("runs") \
        else []
    for label, text in _summary_lines(loader, said):
        styled = Text()
        styled.append(f"{label}: ", style="bold red" if label == "failure" else "bold")
        styled.append(text)
        out.append(styled)
    return out


def loader_markdown(report_loader: LoaderReport | dict[str, object]) -> str:
    """The smoke test as Markdown: the curve as a table with bars, then the summary as a list."""
    loader = cast(LoaderReport, report_loader)
    lines = [f"## {_title(loader)}", ""]
    if loader.get("runs"):
        lines += ["| num_workers | samples/s | spread | first batch (s) | throughput | |",
                  "|---:|---:|---:|---:|:---|:---|"]
        for row in _rows(loader):
            bar = f"`{row[4]}`" if row[4] else ""
            mark = f"**{row[5]}**" if row[5] else ""
            lines.append(f"| {row[0]} | {row[1]} | {row[2]} | {row[3]} | {bar} | {mark} |")
        lines += ["", f"samples/s: {SWEEP_MEDIAN}; ◀ knee: the fewest workers within 95% of the best throughput, "
                      "the recommendation.", ""]
    for label, text in _summary_lines(loader):
        # Dunder names in code spans: Markdown reads __getitem__ as bold "getitem".
        label = "`__getitem__`" if label == "__getitem__" else label
        text = text.replace("|", "/").replace("__getitem__", "`__getitem__`")
        lines.append(f"- **{label}**: {text}")
    return "\n".join(lines)
