"""DL rules: what the live DataLoader smoke test found.

The measuring happens in `envdoctor.loader` (facts, observations only); the
judgement — bottleneck class, knee, recommendation and its trust — is decided
once per check, in `envdoctor.judge.loader`; these rules say it as findings,
with the numbers that back them and the settings to use.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from envdoctor.facts import Facts
from envdoctor.facts.loader import CurrentSettings, LoaderFacts, Recommendation
from envdoctor.inside.loader_knee import STEP_HEADROOM
from envdoctor.judge.bottleneck import measured_runs, startup_cost
from envdoctor.judge.loader import JudgedLoader, loader_judgement
from envdoctor.model import Severity
from envdoctor.rules import Hit

#: DL004 fires when start-up is at least this share of one epoch's loading time.
STARTUP_NOTICE_SHARE = 0.25
#: DL007 fires when at least this share of the samples seen with workers repeat one seen before.
DUPLICATE_SHARE = 0.2


def _users_data(facts: Facts) -> JudgedLoader | None:
    """The judged section when it measured the user's own data, else None.

    The built-in synthetic dataset measures the machine (workers, start-up, IPC),
    not the user's data code: judging its __getitem__ would be a wrong diagnosis.
    """
    judged = loader_judgement(facts)
    if judged is None or judged.section.get("source", {"kind": ""})["kind"] == "synthetic":
        return None
    return judged


def _undecoded(section: LoaderFacts) -> int:
    """Image files of a --data folder that were read but not decoded (no Pillow in the environment)."""
    count = section.get("decoding", {}).get("undecoded_images")
    return count if isinstance(count, int) else 0


def _undecoded_note(section: LoaderFacts) -> str:
    """What every DL005 says when a --data folder's images were read but not decoded ("" otherwise)."""
    undecoded = _undecoded(section)
    return (f" — measured on {undecoded} image file(s) read but not decoded (no Pillow in the environment), "
            "so it shows how reading scales, not your decoding pipeline; install pillow there or pass --dataset"
            if undecoded else "")


def _users_sample_code(facts: Facts) -> JudgedLoader | None:
    """The section when its per-sample work is the user's: not when images went undecoded, since
    reading alone says nothing of what decoding costs or how workers share it."""
    judged = _users_data(facts)
    return judged if judged and not _undecoded(judged.section) else None


def _current(section: LoaderFacts) -> CurrentSettings:
    """The user's settings; empty when the stage never got to read them (no interpreter, a bad factory)."""
    current = section["current"]
    return current if current is not None else {}


def _settings_text(rec: Recommendation, batch_size: int | None = None) -> str:
    parts = [f"num_workers={rec['num_workers']}"]
    if rec["num_workers"]:
        parts += [f"prefetch_factor={rec['prefetch_factor']}", f"persistent_workers={rec['persistent_workers']}"]
    parts.append(f"pin_memory={rec['pin_memory']}")
    if batch_size:
        parts.insert(0, f"batch_size={batch_size}")
    return "DataLoader(dataset, " + ", ".join(parts) + ")"


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


def _rate(value: float | None) -> str:
    return f"{value:,.0f} samples/s" if isinstance(value, (int, float)) else "unknown"


def _curve(section: LoaderFacts) -> dict[str, float | None]:
    return {str(r["num_workers"]): r["samples_per_s"] for r in measured_runs(section)}


def find_slow_loader(facts: Facts) -> Iterator[Hit]:
    """DL001: the loader, as configured, is slower than the training step consumes."""
    judged = _users_data(facts)
    step = facts.config.step_time
    if not judged or not step or not judged.section.get("batch_size") or not judged.rec:
        return
    section, rec = judged.section, judged.rec
    current_rate = rec["current_samples_per_s"]
    if current_rate is None:
        return
    batch_size = section.get("batch_size", 1)
    consumer = batch_size / step
    if current_rate >= consumer:
        return
    best = rec["best_samples_per_s"]
    if best >= consumer:
        fix = (f"use {_settings_text(rec)}: it measured {_rate(rec['samples_per_s'])}, enough for the "
               f"{_rate(consumer)} the step needs")
    else:
        fix = ("no worker setting keeps up: make __getitem__ cheaper (decode smaller images, move augmentation "
               "to the GPU, cache decoded samples or use a packed format) or add CPUs; "
               f"meanwhile use {_settings_text(rec)}")
    current = _current(section)
    yield Hit(
        message=(f"the DataLoader as configured delivers {_rate(current_rate)} but a {step:g} s step with "
                 f"batch_size {batch_size} consumes {_rate(consumer)}: the accelerator waits "
                 f"{1 - current_rate / consumer:.0%} of the time"),
        evidence={"current_samples_per_s": current_rate, "consumer_samples_per_s": round(consumer, 2),
                  "step_time_s": step, "batch_size": batch_size,
                  "current_num_workers": current.get("num_workers"),
                  "best_samples_per_s": best, "bottleneck": judged.bottleneck},
        fix=fix,
    )


def find_workers_no_gain(facts: Facts) -> Iterator[Hit]:
    """DL002: workers do not beat num_workers=0 in steady state (the handover is the cost: IPC)."""
    judged = _users_sample_code(facts)
    if not judged or judged.bottleneck != "ipc":
        return
    section = judged.section
    runs = measured_runs(section)
    zero = next((r for r in runs if r["num_workers"] == 0), None)
    workers = [r for r in runs if r["num_workers"] > 0]
    if zero is None or not workers:
        return
    best = max(workers, key=lambda r: r["samples_per_s"] or 0.0)
    getitem = section.get("getitem", {})
    batch_bytes = section["batch_bytes"]
    batch_size = section.get("batch_size", 1)
    # Already at num_workers=0 nothing is wrong: worth knowing before adding workers, not a warning.
    already = (_current(section)).get("num_workers", 0) == 0
    large = bool(batch_bytes and batch_bytes / max(1, batch_size) >= 256 * 1024)
    size_text = f" ({batch_bytes / 2**20:.1f} MiB a batch)" if batch_bytes else ""
    smaller = ("send fewer and smaller tensors from each worker: uint8 images instead of float32 (4× fewer "
               "bytes), normalise and augment on the GPU after .to(device), drop fields training does not use")
    batched = ("give each worker more to do per handover: a larger batch_size, or a batched __getitems__ / a "
               "sampler that yields whole batches of indices so one transfer carries many samples")
    lose = (best["samples_per_s"] or 0.0) < (zero["samples_per_s"] or 0.0)
    headline = (f"workers do not help: num_workers=0 delivers {_rate(zero['samples_per_s'])}, the best worker "
                f"setting (num_workers={best['num_workers']}) {_rate(best['samples_per_s'])}; moving each "
                f"batch{size_text} between processes costs more than making it" if lose else
                f"the loader's time goes into building and moving batches{size_text}, not into __getitem__ "
                f"({judged.judgement['bottleneck_reason']}); workers only spread that cost over more processes "
                f"(num_workers={best['num_workers']}: {_rate(best['samples_per_s'])} against "
                f"{_rate(zero['samples_per_s'])} with none)")
    yield Hit(
        message=headline + ("; your num_workers=0 is already the better setting" if already and lose else ""),
        evidence={"num_workers_0_samples_per_s": zero["samples_per_s"],
                  "best_worker_setting": best["num_workers"], "best_worker_samples_per_s": best["samples_per_s"],
                  "getitem_s": getitem.get("per_sample_s"), "batch_size": section.get("batch_size"),
                  "batch_bytes": batch_bytes, "curve": _curve(section),
                  "reason": judged.judgement["bottleneck_reason"]},
        fix=((("keep num_workers=0" if already else "use num_workers=0") + ", or " if lose else "")
             + (f"{smaller}; or {batched}" if large else f"{batched}; or {smaller}")),
        severity=Severity.INFO if already and lose else None,
    )


def find_slow_getitem(facts: Facts) -> Iterator[Hit]:
    """DL003: the time goes into __getitem__ (reading, decoding, transforms)."""
    judged = _users_sample_code(facts)
    if not judged or judged.bottleneck not in ("getitem", "storage", "cpu-saturated", "cpu-contended") \
            or not judged.rec:
        return
    section, rec = judged.section, judged.rec
    getitem = section.get("getitem", {})
    runs = measured_runs(section)
    zero = next((r for r in runs if r["num_workers"] == 0), None)
    kind = judged.bottleneck
    reason = judged.judgement["bottleneck_reason"]
    per_sample = getitem.get("per_sample_s")
    cost = f"{per_sample * 1e3:.2f} ms" if per_sample else "unknown"
    if kind == "storage":
        message = (f"__getitem__ takes {cost} a sample and mostly waits on reads ({reason}); throughput rises "
                   f"with workers up to {_rate(rec['best_samples_per_s'])}")
        fix = (f"use {_settings_text(rec)} (waiting workers may outnumber CPUs); move the data to local "
               "SSD or page cache, or pack small files into shards (WebDataset, LMDB, HDF5) and read them "
               "sequentially")
    elif kind == "cpu-contended":
        message = f"__getitem__ takes {cost} a sample in the main process, on CPUs other processes hold ({reason})"
        fix = (f"use {_settings_text(rec)} while the other load runs, and check again on a quiet machine (or "
               "the training node): what workers gain here is CPU share taken from other processes; make the "
               "per-sample work cheaper (cache decoded or resized samples, augment on the GPU)")
    elif kind == "cpu-saturated":
        message = (f"__getitem__ costs {cost} of CPU a sample and the usable CPUs are saturated "
                   f"({reason}): more workers cannot help")
        fix = (f"use {_settings_text(rec)} and make the per-sample work cheaper: decode at lower "
               "resolution, cache decoded or resized samples, move augmentation to the GPU (e.g. batched "
               "transforms after .to(device)), or add CPUs")
    else:
        message = (f"__getitem__ costs {cost} a sample and limits the loader; throughput rises with workers "
                   f"(from {_rate(zero['samples_per_s'] if zero else None)} with none to "
                   f"{_rate(rec['best_samples_per_s'])})")
        fix = (f"use {_settings_text(rec)}, and make __getitem__ cheaper (profile it with "
               "`python -m cProfile`; cache, decode smaller, move augmentation to the GPU)")
    evidence: dict[str, object] = {
        "bottleneck": kind, "getitem_s": per_sample, "cpu_fraction": getitem.get("cpu_fraction"),
        "blocked_fraction": getitem.get("blocked_fraction"), "curve": _curve(section),
        "recommended_num_workers": rec["num_workers"]}
    if "read_s" in getitem and "decode_s" in getitem:
        evidence.update(read_s=getitem["read_s"], decode_s=getitem["decode_s"])
    others = judged.others_cpus
    if others is not None:
        evidence.update(others_cpu=others, usable_cpus=section.get("usable_cpus"))
    yield Hit(message=message, evidence=evidence, fix=fix)


def find_slow_worker_startup(facts: Facts) -> Iterator[Hit]:
    """DL004: first-batch latency is dominated by worker start-up."""
    judged = _users_data(facts)
    if not judged:
        return
    section = judged.section
    length = section.get("length")
    current = _current(section)
    if not length or current.get("persistent_workers"):
        return
    runs = measured_runs(section)
    chosen = next((r for r in runs if r["num_workers"] == judged.judgement["knee"]), None)
    if chosen is None or chosen["num_workers"] == 0:
        workers = [r for r in runs if r["num_workers"] > 0]
        if judged.bottleneck != "startup" or not workers:
            return
        chosen = max(workers, key=lambda r: r["samples_per_s"] or 0.0)
    startup = startup_cost(chosen, section.get("batch_size", 1))
    if startup is None or not chosen["samples_per_s"]:
        return
    epoch_load = length / chosen["samples_per_s"]
    share = startup / (startup + epoch_load)
    if judged.bottleneck != "startup" and (startup < 0.25 or share < STARTUP_NOTICE_SHARE):
        return
    persistent = section.get("persistent", {})
    yield Hit(
        message=(f"starting {chosen['num_workers']} worker(s) takes {startup:.2f} s before the first batch, "
                 f"{share:.0%} of an epoch's loading time ({epoch_load:.2f} s for {length} samples); "
                 "without persistent_workers this is paid again every epoch"),
        evidence={"num_workers": chosen["num_workers"], "first_batch_s": chosen["first_batch_s"],
                  "startup_s": round(startup, 4), "epoch_load_s": round(epoch_load, 4),
                  "startup_share": round(share, 3), "epoch_saving_s": persistent.get("saving_s"),
                  "saving_measured": persistent.get("measured", bool(persistent)),
                  "start_method": section.get("start_method")},
        fix=("DataLoader(..., persistent_workers=True) so workers survive between epochs; and keep worker "
             "start-up cheap: open files/databases lazily once per worker, keep the dataset object small "
             "(it is copied or pickled into every worker), prefer fork where it is safe"),
    )


def _trust_text(rec: Recommendation) -> str:
    interval = rec["gain_interval"]
    if interval is None:
        return ""
    return (f"; re-measured in {rec['paired_windows']} interleaved paired windows against your setting: "
            f"{rec['gain']:.2f}× (95% interval {interval[0]:.2f}–{interval[1]:.2f})")


def find_loader_settings(facts: Facts) -> Iterator[Hit]:
    """DL005: the recommended settings, when they differ from the current ones (or the machine was too
    noisy to tell whether they would)."""
    judged = loader_judgement(facts)
    if not judged or not judged.rec:
        return
    section, rec = judged.section, judged.rec
    current = _current(section)
    synthetic = section.get("source", {"kind": ""})["kind"] == "synthetic"
    curve = _curve(section)
    if rec["trust"] == "incomplete" and rec["basis"] == "current":
        unmeasured = ", ".join(str(n) for n in rec["unmeasured"])
        yield Hit(
            message=(f"the budget ended before num_workers={unmeasured} could be measured (the curve up to the "
                     f"{section.get('usable_cpus')} usable CPU(s) is incomplete), so no setting can be called "
                     f"best; keep your settings" + _undecoded_note(section)),
            evidence={"trust": "incomplete", "unmeasured": rec["unmeasured"], "curve": curve,
                      "budget_s": section.get("budget_s"), "current_num_workers": current.get("num_workers", 0)},
            fix="re-run `envdoctor loader` with a longer --budget (importing torch alone took "
                f"{section.get('torch', {}).get('import_s', 0.0):.1f} s of it)",
            severity=Severity.INFO,
        )
        return
    if rec["trust"] in ("too-noisy", "loss"):
        candidate = rec["candidate_num_workers"]
        said_text = ("the machine was too noisy to tell" if rec["trust"] == "too-noisy"
                        else "it lost to your setting")
        others = judged.others_cpus
        unpaired = not rec["paired_windows"]
        if others is not None and (judged.bottleneck == "cpu-contended" or (judged.contended and unpaired)):
            # Its own figures, not the bottleneck's whole reason: DL003 and the summary give that once.
            why = (f"other processes kept {others:.1f} of the {section.get('usable_cpus')} usable CPU(s) busy"
                   + (", and the sweep timed each setting in one stretch of their load" if unpaired else "")
                   + _trust_text(rec))
            message = (f"whether num_workers={candidate} beats your num_workers={current.get('num_workers', 0)} "
                       f"cannot be told from this run: {why}; keep your settings")
        else:
            message = (f"num_workers={candidate} measured best in the sweep, but re-measured in interleaved paired "
                       f"windows against your num_workers={current.get('num_workers', 0)} {said_text}"
                       + _trust_text(rec) + "; keep your settings")
        message += _undecoded_note(section)
        yield Hit(
            message=message,
            evidence={"trust": rec["trust"], "candidate_num_workers": candidate,
                      "current_num_workers": current.get("num_workers", 0), "gain": rec["gain"],
                      "gain_interval": rec["gain_interval"], "paired_windows": rec["paired_windows"],
                      "curve": curve, "bottleneck": judged.bottleneck, "others_cpu": others,
                      "current_samples_per_s": rec["current_samples_per_s"], "current_basis": rec["current_basis"]},
            fix=("keep your settings; to decide, re-run `envdoctor loader` when the machine is quieter, or with "
                 "a longer --budget"),
            severity=Severity.INFO,
        )
        return
    changes = differs_from_current(rec, current)
    if not changes:
        return
    gain = rec["gain"]
    gain_text = (f", {gain:.2f}× the {_rate(rec['current_samples_per_s'])} of your settings"
                 if gain else "")
    left_out = rec["left_out"]
    usable = section.get("usable_cpus")
    past_cpus = ""
    if left_out:
        counts = ", ".join(f"num_workers={r['num_workers']} ({_rate(r['samples_per_s'])})" for r in left_out)
        past_cpus = (f"; {counts} left out: its workers compute and outnumber the "
                     f"{usable} usable CPUs, so what it measured above them is noise or "
                     "CPU time taken from other processes, the training process among them")
    if rec["basis"] == "step":
        step = section.get("step_time_s") or facts.config.step_time or 0.0
        why = (f"the fewest workers that deliver {STEP_HEADROOM:g}× the {_rate(rec['consumer_samples_per_s'])} "
               f"a {step:g} s step consumes; more only add processes and memory")
    elif rec["basis"] == "paired":
        why = "the sweep's runner-up, faster than yours where the two were timed in turn"
    else:
        why = f"the smallest num_workers within 95% of the best, {_rate(rec['best_samples_per_s'])}"
    evidence: dict[str, object] = {
        "recommendation": {"num_workers": rec["num_workers"], "prefetch_factor": rec["prefetch_factor"],
                           "persistent_workers": rec["persistent_workers"], "pin_memory": rec["pin_memory"]},
        "current": {"num_workers": current.get("num_workers"), "prefetch_factor": current.get("prefetch_factor"),
                    "persistent_workers": current.get("persistent_workers"),
                    "pin_memory": current.get("pin_memory")},
        "samples_per_s": rec["samples_per_s"], "current_samples_per_s": rec["current_samples_per_s"],
        "gain": gain, "gain_interval": rec["gain_interval"], "paired_windows": rec["paired_windows"],
        "trust": rec["trust"], "bottleneck": judged.bottleneck, "curve": curve, "basis": rec["basis"]}
    if left_out:
        evidence.update(left_out=left_out, usable_cpus=usable)
    others = judged.others_cpus
    evidence.update(others_cpu=others, current_basis=rec["current_basis"],
                    current_sweep_samples_per_s=rec["current_sweep_samples_per_s"])
    if rec["trust"] == "incomplete":
        evidence.update(unmeasured=rec["unmeasured"])
        past_cpus += (f"; the budget ended before num_workers={', '.join(str(n) for n in rec['unmeasured'])} "
                      f"could be measured, so more workers may gain more (re-run with a longer --budget)")
    if judged.bottleneck == "cpu-contended":
        past_cpus += (f"; other processes kept {others} of the {usable} usable CPU(s) busy meanwhile, so part of "
                      "the gain is CPU share taken from them: check again on the training node")
    wsl = _wsl_pin_note(facts, rec, current)
    if wsl:
        evidence.update(wsl_version=facts["system"]["wsl"]["version"])
    yield Hit(
        message=(f"recommended: {', '.join(changes)} — measured {_rate(rec['samples_per_s'])}{gain_text} "
                 f"({why})" + _trust_text(rec) + past_cpus
                 + (" on the built-in synthetic dataset, which shows how this machine scales workers; "
                    "pass --dataset or --data to measure your own" if synthetic else "")
                 + _undecoded_note(section) + wsl),
        evidence=evidence,
        fix=_settings_text(rec, current.get("batch_size")),
    )


def _wsl_pin_note(facts: Facts, rec: Recommendation, current: CurrentSettings) -> str:
    """Under WSL, pinned host memory is capped: a recommendation to turn pin_memory on says so (SYS009)."""
    system = facts.get("system") or {}
    wsl = system.get("wsl") if isinstance(system, dict) else None
    if not rec["pin_memory"] or current.get("pin_memory") or not wsl or not wsl.get("version"):
        return ""
    return (f"; under WSL {wsl['version']} pinned host memory is capped, so pin_memory=True may fail ('pin memory "
            "thread exited unexpectedly') or slow copies: keep pin_memory=False if it does (SYS009)")


_FAILURE_WORDS = {
    "raised": "raised an exception",
    "hung": "hung",
    "crashed": "killed the process fetching it",
    "memory": "used too much memory",
    "collate": "returned samples that cannot be collated",
    "factory": "could not be built",
    "empty": "yielded no samples",
    "shm": "could not be handed over through shared memory",
}

_FAILURE_FIX = {
    "raised": "fix __getitem__ for that index (run `dataset[{index}]` under a debugger); if __len__ promises "
              "more samples than exist, make it return the real count",
    "hung": "find what __getitem__({index}) waits for (a lock, a network read without timeout, a queue); "
            "give reads a timeout and set DataLoader(timeout=...) so a stuck worker raises instead of hanging",
    "crashed": "run `dataset[{index}]` in a worker-like child (or with `python -X faulthandler`) to get the "
               "native traceback; native libraries that are not fork-safe (OpenCV threads, CUDA, some HDF5 "
               "builds) need multiprocessing_context='spawn' or opening per worker",
    "memory": "load samples lazily in __getitem__ instead of materialising large arrays; check the sample "
              "size and dtype",
    "collate": "return tensors, numbers, NumPy arrays or dicts/lists of them from __getitem__, or pass a "
               "collate_fn that knows your sample type",
    "factory": "make `{spec}` importable from the working directory and return a Dataset "
               "(or a (Dataset, DataLoader kwargs) pair) without errors",
    "empty": "check the data path and the dataset's file listing",
    "shm": "give /dev/shm room for batch bytes × num_workers × prefetch_factor (docker run --shm-size=8g, "
           "or --ipc=host; see SYS002), or lower num_workers, prefetch_factor or the batch size",
}


def find_dataset_failure(facts: Facts) -> Iterator[Hit]:
    """DL006: the dataset raised, hung or killed its worker during the smoke test."""
    section = facts["loader"]
    failure = section["failure"] if section else None
    if not section or not failure or failure.get("kind") == "pickle":
        return
    kind = failure.get("kind", "raised")
    if kind == "crashed" and failure.get("signal") == "SIGBUS":
        kind = "shm"  # a worker writing a batch into a full /dev/shm dies of SIGBUS
    index = failure.get("index")
    nw = failure.get("num_workers")
    where = "in the main process" if not nw else f"in a worker (num_workers={nw})"
    at = f" at index {index}" if index is not None else ""
    message = f"the dataset {_FAILURE_WORDS.get(kind, kind)}{at} {where}: {failure.get('message')}"
    fix = _FAILURE_FIX.get(kind, _FAILURE_FIX["raised"]).format(
        index=index if index is not None else "i", spec=section["dataset"])
    yield Hit(
        message=message,
        evidence={"kind": kind, "index": index, "num_workers": nw, "where": failure.get("where"),
                  "exception": failure.get("exception"), "signal": failure.get("signal"),
                  "dataset": section["dataset"]},
        fix=fix,
    )


def find_iterable_duplicates(facts: Facts) -> Iterator[Hit]:
    """DL007: an IterableDataset yields the same samples from every worker."""
    section = facts["loader"]
    if not section or "duplicates" not in section:
        return
    dup = section["duplicates"]
    seen_n, repeats_n = dup.get("samples_n", 0), dup.get("duplicates_n", 0)
    seen_0, repeats_0 = dup.get("samples_0", 0), dup.get("duplicates_0", 0)
    if not seen_n or repeats_n < DUPLICATE_SHARE * seen_n:
        return
    if seen_0 and repeats_0 / seen_0 >= 0.5 * repeats_n / seen_n:
        return  # the stream repeats itself without workers too: that is the data, not the workers
    workers = dup.get("num_workers", 2)
    most = dup.get("most_repeats_n", 0)
    yield Hit(
        message=(f"the IterableDataset repeats samples across workers: of {seen_n} samples read with "
                 f"num_workers={workers}, {repeats_n} repeat one already seen (a sample came up to {most} "
                 f"times), against {repeats_0} of {seen_0} with num_workers=0; every worker iterates the whole "
                 f"stream, so an epoch with {workers} workers holds each sample {workers} times"),
        evidence={"num_workers": workers, "samples_n": seen_n, "duplicates_n": repeats_n, "most_repeats_n": most,
                  "samples_0": seen_0, "duplicates_0": repeats_0, "bounded": dup.get("bounded", True),
                  "dataset": section["dataset"]},
        fix=("shard the stream per worker in __iter__: `info = torch.utils.data.get_worker_info()`; when info "
             "is not None, yield only the records with `index % info.num_workers == info.id` (or split the file "
             "list / the index range by info.id); with DistributedSampler-like sharding, shard by rank too"),
    )


def find_cloned_worker_rng(facts: Facts) -> Iterator[Hit]:
    """DL008: every worker draws the same "random" values from a generator the dataset holds."""
    section = facts["loader"]
    if not section or "rng" not in section:
        return
    rng = section["rng"]
    if not rng.get("main_differs") or not rng.get("workers_identical"):
        return
    index = rng.get("index")
    yield Hit(
        message=(f"the dataset's randomness is cloned into every worker: dataset[{index}] drawn twice in the "
                 f"main process differs (the sample is random), yet the first draws of {index} by two workers "
                 "are identical; the generator the dataset holds (np.random.default_rng, random.Random, a "
                 "torch.Generator made in __init__) is copied into each worker with the same state"),
        evidence={"index": index, "main_differs": True, "workers_identical": True,
                  "num_workers": rng.get("num_workers", 2), "worker_init_fn": rng.get("worker_init_fn"),
                  "dataset": section["dataset"]},
        fix=("reseed the dataset's generator in each worker: `def worker_init_fn(worker_id): info = "
             "torch.utils.data.get_worker_info(); info.dataset.rng = np.random.default_rng(info.seed)` and pass "
             "DataLoader(..., worker_init_fn=worker_init_fn); or draw from torch's generator "
             "(torch.randint(..., generator=None)), which torch reseeds in every worker"),
    )


RULES = {
    "DL001": find_slow_loader,
    "DL002": find_workers_no_gain,
    "DL003": find_slow_getitem,
    "DL004": find_slow_worker_startup,
    "DL005": find_loader_settings,
    "DL006": find_dataset_failure,
    "DL007": find_iterable_duplicates,
    "DL008": find_cloned_worker_rng,
}
