"""What a training script does when it runs, read from its syntax tree alone.

The spawn guard check (SPW001) and the start-method check (SPW002) need to know
where a script starts worker processes and whether that happens at import
time, i.e. outside `if __name__ == "__main__":`. Under the spawn and
forkserver start methods every worker re-imports the main script, so whatever
runs at import time runs again in each worker; a worker start there dies with
"An attempt has been made to start a new process before the current process
has finished its bootstrapping phase".

The script is never imported or executed. `analyse_source` walks the tree the
way the interpreter would run it: module-level statements in order, the
bodies of `if`/`with`/`try`/loops, the functions and classes the module
level calls (transitively, within the file, with the call's arguments bound
to the parameters), and generators and coroutines when they are consumed.
Values are tracked just enough to follow DataLoaders, processes, pools and
contexts through names, attributes, returns and `**kwargs` dicts, and to
resolve `num_workers` when it is a literal or a name bound to one.

What starts workers (checked against torch's own code: constructing a
DataLoader starts nothing, `DataLoader.__iter__` creates
`_MultiProcessingDataLoaderIter`, whose `__init__` calls `w.start()`):
iterating a DataLoader with num_workers > 0 (for-loops, comprehensions,
`iter`, `enumerate`, `zip`, `map`, `list` … — the builtins that call
`iter()` on their argument right away), `Process.start()`, constructing a
`multiprocessing.Pool` or `Manager`, `ProcessPoolExecutor.submit/map`,
`torch.multiprocessing.spawn/start_processes`, and Lightning's
`Trainer.fit/validate/test/predict`.

Everything returned is plain JSON-able data (the "scripts" facts section).
"""
from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

#: Fully qualified names of DataLoader classes (torch's and known subclasses).
LOADER_CLASSES = frozenset({
    "torch.utils.data.DataLoader",
    "torch.utils.data.dataloader.DataLoader",
    "torchdata.stateful_dataloader.StatefulDataLoader",
    "torch_geometric.loader.DataLoader",
    "monai.data.DataLoader",
})
#: Where DataLoader's own parameters sit positionally (torch 2.x signature).
LOADER_POSITIONS = {"num_workers": 5, "collate_fn": 6, "worker_init_fn": 10, "multiprocessing_context": 11}

MP_MODULES = ("multiprocessing", "torch.multiprocessing")
PROCESS_CLASSES = frozenset({f"{m}.Process" for m in MP_MODULES} | {"multiprocessing.context.Process"})
POOL_CLASSES = frozenset({f"{m}.Pool" for m in MP_MODULES} | {"multiprocessing.pool.Pool"})
MANAGER_CLASSES = frozenset({f"{m}.Manager" for m in MP_MODULES})
EXECUTOR_CLASSES = frozenset({"concurrent.futures.ProcessPoolExecutor",
                              "concurrent.futures.process.ProcessPoolExecutor"})
#: torch.multiprocessing.spawn always uses the spawn method, start_processes defaults to it.
TORCH_SPAWN = frozenset({"torch.multiprocessing.spawn", "torch.multiprocessing.start_processes",
                         "torch.multiprocessing.spawn.spawn", "torch.multiprocessing.spawn.start_processes"})
SET_START_METHOD = frozenset({f"{m}.set_start_method" for m in MP_MODULES})
GET_CONTEXT = frozenset({f"{m}.get_context" for m in MP_MODULES})
TRAINER_CLASSES = frozenset({"lightning.Trainer", "lightning.pytorch.Trainer", "pytorch_lightning.Trainer",
                             "lightning.pytorch.trainer.Trainer", "pytorch_lightning.trainer.Trainer",
                             "lightning.pytorch.trainer.trainer.Trainer"})
TRAINER_RUNS = frozenset({"fit", "validate", "test", "predict"})
#: Builtins and itertools functions that call iter() on their arguments when called.
EAGER_ITER = frozenset({f"builtins.{n}" for n in (
    "iter", "enumerate", "zip", "map", "filter", "list", "tuple", "set", "frozenset", "sorted",
    "sum", "min", "max", "any", "all", "dict")} | {f"itertools.{n}" for n in (
        "islice", "cycle", "tee", "product", "zip_longest", "starmap", "accumulate", "compress",
        "dropwhile", "takewhile", "filterfalse", "groupby", "pairwise", "batched")})
#: torch.cuda calls that initialise CUDA in the calling process (they call _lazy_init).
CUDA_INIT_CALLS = frozenset(f"torch.cuda.{n}" for n in (
    "init", "set_device", "current_device", "synchronize", "get_device_properties", "get_device_name",
    "get_device_capability", "mem_get_info", "memory_allocated", "max_memory_allocated",
    "memory_reserved", "current_stream", "default_stream", "Stream"))
TENSOR_FACTORIES = frozenset(f"torch.{n}" for n in (
    "zeros", "ones", "empty", "full", "rand", "randn", "randint", "arange", "tensor", "as_tensor",
    "zeros_like", "ones_like", "randn_like", "rand_like", "eye", "linspace"))
#: Calls after which nothing in the same block runs.
EXITS = frozenset({"sys.exit", "os._exit", "os.abort", "builtins.exit", "builtins.quit"})
TYPE_CHECKING_NAMES = frozenset({"typing.TYPE_CHECKING", "typing_extensions.TYPE_CHECKING"})
#: Names that star-imports of these modules are known to bring in.
STAR_EXPORTS = {
    "torch.utils.data": {"DataLoader", "Dataset", "IterableDataset"},
    "multiprocessing": {"Process", "Pool", "Manager", "set_start_method", "get_context"},
    "torch.multiprocessing": {"Process", "Pool", "Manager", "set_start_method", "get_context", "spawn",
                              "start_processes"},
    "lightning": {"Trainer"}, "lightning.pytorch": {"Trainer"}, "pytorch_lightning": {"Trainer"},
}
BUILTIN_NAMES = frozenset(n.split(".", 1)[1] for n in EAGER_ITER if n.startswith("builtins.")) | {
    "next", "len", "print", "range", "super", "isinstance", "object"}

#: Bounds that keep pathological files fast: calls followed per file, nesting of calls.
MAX_CALLS_FOLLOWED = 50_000
MAX_CALL_DEPTH = 25


# ---------------------------------------------------------------------------
# Abstract values: just enough to follow loaders and processes through a script.
# ---------------------------------------------------------------------------

class Value:
    """Something an expression may evaluate to; the base is "unknown"."""

    def text(self) -> str:
        return "?"


def _unparse(node: ast.AST) -> str:
    try:
        text = ast.unparse(node)
    except Exception:  # pragma: no cover - unparse covers every node we meet
        text = "?"
    return text if len(text) <= 120 else text[:117] + "..."


@dataclass(eq=False)
class Unknown(Value):
    source: str = "?"
    node: ast.AST | None = None  # unparsed only when the text is needed: unparse is slow

    def text(self) -> str:
        if self.node is not None:
            self.source, self.node = _unparse(self.node), None
        return self.source


@dataclass(eq=False)
class Const(Value):
    value: Any
    origin: str | None = None  # "N = 2 (line 5)" when it came through a name

    def text(self) -> str:
        return repr(self.value)


@dataclass(eq=False)
class QualName(Value):
    """A module or an object imported from one, by its fully qualified name."""

    name: str

    def text(self) -> str:
        return self.name


@dataclass(eq=False)
class Seq(Value):
    items: list[Value]


@dataclass(eq=False)
class Mapping_(Value):
    items: dict[str, Value]
    open: bool = False  # may hold keys we could not read


@dataclass(eq=False)
class Site:
    line: int
    column: int


@dataclass(eq=False)
class Loader(Value):
    site: Site
    num_workers: Value
    context: str | None = None
    persistent: bool = False
    dataset: Value | None = None
    worker_fns: list[Value] = field(default_factory=list)
    class_name: str = "DataLoader"
    started: bool = False

    def text(self) -> str:
        return f"{self.class_name}(num_workers={self.num_workers.text()})"


@dataclass(eq=False)
class Iterating(Value):
    """An iterator over a loader (already started) or a wrapper that will iterate it (tqdm …)."""

    loader: Loader
    started: bool


@dataclass(eq=False)
class Context(Value):
    method: str | None


@dataclass(eq=False)
class ProcessObj(Value):
    site: Site
    context: str | None
    kind: str = "Process"


@dataclass(eq=False)
class PoolObj(Value):
    kind: str


@dataclass(eq=False)
class Executor(Value):
    site: Site
    context: str | None


@dataclass(eq=False)
class TrainerObj(Value):
    site: Site


@dataclass(eq=False)
class Device(Value):
    cuda: bool


@dataclass(eq=False)
class ClassInfo(Value):
    node: ast.ClassDef
    bases: list[Value]
    namespace: dict[str, Value]

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


@dataclass(eq=False)
class Instance(Value):
    cls: ClassInfo
    attrs: dict[str, Value] = field(default_factory=dict)


@dataclass(eq=False)
class Function(Value):
    node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
    defaults: dict[str, Value]
    owner: ClassInfo | None = None
    #: The scopes of the functions it is nested in, innermost first (its closure).
    closure: list[dict[str, Value]] = field(default_factory=list)


@dataclass(eq=False)
class Bound(Value):
    """A method looked up on a value: obj.attr, not yet called."""

    obj: Value
    attr: str
    func: Function | None = None
    node: ast.AST | None = None

    def text(self) -> str:
        return _unparse(self.node) if self.node is not None else f"?.{self.attr}"


@dataclass(eq=False)
class Deferred(Value):
    """A generator or coroutine: its body runs when it is consumed or awaited."""

    func: Function
    scope: dict[str, Value]
    call_site: tuple[str, int, str]


@dataclass(eq=False)
class GuardFlag(Value):
    """The value of `__name__ == "__main__"` kept in a name: `IS_MAIN = __name__ == "__main__"`."""

    polarity: bool


@dataclass(eq=False)
class SuperObj(Value):
    instance: Value
    cls: ClassInfo | None


def _is_plain(value: Value, depth: int = 0) -> bool:
    """Values that cannot start anything: binding them inside a function changes no memo."""
    if isinstance(value, (Unknown, Const, QualName, Function, ClassInfo, GuardFlag)):
        return True
    if depth < 2 and isinstance(value, Seq):
        return all(_is_plain(v, depth + 1) for v in value.items[:16]) and len(value.items) <= 16
    if depth < 2 and isinstance(value, Mapping_):
        return all(_is_plain(v, depth + 1) for v in list(value.items.values())[:16]) and len(value.items) <= 16
    return False


def _is_loaderish(value: Value) -> Loader | None:
    if isinstance(value, Loader):
        return value
    if isinstance(value, Iterating) and not value.started:
        return value.loader
    return None


def _join(a: Value | None, b: Value | None) -> Value:
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
        return Mapping_({k: _join(a.items.get(k), b.items.get(k)) for k in keys}, open=a.open or b.open)
    rank = lambda v: 0 if isinstance(v, (Unknown, Const)) else 1  # noqa: E731
    return a if rank(a) >= rank(b) else b


# ---------------------------------------------------------------------------
# The walk.
# ---------------------------------------------------------------------------

@dataclass
class Frame:
    """Where the walk is: the scope, whether under the guard, the chain of calls."""

    scope: dict[str, Value]
    guarded: bool
    via: tuple[tuple[str, int, str], ...] = ()
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

    def closure(self, module_scope: dict[str, Value]) -> list[dict[str, Value]]:
        """The scopes a function defined here can see (not the module's, not a class body's)."""
        if self.scope is module_scope or self.class_body:
            return list(self.enclosing)
        return [self.scope, *self.enclosing]


class ScriptAnalysis:
    """One walk over one parsed script; `result()` gives the facts."""

    def __init__(self, tree: ast.Module, lines: list[str]) -> None:
        self.tree = tree
        self.lines = lines
        self.module_scope: dict[str, Value] = {}
        self.star_modules: list[str] = []
        self.events: list[dict[str, Any]] = []
        self._seen: set[tuple[Any, ...]] = set()
        self.seq = 0
        self.calls_followed = 0
        self.truncated = False
        self.stack: list[ast.AST] = []
        self.guard_lines: list[int] = []
        self._generators: dict[int, bool] = {}
        self.memo: dict[tuple[Any, ...], Value] = {}
        self._bound_memo: dict[int, frozenset[str]] = {}
        self.state_version = 0

    # -- helpers ------------------------------------------------------------

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

    def source(self, node: ast.AST) -> str:
        return _unparse(node)

    def record(self, kind: str, node: ast.AST, frame: Frame, **extra: Any) -> None:
        line = getattr(node, "lineno", 1)
        column = self.column(line, getattr(node, "col_offset", 0))
        key = (kind, line, column, frame.guarded)
        if key in self._seen:
            return
        self._seen.add(key)
        self.seq += 1
        entry = frame.via[0] if frame.via else None
        event = {
            "kind": kind,
            "line": line,
            "column": column,
            "code": self.code(line),
            "guarded": frame.guarded,
            "seq": self.seq,
            "entry": ({"line": entry[1], "code": entry[2], "call": entry[0]} if entry else
                      {"line": line, "code": self.code(line), "call": None}),
            "via": [{"function": name, "line": at, "code": code} for name, at, code in frame.via],
        }
        event.update(extra)
        self.events.append(event)

    def lookup(self, name: str, frame: Frame) -> Value:
        if name in frame.scope and name not in frame.declared_global:
            return frame.scope[name]
        for scope in frame.enclosing:
            if name in scope:
                return scope[name]
        if name in self.module_scope:
            return self.module_scope[name]
        for module in self.star_modules:
            if name in STAR_EXPORTS.get(module, ()):
                return QualName(f"{module}.{name}")
        if name in BUILTIN_NAMES:
            return QualName(f"builtins.{name}")
        return Unknown(name)

    def bind(self, target: ast.AST, value: Value, frame: Frame, line: int | None = None) -> None:
        if frame.scope is self.module_scope or not _is_plain(value):
            self.state_version += 1  # what a function sees may have changed: forget its memo
        if isinstance(target, ast.Name):
            if isinstance(value, Const) and value.origin is None:
                value = Const(value.value, f"{target.id} = {value.text()} (line {line or target.lineno})")
            scope = self.module_scope if target.id in frame.declared_global else frame.scope
            scope[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            loader = _is_loaderish(value)
            if loader is not None:  # `a, b = loader` iterates it
                self.start_loader(loader, target, frame, "unpacking")
            items = value.items if isinstance(value, Seq) and len(value.items) == len(target.elts) else None
            for i, element in enumerate(target.elts):
                if isinstance(element, ast.Starred):
                    self.bind(element.value, Unknown(node=element), frame, line)
                else:
                    self.bind(element, items[i] if items else Unknown(node=element), frame, line)
        elif isinstance(target, ast.Attribute):
            owner = self.eval(target.value, frame)
            if isinstance(owner, Instance):
                owner.attrs[target.attr] = value
            elif isinstance(owner, ClassInfo):
                owner.namespace[target.attr] = value
        elif isinstance(target, ast.Subscript):
            owner = self.eval(target.value, frame)
            key = self.eval(target.slice, frame)
            if isinstance(owner, Mapping_) and isinstance(key, Const) and isinstance(key.value, str):
                owner.items[key.value] = value
        elif isinstance(target, ast.Starred):
            self.bind(target.value, Unknown(node=target), frame, line)

    # -- statements ---------------------------------------------------------

    def run(self) -> None:
        frame = Frame(scope=self.module_scope, guarded=False)
        try:
            self.exec_block(self.tree.body, frame)
        except RecursionError:  # a file nested deeper than the interpreter allows
            self.truncated = True

    def exec_block(self, body: Iterable[ast.stmt], frame: Frame) -> bool:
        """Walk a block; True when it always ends early (return, raise, sys.exit …).

        What follows such a statement in the same block never runs, so it is
        not walked: a loop after `sys.exit()` or after `return` starts nothing.
        """
        for stmt in body:
            try:
                if self.exec_stmt(stmt, frame):
                    return True
            except RecursionError:  # an expression nested deeper than we follow: skip it
                self.truncated = True
        return False

    def exec_stmt(self, stmt: ast.stmt, frame: Frame) -> bool:
        method = getattr(self, f"stmt_{type(stmt).__name__}", None)
        if method is not None:
            return bool(method(stmt, frame))
        # Anything else (raise, assert, del, …): its expressions run, in order.
        for child in ast.iter_child_nodes(stmt):
            if isinstance(child, ast.expr):
                self.eval(child, frame)
        return isinstance(stmt, (ast.Raise, ast.Break, ast.Continue))

    def stmt_Import(self, stmt: ast.Import, frame: Frame) -> None:
        for alias in stmt.names:
            if alias.asname:
                frame.scope[alias.asname] = QualName(alias.name)
            else:
                root = alias.name.split(".")[0]
                frame.scope[root] = QualName(root)

    def stmt_ImportFrom(self, stmt: ast.ImportFrom, frame: Frame) -> None:
        module = ("." * stmt.level) + (stmt.module or "")
        for alias in stmt.names:
            if alias.name == "*":
                self.star_modules.append(module)
                continue
            frame.scope[alias.asname or alias.name] = QualName(f"{module}.{alias.name}")

    def stmt_FunctionDef(self, stmt: ast.FunctionDef | ast.AsyncFunctionDef, frame: Frame) -> None:
        for decorator in stmt.decorator_list:
            self.eval(decorator, frame)
        frame.scope[stmt.name] = Function(stmt, self.eval_defaults(stmt.args, frame), owner=frame.self_class,
                                          closure=frame.closure(self.module_scope))

    stmt_AsyncFunctionDef = stmt_FunctionDef

    def eval_defaults(self, args: ast.arguments, frame: Frame) -> dict[str, Value]:
        defaults: dict[str, Value] = {}
        positional = [*args.posonlyargs, *args.args]
        for arg, default in zip(positional[len(positional) - len(args.defaults):], args.defaults):
            defaults[arg.arg] = self.eval(default, frame)
        for arg, default in zip(args.kwonlyargs, args.kw_defaults):
            if default is not None:
                defaults[arg.arg] = self.eval(default, frame)
        return defaults

    def stmt_ClassDef(self, stmt: ast.ClassDef, frame: Frame) -> None:
        for decorator in stmt.decorator_list:
            self.eval(decorator, frame)
        bases = [self.eval(base, frame) for base in stmt.bases]
        for keyword in stmt.keywords:
            self.eval(keyword.value, frame)
        info = ClassInfo(stmt, bases, {})
        # A class body runs at definition time, in a namespace of its own.
        body_frame = Frame(scope=info.namespace, guarded=frame.guarded, via=frame.via,
                           function=frame.function, self_class=info, class_body=True,
                           enclosing=frame.closure(self.module_scope))
        self.exec_block(stmt.body, body_frame)
        frame.scope[stmt.name] = info

    def stmt_Assign(self, stmt: ast.Assign, frame: Frame) -> None:
        value = self.eval(stmt.value, frame)
        for target in stmt.targets:
            self.bind(target, value, frame, stmt.lineno)

    def stmt_AnnAssign(self, stmt: ast.AnnAssign, frame: Frame) -> None:
        if stmt.value is not None:
            self.bind(stmt.target, self.eval(stmt.value, frame), frame, stmt.lineno)

    def stmt_AugAssign(self, stmt: ast.AugAssign, frame: Frame) -> None:
        self.eval(stmt.value, frame)
        if isinstance(stmt.target, ast.Name):
            self.bind(stmt.target, Unknown(node=stmt.target), frame)

    def stmt_Expr(self, stmt: ast.Expr, frame: Frame) -> bool:
        self.eval(stmt.value, frame)
        # `sys.exit(main())` runs main() first, then nothing after it runs.
        call = stmt.value
        if isinstance(call, ast.Call) and isinstance(call.func, (ast.Name, ast.Attribute)):
            func = self.eval(call.func, frame)  # a name or attribute: evaluating it again is harmless
            if isinstance(func, QualName) and func.name in EXITS:
                return True
            if (isinstance(func, Unknown) and isinstance(call.func, ast.Name)
                    and call.func.id in ("exit", "quit")):
                return True
        return False

    def stmt_Return(self, stmt: ast.Return, frame: Frame) -> bool:
        frame.returns.append(self.eval(stmt.value, frame) if stmt.value is not None else Const(None))
        return True

    def stmt_Global(self, stmt: ast.Global, frame: Frame) -> None:
        frame.declared_global.update(stmt.names)

    def guard_of(self, test: ast.expr, frame: Frame) -> bool | None:
        """guard_polarity, seen through `not` and through a name holding the comparison."""
        polarity = guard_polarity(test)
        if polarity is not None:
            return polarity
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            inner = self.guard_of(test.operand, frame)
            return None if inner is None else not inner
        if isinstance(test, ast.Name):
            value = self.lookup(test.id, frame)
            if isinstance(value, GuardFlag):
                return value.polarity
        return None

    def stmt_If(self, stmt: ast.If, frame: Frame) -> None:
        guard = self.guard_of(stmt.test, frame)
        if guard is not None:
            # `if __name__ == "__main__":` runs its body only in the main process;
            # its else (and the body of the `!=` form) runs in every worker too.
            self.guard_lines.append(stmt.lineno)
            main_body, other = (stmt.body, stmt.orelse) if guard else (stmt.orelse, stmt.body)
            self.exec_block(other, frame)
            self.exec_guarded(main_body, frame)
            # What follows still runs in the main process and in every worker: even where
            # the workers' branch ends (`if __name__ != "__main__": sys.exit()`), the
            # workers then die at import, so what follows is still reported.
            return False
        constant = self.static_truth(stmt.test, frame)
        if constant is None:
            self.eval(stmt.test, frame)
        if constant is True:
            return self.exec_block(stmt.body, frame)
        if constant is False:
            return self.exec_block(stmt.orelse, frame)
        return self.exec_branches([stmt.body, stmt.orelse], frame)

    def exec_guarded(self, body: list[ast.stmt], frame: Frame) -> None:
        saved = frame.guarded
        frame.guarded = True
        try:
            self.exec_block(body, frame)
        finally:
            frame.guarded = saved

    def exec_branches(self, branches: list[list[ast.stmt]], frame: Frame) -> bool:
        """Run alternative branches from the same start and merge what they bound.

        Only the names the branches can bind are saved and merged, so an `if`
        in a module with thousands of names costs what its own body costs.
        """
        names = set().union(*(_bound_names(body, self._bound_memo) for body in branches))
        scope = frame.scope
        missing = object()
        before = {name: scope.get(name, missing) for name in names}
        results = []
        ended = []
        for body in branches:
            for name, value in before.items():
                if value is missing:
                    scope.pop(name, None)
                else:
                    scope[name] = value
            ended.append(self.exec_block(body, frame))
            results.append({name: scope.get(name, missing) for name in names})
        if all(ended):
            return True
        # A branch that ended early (return, raise) passes nothing on to what follows.
        results = [r for r, end in zip(results, ended) if not end]
        for name in names:
            values = [r[name] for r in results if r[name] is not missing]
            if not values:
                scope.pop(name, None)
                continue
            merged = values[0]
            for value in values[1:]:
                merged = _join(merged, value)
            scope[name] = merged
        return False

    def static_truth(self, test: ast.expr, frame: Frame) -> bool | None:
        """True/False for tests known before running (`if TYPE_CHECKING`, `if False`)."""
        if isinstance(test, ast.Constant):
            return bool(test.value)
        if isinstance(test, (ast.Name, ast.Attribute)):
            value = self.eval(test, frame)
            if isinstance(value, QualName) and value.name in TYPE_CHECKING_NAMES:
                return False
            # `DEBUG = False` … `if DEBUG:`: a name bound to a literal at this point of the walk.
            # Not inside a loop, which walks its body once: `first = True` … `if first: …
            # first = False; continue` holds another value on the next pass.
            if (frame.loop_depth == 0 and isinstance(value, Const)
                    and isinstance(value.value, (bool, int, float, str, type(None)))):
                return bool(value.value)
            if isinstance(test, ast.Name) and test.id == "TYPE_CHECKING" and isinstance(value, Unknown):
                return False
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            inner = self.static_truth(test.operand, frame)
            return None if inner is None else not inner
        return None

    def stmt_For(self, stmt: ast.For | ast.AsyncFor, frame: Frame) -> None:
        iterable = self.eval(stmt.iter, frame)
        self.consume(iterable, stmt, frame, "for-loop")
        element: Value = Unknown(node=stmt.target)
        if isinstance(iterable, Seq):
            loaders = [v for v in iterable.items if _is_loaderish(v)]
            if loaders and len(iterable.items) <= 4:
                # `for loader in (train_loader, val_loader):` — follow each one.
                for item in iterable.items:
                    self.bind(stmt.target, item, frame, stmt.lineno)
                    self.exec_loop_body(stmt.body, frame)
                self.exec_block(stmt.orelse, frame)
                return
        self.bind(stmt.target, element, frame, stmt.lineno)
        self.exec_loop_body(stmt.body, frame)
        self.exec_block(stmt.orelse, frame)

    def exec_loop_body(self, body: list[ast.stmt], frame: Frame) -> None:
        frame.loop_depth += 1
        try:
            self.exec_block(body, frame)
        finally:
            frame.loop_depth -= 1

    stmt_AsyncFor = stmt_For

    def stmt_While(self, stmt: ast.While, frame: Frame) -> None:
        # The test is read as inside the loop: its names change between passes.
        frame.loop_depth += 1
        try:
            constant = self.static_truth(stmt.test, frame)
        finally:
            frame.loop_depth -= 1
        if constant is None:
            self.eval(stmt.test, frame)
        if constant is not False:  # `while False:` never runs its body
            self.exec_loop_body(stmt.body, frame)
        if constant is not True:  # `while True:` leaves only through break: its else never runs
            self.exec_block(stmt.orelse, frame)

    def stmt_With(self, stmt: ast.With | ast.AsyncWith, frame: Frame) -> bool:
        for item in stmt.items:
            value = self.eval(item.context_expr, frame)
            if item.optional_vars is not None:
                self.bind(item.optional_vars, value, frame, stmt.lineno)
        return self.exec_block(stmt.body, frame)

    stmt_AsyncWith = stmt_With

    def stmt_Try(self, stmt: ast.Try, frame: Frame) -> None:
        self.exec_block(stmt.body, frame)
        for handler in stmt.handlers:
            if handler.type is not None:
                self.eval(handler.type, frame)
            if handler.name:
                frame.scope[handler.name] = Unknown(handler.name)
            self.exec_block(handler.body, frame)
        self.exec_block(stmt.orelse, frame)
        self.exec_block(stmt.finalbody, frame)

    stmt_TryStar = stmt_Try

    def stmt_Match(self, stmt: ast.Match, frame: Frame) -> None:
        self.eval(stmt.subject, frame)
        if isinstance(stmt.subject, ast.Name) and stmt.subject.id == "__name__":
            # `match __name__: case "__main__":` is the guard written as a match.
            main_cases = [case for case in stmt.cases if case.guard is None and _matches_only_main(case.pattern)]
            if main_cases:
                self.guard_lines.append(stmt.lineno)
                for case in main_cases:
                    self.exec_guarded(case.body, frame)
                self.exec_branches([case.body for case in stmt.cases if case not in main_cases] + [[]], frame)
                return
        self.exec_branches([case.body for case in stmt.cases] + [[]], frame)

    # -- expressions --------------------------------------------------------

    def eval(self, node: ast.expr | None, frame: Frame) -> Value:
        if node is None:
            return Const(None)
        method = getattr(self, f"expr_{type(node).__name__}", None)
        if method is not None:
            return method(node, frame)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                self.eval(child, frame)
            elif isinstance(child, ast.comprehension):  # pragma: no cover - handled below
                self.eval(child.iter, frame)
        return Unknown(node=node)

    def expr_Constant(self, node: ast.Constant, frame: Frame) -> Value:
        return Const(node.value)

    def expr_Name(self, node: ast.Name, frame: Frame) -> Value:
        return self.lookup(node.id, frame)

    def expr_Lambda(self, node: ast.Lambda, frame: Frame) -> Value:
        return Function(node, self.eval_defaults(node.args, frame), closure=frame.closure(self.module_scope))

    def expr_Tuple(self, node: ast.Tuple | ast.List | ast.Set, frame: Frame) -> Value:
        items = []
        for element in node.elts:
            value = self.eval(element.value if isinstance(element, ast.Starred) else element, frame)
            if isinstance(element, ast.Starred):
                loader = _is_loaderish(value)
                if loader is not None:
                    self.start_loader(loader, element, frame, "unpacking")
                value = Unknown(node=element)
            items.append(value)
        return Seq(items)

    expr_List = expr_Tuple
    expr_Set = expr_Tuple

    def expr_Dict(self, node: ast.Dict, frame: Frame) -> Value:
        result = Mapping_({})
        for key, value in zip(node.keys, node.values):
            evaluated = self.eval(value, frame)
            if key is None:  # {**other}
                if isinstance(evaluated, Mapping_):
                    result.items.update(evaluated.items)
                    result.open |= evaluated.open
                else:
                    result.open = True
                continue
            k = self.eval(key, frame)
            if isinstance(k, Const) and isinstance(k.value, str):
                result.items[k.value] = evaluated
            else:
                result.open = True
        return result

    def expr_Attribute(self, node: ast.Attribute, frame: Frame) -> Value:
        value = self.attribute(node, frame)
        if isinstance(value, Bound):
            value.node = node
        return value

    def attribute(self, node: ast.Attribute, frame: Frame) -> Value:
        owner = self.eval(node.value, frame)
        attr = node.attr
        if isinstance(owner, QualName):
            return QualName(f"{owner.name}.{attr}")
        if isinstance(owner, Instance):
            if attr in owner.attrs:
                return owner.attrs[attr]
            found = owner.cls.lookup(attr)
            if isinstance(found, Function):
                return Bound(owner, attr, found)
            if found is not None:
                return found
            return Bound(owner, attr)
        if isinstance(owner, ClassInfo):
            found = owner.lookup(attr)
            if found is not None:
                return found
        if isinstance(owner, SuperObj) and owner.cls is not None:
            for base in owner.cls.bases:
                if isinstance(base, ClassInfo):
                    found = base.lookup(attr)
                    if isinstance(found, Function):
                        return Bound(owner.instance, attr, found)
            return Bound(owner, attr)
        if isinstance(owner, Mapping_) and attr in ("copy",):
            return Bound(owner, attr)
        return Bound(owner, attr)

    def expr_Subscript(self, node: ast.Subscript, frame: Frame) -> Value:
        owner = self.eval(node.value, frame)
        key = self.eval(node.slice, frame)
        if isinstance(owner, Mapping_) and isinstance(key, Const) and key.value in owner.items:
            return owner.items[key.value]
        if isinstance(owner, Seq) and isinstance(key, Const) and isinstance(key.value, int):
            if -len(owner.items) <= key.value < len(owner.items):
                return owner.items[key.value]
        return Unknown(node=node)

    def expr_IfExp(self, node: ast.IfExp, frame: Frame) -> Value:
        self.eval(node.test, frame)
        a, b = self.eval(node.body, frame), self.eval(node.orelse, frame)
        if isinstance(a, Device) or isinstance(b, Device):
            return Device(cuda=any(isinstance(v, Device) and v.cuda for v in (a, b)))
        for v in (a, b):
            if isinstance(v, Const) and isinstance(v.value, str) and v.value.startswith("cuda"):
                return Device(cuda=True)
        return _join(a, b)

    def expr_NamedExpr(self, node: ast.NamedExpr, frame: Frame) -> Value:
        value = self.eval(node.value, frame)
        self.bind(node.target, value, frame, node.lineno)
        return value

    def expr_Compare(self, node: ast.Compare, frame: Frame) -> Value:
        polarity = guard_polarity(node)
        if polarity is not None:
            return GuardFlag(polarity)
        self.eval(node.left, frame)
        for op, right in zip(node.ops, node.comparators):
            value = self.eval(right, frame)
            loader = _is_loaderish(value)
            if loader is not None and isinstance(op, (ast.In, ast.NotIn)):
                self.start_loader(loader, node, frame, "`in` test")
        return Unknown(node=node)

    def expr_ListComp(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp,
                      frame: Frame) -> Value:
        inner = Frame(scope=dict(frame.scope), guarded=frame.guarded, via=frame.via, function=frame.function,
                      declared_global=frame.declared_global, self_class=frame.self_class,
                      enclosing=frame.enclosing, loop_depth=frame.loop_depth + 1)
        for i, generator in enumerate(node.generators):
            # The first iterable is evaluated (and iter() called on it) right away,
            # even for a generator expression.
            iterable = self.eval(generator.iter, frame if i == 0 else inner)
            self.consume(iterable, generator.iter, inner, "comprehension")
            self.bind(generator.target, Unknown(node=generator.target), inner)
            for condition in generator.ifs:
                self.eval(condition, inner)
        if isinstance(node, ast.DictComp):
            self.eval(node.key, inner)
            self.eval(node.value, inner)
        else:
            self.eval(node.elt, inner)
        return Unknown(node=node)

    expr_SetComp = expr_ListComp
    expr_GeneratorExp = expr_ListComp
    expr_DictComp = expr_ListComp

    def expr_Await(self, node: ast.Await, frame: Frame) -> Value:
        value = self.eval(node.value, frame)
        if isinstance(value, Deferred):
            return self.run_deferred(value, node, frame)
        return Unknown(node=node)

    def expr_YieldFrom(self, node: ast.YieldFrom, frame: Frame) -> Value:
        value = self.eval(node.value, frame)
        self.consume(value, node, frame, "yield from")
        return Unknown(node=node)

    def expr_Starred(self, node: ast.Starred, frame: Frame) -> Value:
        return self.eval(node.value, frame)

    # -- what starts workers ------------------------------------------------

    def consume(self, value: Value, node: ast.AST, frame: Frame, how: str) -> None:
        """`value` is iterated here: a loader starts its workers, a generator runs."""
        loader = _is_loaderish(value)
        if loader is not None:
            self.start_loader(loader, node, frame, how)
        elif isinstance(value, Deferred):
            self.run_deferred(value, node, frame)

    def start_loader(self, loader: Loader, node: ast.AST, frame: Frame, how: str) -> None:
        workers = loader.num_workers
        if isinstance(workers, Const) and isinstance(workers.value, int) and workers.value <= 0:
            return  # num_workers=0 loads in the main process: nothing starts
        if isinstance(workers, Const) and isinstance(workers.value, int):
            count: Any = workers.value
            source = workers.origin or "literal"
        else:
            count, source = None, workers.text()
        self.record(
            "dataloader", node, frame,
            starts=f"{how} over {loader.class_name} built at line {loader.site.line}",
            num_workers=count,
            num_workers_source=source,
            constructed_at={"line": loader.site.line, "column": loader.site.column},
            context=loader.context,
            persistent_workers=loader.persistent,
            worker_uses_cuda=self.worker_side_uses_cuda(loader),
        )

    def worker_side_uses_cuda(self, loader: Loader) -> bool:
        """Does the dataset's __getitem__/__iter__, collate_fn or worker_init_fn touch CUDA?"""
        nodes: list[ast.AST] = []
        if isinstance(loader.dataset, Instance):
            for name in ("__getitem__", "__getitems__", "__iter__"):
                found = loader.dataset.cls.lookup(name)
                if isinstance(found, Function):
                    nodes.append(found.node)
        nodes += [fn.node for fn in loader.worker_fns if isinstance(fn, Function)]
        return any(_mentions_cuda(n) for n in nodes)

    def call_args(self, node: ast.Call, frame: Frame) -> tuple[list[Value], dict[str, Value], bool]:
        """Evaluate a call's arguments in order; `open` when *args/**kwargs hide some."""
        positional: list[Value] = []
        keywords: dict[str, Value] = {}
        open_ = False
        for arg in node.args:
            value = self.eval(arg, frame)
            if isinstance(arg, ast.Starred):
                if isinstance(value, Seq):
                    positional.extend(value.items)
                else:
                    loader = _is_loaderish(value)
                    if loader is not None:
                        self.start_loader(loader, arg, frame, "unpacking")
                    open_ = True
                continue
            positional.append(value)
        for keyword in node.keywords:
            value = self.eval(keyword.value, frame)
            if keyword.arg is None:
                if isinstance(value, Mapping_):
                    keywords.update(value.items)
                    open_ |= value.open
                else:
                    open_ = True
                continue
            keywords[keyword.arg] = value
        return positional, keywords, open_

    def expr_Call(self, node: ast.Call, frame: Frame) -> Value:
        func = self.eval(node.func, frame)
        positional, keywords, open_ = self.call_args(node, frame)
        site = Site(node.lineno, self.column(node.lineno, node.col_offset))
        if isinstance(func, QualName):
            return self.call_qualified(func.name, node, frame, positional, keywords, open_, site)
        if isinstance(func, Function):
            return self.call_function(func, node, frame, positional, keywords, None)
        if isinstance(func, ClassInfo):
            return self.instantiate(func, node, frame, positional, keywords, open_, site)
        if isinstance(func, Bound):
            return self.call_method(func, node, frame, positional, keywords, open_, site)
        if isinstance(func, Context):
            return Unknown(node=node)
        return self.call_unknown(node, positional, keywords)

    def call_unknown(self, node: ast.Call, positional: list[Value], keywords: dict[str, Value]) -> Value:
        # An unknown wrapper around a loader (tqdm, rich's track, accelerate's
        # prepare …) iterates it when the wrapper is iterated.
        loaders = [loader for v in [*positional, *keywords.values()] if (loader := _is_loaderish(v))]
        if len(loaders) == 1 and len(positional) <= 1:
            return Iterating(loaders[0], started=False)
        if loaders:
            return Seq([Iterating(lo, False) if (lo := _is_loaderish(v)) else Unknown() for v in positional])
        return Unknown(node=node)

    def loader_from_args(self, class_name: str, positional: list[Value], keywords: dict[str, Value],
                         open_: bool, site: Site) -> Loader:
        def argument(name: str) -> Value | None:
            if name in keywords:
                return keywords[name]
            index = LOADER_POSITIONS.get(name)
            if index is not None and index < len(positional):
                return positional[index]
            return None

        workers = argument("num_workers")
        if workers is None:
            workers = Unknown("**kwargs or *args (num_workers may be in them)") if open_ else Const(0)
        context = argument("multiprocessing_context")
        method = None
        if isinstance(context, Const) and isinstance(context.value, str):
            method = context.value
        elif isinstance(context, Context):
            method = context.method
        persistent = argument("persistent_workers")
        dataset = positional[0] if positional else keywords.get("dataset")
        return Loader(site=site, num_workers=workers, context=method,
                      persistent=isinstance(persistent, Const) and bool(persistent.value),
                      dataset=dataset,
                      worker_fns=[v for v in (argument("collate_fn"), argument("worker_init_fn")) if v],
                      class_name=class_name)

    def call_qualified(self, name: str, node: ast.Call, frame: Frame, positional: list[Value],
                       keywords: dict[str, Value], open_: bool, site: Site) -> Value:
        short = name.rsplit(".", 1)[-1]
        if name in LOADER_CLASSES:
            return self.loader_from_args(short, positional, keywords, open_, site)
        if name == "builtins.dict" and not any(_is_loaderish(v) for v in positional):
            base = positional[0] if len(positional) == 1 and isinstance(positional[0], Mapping_) else None
            items = dict(base.items) if base else {}
            items.update(keywords)
            return Mapping_(items, open=(bool(positional) and base is None) or open_)
        if name in EAGER_ITER:
            for value in [*positional, *keywords.values()]:
                loader = _is_loaderish(value)
                if loader is not None:
                    self.start_loader(loader, node, frame, f"{short}()")
                    return Iterating(loader, started=True)
                if isinstance(value, Deferred) and short != "iter":
                    self.run_deferred(value, node, frame)
            return Unknown(node=node)
        if name == "builtins.next" and positional and isinstance(positional[0], Deferred):
            self.run_deferred(positional[0], node, frame)
        if name == "builtins.super":
            return SuperObj(frame.self_value or Unknown("self"), frame.self_class)
        if name in PROCESS_CLASSES:
            return ProcessObj(site, None)
        if name in POOL_CLASSES or name in MANAGER_CLASSES:
            kind = "pool" if name in POOL_CLASSES else "manager"
            self.record(kind, node, frame, starts=f"{short}() starts its worker processes when it is created",
                        context=None)
            return PoolObj(kind)
        if name in EXECUTOR_CLASSES:
            ctx = keywords.get("mp_context")
            return Executor(site, ctx.method if isinstance(ctx, Context) else None)
        if name in TORCH_SPAWN:
            method = keywords.get("start_method")
            context = method.value if isinstance(method, Const) else "spawn"
            self.record("torch-spawn", node, frame, starts=f"torch.multiprocessing.{short}() starts processes",
                        context=context if short == "start_processes" else "spawn")
            return Unknown(node=node)
        if name in SET_START_METHOD:
            method = positional[0] if positional else keywords.get("method")
            self.record("set-start-method", node, frame,
                        method=method.value if isinstance(method, Const) else None)
            return Const(None)
        if name in GET_CONTEXT:
            method = positional[0] if positional else keywords.get("method")
            return Context(method.value if isinstance(method, Const) else None)
        if name in TRAINER_CLASSES:
            return TrainerObj(site)
        if name in CUDA_INIT_CALLS:
            self.record("cuda-init", node, frame, call=self.source(node.func) + "()")
            return Unknown(node=node)
        if name in ("torch.device",):
            arg = positional[0] if positional else keywords.get("type")
            if isinstance(arg, Const) and isinstance(arg.value, str):
                return Device(cuda=arg.value.startswith("cuda"))
            if isinstance(arg, Device):
                return arg
            return Unknown(node=node)
        if name in TENSOR_FACTORIES:
            device = keywords.get("device")
            if _is_cuda(device):
                self.record("cuda-init", node, frame, call=f"{self.source(node.func)}(..., device=cuda)")
            return Unknown(node=node)
        if name == "asyncio.run" and positional:
            if isinstance(positional[0], Deferred):
                return self.run_deferred(positional[0], node, frame)
        return self.call_unknown(node, positional, keywords)

    def call_method(self, bound: Bound, node: ast.Call, frame: Frame, positional: list[Value],
                    keywords: dict[str, Value], open_: bool, site: Site) -> Value:
        obj, attr = bound.obj, bound.attr
        if bound.func is not None:
            return self.call_function(bound.func, node, frame, positional, keywords, obj)
        if attr == "cuda" or (attr == "to" and any(_is_cuda(v) for v in [*positional, *keywords.values()])):
            self.record("cuda-init", node, frame, call=f".{attr}({self.source(node.args[0]) if node.args else ''})")
            return obj if isinstance(obj, (Instance, Unknown)) else Unknown(node=node)
        if attr == "run_until_complete" and positional and isinstance(positional[0], Deferred):
            return self.run_deferred(positional[0], node, frame)
        if isinstance(obj, Loader) and attr == "__iter__":
            self.start_loader(obj, node, frame, "__iter__()")
            return Iterating(obj, started=True)
        if isinstance(obj, ProcessObj) and attr == "start":
            self.record("process-start", node, frame, starts=f"{obj.kind}.start() starts a process "
                        f"(created at line {obj.site.line})", context=obj.context)
            return Const(None)
        if isinstance(obj, Executor) and attr in ("submit", "map"):
            self.record("process-pool", node, frame,
                        starts=f"ProcessPoolExecutor.{attr}() starts worker processes", context=obj.context)
            return Unknown(node=node)
        if isinstance(obj, TrainerObj) and attr in TRAINER_RUNS:
            self.record("lightning", node, frame,
                        starts=f"Trainer.{attr}() iterates the DataLoaders and may launch processes",
                        context=None)
            return Unknown(node=node)
        if isinstance(obj, Context):
            if attr == "Process":
                return ProcessObj(site, obj.method)
            if attr in ("Pool", "Manager"):
                kind = "pool" if attr == "Pool" else "manager"
                self.record(kind, node, frame, starts=f"{attr}() starts its worker processes when it is created",
                            context=obj.method)
                return PoolObj(kind)
        if isinstance(obj, Mapping_) and attr == "copy":
            return Mapping_(dict(obj.items), obj.open)
        if isinstance(obj, Mapping_) and attr == "update":
            if positional and isinstance(positional[0], Mapping_):
                obj.items.update(positional[0].items)
            obj.items.update(keywords)
            return Const(None)
        if isinstance(obj, SuperObj):
            if attr == "__init__" and isinstance(frame.self_value, Loader) and obj.cls is not None:
                built = self.loader_from_args(obj.cls.node.name, positional, keywords, open_,
                                              frame.self_value.site)
                target = frame.self_value
                target.num_workers, target.context = built.num_workers, built.context
                target.persistent, target.dataset, target.worker_fns = (built.persistent, built.dataset,
                                                                        built.worker_fns)
            return Const(None)
        return self.call_unknown(node, positional, keywords)

    def instantiate(self, cls: ClassInfo, node: ast.Call, frame: Frame, positional: list[Value],
                    keywords: dict[str, Value], open_: bool, site: Site) -> Value:
        init = cls.lookup("__init__")
        if cls.inherits(LOADER_CLASSES):
            loader = self.loader_from_args(cls.node.name, positional, keywords, open_, site)
            if isinstance(init, Function):
                # A custom __init__ passes its own values on through super().__init__().
                loader.num_workers = Const(0)
                self.call_function(init, node, frame, positional, keywords, loader)
            return loader
        if cls.inherits(PROCESS_CLASSES):
            process = ProcessObj(site, None, kind=cls.node.name)
            if isinstance(init, Function):
                self.call_function(init, node, frame, positional, keywords, process)
            return process
        instance = Instance(cls)
        if isinstance(init, Function):
            self.call_function(init, node, frame, positional, keywords, instance)
        return instance

    def call_function(self, func: Function, node: ast.AST, frame: Frame, positional: list[Value],
                      keywords: dict[str, Value], self_value: Value | None) -> Value:
        name = "<lambda>" if isinstance(func.node, ast.Lambda) else func.node.name
        scope = self.bind_parameters(func, positional, keywords, self_value)
        call_site = (name, getattr(node, "lineno", 1), self.code(getattr(node, "lineno", 1)))
        if isinstance(func.node, ast.AsyncFunctionDef) or self.is_generator(func.node):
            return Deferred(func, scope, call_site)
        return self.run_body(func, scope, call_site, frame, self_value)

    def run_deferred(self, deferred: Deferred, node: ast.AST, frame: Frame) -> Value:
        return self.run_body(deferred.func, dict(deferred.scope), deferred.call_site, frame, deferred.scope.get("self"))

    def run_body(self, func: Function, scope: dict[str, Value], call_site: tuple[str, int, str],
                 frame: Frame, self_value: Value | None) -> Value:
        node = func.node
        if node in self.stack or len(self.stack) >= MAX_CALL_DEPTH:
            return Unknown(f"{call_site[0]}()")
        if self.calls_followed >= MAX_CALLS_FOLLOWED:
            self.truncated = True
            return Unknown(f"{call_site[0]}()")
        memo_key = self.memo_key(func, scope, frame)
        if memo_key is not None and memo_key in self.memo:
            # Same function, same plain arguments, nothing relevant changed since:
            # walking it again would find the same starts (already recorded).
            return self.memo[memo_key]
        self.calls_followed += 1
        # The chain shows how module level reached this code; its head is the
        # module-level statement to move under the guard.
        via = frame.via + (call_site,)
        inner = Frame(scope=scope, guarded=frame.guarded, via=via, function=func,
                      self_class=func.owner, self_value=self_value, enclosing=func.closure)
        self.stack.append(node)
        try:
            if isinstance(node, ast.Lambda):
                inner.returns.append(self.eval(node.body, inner))
            else:
                self.exec_block(node.body, inner)
        finally:
            self.stack.pop()
        returns = inner.returns
        result = returns[0] if returns else Const(None)
        for value in returns[1:]:
            result = _join(result, value)
        if memo_key is not None:
            self.memo[memo_key] = result
        return result

    def memo_key(self, func: Function, scope: dict[str, Value], frame: Frame) -> tuple[Any, ...] | None:
        """A key for calls whose walk would repeat an earlier one, or None when it might not."""
        parts: list[Any] = [id(func.node), frame.guarded, self.state_version]
        for value in scope.values():
            if isinstance(value, Const):
                # Numbers and short strings may decide num_workers, a start method or a
                # device; long strings (messages, paths) cannot, so only their type counts.
                literal = value.value
                if isinstance(literal, (str, bytes)) and len(literal) > 24:
                    literal = "<long>"
                elif not isinstance(literal, (int, float, str, bytes, type(None))):
                    literal = "<other>"
                parts.append(("const", type(value.value).__name__, literal))
            elif _is_plain(value):
                parts.append(type(value).__name__)
            elif isinstance(value, Instance):
                parts.append(("instance", id(value)))
            else:
                return None  # a loader, a process, a context …: always follow
        return tuple(parts)

    def bind_parameters(self, func: Function, positional: list[Value], keywords: dict[str, Value],
                        self_value: Value | None) -> dict[str, Value]:
        args = func.node.args
        names = [a.arg for a in [*args.posonlyargs, *args.args]]
        values = list(positional)
        if self_value is not None and names:
            values.insert(0, self_value)
        scope: dict[str, Value] = {}
        for i, name in enumerate(names):
            if i < len(values):
                scope[name] = values[i]
            elif name in keywords:
                scope[name] = keywords[name]
            elif name in func.defaults:
                scope[name] = func.defaults[name]
            else:
                scope[name] = Unknown(name)
        for arg in args.kwonlyargs:
            scope[arg.arg] = keywords.get(arg.arg, func.defaults.get(arg.arg, Unknown(arg.arg)))
        if args.vararg:
            scope[args.vararg.arg] = Seq(values[len(names):])
        if args.kwarg:
            known = set(names) | {a.arg for a in args.kwonlyargs}
            scope[args.kwarg.arg] = Mapping_({k: v for k, v in keywords.items() if k not in known})
        return scope

    def is_generator(self, node: ast.AST) -> bool:
        cached = self._generators.get(id(node))
        if cached is None:
            # Reading the function's own lines first is much cheaper than walking its tree.
            lines = self.lines[node.lineno - 1:getattr(node, "end_lineno", None) or len(self.lines)]
            cached = any("yield" in line for line in lines) and _is_generator(node)
            self._generators[id(node)] = cached
        return cached

    # -- the result ----------------------------------------------------------

    def result(self) -> dict[str, Any]:
        starts = [e for e in self.events if e["kind"] not in ("set-start-method", "cuda-init")]
        return {
            "guard_lines": self.guard_lines,
            "worker_starts": starts,
            "start_method_calls": [e for e in self.events if e["kind"] == "set-start-method"],
            "cuda_inits": [e for e in self.events if e["kind"] == "cuda-init"],
            "calls_followed": self.calls_followed,
            "truncated": self.truncated,
        }


def _is_cuda(value: Value | None) -> bool:
    if isinstance(value, Device):
        return value.cuda
    return isinstance(value, Const) and isinstance(value.value, str) and value.value.startswith("cuda")


def _own_nodes(func: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a function body, not descending into nested functions or classes."""
    todo = list(ast.iter_child_nodes(func))
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        yield node
        todo.extend(ast.iter_child_nodes(node))


def _target_names(node: ast.AST) -> Iterator[str]:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, (ast.Store, ast.Del)):
            yield sub.id
        elif isinstance(sub, ast.MatchAs) and sub.name:
            yield sub.name


_BODIES = ("body", "orelse", "finalbody", "handlers", "cases")


def _bound_names(body: list[ast.stmt], memo: dict[int, frozenset[str]]) -> set[str]:
    """Every name a block may bind in its own scope (assignments, loops, with, imports, defs …).

    Nested blocks are looked up in `memo`, so long elif chains cost linear time.
    """
    names: set[str] = set()
    for stmt in body:
        cached = memo.get(id(stmt))
        if cached is None:
            found: set[str] = set()
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                found.add(stmt.name)  # what the body binds is local to it
            elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
                found.update((a.asname or a.name).split(".")[0] for a in stmt.names)
            else:
                for field_name, value in ast.iter_fields(stmt):
                    if field_name in _BODIES and isinstance(value, list):
                        for child in value:
                            if isinstance(child, (ast.ExceptHandler, ast.match_case)):
                                if isinstance(child, ast.ExceptHandler) and child.name:
                                    found.add(child.name)
                                if isinstance(child, ast.match_case):
                                    found.update(_target_names(child.pattern))
                                found |= _bound_names(child.body, memo)
                        if value and isinstance(value[0], ast.stmt):
                            found |= _bound_names(value, memo)
                    elif isinstance(value, ast.AST):
                        found.update(_target_names(value))  # targets, walrus in tests
                    elif isinstance(value, list):
                        for item in value:
                            if isinstance(item, ast.AST):
                                found.update(_target_names(item))
            cached = memo[id(stmt)] = frozenset(found)
        names |= cached
    return names


def _is_generator(func: ast.AST) -> bool:
    return any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in _own_nodes(func))


def _mentions_cuda(func: ast.AST) -> bool:
    for node in ast.walk(func):
        if isinstance(node, ast.Attribute) and node.attr == "cuda":
            return True
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("cuda"):
            return True
    return False


def guard_polarity(test: ast.expr) -> bool | None:
    """True for `__name__ == "__main__"` (any order, either quotes), False for `!=`, else None.

    `if __name__ == "__main__" and x:` still guards its body; `or` does not.
    """
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        if any(guard_polarity(v) is True for v in test.values):
            return True
        return None
    if not isinstance(test, ast.Compare) or len(test.ops) != 1:
        return None
    left, op, right = test.left, test.ops[0], test.comparators[0]

    def is_name(n: ast.expr) -> bool:
        return isinstance(n, ast.Name) and n.id == "__name__"

    def is_main(n: ast.expr) -> bool:
        if isinstance(n, ast.Constant):
            return n.value == "__main__"
        if isinstance(n, (ast.Tuple, ast.List, ast.Set)):
            # `__name__ in ("__main__", "__mp_main__")` is true in spawned workers too
            # (they import the script as __mp_main__): that is no guard.
            names = {e.value for e in n.elts if isinstance(e, ast.Constant)}
            return "__main__" in names and "__mp_main__" not in names
        return False

    if isinstance(op, (ast.In, ast.NotIn)):
        if is_name(left) and is_main(right):
            return isinstance(op, ast.In)
        return None
    if (is_name(left) and is_main(right)) or (is_main(left) and is_name(right)):
        if isinstance(op, (ast.Eq, ast.Is)):
            return True
        if isinstance(op, (ast.NotEq, ast.IsNot)):
            return False
    return None


def _matches_only_main(pattern: ast.pattern) -> bool:
    """A case pattern that matches "__main__" and not "__mp_main__" (what spawned workers see)."""
    if isinstance(pattern, ast.MatchValue):
        return isinstance(pattern.value, ast.Constant) and pattern.value.value == "__main__"
    if isinstance(pattern, ast.MatchOr):
        return (any(_matches_only_main(p) for p in pattern.patterns)
                and not any(isinstance(p, ast.MatchValue) and isinstance(p.value, ast.Constant)
                            and p.value.value == "__mp_main__" for p in pattern.patterns))
    return False


def analyse_source(tree: ast.Module, text: str) -> dict[str, Any]:
    """Where this parsed script starts workers, sets a start method, initialises CUDA."""
    analysis = ScriptAnalysis(tree, text.splitlines())
    analysis.run()
    return analysis.result()
