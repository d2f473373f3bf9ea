"""SPW003 unpicklable-dataset: what the smoke test found when it pickled the dataset for spawn workers.

The loader stage pickles the dataset, collate_fn and worker_init_fn as spawn and
forkserver workers would (the `loader` section's `pickle` check); this rule says
what failed and how to make it picklable.
"""
from __future__ import annotations

from collections.abc import Iterator

from envdoctor.facts import Facts
from envdoctor.model import Severity
from envdoctor.rules import Hit


def find_unpicklable_dataset(facts: Facts) -> Iterator[Hit]:
    """SPW003: the dataset or collate_fn cannot be pickled for spawn/forkserver workers."""
    section = facts["loader"]
    if not section:
        return
    check = section.get("pickle", {})
    problems = list(check.get("problems", []))
    failure = section["failure"]
    if failure is not None and failure.get("kind") == "pickle" and not problems:
        problems.append({"object": "dataset or collate_fn", "error": failure.get("message", "")})
    if not problems:
        return
    method = check.get("start_method") or section.get("start_method")
    names = ", ".join(p.get("object", "?") for p in problems)
    yield Hit(
        message=(f"{names} cannot be pickled, so {method} workers cannot start: "
                 + "; ".join(f"{p.get('object')}: {p.get('error')}" for p in problems)),
        evidence={"start_method": method, "problems": problems, "dataset": section["dataset"]},
        fix=("define the dataset class, collate_fn and worker_init_fn at module level (no lambdas, no "
             "functions nested in other functions, no open file handles or locks as attributes — open them "
             "lazily per worker); functools.partial of a module-level function pickles"),
        severity=None if method in ("spawn", "forkserver") else Severity.INFO,
    )


RULES = {"SPW003": find_unpicklable_dataset}
