"""PKG rules: the packages of the environment, one module per kind of problem.

doubles (PKG001 conda-pip-double, PKG002 duplicate-distribution, PKG003
broken-requirement), clashes (PKG004, PKG005), paths (PKG006, PKG011), spec
(PKG007), metadata (PKG009), torch_import (PKG008, PKG010: what importing torch
printed; numpy_builds: PKG008 without importing, a NumPy 1 build beside NumPy
2), imports (PKG012: what importing each compiled distribution raised,
--deep), kernels (PKG013: the interpreter a notebook given to check runs on).
`states` is what they share: which copy of each distribution counts.
`RULES` is the family's one table, which catalog/PKG.toml names.
"""
from __future__ import annotations

from envdoctor.rules.packages import clashes, doubles, imports, kernels, metadata, numpy_builds, paths, spec, torch_import

RULES = {**doubles.RULES, **clashes.RULES, **paths.RULES, **spec.RULES, **metadata.RULES, **torch_import.RULES,
         **imports.RULES, **kernels.RULES,
         **numpy_builds.RULES}  # PKG008 again: its static half, then torch_import's probe half
