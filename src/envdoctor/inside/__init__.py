"""Code that runs inside the inspected environment's interpreter, never in envdoctor's own.

envdoctor starts these files by path with the target's Python (`torch_probe.py`, `loader_runner.py`),
or, for `preflight(loader=...)`, imports `loader_runner` in a forked child; each imports its siblings as
top-level modules from this folder and nothing but the standard library at module level (the target
need not have envdoctor; torch and the dataset's packages are imported inside functions, once the
runner runs there). tests/test_architecture.py checks both.

The one module envdoctor itself imports from here is `knee` (as `envdoctor.inside.knee`): the rule the
runner uses to choose what it re-measures is the rule the report recommends with.
"""
