"""Code that runs inside the inspected environment's interpreter, never in envdoctor's own.

envdoctor starts these files by path with the target's Python (`torch_probe.py`,
`loader_runner.py`), or, for `preflight(loader=...)`, imports `loader_runner` in a
forked child. Each imports its siblings as top-level modules from this folder (hence
the `loader_` prefix, which keeps them from shadowing the target's own modules) and
nothing but the standard library at module level (the target need not have envdoctor;
torch and the dataset's packages are imported inside functions, once the runner runs
there). tests/test_architecture.py checks both.

- torch_probe.py: imports numpy and torch and reports the build, CUDA, threads.
- loader_runner.py: the smoke test's measuring process; its parts are loader_*.py
  (loader_sweep.py is the num_workers sweep, loader_paired.py the paired windows).
- loader_protocol.py, loader_knee.py and loader_growth.py are the modules envdoctor imports
  from here too (as `envdoctor.inside.loader_protocol`, …): the events the runner writes
  and the supervisor reads, the knee rule the runner uses to choose what it re-measures
  (the rule the report recommends with), and the reading of a worker's private memory
  and its growth a sample, which the smoke test and `envdoctor run` share (DL010).
"""
