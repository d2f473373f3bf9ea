"""The walk's base: where it is (a Frame), what it has found (events), names and bindings.

The interpreter is split by concern into a chain of classes, each reading the
ones below it: `Walker` (state, lookup, bind, record) → `StatementWalker`
(statements, guards, branches) → `ExpressionWalker` (expressions,
containers, comprehensions) → `StartTracker` (what iterating or calling
starts) → `CallWalker` (calls into functions, classes, modules) →
`ScriptAnalysis` (imports of the project's own modules, the result).
"""
from __future__ import annotations

import ast
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from envdoctor.analysis.spawn.names import BUILTIN_NAMES, STAR_EXPORTS
from envdoctor.analysis.spawn.syntax import RestoredBodies
from envdoctor.analysis.spawn.values import (
    ClassInfo,
    Const,
    Either,
    Function,
    Instance,
    Loader,
    Mapping_,
    Module,
    NamespaceObj,
    ParserObj,
    QualName,
    Seq,
    Step,
    TrainerObj,
    Unknown,
    Value,
    any_of,
    is_plain,
    join,
    loaderish,
    tick,
    unparse,
)

#: Node types walked as another one is: `[a, b]` as `(a, b)`, an async def as a def. A table, not class
#: attributes bound to the other method (`stmt_AsyncFor = stmt_For`), which mypyc compiles as data.
SAME_WALK = {"List": "Tuple", "Set": "Tuple", "SetComp": "ListComp", "GeneratorExp": "ListComp",
             "DictComp": "ListComp", "AsyncFunctionDef": "FunctionDef", "AsyncFor": "For", "AsyncWith": "With",
             "TryStar": "Try"}
#: Per walker class and prefix, node type -> the method that walks it (None: the generic walk).
_HANDLERS: dict[tuple[type, str], dict[type, Any]] = {}
#: A dict or list the walk may change in place (see Walker.to_change).
_Container = TypeVar("_Container", bound=Mapping_ | Seq)
#: What holds names or contents a walk reads and writes (see Walker.read): a module's scope, an object's
#: attributes, a dict, a list, a parser's options, a trainer's model. (A function's scope is one too, by its
#: id; a class's namespace is not: see Walker.epoch.)
Holder = Module | Instance | Mapping_ | Seq | ParserObj | TrainerObj
#: One thing read or written: a holder and the name in it (None: what it holds as a whole).
Cell = tuple[Holder | int, str | None]
#: The values whose contents a walk reads whole and later code may change in place (see Walker.read_held).
HELD = frozenset({Mapping_, Seq, ParserObj, TrainerObj, NamespaceObj})


def held(value: Value) -> Holder | None:
    """What a value's contents are held in, when later code may change them in place (a namespace: its parser)."""
    if isinstance(value, NamespaceObj):
        return value.parser
    return value if isinstance(value, (Mapping_, Seq, ParserObj, TrainerObj, Instance)) else None


def holders(value: Value) -> list[Holder]:
    """What `held` says, for each option of one of several objects."""
    found = [held(option) for option in value.options] if isinstance(value, Either) else [held(value)]
    return [holder for holder in found if holder is not None]


@dataclass(slots=True)
class Frame:
    """Where the walk is: the scope, whether under the guard, the chain of calls."""

    scope: dict[str, Value]
    guarded: bool
    module: Module
    via: tuple[Step, ...] = ()
    function: Function | None = None
    declared_global: set[str] = field(default_factory=set)
    returns: list[Value] = field(default_factory=list)
    self_class: ClassInfo | None = None
    self_value: Value | None = None
    #: Enclosing function scopes, innermost first: what a nested function reads.
    enclosing: list[dict[str, Value]] = field(default_factory=list)
    class_body: bool = False
    #: Loops around the statement being walked: a name's value there may change on a later pass.
    loop_depth: int = 0
    #: The start method a launcher forces on what it runs (accelerate's notebook_launcher: fork).
    forced_method: str | None = None
    forced_by: str | None = None
    #: A function's own scope that nothing else can read: its body defines no function, lambda or class
    #: (see BodyRunner.private_body), so no closure ever captures it.
    private: bool = False
    #: The command-line options a branch around this code needs, off by default (`if args.test_only:`:
    #: "--test-only"): a start here happens only with them (see StatementWalker.option_branches).
    needs: str | None = None

    def closure(self) -> list[dict[str, Value]]:
        """The scopes a function defined here can see (not the module's, not a class body's)."""
        if self.scope is self.module.scope or self.class_body:
            return list(self.enclosing)
        return [self.scope, *self.enclosing]


@dataclass(slots=True)
class Memo:
    """A followed call's walk, standing for the next call with the same key while nothing it saw has changed."""

    result: Value
    #: The starts it recorded, each chain cut where the call began.
    events: list[dict[str, Any]]
    #: What it read and what it wrote (a caller's walk counts them as its own when the memo stands for it).
    reads: frozenset[Cell]
    writes: frozenset[tuple[Holder, str | None]]
    #: When its walk ended (the walk's clock), and the walker's epoch then.
    made: int
    epoch: int
    #: A constructor's walk on an object made for it (see Walker.constructing): the object, and the attributes
    #: its walk left on it, which the next object of the class made with the same arguments takes.
    made_object: Instance | None = None
    attrs: dict[str, Value] | None = None


@dataclass(slots=True)
class Trace:
    """What one followed call's walk read and wrote outside its own scope, to know when its memo still holds.

    `start`: when it began (the walk's clock); what was made after is the walk's own. The cells it read and
    wrote are the walker's logs from `reads` and `writes` on (its callees' included); `taints`, the walker's
    count of what makes a walk unrepeatable, when it began (see Walker.taints).
    """

    start: int
    reads: int
    writes: int
    taints: int


def names_of(owner: Module | Instance | ClassInfo) -> tuple[dict[str, Value], Module | None]:
    """The names `owner.name = value` writes into, and the project module that holds them (None: the script's
    own object)."""
    if isinstance(owner, Module):
        return owner.scope, owner
    if isinstance(owner, Instance):
        return owner.attrs, owner.home
    return owner.namespace, owner.module


@dataclass
class ImportRecord:
    """What one project module's import does, while it runs, besides the starts its walk records: the
    writes into other shared modules' names (see Walker.write_name) and the changes to their dicts and
    lists (see Walker.to_change), made again when a later script imports it (ScriptAnalysis.replay)."""

    #: The module whose import this is.
    module: Module | None = None
    writes: list[tuple[Module | Instance | ClassInfo, str, Value]] = field(default_factory=list)
    changes: dict[Mapping_ | Seq, None] = field(default_factory=dict)
    #: The functions its import defined (name, node, the module's lines): a later script that replays the
    #: import knows them too, or `relevant` could not follow a call into them (see Walker.defs).
    defs: list[tuple[str, ast.AST, Sequence[str]]] = field(default_factory=list)


def needed_together(outer: str | None, inner: str | None) -> str | None:
    """The options two nested branches need together (None: neither needs one)."""
    if not outer or not inner or inner == outer:
        return outer or inner
    return f"{outer} and {inner}"


class Walker:
    """The state one analysis shares across every module it reads."""

    def __init__(self, main: Module, deadline_s: float = 20.0) -> None:
        self.main = main
        self.events: list[dict[str, Any]] = []
        self._seen: set[tuple[object, ...]] = set()
        self.seq = 0
        self.calls_followed = 0
        self.truncated = False
        self.stack: list[ast.AST] = []
        self.guard_lines: list[int] = []
        #: Whether the code under the script's own `if __name__ == "__main__":` is walked when nothing
        #: at module level follows it (False when every rule of the check reads only what runs at
        #: import time), and the guards it was not walked under.
        self.main_guard = True
        self.skipped_guard_lines: list[int] = []
        #: Caches keyed by the node or object itself, never its id(): a stripped body's nodes are
        #: freed mid-walk, and a new node at the same address must not get the old one's answer.
        self._generators: dict[ast.AST, bool] = {}
        self._relevant: dict[ast.AST, bool] = {}
        #: Every function the walk has read, by name (what `relevant` follows calls through).
        self.defs: dict[str, list[tuple[ast.AST, Sequence[str]]]] = {}
        #: The functions of replayed imports (Module.import_defs), added to `defs` when `relevant` first
        #: reads it: most scripts replay hundreds of a framework's modules and call few of their functions.
        self.replayed_defs: list[list[tuple[str, ast.AST, Sequence[str]]]] = []
        #: A followed call's result and the events its walk recorded (their chains cut where the call began).
        self.memo: dict[tuple[object, ...], Memo] = {}
        #: Where the check keeps the function bodies it parsed again (SharedModules.restored), if it does.
        self.restored: RestoredBodies | None = None
        #: The object `instantiate` is about to run `__init__` on, new and empty (see BodyRunner.remember).
        self.constructing: Instance | None = None
        #: The calls being walked now, each with what its walk has read and written so far (see Trace).
        self.traces: list[Trace] = []
        #: Every cell read and written while a call is walked, in order (emptied when the outermost ends).
        self.reads_log: list[Cell] = []
        self.writes_log: list[tuple[Holder, str | None]] = []
        #: When each cell was last written, by the walk's clock ((holder, None): anything in the holder).
        self.last_write: dict[Cell, int] = {}
        #: What made the calls walked then unrepeatable: a cycle cut, a budget spent, an import's record.
        self.taints = 0
        #: Bumped when whole holders are put back (restore_modules) or a class's namespace is written after its
        #: body ran (`Config.workers = 4`, rare): every memo made before is stale. A class attribute read
        #: is then no cell a walk need note.
        self.epoch = 0
        #: Project modules (and the objects and containers their code made) that later scripts share, as they
        #: were before this script wrote into them.
        self.written: dict[Value, Any] = {}
        #: The project modules' imports running (walking their bodies) now, outermost first.
        self.imports: list[ImportRecord] = []
        self.deadline = time.monotonic() + deadline_s
        #: The method that walks each node type (`stmt_If`, `expr_Call`), or None for the generic walk.
        self.stmt_handlers = _HANDLERS.setdefault((type(self), "stmt_"), {})
        self.expr_handlers = _HANDLERS.setdefault((type(self), "expr_"), {})

    def handler(self, table: dict[type, Any], prefix: str, kind: type) -> Any:
        """The method of this walker's class named prefix + node type (looked up once per class and type), or
        of the type it is walked as (SAME_WALK)."""
        name = SAME_WALK.get(kind.__name__, kind.__name__)
        method = table[kind] = getattr(type(self), f"{prefix}{name}", None)
        return method

    # -- provided by the classes above (declared here for the type checker) --

    def eval(self, node: ast.expr | None, frame: Frame) -> Value:
        raise NotImplementedError

    def exec_block(self, body: Iterable[ast.stmt], frame: Frame) -> bool:
        raise NotImplementedError

    def start_loader(self, loader: Loader, node: ast.AST, frame: Frame, how: str) -> None:
        raise NotImplementedError

    # -- helpers ------------------------------------------------------------

    def out_of_time(self) -> bool:
        if time.monotonic() > self.deadline:
            self.truncated = True
            self.taints += 1
            return True
        return False

    # -- what a followed call reads and writes (its memo holds while none of it changes) --

    def read(self, holder: Holder | int, key: str | None) -> None:
        """A walk read `key` of `holder` (None: what it holds as a whole)."""
        if self.traces:
            self.reads_log.append((holder, key))

    def wrote(self, holder: Holder | int, key: str | None) -> None:
        """`key` of `holder` changed (None: what it holds, as a whole): a memo that read or wrote it is stale.

        A function's own scope (an int) is only stamped: each call has a scope of its own, so no memo of
        another call counts a write there as its own (see BodyRunner.remember). A module's scope is read
        by name only (a star import reads each name it copies), so its names are stamped one by one. With
        no memo yet, nothing is stamped: a memo made later is made after the write."""
        if self.memo:
            now = tick()
            last = self.last_write
            last[holder, key] = now
            if key is not None and not isinstance(holder, (int, Module)):
                last[holder, None] = now
        if self.traces and not isinstance(holder, int):
            self.writes_log.append((holder, key))

    def read_held(self, value: Value, depth: int = 0) -> None:
        """A walk read what a dict, list, parser or trainer holds (and the dicts and lists held in it)."""
        holder = held(value)
        if holder is None:
            return
        self.reads_log.append((holder, None))
        if depth == 0 and isinstance(holder, (Mapping_, Seq)):
            items = holder.items.values() if isinstance(holder, Mapping_) else holder.items
            for item in list(items)[:16]:
                if type(item) in HELD:
                    self.read_held(item, 1)

    def scope_holder(self, frame: Frame) -> Module | int | None:
        """What a name bound in the frame's own scope writes into, or None when no other walk can read it (a
        class body's namespace: its class is new, and no walk has read it by name yet)."""
        if frame.scope is frame.module.scope:
            return frame.module
        if frame.class_body or frame.private:
            return None
        return id(frame.scope)

    def set_name(self, frame: Frame, name: str, value: Value) -> None:
        """`name = value` in the frame's own scope (an assignment, a def, a class, an import)."""
        frame.scope[name] = value
        if self.memo or self.traces:  # else wrote() has nothing to note
            holder = self.scope_holder(frame)
            if holder is not None:
                self.wrote(holder, name)

    def source(self, node: ast.AST) -> str:
        return unparse(node)

    def step(self, call: str, node: ast.AST, frame: Frame) -> Step:
        line = getattr(node, "lineno", 1)
        return Step(call, frame.module.path, line, frame.module.code(line))

    def record(self, kind: str, node: ast.AST, frame: Frame, **extra: object) -> None:
        module = frame.module
        line = getattr(node, "lineno", 1)
        column = module.column(line, getattr(node, "col_offset", 0))
        entry = frame.via[0] if frame.via else None
        # One finding per start site: the same loop in a helper is a start for each
        # module-level statement that reaches it (the user moves each one under the guard).
        key = (kind, module.path, line, column, frame.guarded,
               (entry.path, entry.line) if entry is not None else None)
        if key in self._seen:
            return
        self._seen.add(key)
        self.seq += 1
        event = {
            "kind": kind,
            "path": module.path,
            "line": line,
            "column": column,
            "code": module.code(line),
            "guarded": frame.guarded,
            "seq": self.seq,
            "entry": ({"path": entry.path, "line": entry.line, "code": entry.code, "call": entry.call} if entry
                      else {"path": module.path, "line": line, "code": module.code(line), "call": None}),
            "via": [{"function": s.call, "path": s.path, "line": s.line, "code": s.code} for s in frame.via],
        }
        event.update(extra)
        if frame.needs:
            event["needs"] = frame.needs
        self.events.append(event)

    def replay_events(self, events: Iterable[dict[str, Any]], steps: Sequence[Step], guarded: bool,
                      needs: str | None = None) -> None:
        """Starts an earlier walk recorded (each `via` cut where that walk began), now reached through `steps`:
        one finding per start site, so each module-level statement that reaches them is named."""
        prefix = [{"function": s.call, "path": s.path, "line": s.line, "code": s.code} for s in steps]
        head = prefix[0]
        for event in events:
            key = (event["kind"], event["path"], event["line"], event["column"], guarded, (head["path"], head["line"]))
            if key in self._seen:
                continue
            self._seen.add(key)
            self.seq += 1
            replayed = {**event, "guarded": guarded, "seq": self.seq, "via": [*prefix, *event["via"]],
                        "entry": {"path": head["path"], "line": head["line"], "code": head["code"],
                                  "call": head["function"]}}
            if needs:
                replayed["needs"] = needed_together(needs, event.get("needs"))
            self.events.append(replayed)

    def write_name(self, owner: Module | Instance | ClassInfo, name: str, value: Value) -> None:
        """`owner.name = value`, by code other than its module's own top level (`settings.X = 4`, a
        `global X` in one of its functions, `settings.cfg.workers = 8`, `settings.Defaults.workers = 8`).

        A module imported and walked is shared by the later scripts of the check, each of which runs in a
        process of its own: what its import left is kept, and put back when this script's walk ends. A write
        made while another project module's import runs is also that import's: each later script that
        imports it (replayed, not walked again) makes it again (see ScriptAnalysis.replay)."""
        names, home = names_of(owner)
        if home is not None and home.state == "done" and not home.is_main:
            if owner not in self.written:
                self.written[owner] = dict(names)
            for record in self.imports:
                record.writes.append((owner, name, value))
                self.taints += 1  # made again for each later importer: no memo may skip it
        names[name] = value
        if isinstance(owner, ClassInfo):
            self.epoch += 1
        else:
            self.wrote(owner, name)

    def to_change(self, container: _Container) -> _Container:
        """`container`, about to change in place (`settings.KW["num_workers"] = 4`, `.update()`,
        `.append()`), kept as `write_name` keeps names. One a shared module's top level bound to a name
        (its `home`) is kept and put back as names are, and a change made while another project module's
        import runs is made again when a later script imports that module. One that no project module
        bound (the script's own, or held inside another container) is the script's when no import runs:
        kept and put back; what an import does to it stays."""
        self.wrote(container, None)
        home = container.home
        if home is not None:
            if home.state != "done" or home.is_main:
                return container  # its own module's import fills it: what every importer sees
            for record in self.imports:
                record.changes[container] = None
                self.taints += 1  # made again for each later importer: no memo may skip it
        elif self.imports:
            return container
        if container not in self.written:
            self.written[container] = container.state()
        return container

    def restore_modules(self) -> None:
        """Every shared module (and object, class or container of one) this script wrote into, as its import
        left it."""
        for owner, kept in self.written.items():
            if isinstance(owner, (Mapping_, Seq)):
                owner.set_state(kept)
            elif isinstance(owner, (Module, Instance, ClassInfo)):
                names = names_of(owner)[0]
                names.clear()
                names.update(kept)
        self.written.clear()
        self.epoch += 1

    def lookup(self, name: str, frame: Frame) -> Value:
        if name in frame.scope and name not in frame.declared_global:
            return frame.scope[name]
        tracing = bool(self.traces)
        for scope in frame.enclosing:
            if tracing:
                self.reads_log.append((id(scope), name))
            if name in scope:
                value = scope[name]
                if tracing and type(value) in HELD:
                    self.read_held(value)
                return value
        module = frame.module
        if tracing:
            self.reads_log.append((module, name))
        if name in module.scope:
            value = module.scope[name]
            if tracing and type(value) in HELD:
                self.read_held(value)
            return value
        for star in module.star_modules:
            if name in STAR_EXPORTS.get(star, ()):
                return QualName(f"{star}.{name}")
        if name in BUILTIN_NAMES:
            return QualName(f"builtins.{name}")
        return Unknown(name)

    def bind(self, target: ast.AST, value: Value, frame: Frame, line: int | None = None) -> None:
        binder = _BINDERS.get(type(target))
        if binder is not None:
            binder(self, target, value, frame, line)

    def bind_name(self, target: ast.Name, value: Value, frame: Frame, line: int | None) -> None:
        if isinstance(value, Const) and value.origin is None:
            value = Const(value.value, f"{target.id} = {value.text()} (line {line or target.lineno})")
        if target.id in frame.declared_global:
            self.write_name(frame.module, target.id, value)
            return
        self.set_name(frame, target.id, value)
        if self.traces and type(value) in HELD:
            self.read_held(value)  # what a loop or an unpacking gave it, read later by name
        if isinstance(value, (Mapping_, Seq)) and value.home is None and frame.scope is frame.module.scope \
                and not frame.module.is_main:
            value.home = frame.module

    def bind_unpacked(self, target: ast.Tuple | ast.List, value: Value, frame: Frame, line: int | None) -> None:
        loader = loaderish(value)
        if loader is not None and loader.guessed:
            # A library call given num_workers= that may return one loader or several: unpacking a
            # list starts nothing, and each name it unpacks into is such a loader.
            value = Seq([replace(loader, site=loader.site) for _ in target.elts])
        elif loader is not None:  # `a, b = loader` iterates it
            self.start_loader(loader, target, frame, "unpacking")
        # `a, b = [loader_a, loader_b]` iterates the list, not a loader: nothing starts.
        seq = value if isinstance(value, Seq) else None
        items = seq.items if seq is not None and len(seq.items) == len(target.elts) and not seq.repeated else None
        each = (any_of(seq.items) if seq is not None and seq.items and items is None
                and not all(is_plain(v) for v in seq.items) else None)
        for i, element in enumerate(target.elts):
            if isinstance(element, ast.Starred):
                self.bind(element.value, Unknown(node=element), frame, line)
            elif items is not None:
                self.bind(element, items[i], frame, line)
            else:
                self.bind(element, each if each is not None else Unknown(node=element), frame, line)

    def bind_attribute(self, target: ast.Attribute, value: Value, frame: Frame, line: int | None) -> None:
        owner = self.eval(target.value, frame)
        for option in owner.options if isinstance(owner, Either) else [owner]:
            if isinstance(option, (Instance, ClassInfo, Module)):
                self.write_name(option, target.attr, value)

    def bind_subscript(self, target: ast.Subscript, value: Value, frame: Frame, line: int | None) -> None:
        owner = self.eval(target.value, frame)
        key = self.eval(target.slice, frame)
        if isinstance(owner, Mapping_):
            self.to_change(owner)
            if isinstance(key, Const) and isinstance(key.value, (str, int)):
                owner.items[str(key.value)] = value
            else:  # `loaders[phase] = DataLoader(...)`: some key holds it
                owner.open = True
                owner.default = join(owner.default, value) if owner.default is not None else value
        elif isinstance(owner, Seq) and not is_plain(value):
            self.to_change(owner).items.append(value)

    def bind_starred(self, target: ast.Starred, value: Value, frame: Frame, line: int | None) -> None:
        self.bind(target.value, Unknown(node=target), frame, line)


#: How each kind of assignment target binds a value.
_BINDERS: dict[type, Callable[..., None]] = {
    ast.Name: Walker.bind_name, ast.Tuple: Walker.bind_unpacked, ast.List: Walker.bind_unpacked,
    ast.Attribute: Walker.bind_attribute, ast.Subscript: Walker.bind_subscript, ast.Starred: Walker.bind_starred,
}
