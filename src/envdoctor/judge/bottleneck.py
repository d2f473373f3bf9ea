"""The loader's bottleneck: which class of cause limits it, and one sentence saying why.

Pure functions of the `loader` facts (no processes, no clocks), so the
classification can be tested on recorded numbers as well as on live runs. It
is part of the loader judgement (`envdoctor.judge.loader`), decided once per
check and read by the DL rules, SYS005 and the report's `loader` object.

The bottleneck classes are one predicate each, tried in this order (the
first that holds names the class):

- none: a step time is known and the loader outruns the step;
- startup: worker start-up takes over half the time of an epoch's loading;
- ipc: `__getitem__` is a minor share of what a sample costs at
  num_workers=0 (collating and moving batches is the cost), or workers do not
  beat num_workers=0 (on CPUs other processes hold: lose to it by more than
  their load explains, CLEAR_GAIN) and moving samples costs more CPU than
  making them (or the workers sit idle while the main process unpacks): large
  cheap samples are IPC-bound whatever CPU the copies burn;
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
"""
from __future__ import annotations

from collections.abc import Callable

from envdoctor.facts.loader import Bottleneck, GetitemFacts, LoaderFacts, RunFacts
from envdoctor.inside.loader_knee import (
    BLOCKED_SHARE,
    WORKER_GAIN,
    computing_share,
    eligible_runs,
    knee,
    measured,
)
from envdoctor.judge.pairing import gain_interval

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
#: Other processes keeping this many of the usable CPUs busy make them contended (not the loader's own).
CONTENDED_CPUS = 0.5
#: One setting this many times another's rate is no stretch of noise, even on contended CPUs: where the budget
#: cut the curve it is still recommended, and unpaired on contended CPUs it still stands (or, lost by, names IPC).
CLEAR_GAIN = 2.0
#: The main process's intra-op pool contends when one thread makes a sample this much faster (SYS005) ...
POOL_SLOWDOWN = 1.5
#: ... and saves at least this much a sample (below it, timer noise).
POOL_SLOWDOWN_FLOOR_S = 0.0002

def measured_runs(section: LoaderFacts) -> list[RunFacts]:
    return measured(section["runs"])


def loses_clearly(run: RunFacts, rate: float) -> bool:
    """Whether `run` falls short of `rate` by more than one stretch of other processes' load explains: even its
    fastest window is under 1 / CLEAR_GAIN of that rate."""
    return CLEAR_GAIN * (run.get("samples_per_s_max") or _rate(run)) <= rate


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


def contended(others: float | None) -> bool:
    """Whether other processes held enough of the usable CPUs that one stretch of time per setting cannot rank
    the settings: each sweep point may have been slowed by a different share of their load."""
    return others is not None and others >= CONTENDED_CPUS


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
        return contended(self.others)

    def workers_lose(self) -> bool:
        """Conclusively, workers do not beat num_workers=0 (in the best worker run's fastest window too)."""
        zero, best = self.zero, self.best_worker
        if zero is None or best is None:
            return False
        # One worker at best matches num_workers=0; only losing to it, or failing with several, says so.
        conclusive = _rate(best) < WORKER_LOSS * _rate(zero) or any(r["num_workers"] >= 2 for r in self.workers)
        best_window = best.get("samples_per_s_max") or _rate(best)
        return conclusive and best_window < WORKER_GAIN * _rate(zero)

    def workers_lose_clearly(self) -> bool:
        """Workers lose to num_workers=0 by more than one stretch of other processes' load explains: the best
        worker run's fastest window is under 1 / CLEAR_GAIN of num_workers=0 (tiny samples: ×50)."""
        zero, best = self.zero, self.best_worker
        if zero is None or best is None:
            return False
        return loses_clearly(best, _rate(zero))


def is_no_bottleneck(ev: Evidence) -> str | None:
    if not ev.step_time_s:
        return None
    consumer = ev.batch_size / ev.step_time_s
    rate = _rate(ev.chosen)
    if rate < consumer:
        return None
    return (f"the loader delivers {rate:,.0f} samples/s with num_workers={ev.chosen['num_workers']}, "
            f"more than the {consumer:,.0f} samples/s a {ev.step_time_s:g} s step consumes")


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
    if not ev.workers_lose() or (ev.contended and not ev.workers_lose_clearly()):
        # On CPUs other processes hold, workers that merely do not gain prove nothing about the handover: each
        # setting was timed in its own stretch of their load (cpu-contended, or storage, says so instead).
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
    return (f"the best worker setting (num_workers={best['num_workers']}, {_rate(best):,.0f} samples/s) does not "
            f"beat num_workers=0 ({_rate(zero):,.0f} samples/s): handing batches{bytes_text} between processes "
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
        return (busy + f"; workers raise throughput from {_rate(zero):,.0f} samples/s with num_workers=0 to "
                f"{_rate(best):,.0f} with num_workers={best['num_workers']} (×{gain:.2f}) by taking CPU share "
                f"from them" + (" and escaping that contention" if pool else "")
                + f", so the knee, num_workers={ev.chosen['num_workers']}, holds only while they run"
                + threads + _paired_text(ev))
    return (busy + f", so the sweep cannot tell whether workers help: num_workers=0 measured {_rate(zero):,.0f} "
            f"samples/s and the best worker setting (num_workers={best['num_workers']}) {_rate(best):,.0f}, "
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
    return None, (f"num_workers={ev.best_worker['num_workers']} ({_rate(ev.best_worker):,.0f} samples/s) does not "
                  f"beat num_workers=0 ({_rate(ev.zero):,.0f} samples/s), and no more workers were measured: "
                  "nothing tells the causes apart")
