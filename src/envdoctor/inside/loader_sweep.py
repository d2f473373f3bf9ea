"""The num_workers sweep: which worker counts to time, how much of the budget each gets, when to go on.

Part of the standalone runner (see loader_runner.py).
"""
from __future__ import annotations

import loader_memory
from loader_measure import RunSpec, SteadySlice, measure
from loader_outcomes import RunCut
from loader_session import Session

#: Shortest steady-state slice worth measuring.
MIN_SLICE_S = 0.3
#: Longest steady-state slice in the adaptive sweep: more points beat longer ones.
MAX_SLICE_S = 1.2
#: Points the adaptive sweep keeps budget for past the usable CPUs.
EXTENSION_POINTS = 2
#: Share of the budget kept from the sweep's points past the usable CPUs (except extension points that
#: still gain) for re-measuring the candidate in paired windows and the persistent_workers check.
RESERVE_SHARE = 0.2


def points(s: Session) -> list[int]:
    """The worker counts to time, in order: 0, the user's own, powers of two up to the usable CPUs."""
    if s.plan.get("workers"):
        return [int(n) for n in s.plan["workers"]]
    usable = int(s.plan.get("usable_cpus") or 1)
    # The user's own setting comes right after 0: the gain is measured against it, and a
    # dataset that only fails in workers fails there first.
    current = s.current["num_workers"]
    points = [0] + ([current] if 0 < current <= s.cap else [])
    n = 1
    while n <= min(usable, s.cap):
        if n not in points:
            points.append(n)
        n *= 2
    if usable <= s.cap and usable not in points:
        points.append(usable)
    if s.current["num_workers"] not in points and s.current["num_workers"] <= max(s.cap, usable) * 2:
        points.append(s.current["num_workers"])
    return points


def startup_estimate(s: Session, nw: int) -> float:
    if nw == 0:
        return 0.0
    known = [(r["first_batch_s"], r["num_workers"]) for r in s.runs
             if r["num_workers"] > 0 and r.get("first_batch_s")]
    if known:
        # Workers start side by side; start-up grows only once they outnumber the CPUs.
        first, measured_nw = max(known)
        usable = int(s.plan.get("usable_cpus") or 1)
        return first * max(1.0, nw / max(measured_nw, usable))
    if s.start_method in ("spawn", "forkserver"):
        return s.import_s * (1 + nw / max(1, int(s.plan.get("usable_cpus") or 1))) + 0.5
    return 0.2 + 0.02 * nw


def sweep(s: Session) -> None:
    """Time each worker count in turn within the budget; past the CPUs while waiting workers still gain."""
    points_to_time = points(s)
    fixed = bool(s.plan.get("workers"))
    # Kept back: the share for the paired windows and persistent_workers, and what DL010 measures in.
    base_reserve = 0.0 if fixed else RESERVE_SHARE * float(s.plan["budget_s"]) + loader_memory.budget_needed(s)
    queue = list(points_to_time)
    extension: set[int] = set()
    done: set[int] = set()
    while queue:
        nw = queue.pop(0)
        if nw in done:
            continue
        if nw > 0 and not s.workers_ok:
            s.events.skip(f"num_workers={nw}",
                          f"the dataset or collate_fn cannot be pickled for {s.start_method} workers")
            done.add(nw)
            continue
        # The paired re-measurement and the persistent_workers check keep a share of the budget from
        # points past the usable CPUs; the curve up to the CPUs comes first: without it the knee is a guess.
        reserve = base_reserve if nw > s.usable and nw not in extension else 0.0
        startup = startup_estimate(s, nw)
        parallel = max(1, min(nw, int(s.plan.get("usable_cpus") or 1)))
        batch_est = s.per_sample_s * s.batch_size / parallel
        points_left = len(queue) + 1 + (0 if fixed else EXTENSION_POINTS)
        room = s.left() - reserve
        if fixed:
            slice_s = float(s.plan.get("point_s") or 1.5)
        else:
            # Slices are sized as if the reserve were spent, so the curve leaves it room: short slices
            # with more points beat long ones, and the paired windows settle what noise the slices leave.
            slice_s = min(MAX_SLICE_S, max(MIN_SLICE_S, (s.left() - base_reserve) / points_left - startup))
        need = startup + max(MIN_SLICE_S, 3 * batch_est) + 0.3
        # Without one worker run nothing can be judged, and start-up estimates are rough (under
        # spawn they scale the runner's own torch import): the first worker count gets whatever
        # budget is left; workers that cannot start in it are skipped as such (SlowStart).
        first_worker_run = nw > 0 and not any(r["num_workers"] > 0 for r in s.runs)
        if first_worker_run:
            room = s.left()
            need = min(need, 1.0)
        if room < need and s.runs:
            s.events.skip(f"num_workers={nw}",
                          f"not enough of the budget left ({room:.1f} s, about {need:.1f} s needed)")
            done.add(nw)
            continue
        try:
            run = measure(s, RunSpec(nw, startup_s=startup, batch_s=batch_est), SteadySlice(slice_s))
        except RunCut as slow:
            s.events.skip(f"num_workers={nw}", str(slow))
            done.add(nw)
            continue
        done.add(nw)
        s.runs.append(run)
        s.events.result("run", run)
        if not fixed and not queue:
            extra = extension_point(s, done)
            if extra is not None:
                queue.append(extra)
                extension.add(extra)


def persistence_cost(s: Session) -> float:
    """Seconds the persistent_workers check would take, from the worker runs so far (0: unknown)."""
    worker_runs = [r for r in s.runs if r["num_workers"] > 0 and r.get("samples_per_s")]
    if not worker_runs or s.length is None:
        return 0.0
    run = max(worker_runs, key=lambda r: r["samples_per_s"])
    startup = run.get("first_batch_s") or 0.0
    size = min(s.length, max(2 * run["num_workers"], 4) * s.batch_size)
    epoch = size / run["samples_per_s"]
    return 2 * (startup + epoch) + (startup + 2 * epoch) + 0.8


def extension_point(s: Session, done: set[int]) -> int | None:
    """One more point past the usable CPUs while throughput climbs and workers mostly wait."""
    worker_runs = sorted((r for r in s.runs if r["num_workers"] > 0 and r.get("samples_per_s")),
                         key=lambda r: r["num_workers"])
    if len(worker_runs) < 1:
        return None
    last = worker_runs[-1]
    previous = [r for r in s.runs if r["num_workers"] < last["num_workers"] and r.get("samples_per_s")]
    if not previous:
        return None
    prev = max(previous, key=lambda r: r["num_workers"])
    climbing = last["samples_per_s"] >= 1.15 * prev["samples_per_s"]
    # Waiting (blocked) rather than computing, of the time not spent queued for a busy CPU.
    cpu, blocked = last.get("worker_cpu") or 0, last.get("worker_blocked") or 0
    waiting = cpu + blocked > 0 and blocked / (cpu + blocked) >= 0.5
    nxt = last["num_workers"] * 2
    if climbing and waiting and nxt <= s.cap and nxt not in done:
        return nxt
    return None

