"""Checking JSON that another process wrote against the TypedDict that declares it.

The torch probe runs in the target's interpreter, and the loader's subprocess
relays what it reported. Whatever a broken or hostile environment prints
there must not reach the rules as a `str` where they expect a `list`: each key
is checked against the TypedDict's annotations, and a value of the wrong type
is dropped and named, so the rest of the report still stands.

Only the shapes JSON can produce are handled: str, int, float, bool, None,
list[X], dict[str, X], nested TypedDicts, unions and Literal.
"""
from __future__ import annotations

import re
import types
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints, is_typeddict


# complexity: 25 — one branch per kind of annotation (Union, Literal, list, dict, TypedDict, plain types): the
#   dispatch is the function.
def conforms(value: object, expected: object) -> bool:
    """True when a JSON value has the annotated type (TypedDicts checked key by key)."""
    if expected is Any or expected is object:  # an untyped field, or one that takes anything
        return True
    if expected is None or expected is type(None):
        return value is None
    origin = get_origin(expected)
    if origin in (Union, types.UnionType):
        return any(conforms(value, option) for option in get_args(expected))
    if origin is Literal:
        return value in get_args(expected)
    if origin is list:
        (item,) = get_args(expected) or (object,)
        return isinstance(value, list) and all(conforms(v, item) for v in value)
    if origin is dict:
        key, item = get_args(expected) or (object, object)
        return isinstance(value, dict) and all(conforms(k, key) and conforms(v, item) for k, v in value.items())
    if is_typeddict(expected):
        hints = get_type_hints(expected)
        return isinstance(value, dict) and all(conforms(v, hints[k]) for k, v in value.items() if k in hints)
    if expected is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if expected is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(expected, type):
        return isinstance(value, expected)
    return True  # an annotation this checker does not know: trust it


def conform_typeddict(value: dict[str, object], declared: object, path: str = "") -> tuple[dict[str, object], list[str]]:
    """`value` with the keys whose values have the wrong type removed, and those keys' paths.

    Keys the TypedDict does not declare are dropped without comment (a newer
    probe may know more): a report carries what envdoctor knows the meaning of.
    Nested TypedDicts are cleaned recursively, so one odd field does not lose
    its siblings; in a list, one bad element makes the whole list unknown.
    """
    hints = get_type_hints(declared)
    clean: dict[str, object] = {}
    problems: list[str] = []
    for key, item in value.items():
        where = f"{path}{key}"
        if not isinstance(key, str) or key not in hints:
            continue
        expected = hints[key]
        if is_typeddict(expected) and isinstance(item, dict):
            inner, inner_problems = conform_typeddict(item, expected, f"{where}.")
            clean[key] = inner
            problems += inner_problems
        elif conforms(item, expected):
            clean[key] = item
        else:
            problems.append(f"{where}: {type(item).__name__}, not {_describe(expected)}")
    return clean, problems


def _describe(expected: object) -> str:
    """An annotation as its source reads: list[ThreadPool] | None, not list[envdoctor.facts.torch.ThreadPool]."""
    text = getattr(expected, "__name__", None) if not get_args(expected) else None
    return text or re.sub(r"\b(?:\w+\.)+(?=\w)", "", str(expected))


__all__ = ["conform_typeddict", "conforms"]
