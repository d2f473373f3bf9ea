"""Facts: one snapshot of the environment, gathered lazily, once per section.

Rules never gather anything themselves. They ask `facts["system"]`,
`facts["packages"]` … and the first request for a section runs its probe;
later requests get the same dict. Sections are plain JSON-able dicts (the
way scikit-learn's show_versions keeps them), so a report's facts can be
saved and fed back to the rules as a fixture with `Facts.from_dict`.

A probe that raises is recorded once under the report's errors and every rule
that needs that section is skipped with the reason, never crashed.

Facts flow one way. Each probe declares in `PROBES` which sections it may read
while it gathers (`reads`, checked: reading another is an error that names the
fix) and which of its keys it gathered for another section (`hands_over`: the
loader stage's subprocess also runs the torch probe, and hands that result to
the torch section). The declared reads form no cycle (tests check it), so no
probe can end up waiting for itself.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, overload

if TYPE_CHECKING:  # pragma: no cover
    from envdoctor.config import Config
    from envdoctor.facts.fleet import FleetFacts
    from envdoctor.facts.gpu import GpuFacts
    from envdoctor.facts.imports import ImportsFacts
    from envdoctor.facts.loader import LoaderFacts
    from envdoctor.facts.loop import LoopFacts
    from envdoctor.facts.packages import PackagesFacts
    from envdoctor.facts.scripts import ScriptsFacts
    from envdoctor.facts.spec import SpecFacts
    from envdoctor.facts.storage import StorageFacts
    from envdoctor.facts.system import SystemFacts
    from envdoctor.facts.target import TargetFacts
    from envdoctor.facts.torch import TorchFacts

@dataclass(frozen=True)
class Probe:
    """How one section is gathered, and what it depends on."""

    #: "module:function" of the probe; the function takes the Facts and returns the section.
    gather: str
    #: The sections this probe may ask for while it gathers.
    reads: tuple[str, ...] = ()
    #: Keys of this section gathered for another section: {key: section}. The other
    #: section gets them through `Facts.handed_over`; the report leaves them out here.
    hands_over: Mapping[str, str] = field(default_factory=dict)


#: Section name -> its probe, in the order a report lists them.
PROBES: dict[str, Probe] = {
    "target": Probe("envdoctor.facts.target:gather_target"),
    "system": Probe("envdoctor.facts.system:gather_system", reads=("target",)),
    "packages": Probe("envdoctor.facts.packages:gather_packages", reads=("target", "system")),
    "spec": Probe("envdoctor.facts.spec:gather_spec", reads=("target", "packages")),
    "imports": Probe("envdoctor.facts.imports:gather_imports", reads=("target", "packages")),
    "torch": Probe("envdoctor.facts.torch:gather_torch", reads=("target", "system", "gpu", "loader")),
    "gpu": Probe("envdoctor.facts.gpu:gather_gpu", reads=("target", "system")),
    "storage": Probe("envdoctor.facts.storage:gather_storage", reads=("target", "system")),
    "scripts": Probe("envdoctor.facts.scripts:gather_scripts", reads=("target", "system")),
    "loader": Probe("envdoctor.loader:gather_loader", reads=("target", "system", "gpu"),
                    hands_over={"torch_probe": "torch"}),
    # Measured only by `envdoctor run`, which hands the section in as a preset; a check has none.
    "loop": Probe("envdoctor.facts.loop:gather_loop"),
}


class UndeclaredRead(Exception):
    """A probe asked for a section its PROBES entry does not declare: a bug in envdoctor."""


class ProbeFailed(Exception):
    """A section's probe failed; rules that need it are skipped."""

    def __init__(self, section: str, reason: str) -> None:
        super().__init__(f"probe {section!r} failed: {reason}")
        self.section = section
        self.reason = reason


def _load_probe(spec: str) -> Callable[[Facts], object]:
    module_name, _, func_name = spec.partition(":")
    return getattr(importlib.import_module(module_name), func_name)


class Facts:
    """The lazily gathered snapshot. `facts[section]` gathers on first use."""

    def __init__(self, config: Config | None = None, preset: Mapping[str, object] | None = None) -> None:
        from envdoctor.config import Config

        self.config = config if config is not None else Config()
        self._sections: dict[str, object] = dict(preset or {})
        self._failed: dict[str, str] = {}
        #: The sections whose probes are running now, outermost first.
        self._gathering: list[str] = []
        self.errors: list[dict[str, object]] = []
        #: What the judge layer decided of these facts (`envdoctor.judge`), by name: each decision is taken once
        #: per check and read by every rule, the engine and the views' objects.
        self.judgements: dict[str, Any] = {}

    @classmethod
    def from_dict(cls, sections: Mapping[str, object], config: Config | None = None) -> Facts:
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
    def __getitem__(self, section: Literal["imports"]) -> ImportsFacts: ...
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
    def __getitem__(self, section: Literal["fleet"]) -> FleetFacts | None: ...
    @overload
    def __getitem__(self, section: Literal["loop"]) -> LoopFacts | None: ...
    @overload
    def __getitem__(self, section: str) -> Any: ...

    def __getitem__(self, section: str) -> Any:
        if section in self._sections:
            return self._sections[section]
        if section in self._failed:
            raise ProbeFailed(section, self._failed[section])
        if section not in PROBES:
            raise KeyError(f"no probe gathers a section called {section!r}")
        if self._gathering:
            asking = self._gathering[-1]
            if section not in PROBES[asking].reads:
                raise UndeclaredRead(f"the {asking} probe read the {section!r} section without declaring it: "
                                     f"add it to PROBES[{asking!r}].reads in envdoctor/facts/__init__.py "
                                     "(and keep the reads free of cycles)")
        self._gathering.append(section)
        try:
            value = _load_probe(PROBES[section].gather)(self)
        except (ProbeFailed, UndeclaredRead):
            raise
        except Exception as exc:  # a probe must never take the report down
            import traceback  # only a failure needs it

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
        finally:
            self._gathering.pop()
        self._sections[section] = value
        return value

    def get(self, section: str, default: Any = None) -> Any:
        """The section, or `default` when its probe failed."""
        try:
            value = self[section]
        except ProbeFailed:
            return default
        return default if value is None else value

    def handed_over(self, section: str) -> dict[str, Any]:
        """What other probes gathered for `section` (see `Probe.hands_over`), gathering them if need be.

        Only the probes `section` declares it reads are asked; one that failed hands over nothing.
        """
        handed: dict[str, Any] = {}
        for name in PROBES[section].reads:
            keys = [key for key, receiver in PROBES[name].hands_over.items() if receiver == section]
            if not keys:
                continue
            source = self.get(name)
            if isinstance(source, Mapping):
                handed.update({key: source[key] for key in keys if key in source})
        return handed

    def gathered(self) -> dict[str, Any]:
        """The sections gathered so far, in probe order, without what they gathered for others."""
        order = list(PROBES)
        names = sorted(self._sections, key=lambda n: order.index(n) if n in order else len(order))
        sections: dict[str, object] = {}
        for name in names:
            value = self._sections[name]
            if value is None:
                continue
            private = PROBES[name].hands_over if name in PROBES else {}
            if private and isinstance(value, Mapping):
                value = {k: v for k, v in value.items() if k not in private}
            sections[name] = value
        return sections
