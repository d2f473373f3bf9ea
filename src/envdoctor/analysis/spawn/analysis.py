"""One script's analysis: the walk from its module level, into the project modules it imports."""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from envdoctor.analysis.spawn.calls import CallWalker
from envdoctor.analysis.spawn.project import Project, SharedModules
from envdoctor.analysis.spawn.syntax import source_lines
from envdoctor.analysis.spawn.values import Module, QualName, Unknown, Value
from envdoctor.analysis.spawn.walker import Frame, ImportRecord


class ScriptAnalysis(CallWalker):
    """One walk over one parsed script and the project modules it reaches; `result()` gives the facts."""

    def __init__(self, main: Module, project: Project | None = None) -> None:
        super().__init__(main)
        self.project = project
        self.restored = project.shared.restored if project is not None else None
        #: Modules this script has imported (walked now, or replayed from an earlier script).
        self.imported: set[int] = set()

    def run(self) -> None:
        frame = Frame(scope=self.main.scope, guarded=False, module=self.main)
        self.main.state = "running"
        try:
            if self.main.tree is not None:
                self.exec_block(self.main.tree.body, frame)
        except RecursionError:  # a file nested deeper than the interpreter allows
            self.truncated = True
        finally:
            self.restore_modules()
        self.main.state = "done"

    # -- imports -------------------------------------------------------------

    def absolute(self, stmt: ast.ImportFrom, module: Module) -> str:
        """The dotted name `from ..x import y` means inside `module`."""
        if not stmt.level:
            return stmt.module or ""
        package = module.package.split(".") if module.package else []
        if stmt.level > 1:
            package = package[:len(package) - (stmt.level - 1)] if len(package) >= stmt.level - 1 else []
        return ".".join([*package, *([stmt.module] if stmt.module else [])])

    def load(self, dotted: str, stmt: ast.stmt, frame: Frame) -> Module | None:
        """The project module `dotted`, walked once (as importing runs it), or None when not the project's."""
        if self.project is None or not dotted:
            return None
        module = self.project.find(dotted)
        if module is None:
            return None
        if id(module) not in self.imported and module.import_events is not None:
            self.imported.add(id(module))
            self.replay(module, stmt, frame)
            return module
        self.imported.add(id(module))
        if module.state != "new" or self.out_of_time():
            return module
        module.state = "running"  # partially initialised while its body runs, as in Python
        inner = Frame(scope=module.scope, guarded=frame.guarded, module=module, needs=frame.needs,
                      via=frame.via + (self.step(f"import {dotted}", stmt, frame),))
        first = len(self.events)
        record = ImportRecord(module)
        self.imports.append(record)
        try:
            if module.tree is not None:
                self.exec_block(module.tree.body, inner)
        finally:
            self.imports.pop()
            module.import_writes = record.writes
            module.import_changes = [(container, container.state()) for container in record.changes]
            module.import_defs = record.defs
            module.state = "done"
        if module.tree is not None:
            # Its function bodies are read again from its lines when a function is called: stripped
            # once this script's walk is over, or now when many modules' are whole (strip_later).
            self.project.shared.strip_later(module)
        cut = len(inner.via)
        # Relative to the import, as the chains are: what the importing branch needed is the importer's.
        module.import_events = [{**{k: v for k, v in event.items() if k != "needs" or v != frame.needs},
                                 "via": event["via"][cut:]} for event in self.events[first:]]
        return module

    def replay(self, module: Module, stmt: ast.stmt, frame: Frame) -> None:
        """What importing `module` started when an earlier script imported it, now reached from here, and
        what it wrote into other shared modules (`settings.use(2)` setting a `global`,
        `settings.KW.update(num_workers=2)`), written again; and the functions it defined, known again
        (what a skipped call is checked through: without them a script's facts depended on which scripts
        were checked before it)."""
        self.replay_events(module.import_events or [], [*frame.via, self.step(f"import {module.name}", stmt, frame)],
                           frame.guarded, frame.needs)
        for owner, name, value in module.import_writes:
            self.write_name(owner, name, value)
        for container, state in module.import_changes:
            self.to_change(container).set_state(state)
        if module.import_defs:
            self.replayed_defs.append(module.import_defs)

    def stmt_Import(self, stmt: ast.Import, frame: Frame) -> None:
        for alias in stmt.names:
            parts = alias.name.split(".")
            loaded = [self.load(".".join(parts[:i + 1]), stmt, frame) for i in range(len(parts))]
            if alias.asname:
                target = loaded[-1]
                self.set_name(frame, alias.asname, target if target is not None else self.external(alias.name, False))
            else:
                head = loaded[0]
                self.set_name(frame, parts[0], head if head is not None else self.external(parts[0], False))

    def stmt_ImportFrom(self, stmt: ast.ImportFrom, frame: Frame) -> None:
        dotted = self.absolute(stmt, frame.module)
        module = self.load(dotted, stmt, frame) if self.project is not None else None
        shown = ("." * stmt.level) + (stmt.module or "")
        for alias in stmt.names:
            if alias.name == "*":
                if module is not None:
                    for name, exported in module.scope.items():
                        if not name.startswith("_"):
                            self.read(module, name)
                            frame.module.scope[name] = exported
                            self.wrote(frame.module, name)
                else:
                    frame.module.star_modules.append(shown)
                continue
            value: Value
            if module is not None:
                value = self.module_attribute(module, alias.name, stmt, frame)
            else:
                value = self.external(f"{shown}.{alias.name}" if not stmt.level else f"{dotted}.{alias.name}",
                                      bool(stmt.level), root=dotted)
            self.set_name(frame, alias.asname or alias.name, value)

    def external(self, dotted: str, relative: bool, root: str | None = None) -> QualName:
        """A name from outside the project; `missing` says why, when it should have been inside."""
        missing = self.project.missing_reason(root or dotted, relative) if self.project is not None else None
        return QualName(dotted.lstrip("."), missing)

    def module_attribute(self, module: Module, attr: str, stmt: ast.stmt | None = None,
                         frame: Frame | None = None) -> Value:
        """`module.attr`: what its body bound, else a submodule, else unknown."""
        self.read(module, attr)
        if attr in module.scope:
            return module.scope[attr]
        if module.problem is not None:
            return QualName(f"{module.name}.{attr}", f"{module.path} cannot be parsed: {module.problem}")
        if self.project is not None and stmt is not None and frame is not None:
            sub = self.load(f"{module.name}.{attr}", stmt, frame)
            if sub is not None:
                module.scope[attr] = sub
                self.wrote(module, attr)
                return sub
        elif self.project is not None:
            sub = self.project.find(f"{module.name}.{attr}")
            if sub is not None and sub.state == "done":
                return sub
        return Unknown(f"{module.name}.{attr}")

    # -- the result ----------------------------------------------------------

    def result(self) -> dict[str, Any]:
        modules = [] if self.project is None else sorted(
            m.path for m in self.project.modules.values() if m is not None and m.tree is not None)
        return {
            **super().result(),
            "modules_followed": modules,
            "module_problems": list(self.project.problems) if self.project is not None else [],
        }


def analyse_source(tree: ast.Module, text: str, path: str = "<script>", project: bool = False,
                   reruns: bool = True, shared: SharedModules | None = None, main_guard: bool = True) -> dict[str, Any]:
    """Where this parsed script (and, with `project`, the project modules it imports) starts workers.

    `reruns` is False for a notebook: spawn does not re-run it in the workers. `main_guard` False: the
    code under a main guard that ends the script is not walked (`skipped_guard_lines`), for a check
    whose rules read only what runs at import time.
    """
    found = None
    package = ""
    if project:
        shared = shared if shared is not None else SharedModules()
        roots, package = shared.files.layout(path)
        found = Project(roots, absolute=Path(path).is_absolute(), shared=shared)
    main = Module("__main__", path, source_lines(text), tree, package=package, is_main=True, reruns=reruns)
    analysis = ScriptAnalysis(main, found)
    analysis.main_guard = main_guard
    try:
        analysis.run()
        return analysis.result()
    finally:
        main.release()  # the script's own tree: later scripts read it only through SharedModules.parse
        if shared is not None:
            shared.strip_deferred()
