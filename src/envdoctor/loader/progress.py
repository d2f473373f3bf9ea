"""The live progress display of the loader stage: what runs now, what each run measured.

The loader probe reports its runner's events to the sink installed here;
the command line installs a rich display on standard error while a text
report is being made for a terminal, and nothing is shown otherwise (JSON
output, CI logs, preflight).
"""
from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import IO

ProgressSink = Callable[[dict[str, object]], None]

_sink: ProgressSink | None = None


def current_sink() -> ProgressSink | None:
    return _sink


def describe(event: dict[str, object]) -> str | None:
    """One line for a runner event, or None when the event is not worth showing."""
    kind = event.get("ev")
    if kind == "phase":
        name = event.get("name")
        if name == "run":
            label = event.get("label")
            return f"timing num_workers={event.get('num_workers')}" + (f" ({label})" if label else "")
        return {
            "import": "importing torch in the target interpreter",
            "build": "building the dataset",
            "pickle": "checking that the dataset pickles",
            "getitem": "timing __getitem__ in the main process",
            "collate": "collating one batch",
            "paired": f"re-measuring num_workers={event.get('num_workers')} against yours in paired windows",
            "duplicates": "counting repeated samples across workers",
            "rng": "checking that workers draw different random values",
        }.get(str(name), str(name))
    if kind == "result" and event.get("key") == "run":
        run = event.get("value")
        run = run if isinstance(run, dict) else {}
        rate = run.get("samples_per_s")
        return f"num_workers={run.get('num_workers')}: " + (f"{rate:,.0f} samples/s" if rate else "no steady state")
    if kind == "failure":
        failure = event.get("value")
        return "the dataset failed: " + str(failure.get("message", "") if isinstance(failure, dict) else "")
    return None


@contextlib.contextmanager
def showing_progress(budget_s: float, stream: IO[str] | None = None) -> Iterator[None]:
    """Show the loader stage on a rich progress bar (standard error) while the block runs."""
    global _sink
    from rich.console import Console
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    console = Console(file=stream or sys.stderr)
    if not console.is_terminal:
        yield
        return
    progress = Progress(SpinnerColumn(), TextColumn("[bold]loader[/bold] {task.description}"), BarColumn(),
                        TimeElapsedColumn(), console=console, transient=True)
    task = progress.add_task("waiting", total=None, visible=False)
    measured: list[str] = []

    def sink(event: dict[str, object]) -> None:
        line = describe(event)
        if line is None:
            return
        if event.get("ev") == "result":
            measured.append(line)
            progress.console.print(f"  [dim]loader[/dim] {line}")
            return
        progress.update(task, description=line, visible=True)

    previous = _sink
    _sink = sink
    try:
        with progress:
            yield
    finally:
        _sink = previous
