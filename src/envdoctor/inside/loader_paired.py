"""The candidate setting re-measured against the user's own in interleaved, paired windows.

Part of the standalone runner (see loader_runner.py). One sweep point is one
stretch of time; a busy neighbour that takes the CPUs during one point and
not another makes a gain out of nothing. So the setting the sweep points to
(the knee, by the rule in loader_knee.py that envdoctor imports too) and the user's
own setting are both kept running, and timed in alternating windows — current
then candidate, candidate then current, … — so a neighbour slows both sides of
a pair alike. The runner reports the windows; envdoctor computes the gain's
interval and decides (envdoctor/judge/loader.py).
"""
from __future__ import annotations

import time
from collections.abc import Iterator

from loader_knee import MIN_PAIRS, recommended
from loader_session import Session
from loader_timing import samples_in, set_timeout, shutdown

#: Pairs of windows wanted (MIN_PAIRS, in loader_knee.py, are the fewest that give an interval).
PAIRS = 5
#: Window length bounds, seconds.
MIN_WINDOW_S = 0.25
MAX_WINDOW_S = 0.8


def candidate(s: Session) -> int | None:
    """The worker count envdoctor will recommend from the sweep: the same `loader_knee.recommended` the judge layer
    calls (envdoctor.judge.loader), imported from this folder."""
    chosen, _ = recommended(s.runs, s.usable, s.batch_size, s.plan.get("step_time_s"))
    return None if chosen is None else int(chosen["num_workers"])


class _Side:
    """One of the two settings, its loader kept running between its windows."""

    def __init__(self, s: Session, nw: int, timeout: float) -> None:
        self.s = s
        self.nw = nw
        data = s.tracked if s.tracked is not None else s.dataset
        self.loader = s.loader(nw, data, timeout, persistent=nw > 0)
        self.timeout = timeout
        self.iterator: Iterator[object] | None = None
        self.buffered = nw * int(s.current.get("prefetch_factor") or 2) if nw else 0

    def next_batch(self) -> object:
        while True:
            if self.iterator is None:
                self.iterator = iter(self.loader)
                set_timeout(self.iterator, self.timeout)
            try:
                return next(self.iterator)
            except StopIteration:
                self.iterator = None

    def window(self, seconds: float) -> float:
        """Samples/s over one window, after the batches its workers made while the other side ran."""
        for _ in range(self.buffered):
            self.next_batch()
        start = time.perf_counter()
        samples = 0
        batches = 0
        while True:
            batch = self.next_batch()
            samples += samples_in(batch, self.s.torch, self.s.batch_size) if self.s.auto_collation else 1
            batches += 1
            elapsed = time.perf_counter() - start
            # Without workers every batch is made on demand: one is a whole round (slow ones spend the budget).
            if elapsed >= seconds and batches >= (max(2, self.nw) if self.nw else 1):
                return samples / elapsed

    def close(self) -> None:
        shutdown(self.iterator)


def _pair(s: Session) -> tuple[int, int] | None:
    """(your num_workers, the candidate) to re-measure, or None when there is nothing to pair."""
    forced = s.plan.get("pair")  # [current, candidate] given by the plan (benchmarks/bench_loader.py)
    if (s.plan.get("workers") and not forced) or not s.runs:
        return None
    current = int(forced[0]) if forced else int(s.current["num_workers"])
    chosen = int(forced[1]) if forced else candidate(s)
    if chosen is not None and chosen == current and not forced:
        # The sweep points at the user's own setting: check it against the runner-up, so noise that
        # sank a better setting in its one sweep point is caught too.
        measured = {r["num_workers"]: r for r in s.runs if r.get("samples_per_s")}
        others = [r for nw, r in measured.items() if nw != current and nw <= max(s.usable, current)]
        chosen = max(others, key=lambda r: r["samples_per_s"])["num_workers"] if others else None
    if chosen is None or chosen == current:
        return None
    return current, chosen


def _window_seconds(s: Session, measured: dict[int, dict[str, object]], current: int, chosen: int) -> float | None:
    """Each window's length in what the budget leaves after both settings start, or None (skipped, said why)."""
    startup = 0.0
    for nw in {current, chosen}:
        seconds = measured[nw].get("first_batch_s") if nw in measured else None
        startup += float(seconds) if isinstance(seconds, (int, float)) else 0.0
    room = s.left() - startup - 0.6
    window_s = min(MAX_WINDOW_S, room / (2 * PAIRS))
    if window_s < MIN_WINDOW_S:
        window_s = MIN_WINDOW_S
        if room < 2 * MIN_PAIRS * window_s:
            s.events.skip("paired windows", f"not enough of the budget left ({s.left():.1f} s) to re-measure "
                          f"num_workers={chosen} against your num_workers={current}")
            return None
    return window_s


def _alternate(s: Session, sides: dict[str, _Side], window_s: float) -> tuple[list[dict[str, object]], str | None]:
    """Up to PAIRS pairs of windows, the order alternating: (the windows, why they were cut or None)."""
    windows: list[dict[str, object]] = []
    cut = None
    try:
        for side in sides.values():
            side.next_batch()  # start the workers before any window
        for k in range(PAIRS):
            if s.left() < 2 * window_s + 0.4:
                cut = f"the budget ended after {len(windows)} pair(s)"
                break
            order = ("current", "candidate") if k % 2 == 0 else ("candidate", "current")
            rates = {name: sides[name].window(window_s) for name in order}
            windows.append({"order": f"{order[0]}-first", "current_samples_per_s": round(rates["current"], 2),
                            "candidate_samples_per_s": round(rates["candidate"], 2)})
    except Exception as exc:  # the sweep ran these settings; what fails now is not a dataset finding
        cut = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ''}"
    finally:
        s.watchdog.disarm()
        for side in sides.values():
            side.close()
    return windows, cut


def paired_windows(s: Session) -> None:
    """Re-measure the candidate against the current setting in alternating windows (result `paired`)."""
    pair = _pair(s)
    if pair is None:
        return
    current, chosen = pair
    measured = {r["num_workers"]: r for r in s.runs if r.get("samples_per_s")}
    if current not in measured:
        s.events.skip("paired windows", f"your num_workers={current} could not be measured in the sweep")
        return
    window_s = _window_seconds(s, measured, current, chosen)
    if window_s is None:
        return
    slowest = min(measured[nw]["samples_per_s"] for nw in (current, chosen))
    timeout = max(3.0, 10 * s.batch_size / slowest)
    # Both settings ran in the sweep under the same watch: overstaying here is the budget's end, not a hang.
    s.guarded(max(1.0, s.left() - 0.2), f"the paired windows of num_workers={current} and {chosen}", "paired",
              check="paired windows", num_workers=chosen)
    sides = {"current": _Side(s, current, timeout), "candidate": _Side(s, chosen, timeout)}
    windows, cut = _alternate(s, sides, window_s)
    s.events.result("paired", {"current": current, "candidate": chosen, "window_s": round(window_s, 3),
                               "windows": windows, "cut": cut})
