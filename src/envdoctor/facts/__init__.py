"""Facts: one snapshot of the environment, gathered lazily, once per section.

Rules never gather anything themselves. They ask `facts["system"]`,
`facts["packages"]` … and the first request for a section runs its probe;
later requests get the same dict. Sections are plain JSON-able dicts (the
way scikit-learn's show_versions keeps them), so a report's facts can be
saved and fed back to the rules as a fixture with `Facts.from_dict`.

A probe that raises is recorded once under the report's errors and every rule
that needs that section is skipped with the reason, never crashed.
"""
from __future__ import annotations

import importlib
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, overload

if TYPE_CHECKING:  # pragma: no cover
    from envdoctor.config import Config
    from envdoctor.facts.gpu import GpuFacts
    from envdoctor.facts.packages import PackagesFacts
    from envdoctor.facts.scripts import ScriptsFacts
    from envdoctor.facts.spec import SpecFacts
    from envdoctor.facts.storage import StorageFacts
    from envdoctor.facts.system import SystemFacts
    from envdoctor.facts.target import TargetFacts
    from envdoctor.facts.torch import TorchFacts
    from envdoctor.loader import LoaderFacts

#: Section name -> "module:function" of its probe, in the order a report lists them.
PROBES: dict[str, str] = {
    "target": "envdoctor.facts.target:gather_target",
    "system": "envdoctor.facts.system:gather_system",
    "packages": "envdoctor.facts.packages:gather_packages",
    "spec": "envdoctor.facts.spec:gather_spec",
    "torch": "envdoctor.facts.torch:gather_torch",
    "gpu": "envdoctor.facts.gpu:gather_gpu",
    "storage": "envdoctor.facts.storage:gather_storage",
    "scripts": "envdoctor.facts.scripts:gather_scripts",
    "loader": "envdoctor.loader:gather_loader",
    "fleet": "envdoctor.fleet:gather_fleet",
}


class ProbeFailed(Exception):
    """A section's probe failed; rules that need it are skipped."""

    def __init__(self, section: str, reason: str) -> None:
        super().__init__(f"probe {section!r} failed: {reason}")
        self.section = section
        self.reason = reason


def _load_probe(spec: str) -> Callable[[Facts], Any]:
    module_name, _, func_name = spec.partition(":")
    return getattr(importlib.import_module(module_name), func_name)


class Facts:
    """The lazily gathered snapshot. `facts[section]` gathers on first use."""

    def __init__(self, config: Config | None = None, preset: dict[str, Any] | None = None) -> None:
        from envdoctor.config import Config

        self.config = config if config is not None else Config()
        self._sections: dict[str, Any] = dict(preset or {})
        self._failed: dict[str, str] = {}
        self.errors: list[dict[str, Any]] = []

    @classmethod
    def from_dict(cls, sections: dict[str, Any], config: Config | None = None) -> Facts:
        """Facts fixed in advance (a saved report's facts): nothing is gathered."""
        facts = cls(config, preset=sections)
        for name in PROBES:
            facts._sections.setdefault(name, None)
        return facts

    # Each section's type is the TypedDict its probe module declares: rules, views
    # and the JSON Schema read the same contract.
    @overload
    def __getitem__(self, section: Literal["target"]) -> TargetFacts: ...
    @overload
    def __getitem__(self, section: Literal["system"]) -> SystemFacts: ...
    @overload
    def __getitem__(self, section: Literal["packages"]) -> PackagesFacts: ...
    @overload
    def __getitem__(self, section: Literal["spec"]) -> SpecFacts | None: ...
    @overload
    def __getitem__(self, section: Literal["torch"]) -> TorchFacts: ...
    @overload
    def __getitem__(self, section: Literal["gpu"]) -> GpuFacts: ...
    @overload
    def __getitem__(self, section: Literal["storage"]) -> StorageFacts: ...
    @overload
    def __getitem__(self, section: Literal["scripts"]) -> ScriptsFacts | None: ...
    @overload
    def __getitem__(self, section: Literal["loader"]) -> LoaderFacts | None: ...
    @overload
    def __getitem__(self, section: str) -> Any: ...

    def __getitem__(self, section: str) -> Any:
        if section in self._sections:
            return self._sections[section]
        if section in self._failed:
            raise ProbeFailed(section, self._failed[section])
        if section not in PROBES:
            raise KeyError(f"no probe gathers a section called {section!r}")
        try:
            value = _load_probe(PROBES[section])(self)
        except ProbeFailed:
            raise
        except Exception as exc:  # a probe must never take the report down
            reason = f"{type(exc).__name__}: {exc}"
            self._failed[section] = reason
            self.errors.append(
                {
                    "probe": section,
                    "message": reason,
                    "traceback": traceback.format_exc(limit=6),
                }
            )
            raise ProbeFailed(section, reason) from exc
        self._sections[section] = value
        return value

    def get(self, section: str, default: Any = None) -> Any:
        """The section, or `default` when its probe failed."""
        try:
            value = self[section]
        except ProbeFailed:
            return default
        return default if value is None else value

    def gathered(self) -> dict[str, Any]:
        """The sections gathered so far, in probe order."""
        order = list(PROBES)
        names = sorted(self._sections, key=lambda n: order.index(n) if n in order else len(order))
        return {name: self._sections[name] for name in names if self._sections[name] is not None}
