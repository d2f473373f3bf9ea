"""Errors shared by several layers (CLI, engine, facts, fleet), below all of them.

Each is printed by the CLI as one line that names the flag or file and the next
step, with exit code 2.
"""
from __future__ import annotations


class UsageError(Exception):
    """A problem with what the user asked for; printed as one line, exit 2."""


class TargetError(Exception):
    """The environment asked for cannot be found or used."""
