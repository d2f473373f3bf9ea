"""The loader judgement: the bottleneck, the knee, the recommended settings and how far the machine's noise lets
us trust them. Decided once per check (`loader_judgement`), read by the DL rules, SYS005, the limits rules'
worker plan, `envdoctor run --tune` and the report's `loader` object (`loader_report`).

Pure functions of the `loader` facts (no processes, no clocks), so the judgement can be tested on recorded
numbers as well as on live runs. The bottleneck classes are in `envdoctor.judge.bottleneck`.

The recommendation is the knee (the fewest workers within 95% of the best), or with a step time the fewest
workers that outrun the step: that rule lives in `envdoctor.inside.loader_knee`, the one module the runner
imports too, so the setting it re-measures in paired windows is the one recommended here. When the runner
re-measured it against the user's own setting in interleaved, paired windows (`paired`), the gain carries a 95%
interval (`envdoctor.judge.pairing`), and a change is recommended only when that interval says it wins: a loss,
or an interval that does not exclude "no gain", keeps the user's setting (trust "loss" / "too-noisy").

The user's own setting is the baseline every gain is measured against; one sweep point is one stretch of time,
which a busy neighbour may have slowed. When the paired windows re-measured it, the judgement takes the median of
those windows as its rate (`with_paired_baseline`; `current_basis` "paired").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, cast

from envdoctor.facts.loader import (
    Bottleneck,
    CurrentSettings,
    LeftOut,
    LoaderFacts,
    LoaderJudgement,
    LoaderReport,
    PairedFacts,
    Recommendation,
    RunFacts,
    Trust,
)
from envdoctor.inside.loader_knee import computes_past_cpus, eligible_runs, knee, recommended
from envdoctor.judge.bottleneck import (
    CLEAR_GAIN,
    classify,
    contended,
    loses_clearly,
    measured_runs,
    others_cpus,
    pool_contention,
)
from envdoctor.judge.pairing import judge_pairing, paired_median

if TYPE_CHECKING:  # pragma: no cover
    from envdoctor.facts import Facts

#: Pinned batches slower than this share of unpinned ones: pin_memory is not recommended.
PIN_LOSS = 0.95
#: The key the loader judgement is kept under on the Facts it judged (`Facts.judgements`).
KEY = "loader"

Basis = Literal["knee", "step", "current", "paired"]


@dataclass(frozen=True)
class JudgedLoader:
    """The loader facts and their judgement, as every reader takes them."""

    #: The facts as gathered (the report shows these).
    section: LoaderFacts
    #: The bottleneck, the knee and the recommendation (the report's `loader` object adds these to the facts).
    judgement: LoaderJudgement
    #: CPUs other processes kept busy while the runs were timed, averaged; None when not measured.
    others_cpus: float | None
    #: (intra-op threads, seconds a sample with them, with one thread) when torch's pool in the main process made
    #: samples slower than one thread did at num_workers=0 (SYS005); None otherwise.
    pool_contention: tuple[int, float, float] | None

    @property
    def contended(self) -> bool:
        """Other processes held enough of the usable CPUs that the sweep alone cannot rank the settings."""
        return contended(self.others_cpus)

    @property
    def bottleneck(self) -> Bottleneck | None:
        return self.judgement["bottleneck"]

    @property
    def rec(self) -> Recommendation | None:
        return self.judgement["recommendation"]


def loader_judgement(facts: Facts) -> JudgedLoader | None:
    """The loader judgement of this check, decided on first use and kept on `facts` (None without a loader
    section). Raises ProbeFailed, as `facts["loader"]` does, when the smoke test failed."""
    held = facts.judgements.get(KEY)
    if held is None:
        section = facts["loader"]
        if not section:
            return None
        held = facts.judgements[KEY] = judge_loader(section, facts.config.step_time)
    return cast(JudgedLoader, held)


def judge_loader(section: LoaderFacts, step_time_s: float | None) -> JudgedLoader:
    """The whole judgement on one loader section (the baseline rated by the paired windows, when measured)."""
    rated = with_paired_baseline(section)
    usable = rated.get("usable_cpus") or 1
    bottleneck, reason = classify(rated, usable, step_time_s)
    cuda = rated.get("torch", {}).get("cuda_available", False)
    chosen = knee(measured_runs(rated), usable)
    judgement: LoaderJudgement = {
        "bottleneck": bottleneck,
        "bottleneck_reason": reason,
        "knee": chosen["num_workers"] if chosen else None,
        "recommendation": recommend(rated, bottleneck, cuda, usable, step_time_s),
        "consumer_samples_per_s": consumer_rate(rated.get("batch_size"), step_time_s),
    }
    return JudgedLoader(section, judgement, others_cpus(section), pool_contention(section))


def consumer_rate(batch_size: int | None, step_time_s: float | None) -> float | None:
    """Samples/s a training step of `step_time_s` takes, rounded as the report shows it; None without both."""
    return round(batch_size / step_time_s, 2) if step_time_s and batch_size else None


def loader_report(judged: JudgedLoader) -> LoaderReport:
    """The report's `loader` object: the facts (less the torch probe, which belongs under torch) and the
    judgement."""
    facts = cast(dict[str, object], {k: v for k, v in judged.section.items() if k != "torch_probe"})
    return cast(LoaderReport, {**facts, **judged.judgement})


# ---------------------------------------------------------------------------
# The recommendation and its trust.


def unmeasured_for_budget(section: LoaderFacts, usable_cpus: int | None) -> list[int]:
    """Worker counts the sweep meant to time (up to the usable CPUs, or past them while waiting workers
    still gained) and skipped because the budget ran out."""
    counts = []
    for skipped in section["skipped"]:
        what, reason = skipped["what"], skipped["reason"]
        if what.startswith("num_workers=") and ("budget" in reason):
            try:
                nw = int(what.split("=", 1)[1])
            except ValueError:
                continue
            counts.append(nw)
    return sorted(counts)


def _rate(run: RunFacts) -> float:
    return run["samples_per_s"] or 0.0


@dataclass
class _Choice:
    """The recommendation as it is decided, step by step (see `recommend`)."""

    chosen: RunFacts
    basis: Basis
    trust: Trust
    interval: tuple[float, ...] | None
    #: The setting the sweep pointed at next, when trust kept the user's own.
    runner_up: int | None = None
    candidate_nw: int | None = None
    #: Whether the paired windows measured the settings the recommendation speaks of.
    pairs_apply: bool = True


def _paired_on(paired: PairedFacts | None, current_nw: int) -> bool:
    """Whether the runner re-measured something against the user's own setting."""
    return bool(paired and paired.get("current") == current_nw and paired.get("windows"))


def _take_paired_winner(choice: _Choice, eligible: list[RunFacts], paired: PairedFacts | None,
                        current_nw: int) -> bool:
    """Recommend the setting the paired windows re-measured against the user's own, when it won (a gain there);
    False when they measured none, or it did not win."""
    if paired is None or not _paired_on(paired, current_nw):
        return False
    other = next((r for r in eligible if r["num_workers"] == paired.get("candidate")), None)
    if other is None or other["num_workers"] == current_nw:
        return False
    said, interval = judge_pairing(paired, other["num_workers"], current_nw)
    if said != "gain":
        return False
    choice.chosen, choice.basis, choice.trust, choice.interval = other, "paired", "gain", interval
    return True


def _promote_runner_up(choice: _Choice, eligible: list[RunFacts], paired: PairedFacts | None,
                       current_nw: int) -> None:
    """The sweep kept the user's setting; the runner-up re-measured against it in paired windows won."""
    if choice.trust == "same":
        _take_paired_winner(choice, eligible, paired, current_nw)


def _doubt_on_contended_cpus(choice: _Choice, eligible: list[RunFacts], paired: PairedFacts | None,
                             current_run: RunFacts | None, current_nw: int) -> None:
    """On CPUs other processes hold, one stretch of time per setting cannot rank the settings: each may have
    been slowed by a different share of their load. The sweep's pick stands only when paired windows said it
    gains (or, too few to decide, each agreed with it), or, not re-measured, when it beats the user's setting
    by far more than one stretch of noise does (CLEAR_GAIN); keeping the user's setting stands only when paired
    windows show the alternative loses. Else it is too noisy to tell (and `_keep_current` keeps the user's
    setting, naming the pick)."""
    if choice.trust == "unpaired":
        repaired = paired is not None and _paired_on(paired, current_nw) \
            and paired.get("candidate") == choice.chosen["num_workers"]
        if not repaired and current_run is not None and _rate(choice.chosen) < CLEAR_GAIN * _rate(current_run) \
                and not _take_paired_winner(choice, eligible, paired, current_nw):
            # A pick no pair measured, within one stretch's noise of yours: too noisy, unless the pairs measured
            # another setting against yours and it won there (SLEEPY_RUNNER_UP: rated by its pairs, your setting
            # fell below num_workers=0, which moved the knee off the runner-up that had just doubled it).
            choice.trust = "too-noisy"
        return
    if choice.trust != "same":
        return
    settled = False
    if paired is not None and _paired_on(paired, current_nw):
        choice.runner_up = paired.get("candidate")
        said, said_interval = (judge_pairing(paired, choice.runner_up, current_nw) if choice.runner_up is not None
                               else ("unpaired", None))
        settled = said == "loss"
        if not settled:
            choice.interval = said_interval
    else:
        others = [r for r in eligible if r["num_workers"] != current_nw]
        choice.runner_up = max(others, key=_rate)["num_workers"] if others else None
    if choice.runner_up is not None and not settled:
        choice.trust = "too-noisy"


def _doubt_fewer_on_contended_cpus(choice: _Choice, eligible: list[RunFacts], current_run: RunFacts | None,
                                  current_nw: int) -> None:
    """Fewer workers than the user's, paired against their setting and as fast: true of those two settings. But
    the pick is fewer workers only because the sweep's settings with more workers than the user's measured no
    better, each in one stretch of the neighbours' load, which cannot rank them (seen beside two busy processes: a
    dataset that sleeps 5 ms a sample, 0: 167, 1: 176, 2: 138 samples/s with windows from 74 to 17,567; idle, 2
    workers deliver twice what 1 does). Whether more workers beat the user's setting cannot be told: their
    setting is kept, and the best of those settings named. Fewer workers that the pairs show faster outright
    are a gain whatever the sweep said of more, and so are fewer workers that every setting with more lost to
    by more than one stretch of the load explains (TINY_FEWER: tiny samples, the pairs' interval wide)."""
    if choice.trust != "gain" or current_run is None or choice.chosen["num_workers"] >= current_nw:
        return
    if choice.interval is not None and choice.interval[0] > 1.0:
        return  # fewer workers beat yours outright in the pairs (tiny samples at ×50): that gain stands
    more = [r for r in eligible if r["num_workers"] > current_nw]
    if not more or all(loses_clearly(r, _rate(choice.chosen)) for r in more):
        return
    choice.chosen, choice.trust, choice.interval = current_run, "too-noisy", None
    choice.runner_up, choice.pairs_apply = max(more, key=_rate)["num_workers"], False


def _cut_short(choice: _Choice, unmeasured: list[int], current_run: RunFacts | None, current_nw: int) -> bool:
    """Marks a knee below where the budget cut the curve "incomplete" (it is no knee, only where the budget
    ended); True when a measured setting beats the user's by far more than one stretch of noise does anyway."""
    if choice.trust in ("gain", "loss") or not unmeasured or choice.chosen["num_workers"] >= max(unmeasured):
        return False
    choice.trust = "incomplete"
    return (current_run is not None and choice.chosen["num_workers"] != current_nw
            and _rate(choice.chosen) >= CLEAR_GAIN * _rate(current_run))


def _keep_current(choice: _Choice, current_run: RunFacts | None, current_nw: int, clear: bool) -> None:
    """A loss, too noisy to tell, or a cut curve without a clear gain: the user's own setting is kept, and the
    setting the sweep pointed at is named as the candidate."""
    doubted = choice.trust in ("loss", "too-noisy") or (choice.trust == "incomplete" and not clear)
    if not doubted or current_run is None:
        return
    pointed = choice.chosen["num_workers"]
    choice.candidate_nw = pointed if pointed != current_nw else choice.runner_up
    choice.chosen, choice.basis = current_run, "current"


def _settings(choice: _Choice, section: LoaderFacts, current: CurrentSettings, cuda: bool,
              bottleneck: Bottleneck | None) -> tuple[int | None, bool, bool]:
    """(prefetch_factor, persistent_workers, pin_memory) that go with the chosen worker count: the user's own
    when their setting is kept."""
    if choice.basis == "current":
        return current.get("prefetch_factor"), current.get("persistent_workers", False), \
            current.get("pin_memory", False)
    nw = choice.chosen["num_workers"]
    pin = section.get("pin_memory", {})
    pinned, unpinned = pin.get("pinned_samples_per_s"), pin.get("unpinned_samples_per_s")
    pin_memory = bool(cuda) and not (pinned and unpinned and pinned < PIN_LOSS * unpinned)
    prefetch = None if nw == 0 else (4 if bottleneck == "storage" else 2)
    return prefetch, nw > 0, pin_memory


def _gain_and_rate(choice: _Choice, paired: PairedFacts | None,
                   current_run: RunFacts | None) -> tuple[float | None, float]:
    """The gain over the user's setting (the paired windows' word when they have one) and the rate beside it."""
    rate = _rate(choice.chosen)
    if choice.interval is not None:
        if choice.basis != "current" and paired and paired.get("candidate") == choice.chosen["num_workers"]:
            # The gain is the pairs' word, and so is the rate beside it: the sweep's one point for this
            # count may be one a neighbour sank (280 samples/s shown as "1.57× the 365 of your settings").
            rate = paired_median(paired, "candidate_samples_per_s") or rate
        return round(choice.interval[1], 3), rate
    if current_run is not None:
        return round(_rate(choice.chosen) / _rate(current_run), 3), rate
    return None, rate


def recommend(section: LoaderFacts, bottleneck: Bottleneck | None, cuda: bool,
              usable_cpus: int | None = None, step_time_s: float | None = None) -> Recommendation | None:
    """Settings for the knee (or, with a step time, the fewest workers that outrun the step), checked
    against the user's setting in the paired windows when the runner measured them."""
    # Decided in steps, each its own function below, in the order they apply to the knee's pick.
    runs = measured_runs(section)
    # The same call the runner makes to choose what it re-measures in paired windows (loader_paired.py).
    found, knee_basis = recommended(runs, usable_cpus, section.get("batch_size"), step_time_s)
    if found is None or section.get("failure") or not any(r["num_workers"] > 0 for r in runs):
        return None  # nothing, or no worker count, was measured: none can be recommended
    eligible = eligible_runs(runs, usable_cpus)
    current: CurrentSettings = section["current"] or {}
    current_nw = current.get("num_workers", 0)
    current_run = next((r for r in runs if r["num_workers"] == current_nw), None)
    paired = section.get("paired")
    trust, interval = judge_pairing(paired, found["num_workers"], current_nw)
    choice = _Choice(found, cast(Basis, knee_basis), trust, interval)
    _promote_runner_up(choice, eligible, paired, current_nw)
    if bottleneck == "cpu-contended" or contended(others_cpus(section)):
        _doubt_on_contended_cpus(choice, eligible, paired, current_run, current_nw)
        _doubt_fewer_on_contended_cpus(choice, eligible, current_run, current_nw)
    unmeasured = unmeasured_for_budget(section, usable_cpus)
    _keep_current(choice, current_run, current_nw, _cut_short(choice, unmeasured, current_run, current_nw))
    prefetch, persistent, pin_memory = _settings(choice, section, current, cuda, bottleneck)
    gain, rate = _gain_and_rate(choice, paired, current_run)
    consumer = consumer_rate(section.get("batch_size"), step_time_s)
    left_out: list[LeftOut] = [{"num_workers": r["num_workers"], "samples_per_s": _rate(r),
                                "worker_runqueue": r.get("worker_runqueue")}
                               for r in runs if computes_past_cpus(r, usable_cpus)]
    current_rate, current_basis, current_sweep = _baseline(current_run)
    interval, trust = choice.interval, choice.trust
    return {
        "num_workers": choice.chosen["num_workers"],
        "prefetch_factor": prefetch,
        "persistent_workers": persistent,
        "pin_memory": pin_memory,
        "samples_per_s": rate,
        "best_samples_per_s": max(_rate(r) for r in eligible),
        "left_out": left_out,
        "current_samples_per_s": current_rate,
        "gain": gain,
        "gain_interval": [round(interval[0], 3), round(interval[2], 3)] if interval is not None else None,
        "paired_windows": len(paired.get("windows", [])) if paired and trust != "unpaired" and choice.pairs_apply
        else 0,
        "basis": choice.basis,
        "consumer_samples_per_s": consumer,
        "trust": trust,
        "candidate_num_workers": choice.candidate_nw,
        "unmeasured": unmeasured if trust == "incomplete" else [],
        "current_basis": current_basis,
        "current_sweep_samples_per_s": current_sweep,
    }


def _baseline(current_run: RunFacts | None) -> tuple[float | None, Literal["paired", "sweep"], float | None]:
    """The user's setting as the recommendation shows it: its rate, where that comes from ("paired": the paired
    windows' median, `with_paired_baseline`), and its one sweep point's rate."""
    if current_run is None:
        return None, "sweep", None
    basis: Literal["paired", "sweep"] = "paired" if "sweep_samples_per_s" in current_run else "sweep"
    return current_run["samples_per_s"], basis, current_run.get("sweep_samples_per_s", current_run["samples_per_s"])


def with_paired_baseline(section: LoaderFacts) -> LoaderFacts:
    """The section with the user's setting rated by the paired windows that re-measured it (their median),
    so one transient slow (or fast) sweep window does not decide the baseline. The sweep's own figure is
    kept as the run's `sweep_samples_per_s`. Unchanged without at least two paired windows."""
    paired = section.get("paired") or {}
    current = paired.get("current")
    rates = sorted(w["current_samples_per_s"] for w in paired.get("windows") or [] if w["current_samples_per_s"] > 0)
    median = paired_median(paired, "current_samples_per_s")
    if current is None or median is None:
        return section
    runs: list[RunFacts] = []
    for r in section["runs"]:
        if r["num_workers"] == current and r.get("samples_per_s") and "pin_memory" not in r:
            rerated = cast(RunFacts, {**r, "samples_per_s": median, "sweep_samples_per_s": r["samples_per_s"],
                                      "samples_per_s_min": rates[0], "samples_per_s_max": rates[-1]})
            runs.append(rerated)
        else:
            runs.append(r)
    return cast(LoaderFacts, {**section, "runs": runs})
