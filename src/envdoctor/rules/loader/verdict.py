"""The loader verdict: which bottleneck, which settings, and how far the machine's noise lets us trust them.

Pure functions of the `loader` facts (no processes, no clocks), so the
verdict can be tested on recorded numbers as well as on live runs. The DL
rules read it through `loader_verdict(facts)`, and the engine puts the same
verdict into the report's `loader` object (`report_section`), so it is
decided in this one place.

The bottleneck classes are one predicate each, tried in this order (the
first that holds names the class):

- none: a step time is known and the loader outruns the step;
- startup: worker start-up takes over half the time of an epoch's loading;
- ipc: `__getitem__` is a minor share of what a sample costs at
  num_workers=0 (collating and moving batches is the cost), or workers do not
  beat num_workers=0 and moving samples costs more CPU than making them (or
  the workers sit idle while the main process unpacks): large cheap samples
  are IPC-bound whatever CPU the copies burn;
- cpu-contended: other processes keep a share of the usable CPUs busy
  (`others_cpu`: /proc/stat over the loader's CPUs, less its own processes)
  while `__getitem__` computes: workers that raise throughput do it by taking
  CPU share from those processes, so the reason gives the numbers and the
  knee is recommended; workers that do not gain prove nothing on CPUs others
  hold, so the reason says the sweep cannot tell (and the recommendation's
  trust says "too-noisy" unless the paired windows settled it);
- cpu-saturated: workers do not beat num_workers=0 because every usable CPU is
  busy computing samples, the loader's own (other processes take little);
- storage: `__getitem__` mostly waits (reads, the network) or raw reads
  outweigh decoding;
- cpu-saturated: the knee uses every usable CPU, or workers queued for one;
- getitem: workers help, samples cost CPU and the CPUs are not all busy.

None when nothing measured tells the causes apart.

The recommendation is the knee (the fewest workers within 95% of the best),
or with a step time the fewest workers that outrun the step: that rule lives
in `envdoctor.inside.loader_knee`, the one module the runner imports too, so the
setting it re-measures in paired windows is the one recommended here. When the runner
re-measured it against the user's own setting in interleaved, paired windows
(`paired`), the gain carries a 95% interval, and a change is recommended only
when that interval says it wins: a loss, or an interval that does not exclude
"no gain", keeps the user's setting (trust "loss" / "too-noisy").

The user's own setting is the baseline every gain is measured against; one
sweep point is one stretch of time, which a busy neighbour may have slowed.
When the paired windows re-measured it, the verdict takes the median of those
windows as its rate (`with_paired_baseline`; `current_basis` "paired").
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal, cast

from envdoctor.facts.loader import (
    Bottleneck,
    CurrentSettings,
    GetitemFacts,
    LeftOut,
    LoaderFacts,
    LoaderReport,
    LoaderVerdict,
    PairedFacts,
    Recommendation,
    RunFacts,
    Trust,
)
from envdoctor.inside.loader_knee import (
    BLOCKED_SHARE,
    KNEE_FRACTION,
    MIN_PAIRS,
    WORKER_GAIN,
    computes_past_cpus,
    computing_share,
    eligible_runs,
    knee,
    measured,
    recommended,
)

#: Workers below this share of num_workers=0 lose to it outright.
WORKER_LOSS = 0.9
#: Start-up counts as the bottleneck above this share of an epoch's loading time.
STARTUP_SHARE = 0.5
#: Below this, start-up is too small to mention whatever its share.
STARTUP_FLOOR_S = 0.25
#: The CPUs count as all busy at this fraction of the usable CPUs.
CPU_BUSY_SHARE = 0.8
#: Workers computing or queued for a CPU this share of the time are not idle on IPC.
WORKER_BUSY_SHARE = 0.6
#: Workers queued for a CPU this share of the time find the CPUs taken.
CPU_WAIT_SHARE = 0.25
#: Samples cost this many times more CPU with workers than without: the handover is the work (IPC).
HANDOVER_FACTOR = 2.0
#: `__getitem__` below this share of a sample's cost at num_workers=0: batches, not samples, cost the time.
GETITEM_MINOR_SHARE = 0.25
#: A candidate with fewer workers than the current setting may lose this much (fewer processes for it).
FEWER_WORKERS_TOLERANCE = KNEE_FRACTION
#: Other processes keeping this many of the usable CPUs busy make them contended (not the loader's own).
CONTENDED_CPUS = 0.5
#: The main process's intra-op pool contends when one thread makes a sample this much faster (SYS005) ...
POOL_SLOWDOWN = 1.5
#: ... and saves at least this much a sample (below it, timer noise).
POOL_SLOWDOWN_FLOOR_S = 0.0002
#: Where the budget cut the curve, a measured setting this many times the user's own is still recommended.
CLEAR_GAIN = 2.0
#: Two-sided 95% quantiles of Student's t by degrees of freedom (the paired windows are few).
T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26, 10: 2.23}


def measured_runs(section: LoaderFacts) -> list[RunFacts]:
    return measured(section["runs"])


def _rate(run: RunFacts) -> float:
    return run["samples_per_s"] or 0.0


def startup_cost(run: RunFacts, batch_size: int) -> float | None:
    """Seconds the first batch took beyond what one batch costs in steady state."""
    first, rate = run["first_batch_s"], run["samples_per_s"]
    if first is None or not rate:
        return None
    # Each of N workers makes a whole batch, so in steady state one batch takes N × batch / rate.
    return max(0.0, first - batch_size * max(1, run["num_workers"]) / rate)


def _worker_busy(run: RunFacts) -> float:
    """Share of the time a worker computed or waited for a CPU."""
    return run.get("worker_cpu", 0.0) + run.get("worker_runqueue", 0.0)


def cpu_per_sample(run: RunFacts) -> float | None:
    """CPU seconds the loader (main process and workers together) spent on one sample in this run."""
    rate = run["samples_per_s"]
    if not rate or "main_cpu" not in run:
        return None
    if run["num_workers"] and "worker_cpu" not in run:
        return None
    workers = run.get("worker_process_cpu", run.get("worker_cpu", 0.0))
    return (run["main_cpu"] + run["num_workers"] * workers) / rate


# ---------------------------------------------------------------------------
# The classes, one predicate each. Each takes the evidence and returns a reason or None.


def others_on_usable(run: RunFacts, usable_cpus: int) -> float | None:
    """CPUs other processes kept busy during a run, as a share of the usable CPUs' worth (/proc/stat counts
    the CPUs of the loader's affinity, which may be more than a cgroup quota lets it use)."""
    others, seen = run.get("others_cpu"), run.get("stat_cpus")
    if others is None or not seen:
        return None
    return min(float(usable_cpus), others * min(usable_cpus, seen) / seen)


def own_cpus(run: RunFacts) -> float:
    """CPUs the loader's own processes (main process and every worker) used during a run."""
    workers = run.get("worker_process_cpu", run.get("worker_cpu", 0.0))
    return run.get("main_cpu", 0.0) + run["num_workers"] * workers


def pool_contention(section: LoaderFacts) -> tuple[int, float, float] | None:
    """(intra-op threads, seconds a sample with them, with one thread) when, at num_workers=0, torch's pool in
    the main process makes samples slower than one thread does (the smoke test re-fetched the same samples
    alternately both ways); None otherwise."""
    getitem = section.get("getitem", {})
    threads = getitem.get("intra_op_threads")
    pooled, single = getitem.get("threads_median_s"), getitem.get("one_thread_median_s")
    if not threads or threads <= 1 or not pooled or not single:
        return None
    if pooled < POOL_SLOWDOWN * single or pooled - single < POOL_SLOWDOWN_FLOOR_S:
        return None
    return threads, pooled, single


def others_cpus(section: LoaderFacts) -> float | None:
    """CPUs other processes kept busy while the loader's runs were timed, averaged (None: not measured)."""
    usable = section.get("usable_cpus") or 1
    taken = [o for o in (others_on_usable(r, usable) for r in measured_runs(section)) if o is not None]
    return round(sum(taken) / len(taken), 2) if taken else None


class Evidence:
    """What the predicates share: the measured runs and the setting they judge."""

    def __init__(self, section: LoaderFacts, usable_cpus: int, step_time_s: float | None) -> None:
        self.section = section
        self.usable = usable_cpus
        self.step_time_s = step_time_s
        self.runs = measured_runs(section)
        self.batch_size = int(section.get("batch_size") or 1)
        self.getitem: GetitemFacts = section.get("getitem", {})
        chosen = knee(self.runs, usable_cpus)
        assert chosen is not None
        self.chosen: RunFacts = chosen
        self.zero = next((r for r in self.runs if r["num_workers"] == 0), None)
        self.workers = [r for r in eligible_runs(self.runs, usable_cpus) if r["num_workers"] > 0]
        self.best_worker = max(self.workers, key=_rate) if self.workers else None
        #: CPUs other processes kept busy, averaged over the runs (None: not measured).
        self.others = others_cpus({**section, "usable_cpus": usable_cpus})

    @property
    def contended(self) -> bool:
        return self.others is not None and self.others >= CONTENDED_CPUS

    def workers_lose(self) -> bool:
        """Conclusively, workers do not beat num_workers=0 (in the best worker run's fastest window too)."""
        zero, best = self.zero, self.best_worker
        if zero is None or best is None:
            return False
        # One worker at best matches num_workers=0; only losing to it, or failing with several, says so.
        conclusive = _rate(best) < WORKER_LOSS * _rate(zero) or any(r["num_workers"] >= 2 for r in self.workers)
        best_window = best.get("samples_per_s_max") or _rate(best)
        return conclusive and best_window < WORKER_GAIN * _rate(zero)


def is_no_bottleneck(ev: Evidence) -> str | None:
    if not ev.step_time_s:
        return None
    consumer = ev.batch_size / ev.step_time_s
    rate = _rate(ev.chosen)
    if rate < consumer:
        return None
    return (f"the loader delivers {rate:.0f} samples/s with num_workers={ev.chosen['num_workers']}, "
            f"more than the {consumer:.0f} samples/s a {ev.step_time_s:g} s step consumes")


def is_startup_bound(ev: Evidence) -> str | None:
    length = ev.section.get("length")
    if not length or ev.chosen["num_workers"] == 0:
        return None
    startup = startup_cost(ev.chosen, ev.batch_size) or 0.0
    epoch_load = length / _rate(ev.chosen)
    if startup >= STARTUP_FLOOR_S and startup >= STARTUP_SHARE * (startup + epoch_load):
        return (f"starting {ev.chosen['num_workers']} worker(s) takes {startup:.2f} s while loading "
                f"an epoch of {length} samples takes {epoch_load:.2f} s in steady state")
    return None


def handover_ratio(ev: Evidence) -> float | None:
    """CPU per sample with the best worker setting over CPU per sample with num_workers=0."""
    if ev.zero is None or ev.best_worker is None:
        return None
    alone, moved = cpu_per_sample(ev.zero), cpu_per_sample(ev.best_worker)
    if alone is None or moved is None or alone <= 0:
        return None
    return moved / alone


def _computing_and_busy(ev: Evidence) -> tuple[bool, float]:
    computing = (ev.getitem.get("cpu_fraction") or 0) >= 0.5
    busy = max((_worker_busy(r) for r in ev.workers if "worker_cpu" in r), default=0.0)
    return computing and (ev.usable <= 1 or busy >= WORKER_BUSY_SHARE), busy


def getitem_share(ev: Evidence) -> float | None:
    """Of what num_workers=0 spends on one sample, the share `__getitem__` takes (the rest is collating,
    copying and handing the batch on): of the wall time, or of the main process's CPU time when that says
    more. The probe and the run are timed apart, and on CPUs other processes hold either one's wall time
    may be slowed; the CPU a sample costs is not."""
    per_sample = ev.getitem.get("median_s") or ev.getitem.get("per_sample_s")
    if ev.zero is None or not per_sample or not ev.zero["samples_per_s"]:
        return None
    share = per_sample * ev.zero["samples_per_s"]
    cpu_fraction, mean_s, main_cpu = (ev.getitem.get("cpu_fraction"), ev.getitem.get("per_sample_s"),
                                      ev.zero.get("main_cpu"))
    if cpu_fraction and mean_s and main_cpu:
        share = max(share, cpu_fraction * mean_s * ev.zero["samples_per_s"] / main_cpu)
    return share


def is_ipc_bound(ev: Evidence) -> str | None:
    share = getitem_share(ev)
    if share is not None and share < GETITEM_MINOR_SHARE:
        # Whatever workers do to the curve (on CPUs others hold, more processes take more CPU), the time
        # is not in __getitem__: it is in building and moving batches.
        assert ev.zero is not None
        batch_bytes = ev.section.get("batch_bytes")
        size = f" of {batch_bytes / 2**20:.1f} MiB" if batch_bytes else ""
        return (f"__getitem__ takes {share:.0%} of the {1e3 / _rate(ev.zero):.2f} ms each sample costs with "
                f"num_workers=0: the time goes into collating and moving batches{size}, not into making samples")
    if not ev.workers_lose():
        return None
    assert ev.zero is not None and ev.best_worker is not None
    ratio = handover_ratio(ev)
    saturated, _ = _computing_and_busy(ev)
    if ratio is not None and ratio < HANDOVER_FACTOR and saturated:
        return None  # the samples cost what they cost: the CPUs are short (cpu-saturated)
    if ratio is None and saturated:
        return None
    best, zero = ev.best_worker, ev.zero
    detail = (f"; with workers each sample costs {ratio:.1f}× the CPU it costs made in the main process, "
              "so the time goes into moving samples, not making them" if ratio is not None and
              ratio >= HANDOVER_FACTOR else "; the workers sit idle while batches are handed over")
    bytes_text = ""
    batch_bytes = ev.section.get("batch_bytes")
    if batch_bytes:
        bytes_text = f" ({batch_bytes / 2**20:.1f} MiB a batch)"
    return (f"the best worker setting (num_workers={best['num_workers']}, {_rate(best):.0f} samples/s) does not "
            f"beat num_workers=0 ({_rate(zero):.0f} samples/s): handing batches{bytes_text} between processes "
            f"costs more than making them" + detail)


def _paired_text(ev: Evidence) -> str:
    paired = ev.section.get("paired") or {}
    windows = paired.get("windows") or []
    if not windows:
        return ""
    interval = gain_interval(paired)
    if interval is None:
        return ""
    low, gain, high = interval
    return (f"; re-measured in {len(windows)} paired windows, num_workers={paired.get('candidate')} against "
            f"num_workers={paired.get('current')} gains ×{gain:.2f} (95% interval {low:.2f}–{high:.2f})")


def is_cpu_contended(ev: Evidence) -> str | None:
    """Other processes hold part of the usable CPUs while __getitem__ computes."""
    if not ev.contended or ev.zero is None or ev.best_worker is None or is_storage_bound(ev):
        return None
    assert ev.others is not None
    zero, best = ev.zero, ev.best_worker
    gain = _rate(best) / _rate(zero) if _rate(zero) else 0.0
    busy = (f"other processes kept {ev.others:.1f} of the {ev.usable} usable CPU(s) busy while the loader ran "
            f"(the loader's own processes used {own_cpus(best):.1f} with num_workers={best['num_workers']})")
    pool = pool_contention(ev.section)
    threads = (f"; at num_workers=0 torch's {pool[0]} intra-op threads in the main process contend for those "
               f"CPUs: a sample costs {pool[1] * 1e3:.2f} ms, {pool[2] * 1e3:.2f} ms with one thread (SYS005), "
               "and workers run one thread each" if pool else "")
    if gain >= WORKER_GAIN:
        return (busy + f"; workers raise throughput from {_rate(zero):.0f} samples/s with num_workers=0 to "
                f"{_rate(best):.0f} with num_workers={best['num_workers']} (×{gain:.2f}) by taking CPU share "
                f"from them" + (" and escaping that contention" if pool else "")
                + f", so the knee, num_workers={ev.chosen['num_workers']}, holds only while they run"
                + threads + _paired_text(ev))
    return (busy + f", so the sweep cannot tell whether workers help: num_workers=0 measured {_rate(zero):.0f} "
            f"samples/s and the best worker setting (num_workers={best['num_workers']}) {_rate(best):.0f}, "
            "each in one stretch of time the other load may have slowed" + threads + _paired_text(ev))


def is_cpu_saturated_without_gain(ev: Evidence) -> str | None:
    if not ev.workers_lose():
        return None
    saturated, busy = _computing_and_busy(ev)
    if not saturated:
        return None
    queued = max((r for r in ev.workers if "worker_cpu" in r), key=lambda r: r.get("worker_runqueue", 0.0),
                 default=None)
    waited = queued.get("worker_runqueue", 0.0) if queued else 0.0
    return ("workers cannot beat num_workers=0: __getitem__ computes and "
            + ("there is a single usable CPU" if ev.usable <= 1 else
               f"the workers were computing or waiting for a CPU {busy:.0%} of the time"
               + (f" (with num_workers={queued['num_workers']} waiting {waited:.0%})" if queued and waited else "")
               + ": the usable CPUs are taken, " + _taken_by(ev)))


def _taken_by(ev: Evidence) -> str:
    """Who holds the CPUs: measured (the loader itself, others taking little), or unknown."""
    if ev.others is None:
        return "by the workers or by other processes"
    return f"by the loader itself (other processes kept {ev.others:.1f} of them busy)"


def is_storage_bound(ev: Evidence) -> str | None:
    getitem = ev.getitem
    blocked = getitem.get("blocked_fraction")
    read_s, decode_s = getitem.get("read_s"), getitem.get("decode_s")
    cpu_share = getitem.get("cpu_fraction")
    # Blocked against computing, leaving out time spent queued for a busy CPU (which dilutes both).
    waits = (blocked / (blocked + cpu_share) if blocked is not None and cpu_share is not None
             and blocked + cpu_share > 0 else blocked)
    if read_s is not None and decode_s is not None and read_s > decode_s:
        return f"raw reads take {read_s * 1e3:.2f} ms a sample against {decode_s * 1e3:.2f} ms of decoding"
    if waits is not None and blocked is not None and waits >= BLOCKED_SHARE:
        return (f"__getitem__ is blocked (waiting on reads, the network or sleeps) {blocked:.0%} of its time"
                + (f" and computes {cpu_share:.0%}" if cpu_share is not None and waits != blocked else ""))
    return None


def is_cpu_saturated_at_knee(ev: Evidence) -> str | None:
    chosen = ev.chosen
    share = computing_share(chosen)
    at_cpus = chosen["num_workers"] >= ev.usable and (share is None or share >= 1 - BLOCKED_SHARE)
    used = chosen.get("main_cpu", 0.0) + chosen["num_workers"] * chosen.get("worker_cpu", 0.0)
    if not (at_cpus or used >= CPU_BUSY_SHARE * ev.usable):
        return None
    waiting = chosen.get("worker_runqueue", 0.0)
    return (f"with num_workers={chosen['num_workers']} the loader uses {used:.1f} of {ev.usable} usable CPUs"
            + (f" and its workers wait for a CPU {waiting:.0%} of the time" if waiting else "")
            + "; more workers cannot add throughput")


def _no_gain(ev: Evidence) -> bool:
    return (ev.zero is not None and ev.best_worker is not None
            and _rate(ev.best_worker) < WORKER_GAIN * _rate(ev.zero))


def is_cpu_saturated_by_queueing(ev: Evidence) -> str | None:
    # Workers no more than the CPUs that still waited for one: the CPUs are taken.
    queued = [r for r in ev.workers if r["num_workers"] <= ev.usable
              and r.get("worker_runqueue", 0.0) >= CPU_WAIT_SHARE]
    if not queued:
        return None
    worst = max(queued, key=lambda r: r.get("worker_runqueue", 0.0))
    return (("workers do not beat num_workers=0, and " if _no_gain(ev) else "")
            + f"with num_workers={worst['num_workers']} (no more than the {ev.usable} usable CPU(s)) the "
            f"workers waited for a CPU {worst.get('worker_runqueue', 0.0):.0%} of the time: the CPUs are taken, "
            + _taken_by(ev))


def is_getitem_bound(ev: Evidence) -> str | None:
    if _no_gain(ev):
        return None
    per_sample = ev.getitem.get("per_sample_s")
    cost = f"{per_sample * 1e3:.2f} ms a sample" if per_sample else "its cost"
    return f"__getitem__ ({cost}) limits the loader and the CPUs are not all busy"


#: The classes in the order they are decided.
PREDICATES: tuple[tuple[Bottleneck, Callable[[Evidence], str | None]], ...] = (
    ("none", is_no_bottleneck),
    ("startup", is_startup_bound),
    ("ipc", is_ipc_bound),
    ("cpu-contended", is_cpu_contended),
    ("cpu-saturated", is_cpu_saturated_without_gain),
    ("storage", is_storage_bound),
    ("cpu-saturated", is_cpu_saturated_at_knee),
    ("cpu-saturated", is_cpu_saturated_by_queueing),
    ("getitem", is_getitem_bound),
)


def classify(section: LoaderFacts, usable_cpus: int, step_time_s: float | None) -> tuple[Bottleneck | None, str]:
    """The bottleneck class and one sentence saying why."""
    if section.get("failure") or not measured_runs(section):
        return None, "no run measured a throughput"
    ev = Evidence(section, usable_cpus, step_time_s)
    # With a step time the loader may keep up even without a worker run.
    reason = is_no_bottleneck(ev)
    if reason:
        return "none", reason
    if not ev.workers:
        return None, "no run with workers could be measured, so nothing tells the causes apart"
    for name, predicate in PREDICATES[1:]:
        reason = predicate(ev)
        if reason:
            return name, reason
    assert ev.zero is not None and ev.best_worker is not None  # only _no_gain leaves every predicate quiet
    return None, (f"num_workers={ev.best_worker['num_workers']} ({_rate(ev.best_worker):.0f} samples/s) does not "
                  f"beat num_workers=0 ({_rate(ev.zero):.0f} samples/s), and no more workers were measured: "
                  "nothing tells the causes apart")


# ---------------------------------------------------------------------------
# The recommendation and its trust.


def pair_ratios(paired: PairedFacts) -> list[float]:
    """Each paired window's candidate throughput over the current one's (windows that measured both).

    The smoke test's windows count samples per second, `envdoctor run --prove`'s the batches per second of the
    real loop (`*_batches_per_s`): a ratio is the same in either unit."""
    ratios = []
    for window in paired.get("windows", []):
        rates: Any = window
        unit = "samples" if "current_samples_per_s" in rates else "batches"
        current, candidate = rates[f"current_{unit}_per_s"], rates[f"candidate_{unit}_per_s"]
        if current > 0 and candidate > 0:
            ratios.append(candidate / current)
    return ratios


def gain_interval(paired: PairedFacts) -> tuple[float, float, float] | None:
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


def judge_pairing(paired: PairedFacts | None, candidate: int, current: int) -> tuple[Trust, tuple[float, ...] | None]:
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


def recommend(section: LoaderFacts, bottleneck: Bottleneck | None, cuda: bool,
              usable_cpus: int | None = None, step_time_s: float | None = None) -> Recommendation | None:
    """Settings for the knee (or, with a step time, the fewest workers that outrun the step), checked
    against the user's setting in the paired windows when the runner measured them."""
    runs = measured_runs(section)
    # The same call the runner makes to choose what it re-measures in paired windows (loader_paired.py).
    found, knee_basis = recommended(runs, usable_cpus, section.get("batch_size"), step_time_s)
    if found is None or section.get("failure"):
        return None
    chosen: RunFacts = found
    basis: Any = knee_basis
    if not any(r["num_workers"] > 0 for r in runs):
        return None  # no worker count was measured, so none can be recommended
    eligible = eligible_runs(runs, usable_cpus)
    consumer = int(section.get("batch_size") or 1) / step_time_s if step_time_s and section.get("batch_size") else None
    current: CurrentSettings = section["current"] or {}
    current_nw = current.get("num_workers", 0)
    current_run = next((r for r in runs if r["num_workers"] == current_nw), None)
    paired = section.get("paired")
    trust, interval = judge_pairing(paired, chosen["num_workers"], current_nw)
    if trust == "same" and paired and paired.get("current") == current_nw and paired.get("windows"):
        # The sweep kept the user's setting; the runner-up was re-measured against it in paired windows.
        other = next((r for r in eligible if r["num_workers"] == paired.get("candidate")), None)
        if other is not None and other["num_workers"] != current_nw:
            verdict_on_other, other_interval = judge_pairing(paired, other["num_workers"], current_nw)
            if verdict_on_other == "gain":
                chosen, basis, trust, interval = other, "paired", "gain", other_interval
    runner_up: int | None = None
    if bottleneck == "cpu-contended" and trust == "same":
        # The sweep keeps the user's setting on CPUs other processes hold: one stretch of time each cannot
        # say workers do not help. Only paired windows that show a loss can; else it is too noisy to tell.
        others = [r for r in eligible if r["num_workers"] != current_nw]
        if paired and paired.get("current") == current_nw and paired.get("windows"):
            runner_up = paired.get("candidate")
            said, said_interval = judge_pairing(paired, runner_up, current_nw) if runner_up is not None \
                else ("unpaired", None)
            settled = said == "loss"
            interval = interval if settled else said_interval
        else:
            runner_up = max(others, key=_rate)["num_workers"] if others else None
            settled = False
        if runner_up is not None and not settled:
            trust = "too-noisy"
    unmeasured = unmeasured_for_budget(section, usable_cpus)
    clear = False
    if trust not in ("gain", "loss") and unmeasured and chosen["num_workers"] < max(unmeasured):
        # The curve was cut before the CPUs: a knee below the cut is no knee, only where the budget ended.
        trust = "incomplete"
        # Unless a measured setting already beats the user's by far more than one stretch of noise does:
        # that much is gained at least, whatever the unmeasured counts would add.
        clear = (current_run is not None and chosen["num_workers"] != current_nw
                 and _rate(chosen) >= CLEAR_GAIN * _rate(current_run))
    candidate_nw: int | None = None
    if (trust in ("loss", "too-noisy") or (trust == "incomplete" and not clear)) and current_run is not None:
        candidate_nw = chosen["num_workers"] if chosen["num_workers"] != current_nw else runner_up
        chosen, basis = current_run, "current"
    nw = chosen["num_workers"]
    pin = section.get("pin_memory", {})
    pinned, unpinned = pin.get("pinned_samples_per_s"), pin.get("unpinned_samples_per_s")
    pin_memory = bool(cuda) and not (pinned and unpinned and pinned < 0.95 * unpinned)
    if basis == "current":
        # Kept: the user's own setting, as it is.
        prefetch = current.get("prefetch_factor")
        persistent = current.get("persistent_workers", False)
    else:
        prefetch = None if nw == 0 else (4 if bottleneck == "storage" else 2)
        persistent = nw > 0
    left_out: list[LeftOut] = [{"num_workers": r["num_workers"], "samples_per_s": _rate(r),
                                "worker_runqueue": r.get("worker_runqueue")}
                               for r in runs if computes_past_cpus(r, usable_cpus)]
    gain = None
    rate = _rate(chosen)
    if interval is not None:
        gain = round(interval[1], 3)
        if basis != "current" and paired and paired.get("candidate") == nw:
            # The gain is the pairs' word, and so is the rate beside it: the sweep's one point for this
            # count may be one a neighbour sank (280 samples/s shown as "1.57× the 365 of your settings").
            rate = paired_median(paired, "candidate_samples_per_s") or rate
    elif current_run is not None:
        gain = round(_rate(chosen) / _rate(current_run), 3)
    return {
        "num_workers": nw,
        "prefetch_factor": prefetch,
        "persistent_workers": persistent,
        "pin_memory": pin_memory if basis != "current" else current.get("pin_memory", False),
        "samples_per_s": rate,
        "best_samples_per_s": max(_rate(r) for r in eligible),
        "left_out": left_out,
        "current_samples_per_s": current_run["samples_per_s"] if current_run else None,
        "gain": gain,
        "gain_interval": [round(interval[0], 3), round(interval[2], 3)] if interval is not None else None,
        "paired_windows": len(paired.get("windows", [])) if paired and trust != "unpaired" else 0,
        "basis": basis,
        "consumer_samples_per_s": round(consumer, 2) if consumer else None,
        "trust": trust,
        "candidate_num_workers": candidate_nw,
        "unmeasured": unmeasured if trust == "incomplete" else [],
        "current_basis": "paired" if current_run is not None and "sweep_samples_per_s" in current_run else "sweep",
        "current_sweep_samples_per_s": (current_run.get("sweep_samples_per_s", current_run["samples_per_s"])
                                        if current_run else None),
    }


def differs_from_current(recommendation: Recommendation, current: CurrentSettings) -> list[str]:
    """The settings the user would change, as `name=value` strings."""
    changes = []
    want: dict[str, Any] = dict(recommendation)
    have: dict[str, Any] = dict(current)
    for key in ("num_workers", "prefetch_factor", "persistent_workers", "pin_memory"):
        if key == "prefetch_factor" and not recommendation["num_workers"]:
            continue
        if want.get(key) != have.get(key):
            changes.append(f"{key}={want.get(key)}")
    return changes


def paired_median(paired: PairedFacts, side: Literal["current_samples_per_s", "candidate_samples_per_s"]
                   ) -> float | None:
    """The median rate of one side of the paired windows (rounded as the runner's), or None with fewer than two."""
    rates = sorted(w[side] for w in paired.get("windows") or [] if w[side] > 0)
    if len(rates) < 2:
        return None
    middle = len(rates) // 2
    return round(rates[middle] if len(rates) % 2 else (rates[middle - 1] + rates[middle]) / 2, 2)


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


def verdict(section: LoaderFacts, step_time_s: float | None) -> LoaderVerdict:
    """The whole verdict on one loader section (the baseline rated by the paired windows, when measured)."""
    section = with_paired_baseline(section)
    usable = section.get("usable_cpus") or 1
    bottleneck, reason = classify(section, usable, step_time_s)
    cuda = section.get("torch", {}).get("cuda_available", False)
    chosen = knee(measured_runs(section), usable)
    batch_size = section.get("batch_size")
    return {
        "bottleneck": bottleneck,
        "bottleneck_reason": reason,
        "knee": chosen["num_workers"] if chosen else None,
        "recommendation": recommend(section, bottleneck, cuda, usable, step_time_s),
        "consumer_samples_per_s": round(batch_size / step_time_s, 2) if step_time_s and batch_size else None,
    }


def report_section(section: LoaderFacts, step_time_s: float | None) -> LoaderReport:
    """The report's `loader` object: the facts (less the torch probe, which belongs under torch) and the
    verdict."""
    facts = cast(dict[str, Any], {k: v for k, v in section.items() if k != "torch_probe"})
    return cast(LoaderReport, {**facts, **verdict(section, step_time_s)})
