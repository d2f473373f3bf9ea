"""Paired windows: the candidate setting and the user's own, timed in alternation, and what their ratios say.

One sweep point is one stretch of time, which a busy neighbour may have slowed; a pair of back-to-back
windows is slowed alike on both sides. The smoke test's runner measures such pairs for the loader alone
(the loader facts' `paired`), `envdoctor run --prove` for the user's whole loop (the loop facts' `proof`):
both are judged here, with one interval and one rule for what it says.
"""
from __future__ import annotations

import math
from typing import Literal

from envdoctor.facts.loader import PairedFacts, PairedWindow, Trust
from envdoctor.facts.loop import LoopProof, LoopProofWindow
from envdoctor.inside.loader_knee import KNEE_FRACTION, MIN_PAIRS

#: A candidate with fewer workers than the current setting may lose this much (fewer processes for it).
FEWER_WORKERS_TOLERANCE = KNEE_FRACTION
#: A candidate measured against the current setting in pairs: the smoke test's windows, or `--prove`'s runs.
Pairing = PairedFacts | LoopProof
#: Two-sided 95% quantiles of Student's t by degrees of freedom (the paired windows are few).
T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26, 10: 2.23}


def window_rates(window: PairedWindow | LoopProofWindow) -> tuple[float, float]:
    """(current, candidate) of one pair: the smoke test's samples/s, or `--prove`'s batches/s of the real loop (a
    ratio is the same in either unit)."""
    if "current_samples_per_s" in window:
        return window["current_samples_per_s"], window["candidate_samples_per_s"]
    return window["current_batches_per_s"], window["candidate_batches_per_s"]


def pair_ratios(paired: Pairing) -> list[float]:
    """Each paired window's candidate throughput over the current one's (windows that measured both)."""
    rates = [window_rates(w) for w in paired.get("windows") or []]
    return [candidate / current for current, candidate in rates if current > 0 and candidate > 0]


def gain_interval(paired: Pairing) -> tuple[float, float, float] | None:
    """(low, gain, high): the candidate's throughput over the current one's, geometric mean of the
    paired windows' ratios with its 95% interval; None with fewer than two pairs."""
    ratios = pair_ratios(paired)
    if len(ratios) < 2:
        return None
    logs = [math.log(r) for r in ratios]
    n = len(logs)
    mean = sum(logs) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1))
    half = T95.get(n - 1, 2.0) * sd / math.sqrt(n)
    return math.exp(mean - half), math.exp(mean), math.exp(mean + half)


def judge_pairing(paired: Pairing | None, candidate: int, current: int) -> tuple[Trust, tuple[float, ...] | None]:
    """What the paired re-measurement says of moving from `current` to `candidate` workers."""
    if candidate == current:
        return "same", None
    if not paired or paired.get("candidate") != candidate or paired.get("current") != current \
            or not paired.get("windows"):
        return "unpaired", None
    interval = gain_interval(paired)
    # More workers must win outright; fewer workers may cost a little (fewer processes, less memory).
    needed = 1.0 if candidate > current else FEWER_WORKERS_TOLERANCE
    if interval is not None:
        low, _, high = interval
        if low > needed:
            return "gain", interval
        if high < needed:
            return "loss", interval
    ratios = pair_ratios(paired)
    if len(ratios) < MIN_PAIRS:
        # The budget cut the pairs short: one has no interval, and two have one degree of freedom (t = 12.7
        # made ×5.8 and ×7.8 an interval from 0.8 to 50). Such an interval that decides nothing is no word
        # against the sweep: every pair agreeing with it leaves it standing; one against it makes it too noisy.
        return ("unpaired" if ratios and all(r > needed for r in ratios) else "too-noisy"), None
    return "too-noisy", interval


def paired_median(paired: PairedFacts, side: Literal["current_samples_per_s", "candidate_samples_per_s"]
                   ) -> float | None:
    """The median rate of one side of the paired windows (rounded as the runner's), or None with fewer than two."""
    rates = sorted(w[side] for w in paired.get("windows") or [] if w[side] > 0)
    if len(rates) < 2:
        return None
    middle = len(rates) // 2
    return round(rates[middle] if len(rates) % 2 else (rates[middle - 1] + rates[middle]) / 2, 2)
