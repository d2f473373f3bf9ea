"""What `envdoctor run` costs the loop it observes: its overhead against the plain command, same run.

Two measurements:

1. Per batch, in-process: `next()` on a DataLoader of trivial samples (the
   cost is then all DataLoader and observer), with torch's own
   `_BaseDataLoaderIter.__next__` and with the observer's wrapper, best of N
   interleaved rounds; the difference is the observer's cost per batch, shown
   against a 20 ms step (the target: under 1% of step time).
2. End to end: fixtures/loop/train_loop.py run plainly and under
   `envdoctor run`, interleaved, each reporting its own steps/s over the same
   window (its own perf_counter around next()); also that the loss is the same.

    python benchmarks/bench_run_overhead.py [--rounds 3] [--batches 3000]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "fixtures" / "loop" / "train_loop.py"
BOOTSTRAP = ROOT / "src" / "envdoctor" / "inside" / "loop_bootstrap"
STEP_S = 0.020

PER_BATCH = r"""
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
import torch
from torch.utils.data import DataLoader
loader = DataLoader(list(range(10**6)), batch_size=1)
import torch.utils.data.dataloader as module
plain = module._BaseDataLoaderIter.__next__
import envdoctor_loop_observer as observer
observer._plan = {"steps": 10**9, "warmup_steps": 0}
observer._patch(module)
wrapped = module._BaseDataLoaderIter.__next__
def per_batch(method, n):
    module._BaseDataLoaderIter.__next__ = method
    it = iter(loader)
    start = time.perf_counter()
    for _ in range(n):
        next(it)
    return (time.perf_counter() - start) / n
n = int(sys.argv[2])
rounds = [(per_batch(plain, n), per_batch(wrapped, n)) for _ in range(7)]
print(json.dumps({"plain": min(r[0] for r in rounds), "observed": min(r[1] for r in rounds)}))
"""


def per_batch(batches: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as events:
        env = {**os.environ, "ENVDOCTOR_LOOP_EVENTS": events}
        out = subprocess.run([sys.executable, "-c", PER_BATCH, str(BOOTSTRAP), str(batches)], env=env,
                             capture_output=True, text=True, check=True).stdout
    return json.loads(out.splitlines()[-1])


def end_to_end(observed: bool, env: dict[str, str]) -> dict[str, float]:
    argv = [sys.executable, str(SCRIPT)]
    if observed:
        argv = [sys.executable, "-m", "envdoctor", "run", "--warmup", env["WARMUP"], "--steps", env["WINDOW"],
                "--format", "json", "--output", os.devnull, "--", *argv]
    out = subprocess.run(argv, env={**os.environ, **env}, capture_output=True, text=True, check=True).stdout
    return json.loads([line for line in out.splitlines() if line.startswith("{")][-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", type=int, default=3000)
    args = parser.parse_args()
    cost = per_batch(args.batches)
    extra = cost["observed"] - cost["plain"]
    print(f"per batch: torch's next() {cost['plain'] * 1e6:.1f} µs, observed {cost['observed'] * 1e6:.1f} µs: "
          f"+{extra * 1e6:.2f} µs, {extra / STEP_S:.4%} of a {STEP_S * 1000:.0f} ms step")
    env = {"WARMUP": "5", "WINDOW": "100", "SAMPLE_S": "0.001", "STEP_S": str(STEP_S)}
    plain, observed, losses = [], [], set()
    for _ in range(args.rounds):  # interleaved, so machine noise hits both alike
        for is_observed, into in ((False, plain), (True, observed)):
            own = end_to_end(is_observed, env)
            into.append(own["batches_per_s"])
            losses.add(own["loss"])
    p, o = statistics.median(plain), statistics.median(observed)
    ratios = sorted(b / a - 1 for a, b in zip(plain, observed))  # each round's pair: the same moment's noise
    print(f"end to end ({args.rounds} rounds, median steps/s): plain {p:.2f}, under envdoctor run {o:.2f} "
          f"({o / p - 1:+.1%}); per round {', '.join(f'{r:+.1%}' for r in ratios)}; "
          f"losses {'identical' if len(losses) == 1 else sorted(losses)}")


if __name__ == "__main__":
    started = time.monotonic()
    main()
    print(f"({time.monotonic() - started:.0f} s)")
