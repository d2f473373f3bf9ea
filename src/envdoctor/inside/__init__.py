"""Code that runs inside the inspected interpreter, not in envdoctor's.

Every module here is started by path with the target environment's own Python
(which may lack envdoctor, rich or psutil, and may be older): the standard library
only at import time, never `envdoctor`. The parts import each other as top-level
modules from this folder (hence their `loader_` prefix, which keeps them from
shadowing the target's own modules).

- torch_probe.py: imports numpy and torch and reports the build, CUDA, threads.
- loader_runner.py: the smoke test's measuring process; its parts are loader_*.py
  (loader_sweep.py is the num_workers sweep, loader_paired.py the paired windows).
- loader_protocol.py: the events the runner writes and envdoctor's supervisor
  (envdoctor.loader.supervisor) reads — the one definition both sides import.
"""
