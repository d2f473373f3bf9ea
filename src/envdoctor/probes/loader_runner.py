"""The DataLoader smoke test as it runs inside the target environment's interpreter.

Standalone: the standard library at top level, torch imported inside
`run_plan`, and never envdoctor (the inspected environment need not have it).
envdoctor starts this file as a script in a session of its own
(`python -B loader_runner.py PLAN.json`), or, for `preflight(loader=...)`,
calls `run_plan` in a forked child of the training process.

The runner measures and reports; it judges nothing. It writes one JSON object
a line to the event file descriptor the plan names: `phase` events (what it
is doing now and how long that may take, so envdoctor can kill the group if
it overstays), `index` events while it fetches samples in its own process
(so a sample that kills the interpreter is still known), `result` events with
each measurement as soon as it exists (so a kill keeps what was measured),
`failure` when the dataset raised, hung or killed a worker, then `done`.

A watchdog thread ends the run itself when a phase overstays, after writing
which indices were being fetched; envdoctor's own deadline is the backstop
for hangs that hold the interpreter lock.
"""
from __future__ import annotations

import importlib
import json
import math
import os
import pickle
import re
import signal
import sys
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:  # loader_workloads and torch_probe live beside this file
    sys.path.insert(0, HERE)

#: Batch size used when the dataset comes without DataLoader settings.
DEFAULT_BATCH_SIZE = 32
#: Steady-state windows each run is split into, for the spread.
WINDOWS = 5
#: Shortest steady-state slice worth measuring.
MIN_SLICE_S = 0.3
#: Longest steady-state slice in the adaptive sweep: more points beat longer ones.
MAX_SLICE_S = 1.2
#: Points the adaptive sweep keeps budget for past the usable CPUs.
EXTENSION_POINTS = 2


class Events:
    """Writes events as JSON lines to a file descriptor (a pipe to envdoctor)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.lock = threading.Lock()

    def emit(self, ev: str, **fields) -> None:
        data = (json.dumps({"ev": ev, **fields}, default=repr) + "\n").encode("utf-8")
        with self.lock:
            try:
                while data:
                    written = os.write(self.fd, data)
                    data = data[written:]
            except OSError:
                pass  # envdoctor has gone; nothing left to tell

    def phase(self, name: str, limit_s: float, **fields) -> None:
        self.emit("phase", name=name, limit_s=round(limit_s, 3), **fields)

    def result(self, key: str, value) -> None:
        self.emit("result", key=key, value=value)


class DatasetFailure(Exception):
    """The dataset (or its collate_fn) raised, hung, or killed the process fetching it."""

    def __init__(self, kind: str, message: str, *, index=None, num_workers=None, where="__getitem__",
                 exception=None, signal_name=None) -> None:
        super().__init__(message)
        self.info = {"kind": kind, "message": message, "index": index, "num_workers": num_workers,
                     "where": where, "exception": exception, "signal": signal_name}


class Watchdog:
    """Ends the runner when a phase overstays, saying which indices were in flight."""

    def __init__(self, events: Events, describe) -> None:
        self.events = events
        self.describe = describe
        self.deadline = None
        self.what = ""
        self.cond = threading.Condition()
        thread = threading.Thread(target=self._watch, name="envdoctor-watchdog", daemon=True)
        thread.start()

    def arm(self, limit_s: float, what: str) -> None:
        with self.cond:
            self.deadline = time.monotonic() + max(0.1, limit_s)
            self.what = what
            self.cond.notify()

    def disarm(self) -> None:
        with self.cond:
            self.deadline = None
            self.cond.notify()

    def _watch(self) -> None:
        while True:
            with self.cond:
                while self.deadline is None:
                    self.cond.wait()
                left = self.deadline - time.monotonic()
                if left > 0:
                    self.cond.wait(left)
                    continue
                what = self.what
            self.events.emit("failure", value=self.describe(what))
            try:
                release_semaphores()
            except Exception:
                pass  # platforms without named semaphores; the exit below must happen regardless
            self.events.emit("done", reason="watchdog")
            os._exit(0)


# ---------------------------------------------------------------------------
# Reading the kernel's account of a process: CPU time, scheduler time, memory.

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _schedstat(pid) -> tuple[float, float] | None:
    """(seconds on a CPU, seconds waiting for one) of a task, from /proc.

    Kernels without scheduler statistics have no schedstat file; then the CPU
    time comes from /proc/<pid>/stat and the wait for a CPU counts as zero.
    """
    try:
        with open(f"/proc/{pid}/schedstat") as fh:
            run_ns, wait_ns, _ = fh.read().split()
        return int(run_ns) / 1e9, int(wait_ns) / 1e9
    except (OSError, ValueError):
        pass
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        # utime and stime are fields 14 and 15 of stat, 12 and 13 after the command name.
        return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS, 0.0
    except (OSError, ValueError, IndexError):
        return None


def _peak_rss(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _worker_pids(iterator) -> list[int]:
    workers = getattr(iterator, "_workers", None) or []
    return [w.pid for w in workers if getattr(w, "pid", None)]


class CpuWindow:
    """How the main process and the workers spent a stretch of wall time."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids
        self.wall = time.perf_counter()
        self.main = os.times()
        self.workers = {pid: _schedstat(pid) for pid in pids}

    def close(self) -> dict:
        wall = max(1e-9, time.perf_counter() - self.wall)
        now = os.times()
        main_cpu = (now.user - self.main.user) + (now.system - self.main.system)
        out = {"main_cpu": round(main_cpu / wall, 3)}
        run = waiting = 0.0
        counted = 0
        for pid, start in self.workers.items():
            end = _schedstat(pid)
            if start is None or end is None:
                continue
            run += end[0] - start[0]
            waiting += end[1] - start[1]
            counted += 1
        if counted:
            # run: computing; runqueue: ready but no CPU free; the rest: blocked
            # (sleeping on I/O, the network, or the index queue).
            out["worker_cpu"] = round(run / wall / counted, 3)
            out["worker_runqueue"] = round(waiting / wall / counted, 3)
            out["worker_blocked"] = round(max(0.0, 1 - (run + waiting) / wall / counted), 3)
        rss = [r for r in (_peak_rss(pid) for pid in self.pids) if r]
        if rss:
            out["worker_rss_bytes"] = max(rss)
        return out


# ---------------------------------------------------------------------------
# Batches: how many samples, how many bytes, how many tensors.


def batch_stats(batch, torch) -> dict:
    """Bytes and tensors in one collated batch, and what else it holds."""
    total = 0
    tensors = 0
    others: set[str] = set()
    stack = [batch]
    seen = 0
    while stack and seen < 10000:
        item = stack.pop()
        seen += 1
        if isinstance(item, torch.Tensor):
            total += item.element_size() * item.nelement()
            tensors += 1
        elif type(item).__module__ == "numpy" and hasattr(item, "nbytes"):
            total += int(item.nbytes)
            others.add("numpy." + type(item).__name__)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, (str, bytes, int, float, bool)) or item is None:
            others.add(type(item).__name__)
        else:
            others.add(type(item).__module__ + "." + type(item).__qualname__)
    return {"batch_bytes": total, "tensors_per_batch": tensors, "non_tensor_types": sorted(others)}


def samples_in(batch, torch, default: int) -> int:
    stack = [batch]
    while stack:
        item = stack.pop(0)
        if isinstance(item, torch.Tensor):
            return int(item.shape[0]) if item.dim() else default
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            if item and not isinstance(item[0], (list, tuple, dict)) and not isinstance(item[0], torch.Tensor):
                return len(item)
            stack.extend(item)
    return default


def steady_state(epochs: list[list[tuple[float, int]]], warmup: int, workers: int = 1) -> dict:
    """Samples/s after each epoch's warm-up batches, with its spread over windows.

    N workers deliver their batches in rounds of N, so each window spans at least one
    round; shorter windows would measure the bursts, not the rate.
    """
    intervals: list[tuple[float, int]] = []
    for stamps in epochs:
        start = min(warmup, len(stamps) - 1)
        for k in range(start + 1, len(stamps)):
            intervals.append((stamps[k][0] - stamps[k - 1][0], stamps[k][1]))
    if not intervals:
        return {"samples_per_s": None, "steady_batches": 0}
    seconds = sum(dt for dt, _ in intervals)
    samples = sum(n for _, n in intervals)
    rate = samples / seconds if seconds > 0 else None
    # Windows are whole rounds (a multiple of `workers` intervals), as equal as they can be.
    rounds = len(intervals) // workers
    windows = min(WINDOWS, rounds // 2 if workers == 1 else rounds) or 1
    size = max(1, rounds // windows) * workers if rounds else len(intervals)
    rates = []
    for w in range(windows):
        chunk = intervals[w * size:(w + 1) * size]
        dt = sum(d for d, _ in chunk)
        if dt > 0:
            rates.append(sum(n for _, n in chunk) / dt)
    rates.sort()
    out = {"samples_per_s": round(rate, 2) if rate else None, "steady_batches": len(intervals),
           "steady_s": round(seconds, 4), "windows": len(rates)}
    if rate and rates:
        out["samples_per_s_min"] = round(rates[0], 2)
        out["samples_per_s_max"] = round(rates[-1], 2)
        out["spread"] = round((rates[-1] - rates[0]) / rate, 3)
    return out


# ---------------------------------------------------------------------------
# The smoke test.


class SmokeTest:
    def __init__(self, plan: dict, events: Events, dataset=None, loader_kwargs=None, description=None) -> None:
        self.plan = plan
        self.events = events
        self.deadline = time.monotonic() + float(plan["budget_left_s"])
        self.given_dataset = dataset
        self.given_kwargs = loader_kwargs
        self.given_description = description
        self.tracked = None
        self.watchdog = Watchdog(events, self._describe_stuck)
        self.failure_workers = None
        self.import_s = 0.0

    # -- helpers ---------------------------------------------------------

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def _describe_stuck(self, what: str) -> dict:
        busy = self.tracked.in_progress() if self.tracked is not None else {}
        index = next(iter(busy.values()), None)
        where = "main process" if 0 in busy or not busy else f"worker {min(busy) - 1}"
        return {"kind": "hung", "index": index, "num_workers": self.failure_workers,
                "where": "__getitem__" if busy else what,
                "message": (f"{what} did not finish in time" + (f"; index {index} was being fetched in the {where}"
                                                                if index is not None else "")),
                "exception": None, "signal": None, "in_progress": {str(k): v for k, v in busy.items()}}

    def guarded(self, limit_s: float, what: str, phase: str, **fields) -> None:
        self.events.phase(phase, limit_s, **fields)
        self.watchdog.arm(limit_s, what)

    # -- setup -----------------------------------------------------------

    def import_torch(self):
        self.guarded(max(20.0, self.left()), "importing torch", "import")
        start = time.perf_counter()
        probe = None
        if self.plan.get("torch_probe"):
            # Before this process imports torch itself: the probe must see what importing
            # numpy and torch prints (the NumPy 1.x/2.x ABI message PKG008 reads).
            try:
                import torch_probe  # written by the torch-facts probe, beside this file
            except ImportError:
                torch_probe = None
            if torch_probe is not None:
                try:
                    probe = torch_probe.collect()
                except Exception as exc:  # the probe's failure is not the loader's
                    probe = {"error": f"{type(exc).__name__}: {exc}"}
        import torch.utils.data

        import torch

        self.import_s = time.perf_counter() - start
        self.watchdog.disarm()
        self.torch = torch
        cuda = bool(torch.cuda.is_available()) if self.plan.get("check_cuda", True) else False
        self.events.result("torch", {"version": torch.__version__, "import_s": round(self.import_s, 3),
                                     "cuda_available": cuda})
        if probe is not None:
            self.events.result("torch_probe", probe)
        return torch

    def build_dataset(self):
        source = self.plan["source"]
        kind = source["kind"]
        self.guarded(max(1.0, self.left() - 1.0), "building the dataset", "build")
        if kind == "object":
            dataset, kwargs, description = self.given_dataset, dict(self.given_kwargs or {}), self.given_description
        elif kind == "synthetic":
            # Measured single-threaded, as each worker runs (torch gives workers one thread):
            # the curve then shows what workers add rather than what intra-op threads do.
            self.torch.set_num_threads(1)
            import loader_workloads

            dataset = loader_workloads.SyntheticImages(**source.get("options", {}))
            kwargs, description = {}, dataset.description
        elif kind == "folder":
            import loader_workloads

            dataset = loader_workloads.FolderImages(source["path"])
            kwargs, description = {}, dataset.description
            if len(dataset) == 0:
                raise SetupProblem(f"{source['path']} holds no sample files "
                                   f"({', '.join(loader_workloads.SAMPLE_SUFFIXES)})")
        elif kind == "factory":
            dataset, kwargs, description = self._from_factory(source["spec"], source.get("cwd"))
        elif kind == "pickle":
            # The caller's import path, so its modules unpickle here as they would in its workers.
            sys.path.extend(p for p in source.get("sys_path", []) if p not in sys.path)
            try:
                with open(source["path"], "rb") as fh:
                    payload = pickle.load(fh)
            except Exception as exc:
                raise FactoryProblem(
                    f"the DataLoader's dataset could not be unpickled in a fresh interpreter: "
                    f"{type(exc).__name__}: {exc} (classes defined in the script being run, __main__, "
                    "cannot be; move them into a module)") from None
            dataset, kwargs, description = payload["dataset"], payload["kwargs"], payload["description"]
        else:
            raise SetupProblem(f"unknown dataset source {kind!r}")
        self.watchdog.disarm()
        return dataset, kwargs, description

    def _from_factory(self, spec: str, cwd):
        module_name, sep, attr = spec.partition(":")
        if not sep or not module_name or not attr:
            raise SetupProblem(f"--dataset wants MODULE:CALLABLE, not {spec!r}")
        if cwd and cwd not in sys.path:
            sys.path.insert(1, cwd)
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:
            raise FactoryProblem(f"cannot import {module_name!r}: {type(exc).__name__}: {exc}") from None
        try:
            factory = module
            for part in attr.split("."):
                factory = getattr(factory, part)
        except AttributeError:
            raise FactoryProblem(f"{module_name!r} has no attribute {attr!r}") from None
        try:
            made = factory() if callable(factory) else factory
        except Exception as exc:
            raise FactoryProblem(f"{spec}() raised {type(exc).__name__}: {exc}",
                                 trace=traceback.format_exc(limit=-3)) from None
        kwargs: dict = {}
        if isinstance(made, tuple) and len(made) == 2 and isinstance(made[1], dict):
            made, kwargs = made
        if not (hasattr(made, "__getitem__") or hasattr(made, "__iter__")):
            raise FactoryProblem(f"{spec}() returned {type(made).__name__}, not a Dataset "
                                 "(or a (Dataset, DataLoader kwargs) pair)")
        return made, dict(kwargs), f"{spec} ({type(made).__name__})"

    # -- the plan ----------------------------------------------------------

    def run(self) -> None:
        torch = self.import_torch()
        from torch.utils.data import DataLoader, IterableDataset

        self.DataLoader = DataLoader
        dataset, kwargs, description = self.build_dataset()
        self.dataset = dataset
        self.iterable = isinstance(dataset, IterableDataset)
        self.kwargs = self._base_kwargs(kwargs)
        self.current = self._current_settings(kwargs)
        self.start_method = self._start_method(kwargs)
        try:
            length = len(dataset)
        except Exception:
            length = None
        self.length = length
        self.events.result("dataset", {"description": description, "length": length,
                                        "iterable": self.iterable, "type": type(dataset).__qualname__,
                                        "start_method": self.start_method, "current": self.current,
                                        "batch_size": self.batch_size,
                                        "decoding": getattr(dataset, "decoding", None)})
        self.cap = self._worker_cap()
        slots = max(self.cap, self.current["num_workers"], *(self.plan.get("workers") or [0])) + 1
        if not self.iterable:
            import loader_workloads

            self.tracked = loader_workloads.TrackedDataset(dataset, slots)
        else:
            self.tracked = None

        pickle_problems = self.check_pickle(dataset, kwargs)
        self.probe()
        workers_ok = not pickle_problems
        self.sweep(workers_ok)
        if not self.plan.get("workers"):
            self.persistence(workers_ok)
            self.pin_memory(workers_ok)

    def _base_kwargs(self, kwargs: dict) -> dict:
        controlled = {"num_workers", "prefetch_factor", "persistent_workers", "pin_memory", "timeout",
                      "pin_memory_device"}
        base = {k: v for k, v in kwargs.items() if k not in controlled}
        if "batch_sampler" in base and base["batch_sampler"] is not None:
            base.pop("batch_size", None)
            bs = getattr(base["batch_sampler"], "batch_size", None) or DEFAULT_BATCH_SIZE
        else:
            base.pop("batch_sampler", None)
            if "batch_size" not in base:
                base["batch_size"] = DEFAULT_BATCH_SIZE
            bs = base["batch_size"] or 1
        self.batch_size = int(bs)
        # batch_size=None turns automatic batching off: every "batch" is one sample.
        self.auto_collation = base.get("batch_sampler") is not None or base.get("batch_size") is not None
        return base

    def _current_settings(self, kwargs: dict) -> dict:
        nw = int(kwargs.get("num_workers") or 0)
        prefetch = kwargs.get("prefetch_factor")
        return {"num_workers": nw, "prefetch_factor": (prefetch if prefetch is not None else 2) if nw else None,
                "persistent_workers": bool(kwargs.get("persistent_workers", False)),
                "pin_memory": bool(kwargs.get("pin_memory", False)),
                "batch_size": self.batch_size, "assumed_batch_size": "batch_size" not in kwargs
                and kwargs.get("batch_sampler") is None}

    def _start_method(self, kwargs: dict) -> str:
        import multiprocessing

        ctx = kwargs.get("multiprocessing_context")
        if isinstance(ctx, str):
            return ctx
        if ctx is not None and hasattr(ctx, "get_start_method"):
            return ctx.get_start_method()
        return multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_start_method()

    def _worker_cap(self) -> int:
        usable = int(self.plan.get("usable_cpus") or 1)
        cap = min(32, max(8, 4 * usable))
        if self.length is not None and not self.iterable:
            cap = max(1, min(cap, math.ceil(self.length / max(1, self.batch_size))))
        return cap

    # -- 1. pickling under spawn/forkserver ---------------------------------

    def check_pickle(self, dataset, kwargs) -> list:
        if self.start_method not in ("spawn", "forkserver"):
            self.events.result("pickle", {"start_method": self.start_method, "checked": False, "problems": []})
            return []
        self.guarded(max(1.0, min(10.0, self.left() - 1)), "pickling the dataset", "pickle")

        class _Null:
            def write(self, data):
                return len(data)

        problems = []
        for name, obj in (("dataset", dataset), ("collate_fn", kwargs.get("collate_fn")),
                          ("worker_init_fn", kwargs.get("worker_init_fn"))):
            if obj is None:
                continue
            try:
                pickle.Pickler(_Null(), protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
            except Exception as exc:
                problems.append({"object": name, "type": getattr(type(obj), "__qualname__", str(type(obj))),
                                 "error": f"{type(exc).__name__}: {exc}"})
        self.watchdog.disarm()
        self.events.result("pickle", {"start_method": self.start_method, "checked": True, "problems": problems})
        return problems

    # -- 2. __getitem__ in this process ---------------------------------------

    def _index_stream(self):
        """Indices in the order the user's loader would ask for them (first epoch)."""
        from torch.utils.data import BatchSampler, SequentialSampler

        if self.kwargs.get("batch_sampler") is not None:
            batches = self.kwargs["batch_sampler"]
        else:
            sampler = self.kwargs.get("sampler") or SequentialSampler(range(self.length or 0))
            batches = BatchSampler(sampler, self.batch_size, False)
        for batch in batches:
            yield from batch

    def probe(self) -> None:
        torch = self.torch
        from torch.utils.data import default_collate

        budget = max(0.3, min(1.0, 0.06 * float(self.plan["budget_s"])))
        limit = max(3.0, min(0.35 * float(self.plan["budget_s"]), self.left() - 1.0))
        self.guarded(limit, "fetching samples in the main process", "getitem", limit_per_sample=True)
        self.failure_workers = 0
        samples = []
        times, cpu, read_s, decode_s = [], [], [], []
        blocked = 0.0
        split = hasattr(self.dataset, "read_sample") and hasattr(self.dataset, "decode_sample")
        start = time.perf_counter()
        stream = iter(self.dataset) if self.iterable else self._index_stream()
        count = 0
        while True:
            elapsed = time.perf_counter() - start
            if count >= self.batch_size and (elapsed > budget or count >= 8 * self.batch_size):
                break
            if count >= self.batch_size * 64:
                break
            try:
                index = next(stream) if not self.iterable else count
            except StopIteration:
                break
            self.events.emit("index", i=index if isinstance(index, (int, str, float)) else repr(index))
            sched0 = _schedstat("thread-self")
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                if self.iterable:
                    item = next(stream)
                elif split:
                    self.tracked.current[0] = index
                    raw = self.dataset.read_sample(index)
                    t_mid = time.perf_counter()
                    item = self.dataset.decode_sample(index, raw)
                    read_s.append(t_mid - t0)
                    decode_s.append(time.perf_counter() - t_mid)
                    self.tracked.current[0] = -1
                else:
                    item = self.tracked[index]
            except StopIteration:
                break
            except Exception as exc:
                raise self._raised(exc, index, 0) from None
            t1, c1 = time.perf_counter(), time.thread_time()
            sched1 = _schedstat("thread-self")
            times.append(t1 - t0)
            cpu.append(c1 - c0)
            if sched0 and sched1:
                blocked += max(0.0, (t1 - t0) - (sched1[0] - sched0[0]) - (sched1[1] - sched0[1]))
            if len(samples) < self.batch_size:
                samples.append(item)
            count += 1
        self.watchdog.disarm()
        if not times:
            raise DatasetFailure("empty", "the dataset yielded no samples", index=None, num_workers=0)
        total = sum(times)
        getitem = {
            "samples": len(times),
            "per_sample_s": total / len(times),
            "median_s": sorted(times)[len(times) // 2],
            "max_s": max(times),
            "cpu_fraction": round(min(1.0, sum(cpu) / total), 3) if total > 0 else None,
            "blocked_fraction": round(min(1.0, blocked / total), 3) if total > 0 else None,
        }
        if split and read_s:
            getitem["read_s"] = sum(read_s) / len(read_s)
            getitem["decode_s"] = sum(decode_s) / len(decode_s)
        # Estimates of batch times use the median: one slow first sample (a lazy open) must not
        # make every later estimate a second long.
        self.per_sample_s = getitem["median_s"]
        self.events.result("getitem", getitem)
        # One batch, collated the way the user's loader does it.
        self.guarded(max(2.0, min(10.0, self.left() - 0.5)), "collating one batch in the main process", "collate")
        collate = self.kwargs.get("collate_fn") or default_collate
        try:
            batch = collate(samples[: self.batch_size])
        except Exception as exc:
            kinds = sorted({type(s).__module__ + "." + type(s).__qualname__ for s in samples[:4]})
            raise DatasetFailure(
                "collate",
                f"collating {len(samples[: self.batch_size])} samples failed: {type(exc).__name__}: "
                f"{_first_line(exc)} (__getitem__ returns {', '.join(kinds)})",
                index=None, num_workers=0, where="collate_fn", exception=type(exc).__name__) from None
        self.watchdog.disarm()
        stats = batch_stats(batch, torch)
        stats["sample_types"] = sorted({type(s).__module__ + "." + type(s).__qualname__ for s in samples[:4]})
        self.events.result("batch", stats)

    def _raised(self, exc: BaseException, index, nw) -> DatasetFailure:
        kind = "memory" if isinstance(exc, MemoryError) else "raised"
        where = "__getitem__"
        message = f"{type(exc).__name__}: {_first_line(exc)}"
        if isinstance(exc, IndexError) and self.length is not None and isinstance(index, int) and index < self.length:
            message += f" (len() says {self.length} samples, so __len__ promises more than __getitem__ serves)"
        return DatasetFailure(kind, message, index=index, num_workers=nw, where=where,
                              exception=type(exc).__name__)

    # -- 3. the num_workers sweep ----------------------------------------------

    def _points(self) -> list[int]:
        if self.plan.get("workers"):
            return [int(n) for n in self.plan["workers"]]
        usable = int(self.plan.get("usable_cpus") or 1)
        # The user's own setting comes right after 0: the gain is measured against it, and a
        # dataset that only fails in workers fails there first.
        current = self.current["num_workers"]
        points = [0] + ([current] if 0 < current <= self.cap else [])
        n = 1
        while n <= min(usable, self.cap):
            if n not in points:
                points.append(n)
            n *= 2
        if usable <= self.cap and usable not in points:
            points.append(usable)
        if self.current["num_workers"] not in points and self.current["num_workers"] <= max(self.cap, usable) * 2:
            points.append(self.current["num_workers"])
        return points

    def _startup_estimate(self, nw: int) -> float:
        if nw == 0:
            return 0.0
        known = [(r["first_batch_s"], r["num_workers"]) for r in self.runs
                 if r["num_workers"] > 0 and r.get("first_batch_s")]
        if known:
            # Workers start side by side; start-up grows only once they outnumber the CPUs.
            first, measured_nw = max(known)
            usable = int(self.plan.get("usable_cpus") or 1)
            return first * max(1.0, nw / max(measured_nw, usable))
        if self.start_method in ("spawn", "forkserver"):
            return self.import_s * (1 + nw / max(1, int(self.plan.get("usable_cpus") or 1))) + 0.5
        return 0.2 + 0.02 * nw

    def sweep(self, workers_ok: bool) -> None:
        self.runs: list[dict] = []
        points = self._points()
        fixed = bool(self.plan.get("workers"))
        base_reserve = 0.0 if fixed else 0.15 * float(self.plan["budget_s"])
        queue = list(points)
        extension = set()
        done: set[int] = set()
        while queue:
            nw = queue.pop(0)
            if nw in done:
                continue
            if nw > 0 and not workers_ok:
                self.events.result("skip", {"what": f"num_workers={nw}",
                                            "reason": "the dataset or collate_fn cannot be pickled for "
                                                      f"{self.start_method} workers"})
                done.add(nw)
                continue
            # The persistent_workers check keeps a share of the budget, except from points past
            # the CPUs: a higher worker count that still gains is worth more than that check.
            reserve = 0.0 if nw in extension else base_reserve
            if reserve and self._persistence_cost() > reserve:
                base_reserve = reserve = 0.0  # the check will not fit anyway: give its share to the sweep
            startup = self._startup_estimate(nw)
            parallel = max(1, min(nw, int(self.plan.get("usable_cpus") or 1)))
            batch_est = self.per_sample_s * self.batch_size / parallel
            points_left = len(queue) + 1 + (0 if fixed else EXTENSION_POINTS)
            room = self.left() - reserve
            if fixed:
                slice_s = float(self.plan.get("point_s") or 1.5)
            else:
                slice_s = min(MAX_SLICE_S, max(MIN_SLICE_S, room / points_left - startup))
            need = startup + max(MIN_SLICE_S, 3 * batch_est) + 0.3
            # Without one worker run nothing can be judged, and start-up estimates are rough (under
            # spawn they scale the runner's own torch import): the first worker count gets whatever
            # budget is left; workers that cannot start in it are skipped as such (SlowStart).
            first_worker_run = nw > 0 and not any(r["num_workers"] > 0 for r in self.runs)
            if first_worker_run:
                room = self.left()
                need = min(need, 1.0)
            if room < need and self.runs:
                self.events.result("skip", {"what": f"num_workers={nw}",
                                            "reason": f"not enough of the budget left ({room:.1f} s, "
                                                      f"about {need:.1f} s needed)"})
                done.add(nw)
                continue
            try:
                run = self.measure(nw, slice_s, startup, batch_est)
            except SlowStart as slow:
                self.events.result("skip", {"what": f"num_workers={nw}", "reason": str(slow)})
                done.add(nw)
                continue
            done.add(nw)
            self.runs.append(run)
            self.events.result("run", run)
            if not fixed and not queue:
                extra = self._extension(done)
                if extra is not None:
                    queue.append(extra)
                    extension.add(extra)

    def _persistence_cost(self) -> float:
        """Seconds the persistent_workers check would take, from the worker runs so far (0: unknown)."""
        worker_runs = [r for r in self.runs if r["num_workers"] > 0 and r.get("samples_per_s")]
        if not worker_runs or self.length is None:
            return 0.0
        run = max(worker_runs, key=lambda r: r["samples_per_s"])
        startup = run.get("first_batch_s") or 0.0
        size = min(self.length, max(2 * run["num_workers"], 4) * self.batch_size)
        epoch = size / run["samples_per_s"]
        return 2 * (startup + epoch) + (startup + 2 * epoch) + 0.8

    def _extension(self, done: set[int]) -> int | None:
        """One more point past the usable CPUs while throughput climbs and workers mostly wait."""
        worker_runs = sorted((r for r in self.runs if r["num_workers"] > 0 and r.get("samples_per_s")),
                             key=lambda r: r["num_workers"])
        if len(worker_runs) < 1:
            return None
        last = worker_runs[-1]
        previous = [r for r in self.runs if r["num_workers"] < last["num_workers"] and r.get("samples_per_s")]
        if not previous:
            return None
        prev = max(previous, key=lambda r: r["num_workers"])
        climbing = last["samples_per_s"] >= 1.15 * prev["samples_per_s"]
        # Waiting (blocked) rather than computing, of the time not spent queued for a busy CPU.
        cpu, blocked = last.get("worker_cpu") or 0, last.get("worker_blocked") or 0
        waiting = cpu + blocked > 0 and blocked / (cpu + blocked) >= 0.5
        nxt = last["num_workers"] * 2
        if climbing and waiting and nxt <= self.cap and nxt not in done:
            return nxt
        return None

    def _loader(self, nw: int, dataset, timeout: float, *, persistent=False, pin=False, prefetch=None, kwargs=None):
        options = dict(self.kwargs if kwargs is None else kwargs)
        options["num_workers"] = nw
        options["pin_memory"] = pin
        if nw > 0:
            options["prefetch_factor"] = prefetch or self.current["prefetch_factor"] or 2
            options["persistent_workers"] = persistent
            options["timeout"] = timeout
        else:
            options.pop("multiprocessing_context", None)
            options.pop("worker_init_fn", None)
        return self.DataLoader(dataset, **options)

    def measure(self, nw: int, slice_s: float, startup: float, batch_est: float, *, epochs_wanted: int = 0,
                epoch_est: float = 0.0, persistent=False, pin=False, dataset=None, kwargs=None, label=None) -> dict:
        """One timed run: first-batch latency, steady-state samples/s and where the time went.

        In the sweep (epochs_wanted == 0) workers persist across epochs, so a
        small dataset runs epoch after epoch into one steady state with the
        start-up paid once, in the first batch. With epochs_wanted, each epoch
        is timed on its own (the persistent_workers comparison).
        """
        torch = self.torch
        # A batch that does not come within `timeout` once the workers deliver is a hang. The first
        # batch of an epoch may take the rest of the budget: starting workers (under spawn each one
        # imports torch and unpickles the dataset) is slow, not stuck, and estimates of it are rough.
        hang_s = max(3.0, 10 * batch_est + 2 * startup)
        timeout = round(min(hang_s, max(1.0, self.left() - 0.5)), 2)
        first_timeout = round(max(timeout, self.left() - 0.5), 2)
        if epochs_wanted:
            limit = epochs_wanted * (startup + epoch_est) + first_timeout + 2.0
        else:
            limit = slice_s + timeout + first_timeout + 2.0
            persistent = nw > 0
        self.guarded(limit, f"the run with num_workers={nw}", "run", num_workers=nw, slice_s=round(slice_s, 3),
                     label=label)
        self.failure_workers = nw
        if self.tracked is not None:
            self.tracked.reset()
        data = dataset if dataset is not None else (self.tracked if self.tracked is not None else self.dataset)
        try:
            loader = self._loader(nw, data, first_timeout, persistent=persistent, pin=pin, kwargs=kwargs)
        except (TypeError, ValueError) as exc:
            self.watchdog.disarm()
            raise FactoryProblem(f"DataLoader rejects the settings it was given: {type(exc).__name__}: "
                                 f"{exc}") from None
        stamps: list[tuple[float, int]] = []
        epoch_marks: list[tuple[float, int]] = []  # (start time, index of its first stamp)
        first_batch = None
        window = None
        iterator = None
        warmup = max(1, nw) - 1
        start = self._run_started = time.perf_counter()
        hard_end = math.inf  # set when the first batch arrives: the steady slice, then the hang limit
        epoch_started = False
        try:
            done = False
            while not done:
                epoch_marks.append((time.perf_counter(), len(stamps)))
                iterator = iter(loader)
                _set_timeout(iterator, first_timeout)
                epoch_started = False
                finished_epoch = False
                while True:
                    try:
                        batch = next(iterator)
                    except StopIteration:
                        finished_epoch = True
                        break
                    now = time.perf_counter()
                    stamps.append((now, samples_in(batch, torch, self.batch_size) if self.auto_collation else 1))
                    if not epoch_started:
                        epoch_started = True
                        # Never past the budget: a wait cut short by it is told from a hang below.
                        _set_timeout(iterator, round(min(timeout, max(0.5, self.left() - 0.5)), 2))
                    if first_batch is None:
                        first_batch = now - start
                        window = CpuWindow(_worker_pids(iterator))
                        if not epochs_wanted:
                            hard_end = now + slice_s + timeout
                    # Three rounds of every worker's batch past the warm-up, and the slice's time.
                    if not epochs_wanted and len(stamps) > warmup + max(4, 3 * nw) \
                            and now - stamps[warmup][0] >= slice_s:
                        done = True
                        break
                    if now > hard_end:
                        done = True
                        break
                if not finished_epoch:
                    break
                if epochs_wanted:
                    done = len(epoch_marks) >= epochs_wanted
                    if not done and not persistent:
                        _shutdown(iterator)
                elif len(epoch_marks) >= 200 or time.perf_counter() > hard_end:
                    done = True
            usage = window.close() if window is not None else {}
        except DatasetFailure:
            raise
        except Exception as exc:
            waited = time.perf_counter() - (stamps[-1][0] if stamps else start)
            if epoch_started and isinstance(exc, RuntimeError) and "timed out after" in str(exc) \
                    and waited < hang_s - 0.05:
                failure = BudgetEnd(nw, waited)  # the budget ran out before a wait could become a hang
            else:
                failure = self._worker_failure(exc, nw, iterator, delivered=epoch_started)
            if isinstance(failure, SlowStart):
                _abandon_workers(iterator)
            raise failure from None
        finally:
            self.watchdog.disarm()
        _shutdown(iterator)
        if epochs_wanted:
            bounds = [m[1] for m in epoch_marks] + [len(stamps)]
            epochs = [stamps[bounds[k]:bounds[k + 1]] for k in range(len(epoch_marks))]
        else:
            epochs = [stamps]
        run = {"num_workers": nw, "first_batch_s": round(first_batch, 4) if first_batch is not None else None,
               **steady_state(epochs, warmup, max(1, nw)),
               "batches": len(stamps), "epochs": len(epoch_marks),
               "seconds": round(time.perf_counter() - start, 3), **usage}
        if pin:
            run["pin_memory"] = pin
        if epochs_wanted:
            run["persistent_workers"] = persistent
            run["epoch_s"] = [round((e[-1][0] if e else m[0]) - m[0], 4) for e, m in zip(epochs, epoch_marks)]
            run["epoch_first_batch_s"] = [round(e[0][0] - m[0], 4) if e else None
                                          for e, m in zip(epochs, epoch_marks)]
        return run

    def _worker_failure(self, exc: BaseException, nw: int, iterator, delivered: bool = True) -> Exception:
        text = str(exc)
        failed = self.tracked.failures() if self.tracked is not None else {}
        busy = self.tracked.in_progress() if self.tracked is not None else {}
        exitcodes = {}
        for w in (getattr(iterator, "_workers", None) or []):
            try:
                w.join(timeout=0.05)
                exitcodes[w.pid] = w.exitcode
            except Exception:
                pass
        if nw == 0 or not failed and not busy and not exitcodes:
            # raised in this process: __getitem__ (the index is in slot 0) or collate
            if failed.get(0) is not None:
                return self._raised(exc, failed[0], nw)
        if "shared memory" in text or "No space left on device" in text or "Bus error" in text:
            index = next(iter(failed.values()), None)
            return DatasetFailure("shm", f"a worker could not hand its batch over through shared memory: "
                                  f"{_original_error(text) or _first_line(exc)}", index=index, num_workers=nw,
                                  where="shared memory", exception=type(exc).__name__,
                                  signal_name="SIGBUS" if "Bus error" in text else None)
        if isinstance(exc, RuntimeError) and "timed out after" in text:
            index = next(iter(busy.values()), None)
            if not delivered and not busy and not failed:
                # No worker had begun a __getitem__ when the budget ran out: the workers were still
                # starting (importing, unpickling the dataset), which is no failure of the dataset.
                return SlowStart(nw, time.perf_counter() - self._run_started)
            return DatasetFailure("hung", f"no batch arrived within the DataLoader timeout ({_first_line(exc)})"
                                  + (f"; index {index} was still being fetched" if index is not None else ""),
                                  index=index, num_workers=nw)
        dead = {pid: code for pid, code in exitcodes.items() if code not in (None, 0)}
        if dead or "exited unexpectedly" in text or "killed by signal" in text:
            pid, code = next(iter(dead.items()), (None, None))
            match = re.search(r"pid\(?s?\)? (\d+)", text)
            if pid is None and match:
                pid = int(match.group(1))
            slot = self.tracked.slot_of_pid(pid) if (self.tracked is not None and pid) else None
            index = busy.get(slot) if slot is not None else next(iter(busy.values()), None)
            signame = None
            if code is not None and code < 0:
                try:
                    signame = signal.Signals(-code).name
                except ValueError:
                    signame = f"signal {-code}"
            how = f"was killed by {signame}" if signame else (f"exited with status {code}" if code is not None
                                                              else "exited unexpectedly")
            return DatasetFailure("crashed", f"a worker process {how}"
                                  + (f" while fetching index {index}" if index is not None else ""),
                                  index=index, num_workers=nw, signal_name=signame)
        if isinstance(exc, MemoryError):
            return DatasetFailure("memory", f"MemoryError: {_first_line(exc)}", num_workers=nw,
                                  index=next(iter(failed.values()), None), exception="MemoryError")
        if _looks_like_pickling(exc) and nw > 0 and self.start_method in ("spawn", "forkserver"):
            return DatasetFailure("pickle", f"starting {self.start_method} workers failed: {type(exc).__name__}: "
                                  f"{_first_line(exc)}", num_workers=nw, where="pickling",
                                  exception=type(exc).__name__)
        original = _original_error(text) or f"{type(exc).__name__}: {_first_line(exc)}"
        if failed:
            slot, index = next(iter(failed.items()))
            if isinstance(exc, IndexError) and self.length is not None and isinstance(index, int) \
                    and index < self.length:
                original += f" (len() says {self.length} samples)"
            return DatasetFailure("raised", original, index=index, num_workers=nw, exception=type(exc).__name__)
        return DatasetFailure("raised", original + " (in collate_fn, the sampler or worker_init_fn: no "
                              "__getitem__ call failed)", index=None, num_workers=nw, where="collate_fn",
                              exception=type(exc).__name__)

    # -- 4. persistent_workers across two epochs ------------------------------

    def persistence(self, workers_ok: bool) -> None:
        from torch.utils.data import Subset

        if not workers_ok or self.iterable or self.length is None:
            self.events.result("skip", {"what": "persistent_workers", "reason": "no worker runs to compare"
                                        if not workers_ok else "the dataset has no length"})
            return
        candidates = [r for r in self.runs if r["num_workers"] > 0 and r.get("samples_per_s")]
        if not candidates:
            self.events.result("skip", {"what": "persistent_workers", "reason": "no successful worker run"})
            return
        best = max(r["samples_per_s"] for r in candidates)
        nw = min(r["num_workers"] for r in candidates if r["samples_per_s"] >= 0.95 * best)
        run_nw = next(r for r in candidates if r["num_workers"] == nw)
        startup = run_nw.get("first_batch_s") or 0.0
        size = min(self.length, max(2 * nw, 4) * self.batch_size)
        epoch_est = size / best
        cost = 2 * (startup + epoch_est) + (startup + 2 * epoch_est) + 0.5
        if cost > self.left() - 0.3:
            self.events.result("skip", {"what": "persistent_workers",
                                        "reason": f"not enough of the budget left ({self.left():.1f} s, about "
                                                  f"{cost + 0.3:.1f} s needed); estimated from start-up instead"})
            # Without persistent workers every epoch pays the start-up the sweep measured once.
            batch_time = self.batch_size * nw / best
            self.events.result("persistent", {"num_workers": nw, "measured": False,
                                              "saving_s": round(max(0.0, startup - batch_time), 4)})
            return
        subset = Subset(self.tracked, range(size))
        kwargs = {k: v for k, v in self.kwargs.items() if k not in ("sampler", "batch_sampler", "shuffle")}
        if "batch_size" not in kwargs:
            kwargs["batch_size"] = self.batch_size
        results = {}
        for persistent in (False, True):
            try:
                run = self.measure(nw, 0.0, startup, self.per_sample_s * self.batch_size, epochs_wanted=2,
                                   epoch_est=epoch_est, persistent=persistent, dataset=subset, kwargs=kwargs,
                                   label=f"persistent_workers={persistent}")
            except SlowStart as slow:
                self.events.result("skip", {"what": "persistent_workers", "reason": str(slow)})
                return
            results[persistent] = run
        off, on = results[False], results[True]
        second_off = (off.get("epoch_first_batch_s") or [None, None])[-1]
        second_on = (on.get("epoch_first_batch_s") or [None, None])[-1]
        self.events.result("persistent", {
            "num_workers": nw, "measured": True, "samples_per_epoch": size,
            "epoch2_first_batch_s": {"false": second_off, "true": second_on},
            "epoch_s": {"false": off.get("epoch_s"), "true": on.get("epoch_s")},
            "saving_s": round(second_off - second_on, 4) if second_off is not None and second_on is not None else None,
        })

    # -- 5. pin_memory when a GPU is present ---------------------------------

    def pin_memory(self, workers_ok: bool) -> None:
        if not (self.plan.get("check_cuda", True) and self.torch.cuda.is_available()):
            self.events.result("skip", {"what": "pin_memory", "reason": "no CUDA device: pinned memory only "
                                        "speeds up copies to a GPU"})
            return
        if getattr(self.torch.cuda, "_is_in_bad_fork", lambda: False)():
            self.events.result("skip", {"what": "pin_memory", "reason": "CUDA was initialised in the training "
                                        "process before preflight, so a forked child cannot pin memory"})
            return
        candidates = [r for r in self.runs if r.get("samples_per_s")]
        if not candidates:
            return
        best_run = max(candidates, key=lambda r: r["samples_per_s"])
        nw = best_run["num_workers"] if workers_ok else 0
        startup = best_run.get("first_batch_s") or 0.0
        slice_s = min(1.5, max(MIN_SLICE_S, self.left() - startup - 1.0))
        if self.left() < startup + slice_s + 0.5:
            self.events.result("skip", {"what": "pin_memory", "reason": "not enough of the budget left"})
            return
        try:
            run = self.measure(nw, slice_s, startup, self.per_sample_s * self.batch_size, pin=True,
                               label="pin_memory=True")
        except DatasetFailure as failure:
            # The same loader ran unpinned: what failed here is pinning (the CUDA side), not the dataset.
            self.events.result("skip", {"what": "pin_memory", "reason": f"pinning failed: {failure}"})
            return
        except SlowStart as slow:
            self.events.result("skip", {"what": "pin_memory", "reason": str(slow)})
            return
        self.events.result("pin", {"num_workers": nw, "unpinned_samples_per_s": best_run["samples_per_s"],
                                   "pinned_samples_per_s": run.get("samples_per_s"),
                                   "pinned_first_batch_s": run.get("first_batch_s")})


class SlowStart(Exception):
    """Workers that delivered no batch, and had not begun a `__getitem__`, before the budget ran out."""

    def __init__(self, num_workers: int, waited_s: float) -> None:
        super().__init__(f"the {num_workers} worker(s) had not delivered a first batch after {waited_s:.1f} s, "
                         "when the budget ran out; none had begun a __getitem__ (still starting: importing "
                         "modules and unpickling the dataset under spawn or forkserver)")
        self.num_workers = num_workers


class BudgetEnd(SlowStart):
    """The budget ran out while the workers made a batch, before the wait was long enough to be a hang."""

    def __init__(self, num_workers: int, waited_s: float) -> None:
        Exception.__init__(self, f"stopped at the end of the budget after waiting {waited_s:.1f} s for a batch, "
                                 "too short to call it a hang")
        self.num_workers = num_workers


class SetupProblem(Exception):
    """The smoke test could not be set up (not the dataset's fault: a bad path, a bad spec)."""


class FactoryProblem(Exception):
    """The --dataset factory could not be imported or called."""

    def __init__(self, message: str, trace: str | None = None) -> None:
        super().__init__(message)
        self.trace = trace


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def _original_error(text: str) -> str | None:
    """The last line of the worker's original traceback that torch re-raises."""
    if "Original Traceback" not in text:
        return None
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else None


def _looks_like_pickling(exc: BaseException) -> bool:
    text = f"{type(exc).__name__}: {exc}".lower()
    return isinstance(exc, pickle.PicklingError) or "pickle" in text or "can't get local object" in text


def _set_timeout(iterator, seconds: float) -> None:
    """Change how long a worker iterator waits for its next batch (a DataLoader has one timeout for all)."""
    if getattr(iterator, "_timeout", 0):
        iterator._timeout = seconds


def release_semaphores() -> None:
    """Unlink the named semaphores this process created, before it ends without running finalizers.

    Under spawn and forkserver every DataLoader queue holds named semaphores
    (/dev/shm/sem.mp-*) that multiprocessing unlinks only when the objects are
    collected or the interpreter exits normally; the runner ends with os._exit,
    so it unlinks them itself. Unlinking a name leaves the semaphores working
    for processes that still use them.
    """
    from multiprocessing import synchronize, util

    cleanup = getattr(synchronize.SemLock, "_cleanup", None)
    registry = getattr(util, "_finalizer_registry", {})
    for finalizer in list(registry.values()):
        if cleanup is not None and getattr(finalizer, "_callback", None) is cleanup:
            try:
                finalizer()  # skips, by itself, the semaphores of the process this one was forked from
            except Exception:
                pass


def _abandon_workers(iterator) -> None:
    """Kill workers that are still starting: a graceful shutdown waits seconds for each."""
    for worker in getattr(iterator, "_workers", None) or []:
        try:
            worker.kill()
            worker.join(timeout=1.0)
        except Exception:
            pass


def _shutdown(iterator) -> None:
    """Stop an iterator's workers now rather than when the garbage collector gets to it."""
    if iterator is None:
        return
    shutdown = getattr(iterator, "_shutdown_workers", None)
    if shutdown is not None:
        try:
            shutdown()
        except Exception:
            pass


def run_plan(plan: dict, events: Events, dataset=None, loader_kwargs=None, description=None) -> None:
    """Run the whole smoke test, writing events; never raises for the dataset's failures."""
    test = SmokeTest(plan, events, dataset, loader_kwargs, description)
    try:
        test.run()
    except DatasetFailure as failure:
        events.emit("failure", value=failure.info)
    except FactoryProblem as exc:
        events.emit("failure", value={"kind": "factory", "message": str(exc), "index": None,
                                      "num_workers": None, "where": "factory", "exception": None,
                                      "signal": None, "trace": exc.trace})
    except SetupProblem as exc:
        events.emit("setup_error", message=str(exc))
    except ImportError as exc:
        events.emit("setup_error", message=f"torch cannot be imported: {exc}")
    except BaseException as exc:  # the runner's own bug: report it, do not hang
        events.emit("runner_error", message=f"{type(exc).__name__}: {exc}",
                    traceback=traceback.format_exc(limit=8))
    try:
        release_semaphores()
    except Exception:
        pass
    events.emit("done")


def main(argv: list[str]) -> int:
    with open(argv[1], encoding="utf-8") as fh:
        plan = json.load(fh)
    events = Events(int(plan["event_fd"]))
    run_plan(plan, events)
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: a dataset's own threads or finalizers must not hold us.
    os._exit(0)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
