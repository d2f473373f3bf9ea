"""The text view of `envdoctor run`: one screen — the share of each step that waits for data as a bar,
the numbers behind it, the loader's settings, the CPU and GPU inside the window, a line per rank.

It renders the report's `loop` object (decided by `envdoctor.judge.loop`); the verdict and the
fix are DL009's finding, drawn below by the text report like every other finding.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from envdoctor.report.safe import printable

BAR_WIDTH = 20
#: Ranks listed one a line before the rest are summarised.
RANK_LIMIT = 8


def share_bar(share: float, width: int = BAR_WIDTH) -> str:
    filled = max(0, min(width, round(share * width)))
    return "█" * filled + "░" * (width - filled)


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    return f"{seconds * 1000:.1f} ms" if seconds < 10 else f"{seconds:.1f} s"


def settings_text(settings: Mapping[str, Any] | None) -> str:
    if not settings:
        return "?"
    keys = ("num_workers", "batch_size", "prefetch_factor", "pin_memory", "persistent_workers", "start_method")
    shown = " ".join(f"{key}={printable(settings[key], 40)}" for key in keys
                     if key in settings and settings[key] is not None)
    dataset = printable(settings.get("dataset") or "", 80)
    return f"{dataset}: {shown}" if dataset else shown


# complexity: 23 — one line per optional part of the loop's summary, each printed only when measured.
def loop_lines(loop: Mapping[str, Any]) -> list[tuple[int, str]]:
    """(indent, text) lines of the loop summary."""
    command = " ".join(printable(arg, 200) for arg in loop.get("command") or [])
    lines: list[tuple[int, str]] = [(0, f"envdoctor run — {printable(command, 300)}")]
    share = loop.get("data_wait_share")
    if share is None:
        lines.append((2, f"nothing measured ({printable(loop.get('outcome'), 40)})"))
        return lines
    verdict = "waits for data" if loop.get("waits_for_data") else "keeps up"
    lines.append((2, f"data wait  {share_bar(share)}  {share:.0%} of each step: {verdict}"))
    lines.append((13, f"{_ms(loop.get('wait_s'))} waiting + {_ms(loop.get('step_s'))} computing a step"))
    lines.append((13, f"{loop.get('batches_per_s') or 0:.1f} batches/s over {loop.get('steps')} steps "
                      f"(DL009 from {loop.get('threshold', 0.1):.0%})"))
    lines.append((2, f"loader     {settings_text(loop.get('settings'))}"))
    cpu = loop.get("cpu")
    if cpu:
        machine = cpu.get("machine_busy_share")
        threads = loop.get("intra_op_threads")
        lines.append((2, f"CPU        {cpu['busy_share']:.0%} of {cpu['usable_cpus']} usable CPUs busy "
                         f"({cpu['processes']} processes)"
                         + (f"; machine {machine:.0%} busy" if machine is not None else "")
                         + (f"; {threads} intra-op threads" if threads else "")))
    cuda = loop.get("cuda")
    if cuda and cuda.get("devices"):
        for device in cuda["devices"][:RANK_LIMIT]:
            util = device.get("util_mean")
            used = device.get("memory_used_bytes")
            lines.append((2, f"GPU {device.get('index')}      {printable(device.get('name') or '', 60)} "
                             f"{'?' if util is None else f'{util:.0f}%'} busy"
                             + (f", {used / 2**30:.1f} GiB used" if used else "")))
    else:
        lines.append((2, "GPU        none seen by NVML"))
    processes = loop.get("processes") or []
    if len(processes) > 1:
        for row in processes[:RANK_LIMIT]:
            who = f"rank {row['rank']}" if row.get("rank") is not None else f"pid {row['pid']}"
            row_share = row.get("data_wait_share")
            lines.append((2, f"{who:<10} {share_bar(row_share or 0, 20)}  "
                             f"{'?' if row_share is None else f'{row_share:.0%}'}, "
                             f"{row.get('batches_per_s') or 0:.1f} batches/s ({row.get('steps')} steps)"))
        if len(processes) > RANK_LIMIT:
            lines.append((2, f"… {len(processes) - RANK_LIMIT} more processes (see --format json)"))
    return lines
