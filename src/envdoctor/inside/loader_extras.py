"""The settings beside num_workers: persistent_workers across two epochs, pin_memory when a GPU is present.

Part of the standalone runner (see loader_runner.py).
"""
from __future__ import annotations

from loader_measure import RunSpec, SteadySlice, WholeEpochs, measure
from loader_outcomes import DatasetFailure, RunCut
from loader_session import Session
from loader_sweep import MIN_SLICE_S


def _second_epoch_first_batch(run: dict[str, object]) -> float | None:
    """How long the run's last epoch waited for its first batch (None when it was not timed)."""
    waits = run.get("epoch_first_batch_s")
    last = waits[-1] if isinstance(waits, list) and waits else None
    return float(last) if isinstance(last, (int, float)) else None


def persistence(s: Session) -> None:
    """Two epochs without and with persistent_workers: what the second epoch's start-up costs."""
    workers_ok = s.workers_ok
    from torch.utils.data import Subset

    if not workers_ok or s.iterable or s.length is None:
        s.events.result("skip", {"what": "persistent_workers", "reason": "no worker runs to compare"
                                    if not workers_ok else "the dataset has no length"})
        return
    candidates = [r for r in s.runs if r["num_workers"] > 0 and r.get("samples_per_s")]
    if not candidates:
        s.events.result("skip", {"what": "persistent_workers", "reason": "no successful worker run"})
        return
    best = max(r["samples_per_s"] for r in candidates)
    nw = min(r["num_workers"] for r in candidates if r["samples_per_s"] >= 0.95 * best)
    run_nw = next(r for r in candidates if r["num_workers"] == nw)
    startup = run_nw.get("first_batch_s") or 0.0
    size = min(s.length, max(2 * nw, 4) * s.batch_size)
    epoch_est = size / best
    cost = 2 * (startup + epoch_est) + (startup + 2 * epoch_est) + 0.5
    if cost > s.left() - 0.3:
        s.events.result("skip", {"what": "persistent_workers",
                                    "reason": f"not enough of the budget left ({s.left():.1f} s, about "
                                              f"{cost + 0.3:.1f} s needed); estimated from start-up instead"})
        # Without persistent workers every epoch pays the start-up the sweep measured once.
        batch_time = s.batch_size * nw / best
        s.events.result("persistent", {"num_workers": nw, "measured": False,
                                          "saving_s": round(max(0.0, startup - batch_time), 4)})
        return
    subset = Subset(s.tracked, range(size))
    kwargs = {k: v for k, v in s.kwargs.items() if k not in ("sampler", "batch_sampler", "shuffle")}
    if "batch_size" not in kwargs:
        kwargs["batch_size"] = s.batch_size
    results: dict[bool, dict[str, object]] = {}
    for persistent in (False, True):
        try:
            run = measure(s, RunSpec(nw, startup_s=startup, batch_s=s.per_sample_s * s.batch_size,
                                     persistent=persistent, dataset=subset, kwargs=kwargs,
                                     label=f"persistent_workers={persistent}"), WholeEpochs(2, epoch_est))
        except RunCut as slow:
            s.events.result("skip", {"what": "persistent_workers", "reason": str(slow)})
            return
        results[persistent] = run
    off, on = results[False], results[True]
    second_off, second_on = _second_epoch_first_batch(off), _second_epoch_first_batch(on)
    s.events.result("persistent", {
        "num_workers": nw, "measured": True, "samples_per_epoch": size,
        "epoch2_first_batch_s": {"false": second_off, "true": second_on},
        "epoch_s": {"false": off.get("epoch_s"), "true": on.get("epoch_s")},
        "saving_s": round(second_off - second_on, 4) if second_off is not None and second_on is not None else None,
    })

# -- 5. pin_memory when a GPU is present ---------------------------------

def pin_memory(s: Session) -> None:
    """The best setting again with pin_memory=True, when a CUDA device is present."""
    workers_ok = s.workers_ok
    if not (s.plan.get("check_cuda", True) and s.torch.cuda.is_available()):
        s.events.result("skip", {"what": "pin_memory", "reason": "no CUDA device: pinned memory only "
                                    "speeds up copies to a GPU"})
        return
    if getattr(s.torch.cuda, "_is_in_bad_fork", lambda: False)():
        s.events.result("skip", {"what": "pin_memory", "reason": "CUDA was initialised in the training "
                                    "process before preflight, so a forked child cannot pin memory"})
        return
    candidates = [r for r in s.runs if r.get("samples_per_s")]
    if not candidates:
        return
    best_run = max(candidates, key=lambda r: r["samples_per_s"])
    nw = best_run["num_workers"] if workers_ok else 0
    startup = best_run.get("first_batch_s") or 0.0
    slice_s = min(1.5, max(MIN_SLICE_S, s.left() - startup - 1.0))
    if s.left() < startup + slice_s + 0.5:
        s.events.result("skip", {"what": "pin_memory", "reason": "not enough of the budget left"})
        return
    try:
        run = measure(s, RunSpec(nw, startup_s=startup, batch_s=s.per_sample_s * s.batch_size,
                                 pin_memory=True, label="pin_memory=True"), SteadySlice(slice_s))
    except DatasetFailure as failure:
        # The same loader ran unpinned: what failed here is pinning (the CUDA side), not the dataset.
        s.events.result("skip", {"what": "pin_memory", "reason": f"pinning failed: {failure}"})
        return
    except RunCut as slow:
        s.events.result("skip", {"what": "pin_memory", "reason": str(slow)})
        return
    s.events.result("pin", {"num_workers": nw, "unpinned_samples_per_s": best_run["samples_per_s"],
                               "pinned_samples_per_s": run.get("samples_per_s"),
                               "pinned_first_batch_s": run.get("first_batch_s")})


