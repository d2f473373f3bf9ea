"""What the loader feeds training, not how fast: repeated samples (DL007) and cloned randomness (DL008).

Part of the standalone runner (see loader_runner.py). Both are bounded in
samples and time and run inside the stage's budget; the workers they start
are shut down before they return.

- duplicates: an IterableDataset's sample identities (a hash of each
  sample's tensors) over one bounded epoch in this process, then over the same
  number of samples and more with two workers. A dataset that ignores
  `get_worker_info()` yields each record once per worker.
- rng: one index drawn twice in this process (different results: the sample
  is random), then drawn first by each of two workers; identical results mean
  the workers share a cloned generator (one the dataset made in `__init__`).
"""
from __future__ import annotations

import hashlib
import time
from collections import Counter
from types import ModuleType

from loader_session import Session
from loader_timing import leaves, shutdown

#: Samples one side of the duplicates check reads at most, and seconds it may take.
DUP_MAX_SAMPLES = 512
DUP_MAX_S = 0.75
#: Workers the checks start.
CHECK_WORKERS = 2


def sample_identity(sample: object, torch: ModuleType) -> str:
    """A hash of what a sample holds: tensor and array bytes, numbers and strings, in order."""
    digest = hashlib.blake2b(digest_size=16)
    for item in leaves(sample, 1000):
        if isinstance(item, torch.Tensor):
            tensor = item.detach().cpu().contiguous()
            digest.update(str((tuple(tensor.shape), str(tensor.dtype))).encode())
            try:
                digest.update(tensor.numpy().tobytes())
            except Exception:  # dtypes numpy lacks (bfloat16), or no numpy
                digest.update(repr(tensor.flatten().tolist()).encode())
        elif hasattr(item, "tobytes") and hasattr(item, "dtype"):
            digest.update(item.tobytes())
        else:
            digest.update(repr(item).encode())
    return digest.hexdigest()


def _worker_options(s: Session, timeout: float) -> dict[str, object]:
    options: dict[str, object] = {"batch_size": None, "num_workers": CHECK_WORKERS, "timeout": timeout}
    for key in ("worker_init_fn", "multiprocessing_context", "generator"):
        if s.user_kwargs.get(key) is not None:
            options[key] = s.user_kwargs[key]
    return options


#: Seconds a spawn or forkserver worker takes at least to import torch, whatever this process took (in
#: preflight's forked child torch was already imported, so its own import time says nothing).
SPAWN_IMPORT_FLOOR_S = 4.0


def _startup_allowance(s: Session) -> float:
    """Seconds two workers may take to start (under spawn each imports torch)."""
    if s.start_method in ("spawn", "forkserver"):
        return 2.0 * max(s.import_s, SPAWN_IMPORT_FLOOR_S) + 1.0
    return 1.0


def _guard(s: Session, what: str, phase: str, check: str) -> None:
    """The watchdog only backs the checks' own limits up (the DataLoader timeout, the sample and time
    bounds): it gets the rest of the budget, so a slow check ends as a skip, never as a hang finding."""
    s.guarded(max(1.0, s.left() - 0.3), what, phase, check=check, num_workers=CHECK_WORKERS)


def duplicates(s: Session) -> None:
    """DL007's measurement (result `duplicates`), for iterable datasets."""
    if not s.iterable or not s.workers_ok:
        return
    need = 2 * DUP_MAX_S + _startup_allowance(s) + 0.5
    if s.left() < need:
        s.events.skip("repeated samples (DL007)", f"not enough of the budget left ({s.left():.1f} s)")
        return
    _guard(s, "reading samples to count repeats", "duplicates", "repeated samples (DL007)")
    alone: list[str] = []
    bounded = False
    try:
        end = time.monotonic() + DUP_MAX_S
        for sample in s.dataset:
            alone.append(sample_identity(sample, s.torch))
            if len(alone) >= DUP_MAX_SAMPLES or time.monotonic() > end:
                bounded = True
                break
    except Exception as exc:
        s.watchdog.disarm()
        s.events.skip("repeated samples (DL007)", f"iterating the dataset raised {type(exc).__name__}: {exc}")
        return
    wanted = CHECK_WORKERS * len(alone)
    together: list[str] = []
    iterator = None
    try:
        s.as_built()
        loader = s.DataLoader(s.dataset, **_worker_options(s, timeout=_startup_allowance(s) + DUP_MAX_S))
        iterator = iter(loader)
        end = time.monotonic() + DUP_MAX_S + _startup_allowance(s)
        for sample in iterator:
            together.append(sample_identity(sample, s.torch))
            if len(together) >= wanted or time.monotonic() > end:
                break
    except Exception as exc:
        s.events.skip("repeated samples (DL007)",
                      f"reading with {CHECK_WORKERS} workers raised {type(exc).__name__}: {str(exc)[:200]}")
        return
    finally:
        shutdown(iterator)
        s.watchdog.disarm()
    counts = Counter(together)
    s.events.result("duplicates", {
        "num_workers": CHECK_WORKERS, "samples_0": len(alone), "duplicates_0": len(alone) - len(set(alone)),
        "samples_n": len(together), "duplicates_n": len(together) - len(counts),
        "most_repeats_n": max(counts.values(), default=0), "bounded": bounded})


def cloned_rng(s: Session, first_index: object) -> None:
    """DL008's measurement (result `rng`), for map-style datasets."""
    if s.iterable or not s.workers_ok or first_index is None:
        return
    need = _startup_allowance(s) + 4 * s.per_sample_s + 0.5
    if s.left() < need:
        s.events.skip("cloned randomness (DL008)", f"not enough of the budget left ({s.left():.1f} s)")
        return
    _guard(s, f"drawing index {first_index} twice and in two workers", "rng", "cloned randomness (DL008)")
    record: dict[str, object] = {"index": first_index, "num_workers": CHECK_WORKERS,
                              "worker_init_fn": getattr(s.user_kwargs.get("worker_init_fn"), "__qualname__", None)}
    iterator = None
    try:
        first = sample_identity(s.dataset[first_index], s.torch)
        second = sample_identity(s.dataset[first_index], s.torch)
        record["main_differs"] = first != second
        record["workers_identical"] = None
        if record["main_differs"]:
            # Indices go to the workers in turn: worker 0 gets the first, worker 1 the second.
            options = _worker_options(s, timeout=need)
            s.as_built()
            loader = s.DataLoader(s.dataset, sampler=[first_index] * CHECK_WORKERS, **options)
            iterator = iter(loader)
            drawn = [sample_identity(sample, s.torch) for sample in iterator]
            record["workers_identical"] = len(drawn) == CHECK_WORKERS and len(set(drawn)) == 1
    except Exception as exc:
        s.events.skip("cloned randomness (DL008)", f"drawing index {first_index} raised {type(exc).__name__}: "
                      f"{str(exc)[:200]}")
        return
    finally:
        shutdown(iterator)
        s.watchdog.disarm()
    s.events.result("rng", record)
