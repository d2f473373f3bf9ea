"""DL rules and SPW003: what the live DataLoader smoke test found.

The measuring and the classification happen in `envdoctor.loader`; these
rules only read the `loader` section and say it as findings, with the numbers
that back them and the settings to use.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from envdoctor.facts import Facts
from envdoctor.loader.diagnose import STEP_HEADROOM, differs_from_current, knee, measured_runs, startup_cost
from envdoctor.model import Severity
from envdoctor.rules import Hit

#: DL004 fires when start-up is at least this share of one epoch's loading time.
STARTUP_NOTICE_SHARE = 0.25


def _section(facts: Facts) -> dict[str, Any] | None:
    return facts.get("loader") or None


def _users_data(facts: Facts) -> dict[str, Any] | None:
    """The loader section when it measured the user's own data, else None.

    The built-in synthetic dataset measures the machine (workers, start-up, IPC),
    not the user's data code: judging its __getitem__ would be a wrong diagnosis.
    """
    section = _section(facts)
    if not section or (section.get("source") or {}).get("kind") == "synthetic":
        return None
    return section


def _undecoded(section: dict[str, Any]) -> int:
    """Image files of a --data folder that were read but not decoded (no Pillow in the environment)."""
    return int((section.get("decoding") or {}).get("undecoded_images") or 0)


def _users_sample_code(facts: Facts) -> dict[str, Any] | None:
    """The section when its per-sample work is the user's: not when images went undecoded, since
    reading alone says nothing of what decoding costs or how workers share it."""
    section = _users_data(facts)
    return section if section and not _undecoded(section) else None


def _settings_text(rec: dict[str, Any], batch_size: Any = None) -> str:
    parts = [f"num_workers={rec['num_workers']}"]
    if rec["num_workers"]:
        parts += [f"prefetch_factor={rec['prefetch_factor']}", f"persistent_workers={rec['persistent_workers']}"]
    parts.append(f"pin_memory={rec['pin_memory']}")
    if batch_size:
        parts.insert(0, f"batch_size={batch_size}")
    return "DataLoader(dataset, " + ", ".join(parts) + ")"


def _rate(value: Any) -> str:
    return f"{value:,.0f} samples/s" if isinstance(value, (int, float)) else "unknown"


def _curve(section: dict[str, Any]) -> dict[str, Any]:
    return {str(r["num_workers"]): r["samples_per_s"] for r in measured_runs(section)}


def find_slow_loader(facts: Facts) -> Iterator[Hit]:
    """DL001: the loader, as configured, is slower than the training step consumes."""
    section = _users_data(facts)
    step = facts.config.step_time
    if not section or not step or not section.get("batch_size"):
        return
    rec = section.get("recommendation") or {}
    current_rate = rec.get("current_samples_per_s")
    if current_rate is None:
        return
    consumer = section["batch_size"] / step
    if current_rate >= consumer:
        return
    best = rec.get("best_samples_per_s")
    reachable = best is not None and best >= consumer
    if reachable:
        fix = (f"use {_settings_text(rec)}: it measured {_rate(rec['samples_per_s'])}, enough for the "
               f"{_rate(consumer)} the step needs")
    else:
        fix = ("no worker setting keeps up: make __getitem__ cheaper (decode smaller images, move augmentation "
               "to the GPU, cache decoded samples or use a packed format) or add CPUs; "
               f"meanwhile use {_settings_text(rec)}" if rec.get("num_workers") is not None else
               "make __getitem__ cheaper")
    yield Hit(
        message=(f"the DataLoader as configured delivers {_rate(current_rate)} but a {step:g} s step with "
                 f"batch_size {section['batch_size']} consumes {_rate(consumer)}: the accelerator waits "
                 f"{1 - current_rate / consumer:.0%} of the time"),
        evidence={"current_samples_per_s": current_rate, "consumer_samples_per_s": round(consumer, 2),
                  "step_time_s": step, "batch_size": section["batch_size"],
                  "current_num_workers": (section.get("current") or {}).get("num_workers"),
                  "best_samples_per_s": best, "bottleneck": section.get("bottleneck")},
        fix=fix,
    )


def find_workers_no_gain(facts: Facts) -> Iterator[Hit]:
    """DL002: workers do not beat num_workers=0 in steady state."""
    section = _users_sample_code(facts)
    if not section or section.get("bottleneck") != "ipc":
        return
    runs = measured_runs(section)
    zero = next((r for r in runs if r["num_workers"] == 0), None)
    workers = [r for r in runs if r["num_workers"] > 0]
    if zero is None or not workers:
        return
    best = max(workers, key=lambda r: r["samples_per_s"])
    getitem = section.get("getitem") or {}
    # Already at num_workers=0 nothing is wrong: worth knowing before adding workers, not a warning.
    already = (section.get("current") or {}).get("num_workers", 0) == 0
    yield Hit(
        message=(f"workers do not help: num_workers=0 delivers {_rate(zero['samples_per_s'])}, the best worker "
                 f"setting (num_workers={best['num_workers']}) {_rate(best['samples_per_s'])}; each batch costs "
                 "more to move between processes than to make"
                 + ("; your num_workers=0 is already the better setting" if already else "")),
        evidence={"num_workers_0_samples_per_s": zero["samples_per_s"],
                  "best_worker_setting": best["num_workers"], "best_worker_samples_per_s": best["samples_per_s"],
                  "getitem_s": getitem.get("per_sample_s"), "batch_size": section.get("batch_size"),
                  "batch_bytes": section.get("batch_bytes"), "curve": _curve(section)},
        fix=(("keep num_workers=0" if already else "use num_workers=0")
             + ", or give each worker more to do per handover: a larger batch_size, or a "
             "batched __getitems__ / a sampler that yields whole batches of indices so one transfer carries "
             "many samples"),
        severity=Severity.INFO if already else None,
    )


def find_slow_getitem(facts: Facts) -> Iterator[Hit]:
    """DL003: the time goes into __getitem__ (reading, decoding, transforms)."""
    section = _users_sample_code(facts)
    if not section or section.get("bottleneck") not in ("getitem", "storage", "cpu-saturated"):
        return
    getitem = section.get("getitem") or {}
    rec = section.get("recommendation") or {}
    runs = measured_runs(section)
    zero = next((r for r in runs if r["num_workers"] == 0), None)
    kind = section["bottleneck"]
    per_sample = getitem.get("per_sample_s")
    cost = f"{per_sample * 1e3:.2f} ms" if per_sample else "unknown"
    if kind == "storage":
        message = (f"__getitem__ takes {cost} a sample and mostly waits on reads "
                   f"({section.get('bottleneck_reason')}); throughput rises with workers "
                   f"up to {_rate(rec.get('best_samples_per_s'))}")
        fix = (f"use {_settings_text(rec)} (waiting workers may outnumber CPUs); move the data to local "
               "SSD or page cache, or pack small files into shards (WebDataset, LMDB, HDF5) and read them "
               "sequentially")
    elif kind == "cpu-saturated":
        message = (f"__getitem__ costs {cost} of CPU a sample and the usable CPUs are saturated "
                   f"({section.get('bottleneck_reason')}): more workers cannot help")
        fix = (f"use {_settings_text(rec)} and make the per-sample work cheaper: decode at lower "
               "resolution, cache decoded or resized samples, move augmentation to the GPU (e.g. batched "
               "transforms after .to(device)), or add CPUs")
    else:
        message = (f"__getitem__ costs {cost} a sample and limits the loader; throughput rises with workers "
                   f"(from {_rate(zero['samples_per_s'] if zero else None)} with none to "
                   f"{_rate(rec.get('best_samples_per_s'))})")
        fix = (f"use {_settings_text(rec)}, and make __getitem__ cheaper (profile it with "
               "`python -m cProfile`; cache, decode smaller, move augmentation to the GPU)")
    yield Hit(
        message=message,
        evidence={key: value for key, value in {
            "bottleneck": kind, "getitem_s": per_sample, "cpu_fraction": getitem.get("cpu_fraction"),
            "blocked_fraction": getitem.get("blocked_fraction"), "read_s": getitem.get("read_s"),
            "decode_s": getitem.get("decode_s"), "curve": _curve(section),
            "recommended_num_workers": rec.get("num_workers")}.items()
            if value is not None or key not in ("read_s", "decode_s")},
        fix=fix,
    )


def find_slow_worker_startup(facts: Facts) -> Iterator[Hit]:
    """DL004: first-batch latency is dominated by worker start-up."""
    section = _users_data(facts)
    if not section or not section.get("length"):
        return
    current = section.get("current") or {}
    if current.get("persistent_workers"):
        return
    runs = measured_runs(section)
    chosen = knee(runs, section.get("usable_cpus"))
    if chosen is None or chosen["num_workers"] == 0:
        workers = [r for r in runs if r["num_workers"] > 0]
        if section.get("bottleneck") != "startup" or not workers:
            return
        chosen = max(workers, key=lambda r: r["samples_per_s"])
    batch_size = int(section.get("batch_size") or 1)
    startup = startup_cost(chosen, batch_size)
    if startup is None:
        return
    epoch_load = section["length"] / chosen["samples_per_s"]
    share = startup / (startup + epoch_load)
    if section.get("bottleneck") != "startup" and (startup < 0.25 or share < STARTUP_NOTICE_SHARE):
        return
    persistent = section.get("persistent") or {}
    yield Hit(
        message=(f"starting {chosen['num_workers']} worker(s) takes {startup:.2f} s before the first batch, "
                 f"{share:.0%} of an epoch's loading time ({epoch_load:.2f} s for {section['length']} samples); "
                 "without persistent_workers this is paid again every epoch"),
        evidence={"num_workers": chosen["num_workers"], "first_batch_s": chosen.get("first_batch_s"),
                  "startup_s": round(startup, 4), "epoch_load_s": round(epoch_load, 4),
                  "startup_share": round(share, 3), "epoch_saving_s": persistent.get("saving_s"),
                  "saving_measured": persistent.get("measured", bool(persistent)),
                  "start_method": section.get("start_method")},
        fix=("DataLoader(..., persistent_workers=True) so workers survive between epochs; and keep worker "
             "start-up cheap: open files/databases lazily once per worker, keep the dataset object small "
             "(it is copied or pickled into every worker), prefer fork where it is safe"),
    )


def find_loader_settings(facts: Facts) -> Iterator[Hit]:
    """DL005: the recommended settings, when they differ from the current ones."""
    section = _section(facts)
    if not section:
        return
    rec = section.get("recommendation")
    current = section.get("current") or {}
    if not rec:
        return
    changes = differs_from_current(rec, current)
    if not changes:
        return
    gain = rec.get("gain")
    gain_text = (f", {gain:.2f}× the {_rate(rec.get('current_samples_per_s'))} of your settings"
                 if gain else "")
    synthetic = (section.get("source") or {}).get("kind") == "synthetic"
    left_out = rec.get("left_out") or []
    past_cpus = ""
    if left_out:
        counts = ", ".join(f"num_workers={r['num_workers']} ({_rate(r['samples_per_s'])})" for r in left_out)
        past_cpus = (f"; {counts} left out: its workers compute and outnumber the "
                     f"{section.get('usable_cpus')} usable CPUs, so what it measured above them is noise or "
                     "CPU time taken from other processes, the training process among them")
    if rec.get("basis") == "step":
        why = (f"the fewest workers that deliver {STEP_HEADROOM:g}× the {_rate(rec.get('consumer_samples_per_s'))} "
               f"a {section.get('step_time_s') or facts.config.step_time:g} s step consumes; more only add "
               "processes and memory")
    else:
        why = f"the smallest num_workers within 95% of the best, {_rate(rec.get('best_samples_per_s'))}"
    yield Hit(
        message=(f"recommended: {', '.join(changes)} — measured {_rate(rec.get('samples_per_s'))}{gain_text} "
                 f"({why})"
                 + past_cpus
                 + (" on the built-in synthetic dataset, which shows how this machine scales workers; "
                    "pass --dataset or --data to measure your own" if synthetic else "")
                 + (f" — measured on {_undecoded(section)} image file(s) read but not decoded (no Pillow in "
                    "the environment), so it shows how reading scales, not your decoding pipeline; install "
                    "pillow there or pass --dataset" if _undecoded(section) else "")),
        evidence={"recommendation": {k: rec[k] for k in ("num_workers", "prefetch_factor",
                                                           "persistent_workers", "pin_memory")},
                  "current": {k: current.get(k) for k in ("num_workers", "prefetch_factor",
                                                          "persistent_workers", "pin_memory")},
                  "samples_per_s": rec.get("samples_per_s"), "current_samples_per_s": rec.get("current_samples_per_s"),
                  "gain": gain, "bottleneck": section.get("bottleneck"), "curve": _curve(section),
                  "basis": rec.get("basis", "knee"),
                  **({"left_out": left_out, "usable_cpus": section.get("usable_cpus")} if left_out else {})},
        fix=_settings_text(rec, current.get("batch_size")),
    )


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
    section = _section(facts)
    if not section:
        return
    failure = section.get("failure")
    if not failure or failure.get("kind") == "pickle":
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
        index=index if index is not None else "i", spec=section.get("dataset"))
    yield Hit(
        message=message,
        evidence={"kind": kind, "index": index, "num_workers": nw, "where": failure.get("where"),
                  "exception": failure.get("exception"), "signal": failure.get("signal"),
                  "dataset": section.get("dataset")},
        fix=fix,
    )


def find_unpicklable_dataset(facts: Facts) -> Iterator[Hit]:
    """SPW003: the dataset or collate_fn cannot be pickled for spawn/forkserver workers."""
    section = _section(facts)
    if not section:
        return
    check = section.get("pickle") or {}
    problems = list(check.get("problems") or [])
    failure = section.get("failure") or {}
    if failure.get("kind") == "pickle" and not problems:
        problems.append({"object": "dataset or collate_fn", "error": failure.get("message")})
    if not problems:
        return
    method = check.get("start_method") or section.get("start_method")
    names = ", ".join(p["object"] for p in problems)
    yield Hit(
        message=(f"{names} cannot be pickled, so {method} workers cannot start: "
                 + "; ".join(f"{p['object']}: {p['error']}" for p in problems)),
        evidence={"start_method": method, "problems": problems, "dataset": section.get("dataset")},
        fix=("define the dataset class, collate_fn and worker_init_fn at module level (no lambdas, no "
             "functions nested in other functions, no open file handles or locks as attributes — open them "
             "lazily per worker); functools.partial of a module-level function pickles"),
        severity=None if method in ("spawn", "forkserver") else Severity.INFO,
    )


RULES = {
    "DL001": find_slow_loader,
    "DL002": find_workers_no_gain,
    "DL003": find_slow_getitem,
    "DL004": find_slow_worker_startup,
    "DL005": find_loader_settings,
    "DL006": find_dataset_failure,
    "SPW003": find_unpicklable_dataset,
}
