"""Setting the smoke test up: torch imported, the dataset built, the user's settings read, pickling checked.

Part of the standalone runner (see loader_runner.py).
"""
from __future__ import annotations

import importlib
import math
import pickle
import sys
import time
import traceback
from collections.abc import Mapping, Sized
from types import ModuleType
from typing import IO

from loader_outcomes import FactoryProblem, SetupProblem
from loader_session import Session

#: Batch size used when the dataset comes without DataLoader settings.
DEFAULT_BATCH_SIZE = 32


def build(s: Session, given: tuple[object, object, object]) -> list[dict[str, str]]:
    """Import torch, build the dataset and fill the session; the pickling problems (spawn/forkserver)."""
    import_torch(s)
    from torch.utils.data import DataLoader, IterableDataset

    s.DataLoader = DataLoader
    dataset, kwargs, description = build_dataset(s, given)
    s.dataset = dataset
    s.user_kwargs = kwargs
    try:
        import loader_hazards

        s.built = loader_hazards.built_state(dataset)
    except Exception:  # the user's objects may answer anything; workers then see what this process left
        s.built = []
    s.iterable = isinstance(dataset, IterableDataset)
    s.kwargs = _base_kwargs(s, kwargs)
    s.current = _current_settings(s, kwargs)
    s.start_method = _start_method(kwargs)
    try:
        s.length = len(dataset) if isinstance(dataset, Sized) else None
    except Exception:
        s.length = None
    s.events.result("dataset", {"description": description, "length": s.length,
                                "iterable": s.iterable, "type": type(dataset).__qualname__,
                                "start_method": s.start_method, "current": s.current,
                                "batch_size": s.batch_size, "decoding": getattr(dataset, "decoding", None)})
    s.cap = _worker_cap(s)
    slots = max(s.cap, s.current["num_workers"], *(s.plan.get("workers") or [0])) + 1
    if not s.iterable:
        import loader_workloads

        s.tracked = loader_workloads.TrackedDataset(dataset, slots)
    problems = check_pickle(s, dataset, kwargs)
    s.workers_ok = not problems
    return problems


def import_torch(s: Session) -> ModuleType:
    s.guarded(max(20.0, s.left()), "importing torch", "import")
    start = time.perf_counter()
    probe = None
    if s.plan.get("torch_probe"):
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

    s.import_s = time.perf_counter() - start
    s.watchdog.disarm()
    s.torch = torch
    cuda = bool(torch.cuda.is_available()) if s.plan.get("check_cuda", True) else False
    s.events.result("torch", {"version": torch.__version__, "import_s": round(s.import_s, 3),
                                 "cuda_available": cuda})
    if probe is not None:
        s.events.result("torch_probe", probe)
    return torch

def build_dataset(s: Session, given: tuple[object, object, object]
                  ) -> tuple[object, dict[str, object], str | None]:
    source = s.plan["source"]
    kind = source["kind"]
    s.guarded(max(1.0, s.left() - 1.0), "building the dataset", "build")
    if kind == "object":
        dataset, kwargs = given[0], dict(given[1]) if isinstance(given[1], Mapping) else {}
        description = given[2] if isinstance(given[2], str) else None
    elif kind == "synthetic":
        # Measured single-threaded, as each worker runs (torch gives workers one thread):
        # the curve then shows what workers add rather than what intra-op threads do.
        s.torch.set_num_threads(1)
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
        dataset, kwargs, description = _from_factory(source["spec"], source.get("cwd"))
    elif kind == "pickle":
        # The caller's import path, so its modules unpickle here as they would in its workers.
        sys.path.extend(p for p in source.get("sys_path", []) if p not in sys.path)
        try:
            with open(source["path"], "rb") as fh:
                payload = _Unpickler(fh, _script_module(source.get("main_path"))).load()
        except Exception as exc:
            raise FactoryProblem(
                f"the DataLoader's dataset could not be unpickled in a fresh interpreter: "
                f"{type(exc).__name__}: {exc} (classes defined in the script being run, __main__, "
                "cannot be; move them into a module)") from None
        dataset, kwargs, description = payload["dataset"], payload["kwargs"], payload["description"]
    else:
        raise SetupProblem(f"unknown dataset source {kind!r}")
    s.watchdog.disarm()
    return dataset, kwargs, description

def _script_module(main_path: str | None) -> object:
    """`envdoctor run --tune`: the training script, run as `__mp_main__` (its main guard keeps training from
    starting, as under spawn), so classes it defines in `__main__` unpickle here. The host has checked that
    the script runs nothing else at import."""
    if not main_path:
        return None
    import runpy
    import types

    module = types.ModuleType("__mp_main__")
    module.__dict__.update(runpy.run_path(main_path, run_name="__mp_main__"))
    sys.modules["__mp_main__"] = module
    return module


class _Unpickler(pickle.Unpickler):
    """Finds the classes of `__main__` in the training script's module, when there is one."""

    def __init__(self, handle: IO[bytes], script: object) -> None:
        super().__init__(handle)
        self.script = script

    def find_class(self, module: str, name: str) -> object:
        if module == "__main__" and self.script is not None and hasattr(self.script, name):
            return getattr(self.script, name)
        return super().find_class(module, name)


def _from_factory(spec: str, cwd: str | None) -> tuple[object, dict[str, object], str]:
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
    kwargs: dict[str, object] = {}
    if isinstance(made, tuple) and len(made) == 2 and isinstance(made[1], dict):
        made, kwargs = made
    if not (hasattr(made, "__getitem__") or hasattr(made, "__iter__")):
        raise FactoryProblem(f"{spec}() returned {type(made).__name__}, not a Dataset "
                             "(or a (Dataset, DataLoader kwargs) pair)")
    return made, dict(kwargs), f"{spec} ({type(made).__name__})"


def _base_kwargs(s: Session, kwargs: dict[str, object]) -> dict[str, object]:
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
    s.batch_size = int(bs)
    # batch_size=None turns automatic batching off: every "batch" is one sample.
    s.auto_collation = base.get("batch_sampler") is not None or base.get("batch_size") is not None
    return base

def _current_settings(s: Session, kwargs: dict[str, object]) -> dict[str, object]:
    given_nw = kwargs.get("num_workers")
    nw = int(given_nw) if isinstance(given_nw, (int, float, str)) and given_nw else 0
    prefetch = kwargs.get("prefetch_factor")
    return {"num_workers": nw, "prefetch_factor": (prefetch if prefetch is not None else 2) if nw else None,
            "persistent_workers": bool(kwargs.get("persistent_workers", False)),
            "pin_memory": bool(kwargs.get("pin_memory", False)),
            "batch_size": s.batch_size, "assumed_batch_size": "batch_size" not in kwargs
            and kwargs.get("batch_sampler") is None}

def _start_method(kwargs: dict[str, object]) -> str:
    import multiprocessing

    ctx = kwargs.get("multiprocessing_context")
    if isinstance(ctx, str):
        return ctx
    if ctx is not None and hasattr(ctx, "get_start_method"):
        return ctx.get_start_method()
    return multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_start_method()

def _worker_cap(s: Session) -> int:
    usable = int(s.plan.get("usable_cpus") or 1)
    cap = min(32, max(8, 4 * usable))
    if s.length is not None and not s.iterable:
        cap = max(1, min(cap, math.ceil(s.length / max(1, s.batch_size))))
    return cap

# -- 1. pickling under spawn/forkserver ---------------------------------

def check_pickle(s: Session, dataset: object, kwargs: dict[str, object]) -> list[dict[str, str]]:
    if s.start_method not in ("spawn", "forkserver"):
        s.events.result("pickle", {"start_method": s.start_method, "checked": False, "problems": []})
        return []
    s.guarded(max(1.0, min(10.0, s.left() - 1)), "pickling the dataset", "pickle")

    class _Null:
        def write(self, data: bytes) -> int:
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
    s.watchdog.disarm()
    s.events.result("pickle", {"start_method": s.start_method, "checked": True, "problems": problems})
    return problems

