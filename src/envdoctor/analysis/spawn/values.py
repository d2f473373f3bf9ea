"""The value lattice: what an expression may evaluate to, just enough to follow loaders and processes."""
from __future__ import annotations

import ast
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

#: The walk's clock: the next moment of it, for what is made, changed or walked, in order (see walker.Trace).
#: One for the process, so the values of every script's walk are ordered too.
tick: Callable[[], int] = itertools.count(1).__next__


class Value:
    """Something an expression may evaluate to; the base is "unknown".

    Every kind of value is a slotted dataclass (no per-object dict): the walk makes millions of them.
    """

    __slots__ = ()

    def text(self) -> str:
        return "?"


def unparse(node: ast.AST) -> str:
    try:
        text = ast.unparse(node)
    except Exception:  # pragma: no cover - unparse covers every node we meet
        text = "?"
    return text if len(text) <= 120 else text[:117] + "..."


@dataclass(eq=False, slots=True)
class Unknown(Value):
    source: str = "?"
    node: ast.AST | None = None  # unparsed only when the text is needed: unparse is slow
    #: Objects defined in the walk that this value may carry (`Subset(MyDataset(), idx)`).
    holds: Sequence[Value] = ()
    #: The library class that made it (`Node2Vec(...)`), whose methods may return loaders.
    lib: str | None = None
    #: The num_workers= that library call was given (`DataModule(num_workers=2)`): the loaders its
    #: methods return take it.
    workers: Value | None = None

    def text(self) -> str:
        if self.node is not None:
            self.source, self.node = unparse(self.node), None
        return self.source


@dataclass(eq=False, slots=True)
class Const(Value):
    value: Any
    origin: str | None = None  # "N = 2 (line 5)" when it came through a name

    def text(self) -> str:
        return repr(self.value)


@dataclass(eq=False, slots=True)
class QualName(Value):
    """A module or an object imported from one, by its fully qualified name."""

    name: str
    #: Why the module it names could not be read, when it should have been (a project module).
    missing: str | None = None

    def text(self) -> str:
        return self.name


@dataclass(eq=False, slots=True)
class Seq(Value):
    items: list[Value]
    #: Built by a comprehension: any number of elements, each like `items` (`[DataLoader(d) for d in ds]`).
    repeated: bool = False
    #: The project module whose top level bound it to a name (shared with later scripts), if one did.
    home: Module | None = None
    #: When it was made, by the walk's clock (see walker.Trace).
    born: int = field(default_factory=tick)

    def state(self) -> list[Value]:
        """What it holds, as a copy (to put back with `set_state`)."""
        return list(self.items)

    def set_state(self, state: list[Value]) -> None:
        self.items = list(state)


@dataclass(eq=False, slots=True)
class Mapping_(Value):
    items: dict[str, Value]
    open: bool = False  # may hold keys we could not read
    #: What any key we could not read holds (a dict comprehension's value).
    default: Value | None = None
    #: The project module whose top level bound it to a name (shared with later scripts), if one did.
    home: Module | None = None
    #: When it was made, by the walk's clock (see walker.Trace).
    born: int = field(default_factory=tick)

    def every_value(self) -> list[Value]:
        """What a subscript with an unknown key may give: every value."""
        return [*self.items.values(), *([self.default] if self.default is not None else [])]

    def state(self) -> tuple[dict[str, Value], bool, Value | None]:
        """What it holds, as a copy (to put back with `set_state`)."""
        return dict(self.items), self.open, self.default

    def set_state(self, state: tuple[dict[str, Value], bool, Value | None]) -> None:
        items, self.open, self.default = state
        self.items = dict(items)


@dataclass(eq=False, slots=True)
class Site:
    line: int
    column: int
    path: str = ""
    #: Reached only in the main process: under the script's own main guard (not in a module's import).
    main_only: bool = False


class Step(NamedTuple):
    """One link of the chain from module level to a start: a call, or an import."""

    call: str
    path: str
    line: int
    code: str


@dataclass(eq=False, slots=True)
class Module(Value):
    """One file the walk reads: the script, a project module it imports, or a notebook.

    `reruns` is what spawn does with it: a script is re-imported in every worker as
    `__mp_main__`, an imported module is imported again, a notebook is not re-run at
    all (so what it defines cannot be found by the workers).
    """

    name: str
    path: str
    lines: Sequence[str]
    tree: ast.Module | None
    package: str = ""
    is_main: bool = False
    reruns: bool = True
    scope: dict[str, Value] = field(default_factory=dict)
    star_modules: list[str] = field(default_factory=list)
    state: str = "new"  # new, running, done
    #: Why the module could not be read or parsed, when it could not.
    problem: str | None = None
    problem_line: int = 1
    #: What importing it started, with the chain from the import on (replayed for later importers).
    import_events: list[dict[str, Any]] | None = None
    #: What importing it wrote into other shared modules: (module, object or class; name; value).
    import_writes: list[tuple[Module | Instance | ClassInfo, str, Value]] = field(default_factory=list)
    #: The dicts and lists of other shared modules its import changed, each as the import left it.
    import_changes: list[tuple[Mapping_ | Seq, Any]] = field(default_factory=list)
    #: The functions its import defined, by name, with the lines they are read from (ImportRecord.defs).
    import_defs: list[tuple[str, ast.AST, Sequence[str]]] = field(default_factory=list)
    #: When it was made, by the walk's clock (see walker.Trace).
    born: int = field(default_factory=tick)

    def text(self) -> str:
        return self.name

    def release(self) -> None:
        """Drop the tree and the names its walk bound, once nothing will read them again.

        A module's functions point back at it and a class's methods at the
        class: those cycles would keep the whole tree alive until the garbage
        collector walked it (or for good, once frozen). Broken here, reference
        counting frees the tree the moment the walk is over.
        """
        for value in self.scope.values():
            if isinstance(value, ClassInfo) and value.module is self:
                value.namespace.clear()
        self.scope.clear()
        self.import_writes = []
        self.import_changes = []
        self.tree = None

    def code(self, line: int) -> str:
        if 1 <= line <= len(self.lines):
            return self.lines[line - 1].strip()[:200]
        return ""

    def column(self, line: int, col_offset: int) -> int:
        """The 1-based character column of a node: ast counts UTF-8 bytes, editors and SARIF characters."""
        if 1 <= line <= len(self.lines):
            text = self.lines[line - 1]
            if not text.isascii():
                return len(text.encode("utf-8")[:col_offset].decode("utf-8", "replace")) + 1
        return col_offset + 1


@dataclass(eq=False, slots=True)
class Loader(Value):
    site: Site
    num_workers: Value
    context: str | None = None
    persistent: bool = False
    dataset: Value | None = None
    worker_fns: list[Value] = field(default_factory=list)
    class_name: str = "DataLoader"
    started: bool = False
    #: What the workers must unpickle, by the DataLoader parameter that passes it.
    shipped: dict[str, Value] = field(default_factory=dict)
    #: Known only by its behaviour (a library call given num_workers= that the walk could not read):
    #: it may be one loader or a list of them, so unpacking it starts nothing and each name it
    #: unpacks into is such a loader.
    guessed: bool = False

    def text(self) -> str:
        return f"{self.class_name}(num_workers={self.num_workers.text()})"


@dataclass(eq=False, slots=True)
class Partial(Value):
    """`functools.partial(func, *args, **keywords)`: `func` with those arguments bound first."""

    func: Value
    positional: list[Value]
    keywords: dict[str, Value]
    open: bool = False


@dataclass(eq=False, slots=True)
class Iterating(Value):
    """An iterator over a loader (already started) or a wrapper that will iterate it (tqdm …)."""

    loader: Loader
    started: bool
    #: A wrapper known to iterate what it wraps (tqdm …); an unknown one counts only
    #: where its items are unpacked (`for x, y in wrapper(loader)`).
    known: bool = True


@dataclass(eq=False, slots=True)
class Context(Value):
    method: str | None


@dataclass(eq=False, slots=True)
class ProcessObj(Value):
    site: Site
    context: str | None
    kind: str = "Process"


@dataclass(eq=False, slots=True)
class PoolObj(Value):
    kind: str


@dataclass(eq=False, slots=True)
class Executor(Value):
    site: Site
    context: str | None


@dataclass(eq=False, slots=True)
class TrainerObj(Value):
    """A training loop from the catalog's [[trainer]] table, with what its constructor received."""

    site: Site
    spec: Any = None  # names.TrainerSpec
    received: list[Value] = field(default_factory=list)
    keywords: dict[str, Value] = field(default_factory=dict)
    #: The model the last run was given (`trainer.test(ckpt_path="best")` reuses it).
    model: Value | None = None
    #: When it was made, by the walk's clock (see walker.Trace).
    born: int = field(default_factory=tick)


@dataclass(eq=False, slots=True)
class Option(Value):
    """A command-line option or config entry: its value is the default unless the user sets it.

    `num_workers=args.workers` with `--workers` defaulting to 0 starts nothing by
    default, and workers only when the option raises it.
    """

    flag: str
    default: Value

    def text(self) -> str:
        return f"{self.flag} (default {self.default.text()})"


@dataclass(eq=False, slots=True)
class SettingsObj(Value):
    """A trainer's settings object (`TrainingArguments(dataloader_num_workers=4)`), by keyword."""

    keywords: dict[str, Value]
    open: bool = False


@dataclass(eq=False, slots=True)
class ParserObj(Value):
    """An argparse.ArgumentParser: its options by destination, (flag, default)."""

    options: dict[str, tuple[str, Value]] = field(default_factory=dict)
    #: When it was made, by the walk's clock (see walker.Trace).
    born: int = field(default_factory=tick)


@dataclass(eq=False, slots=True)
class NamespaceObj(Value):
    """What parse_args() returns: attributes are the parser's options."""

    parser: ParserObj


@dataclass(eq=False, slots=True)
class Device(Value):
    cuda: bool


@dataclass(eq=False, slots=True)
class ClassInfo(Value):
    node: ast.ClassDef
    bases: list[Value]
    namespace: dict[str, Value]
    module: Module | None = None
    #: The function it is defined in (`load` for `load.<locals>.Frames`): pickle cannot find it by name.
    local_in: str = ""

    def lookup(self, name: str) -> Value | None:
        if name in self.namespace:
            return self.namespace[name]
        for base in self.bases:
            if isinstance(base, ClassInfo):
                found = base.lookup(name)
                if found is not None:
                    return found
        return None

    def inherits(self, names: frozenset[str]) -> bool:
        for base in self.bases:
            if isinstance(base, QualName) and base.name in names:
                return True
            if isinstance(base, ClassInfo) and base.inherits(names):
                return True
        return False


@dataclass(eq=False, slots=True)
class Instance(Value):
    cls: ClassInfo
    attrs: dict[str, Value] = field(default_factory=dict)
    #: The project module whose code made it (None: the script's own), shared with later scripts.
    home: Module | None = None
    #: When it was made, by the walk's clock (see walker.Trace).
    born: int = field(default_factory=tick)


@dataclass(eq=False, slots=True)
class Function(Value):
    node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
    defaults: dict[str, Value]
    owner: ClassInfo | None = None
    #: The scopes of the functions it is nested in, innermost first (its closure).
    closure: list[dict[str, Value]] = field(default_factory=list)
    module: Module | None = None
    #: The function it is defined in (`make_loader` for `make_loader.<locals>.stack`).
    local_in: str = ""
    #: A `@staticmethod`: a call through an object gives it no first argument.
    static: bool = False

    @property
    def name(self) -> str:
        return "<lambda>" if isinstance(self.node, ast.Lambda) else self.node.name


def method_of(owner: Value, attr: str, found: Function) -> Value:
    """`owner.attr`, a function of `owner`'s class: bound to the object, to nothing for a `@staticmethod`."""
    return found if found.static else Bound(owner, attr, found)


def first_argument(owner: Instance, found: Function) -> Value | None:
    """What a method called on `owner` by the walk itself (a trainer's hook) is given first (see method_of)."""
    return None if found.static else owner


@dataclass(eq=False, slots=True)
class Bound(Value):
    """A method looked up on a value: obj.attr, not yet called."""

    obj: Value
    attr: str
    func: Function | None = None
    node: ast.AST | None = None

    def text(self) -> str:
        return unparse(self.node) if self.node is not None else f"?.{self.attr}"


@dataclass(eq=False, slots=True)
class Either(Value):
    """One of several objects, functions or classes, as branches left a name (`Serial() if debug else
    Parallel()`): an attribute, a call or a loop over it is each option's, joined (see join)."""

    options: list[Value]


@dataclass(eq=False, slots=True)
class Deferred(Value):
    """A generator or coroutine: its body runs when it is consumed or awaited."""

    func: Function
    scope: dict[str, Value]
    call_site: Step


@dataclass(eq=False, slots=True)
class GuardFlag(Value):
    """The value of `__name__ == "__main__"` kept in a name: `IS_MAIN = __name__ == "__main__"`."""

    polarity: bool


@dataclass(eq=False, slots=True)
class SuperObj(Value):
    instance: Value
    cls: ClassInfo | None


#: The kinds of value that are plain whatever they hold (see is_plain). Every value type derives from
#: Value directly, so a type's membership here stands for isinstance (and costs one lookup).
_PLAIN = frozenset({Unknown, Const, QualName, Function, ClassInfo, GuardFlag, Option, ParserObj, NamespaceObj,
                    SettingsObj})
#: What defined_in_main looks inside; any other value holds nothing a module defines.
_MAY_HOLD = frozenset({Instance, ClassInfo, Function, Unknown, Seq, Either})
#: The values two branches keep both of (see join, _is_object).
_OBJECTS = frozenset({Instance, ClassInfo, Function, Either})
#: What loaderish may find a loader in.
_LOADERISH = frozenset({Loader, Iterating})


def is_plain(value: Value, depth: int = 0) -> bool:
    """Values that cannot start anything: binding them inside a function changes no memo."""
    if type(value) in _PLAIN:
        return True
    if depth < 2 and isinstance(value, Seq):
        return all(is_plain(v, depth + 1) for v in value.items[:16]) and len(value.items) <= 16
    if depth < 2 and isinstance(value, Mapping_):
        return all(is_plain(v, depth + 1) for v in list(value.items.values())[:16]) and len(value.items) <= 16
    return False


def read_off_unknown(value: Bound) -> bool:
    """Whether an attribute is read off a value the walk knows nothing of (`cfg.model.train_ds` of an unknown
    `cfg`): as unknown as that value, since no method of it is the walk's and no library made it."""
    obj: Value = value
    while isinstance(obj, Bound):
        if obj.func is not None:
            return False
        obj = obj.obj
    return type(obj) is Const or isinstance(obj, Unknown) and obj.lib is None and obj.workers is None and not obj.holds


def loaderish(value: Value) -> Loader | None:
    if type(value) not in _LOADERISH:  # most values: one lookup
        return None
    if isinstance(value, Loader):
        return value
    if isinstance(value, Iterating) and not value.started:
        return value.loader
    return None


def join(a: Value | None, b: Value | None) -> Value:
    """The value of a name after two branches: keep what can start workers."""
    if a is None:
        return b if b is not None else Unknown()
    if b is None or a is b:
        return a
    if isinstance(a, Const) and isinstance(b, Const):
        if a.value == b.value:
            return a
        return Unknown(f"{a.text()} or {b.text()}")
    if isinstance(a, Mapping_) and isinstance(b, Mapping_):
        # `{"num_workers": 2} if cuda else {}`: a key either branch sets may be set.
        keys = list(dict.fromkeys([*a.items, *b.items]))
        # `{k: DataLoader(...) for k in ...}` in both branches of an if/else: keep what any key holds.
        default = join(a.default, b.default) if a.default is not None or b.default is not None else None
        return Mapping_({k: join(a.items.get(k), b.items.get(k)) for k in keys}, open=a.open or b.open,
                        default=default)
    if isinstance(a, Mapping_) and isinstance(b, Unknown) or isinstance(b, Mapping_) and isinstance(a, Unknown):
        # `json.load(f) if path else {}`: the dict's keys, and whatever the unknown one holds.
        known = a if isinstance(a, Mapping_) else b
        assert isinstance(known, Mapping_)
        return Mapping_(dict(known.items), open=True, default=known.default)
    both = either(a, b)
    if both is not None:
        return both
    one = a if isinstance(a, Loader) else b if isinstance(b, Loader) else None
    other = b if one is a else a
    if one is not None and isinstance(other, Seq) and any(loaderish(v) for v in other.items[:8]):
        # `ds = ds[0] if len(ds) == 1 else ds`: one loader or a list of them. Unpacking it starts
        # nothing (it is the list then); iterating what it unpacks into does.
        return replace(one, guessed=True)
    return a if _rank(a) >= _rank(b) else b


def join_all(values: Sequence[Value]) -> Value:
    """The value of several branches, returns or options (at least one), joined in order (see join)."""
    result = values[0]
    for value in values[1:]:
        result = join(result, value)
    return result


#: How many options an Either holds at most: past it, later branches' objects are dropped (a bound on the
#: walk's work for each attribute, call or loop over the value).
MAX_OPTIONS = 4


def _is_object(value: Value) -> bool:
    """An object, class or function of the walk's, or a method bound to one: what attributes, calls and loops
    of it run the walk's own code, differently for each."""
    return type(value) in _OBJECTS or isinstance(value, Bound) and value.func is not None


def either(a: Value, b: Value) -> Value | None:
    """`a` or `b` when both are objects, classes or functions (see _is_object), each option once, at most
    MAX_OPTIONS; None for any other two values."""
    if not (_is_object(a) and _is_object(b)):
        return None
    options: list[Value] = []
    for value in (a, b):
        for option in value.options if isinstance(value, Either) else [value]:
            if all(option is not known for known in options) and len(options) < MAX_OPTIONS:
                options.append(option)
    return options[0] if len(options) == 1 else Either(options)


def _rank(value: Value) -> int:
    """How much a value matters to the guard: a loader that may start workers most."""
    if isinstance(value, (Unknown, Const, Option)):
        return 0
    loader = loaderish(value)
    if loader is None:
        return 1
    workers = loader.num_workers
    return 2 if isinstance(workers, Const) and workers.value == 0 else 3


def any_of(values: list[Value]) -> Value:
    """One value standing for several (a subscript with an unknown key): the one that matters most."""
    if not values:
        return Unknown()
    return max(values, key=_rank)


def defined_in_main(value: Value | None, depth: int = 0) -> list[Value]:
    """The classes' instances and functions in `value` that a module not re-run by the workers defines.

    A notebook is `__main__` for its kernel, and spawn does not re-run it: what it
    defines cannot be unpickled by a worker.
    """
    if type(value) not in _MAY_HOLD or depth > 3:  # None included
        return []
    if isinstance(value, (Instance, ClassInfo, Function)):
        module = value.cls.module if isinstance(value, Instance) else value.module
        return [value] if module is not None and not module.reruns else []
    inner: Sequence[Value]
    if isinstance(value, Unknown):
        inner = value.holds
    elif isinstance(value, Either):
        inner = value.options
    elif isinstance(value, Seq):
        inner = value.items[:16]
    else:
        return []
    return [found for held in inner for found in defined_in_main(held, depth + 1)]


def is_cuda(value: Value | None) -> bool:
    if isinstance(value, Device):
        return value.cuda
    return isinstance(value, Const) and isinstance(value.value, str) and value.value.startswith("cuda")


