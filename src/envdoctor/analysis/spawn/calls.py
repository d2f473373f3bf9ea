"""Calls: into known library names, methods, classes and the functions the walk has read."""
from __future__ import annotations

import ast
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import ClassVar, NamedTuple

from envdoctor.analysis.spawn.bodies import BodyRunner
from envdoctor.analysis.spawn.libraries import LibraryLoaders, table_only
from envdoctor.analysis.spawn.names import (
    CUDA_INIT_CALLS,
    EXECUTOR_CLASSES,
    GET_CONTEXT,
    LOADER_CLASSES,
    MANAGER_CLASSES,
    NON_ITERATING,
    POOL_CLASSES,
    PROCESS_CLASSES,
    SET_START_METHOD,
    TENSOR_FACTORIES,
    TORCH_SPAWN,
    TrainerSpec,
    iterating_callees,
)
from envdoctor.analysis.spawn.values import (
    Bound,
    ClassInfo,
    Const,
    Context,
    Deferred,
    Device,
    Either,
    Executor,
    Function,
    Instance,
    Iterating,
    Loader,
    Mapping_,
    NamespaceObj,
    Option,
    ParserObj,
    Partial,
    PoolObj,
    ProcessObj,
    QualName,
    Seq,
    SettingsObj,
    Site,
    SuperObj,
    TrainerObj,
    Unknown,
    Value,
    any_of,
    first_argument,
    is_cuda,
    is_plain,
    join_all,
    loaderish,
)
from envdoctor.analysis.spawn.walker import Frame


class Call(NamedTuple):
    """One call being walked: what it calls (a qualified name or a method's name) and with what."""

    name: str
    node: ast.Call
    frame: Frame
    positional: list[Value]
    keywords: dict[str, Value]
    open: bool

    @property
    def short(self) -> str:
        return self.name.rsplit(".", 1)[-1]

    @property
    def site(self) -> Site:
        """Where the call is: made when a handler keeps it (a loader's, a process's), not for every call."""
        return site_of(self.node, self.frame)


def site_of(node: ast.Call, frame: Frame) -> Site:
    """The call's line, character column and file, and whether only the main process reaches it."""
    main_only = frame.guarded and not any(step.call.startswith("import ") for step in frame.via)
    return Site(node.lineno, frame.module.column(node.lineno, node.col_offset), frame.module.path, main_only)


#: A call's handler: a method of CallWalker, or None to go on to the next question.
Handler = Callable[["CallWalker", Call], "Value | None"]


class CallWalker(BodyRunner):
    """Follows calls: what they return, what they start, into the bodies the walk can read."""

    #: Qualified name -> handler, built once from the name tables and the catalog (`qualified_table`).
    _qualified: ClassVar[dict[str, Handler] | None] = None

    @property
    def libraries(self) -> LibraryLoaders:
        """The check's reader of library loaders (the target's installed source, else the catalog)."""
        project = getattr(self, "project", None)
        return project.shared.libraries if project is not None else table_only()

    def expr_Call(self, node: ast.Call, frame: Frame) -> Value:
        func = self.eval(node.func, frame)
        positional, keywords, open_ = self.call_args(node, frame)
        return self.call_value(func, node, frame, positional, keywords, open_)

    def call_value(self, func: Value, node: ast.Call, frame: Frame, positional: list[Value],
                   keywords: dict[str, Value], open_: bool) -> Value:
        depth = 0
        while type(func) is Partial and depth < 4:  # `partial(partial(DataLoader, ds), num_workers=2)`
            positional, keywords = [*func.positional, *positional], {**func.keywords, **keywords}
            open_, func = open_ or func.open, func.func
            depth += 1
        if isinstance(func, QualName):
            if func.missing is not None and not frame.guarded:
                self.passed_to_unreadable(func, node, frame, positional, keywords)
            return self.call_qualified(Call(func.name, node, frame, positional, keywords, open_))
        if isinstance(func, Function):
            return self.call_function(func, node, frame, positional, keywords, None)
        if isinstance(func, ClassInfo):
            return self.instantiate(func, node, frame, positional, keywords, open_, site_of(node, frame))
        if isinstance(func, Bound):
            return self.call_method(func, Call(func.attr, node, frame, positional, keywords, open_))
        if isinstance(func, Either):  # `(Serial if debug else Parallel)()`, a partial of one: each one's call
            return join_all([self.call_value(option, node, frame, positional, keywords, open_)
                             for option in func.options])
        if isinstance(func, Context):
            return Unknown(node=node)
        return self.call_unknown(node, positional, keywords)

    # -- calls of names the tables know ----------------------------------------

    @classmethod
    def qualified_table(cls) -> dict[str, Handler]:
        """Every name a table knows, with its handler: one dict lookup per call, whatever the tables hold."""
        if cls._qualified is None:
            callees = iterating_callees()
            table: dict[str, Handler] = {}
            groups: list[tuple[Iterable[str], Handler]] = [
                (callees.when_called, CallWalker.q_iterates),
                (NON_ITERATING, CallWalker.q_inspects),
                (callees.fork_launchers, CallWalker.q_fork_launcher),
                (PROCESS_CLASSES, CallWalker.q_process),
                (POOL_CLASSES | MANAGER_CLASSES, CallWalker.q_pool),
                (EXECUTOR_CLASSES, CallWalker.q_executor),
                (TORCH_SPAWN, CallWalker.q_torch_spawn),
                (SET_START_METHOD, CallWalker.q_set_start_method),
                (GET_CONTEXT, CallWalker.q_get_context),
                (callees.settings_classes, CallWalker.q_settings),
                (callees.trainers, CallWalker.q_trainer),
                (CUDA_INIT_CALLS, CallWalker.q_cuda_init),
                (TENSOR_FACTORIES, CallWalker.q_tensor),
                (LOADER_CLASSES, CallWalker.q_loader),
            ]
            for names, handler in groups:
                table.update(dict.fromkeys(names, handler))
            table.update({
                "builtins.dict": CallWalker.q_dict, "argparse.ArgumentParser": CallWalker.q_parser,
                "builtins.getattr": CallWalker.q_getattr, "builtins.vars": CallWalker.q_vars,
                "builtins.next": CallWalker.q_next, "builtins.super": CallWalker.q_super,
                "torch.device": CallWalker.q_device, "asyncio.run": CallWalker.q_asyncio_run,
                "functools.partial": CallWalker.q_partial,
            })
            cls._qualified = table
        return cls._qualified

    def call_qualified(self, call: Call) -> Value:
        handler = self.qualified_table().get(call.name)
        if handler is not None:
            result = handler(self, call)
            if result is not None:
                return result
        library = self.library_call(call)
        if library is not None:
            return library
        return self.call_unknown(call.node, call.positional, call.keywords,
                                 known=call.name in iterating_callees().when_iterated)

    def q_loader(self, call: Call) -> Value:
        return self.loader_from_args(call.short, call.positional, call.keywords, call.open, call.site)

    def q_dict(self, call: Call) -> Value | None:
        positional = call.positional
        if any(loaderish(v) for v in positional):
            return None
        base = positional[0] if len(positional) == 1 and isinstance(positional[0], Mapping_) else None
        items = dict(base.items) if base else {}
        items.update(call.keywords)
        return Mapping_(items, open=(bool(positional) and base is None) or call.open)

    def q_inspects(self, call: Call) -> Value:
        return Unknown(node=call.node)  # `total=len(loader)` is a number, not a wrapper around the loader

    def q_iterates(self, call: Call) -> Value:
        positions, names = iterating_callees().when_called[call.name]
        chosen = [v for i, v in enumerate(call.positional) if positions is None or i in positions]
        chosen += [v for k, v in call.keywords.items() if k in names or (positions is None and k != "start")]
        for value in chosen:
            loader = loaderish(value)
            if loader is not None:
                self.start_loader(loader, call.node, call.frame, f"{call.short}()")
                return Iterating(loader, started=True)
            if isinstance(value, Deferred) and call.short != "iter":
                self.run_deferred(value, call.node, call.frame)
        return Unknown(node=call.node)

    def q_fork_launcher(self, call: Call) -> Value:
        return self.launch_forked(call.name, call.node, call.frame, call.positional)

    def q_parser(self, call: Call) -> Value:
        return ParserObj()

    def q_getattr(self, call: Call) -> Value | None:
        positional = call.positional
        if len(positional) == 3 and isinstance(positional[1], Const):
            return self.option_of(positional[0], str(positional[1].value), positional[2])
        return None

    def q_vars(self, call: Call) -> Value | None:
        if call.positional and isinstance(call.positional[0], NamespaceObj):
            parser = call.positional[0].parser
            return Mapping_({dest: Option(flag, default) for dest, (flag, default) in parser.options.items()})
        return None

    def q_next(self, call: Call) -> Value | None:
        if call.positional and isinstance(call.positional[0], Deferred):
            self.run_deferred(call.positional[0], call.node, call.frame)
        return None

    def q_super(self, call: Call) -> Value:
        return SuperObj(call.frame.self_value or Unknown("self"), call.frame.self_class)

    def q_process(self, call: Call) -> Value:
        return ProcessObj(call.site, None)

    def q_pool(self, call: Call) -> Value:
        kind = "pool" if call.name in POOL_CLASSES else "manager"
        self.record(kind, call.node, call.frame, starts=f"{call.short}() starts its worker processes when it is created",
                    context=None)
        return PoolObj(kind)

    def q_executor(self, call: Call) -> Value:
        ctx = call.keywords.get("mp_context")
        return Executor(call.site, ctx.method if isinstance(ctx, Context) else None)

    def q_torch_spawn(self, call: Call) -> Value:
        method = call.keywords.get("start_method")
        context = method.value if isinstance(method, Const) else "spawn"
        self.record("torch-spawn", call.node, call.frame,
                    starts=f"torch.multiprocessing.{call.short}() starts processes",
                    context=context if call.short == "start_processes" else "spawn")
        return Unknown(node=call.node)

    def q_set_start_method(self, call: Call) -> Value:
        method = call.positional[0] if call.positional else call.keywords.get("method")
        self.record("set-start-method", call.node, call.frame,
                    method=method.value if isinstance(method, Const) else None)
        return Const(None)

    def q_get_context(self, call: Call) -> Value:
        method = call.positional[0] if call.positional else call.keywords.get("method")
        return Context(method.value if isinstance(method, Const) else None)

    def q_settings(self, call: Call) -> Value:
        return SettingsObj(dict(call.keywords), open=call.open)

    def q_trainer(self, call: Call) -> Value:
        spec = iterating_callees().trainers[call.name]
        return TrainerObj(call.site, spec, list(call.positional), dict(call.keywords))

    def q_cuda_init(self, call: Call) -> Value:
        self.record("cuda-init", call.node, call.frame, call=self.source(call.node.func) + "()")
        return Unknown(node=call.node)

    def q_device(self, call: Call) -> Value:
        arg = call.positional[0] if call.positional else call.keywords.get("type")
        if isinstance(arg, Const) and isinstance(arg.value, str):
            return Device(cuda=arg.value.startswith("cuda"))
        if isinstance(arg, Device):
            return arg
        return Unknown(node=call.node)

    def q_tensor(self, call: Call) -> Value:
        if is_cuda(call.keywords.get("device")):
            self.record("cuda-init", call.node, call.frame, call=f"{self.source(call.node.func)}(..., device=cuda)")
        return Unknown(node=call.node)

    def q_asyncio_run(self, call: Call) -> Value | None:
        if call.positional and isinstance(call.positional[0], Deferred):
            return self.run_deferred(call.positional[0], call.node, call.frame)
        return None

    def q_partial(self, call: Call) -> Value | None:
        """`functools.partial(DataLoader, num_workers=4)`: the class with those arguments bound."""
        if not call.positional:
            return None
        return Partial(call.positional[0], list(call.positional[1:]), dict(call.keywords), call.open)

    # -- library loaders: by what they are -------------------------------------

    def library_call(self, call: Call) -> Value | None:
        """A library class that is a DataLoader, a function that returns one, or a call that behaves as one."""
        libraries = self.libraries
        name = call.name
        # Only a call that may set num_workers can give a loader that starts workers: one built
        # without it has none (`loader_from_args`), so the library need not be read for it.
        read = "num_workers" in call.keywords
        if libraries.is_loader_class(name, read):
            return self.library_loader(call, call.short)
        if libraries.returns_loader(name, read):
            return self.library_loader(call, f"{call.short}()")
        guessed = self.behaves_as_loader(call, name)
        if guessed is not None:
            return guessed
        if call.short[:1].isupper():
            made = self.call_unknown(call.node, call.positional, call.keywords)
            if isinstance(made, Unknown):
                made.lib = name  # its methods may return loaders (`Node2Vec(...).loader(...)`)
                made.workers = call.keywords.get("num_workers")
            return made
        return None

    def library_loader(self, call: Call, shown: str) -> Loader:
        # Only the first argument is known to be the dataset: a library class's own parameters
        # (`NeighborLoader(data, num_neighbors, ...)`) do not sit where DataLoader's do.
        return self.loader_from_args(shown, call.positional[:1], call.keywords, call.open, call.site)

    def behaves_as_loader(self, call: Call, name: str) -> Value | None:
        """A call given `num_workers=` into a library that cannot be read: its result may be a loader."""
        if "num_workers" not in call.keywords or (name and self.libraries.installed(name)):
            return None
        loader = self.loader_from_args(f"{call.short}()", call.positional[:1], call.keywords, call.open, call.site)
        loader.guessed = True
        return loader

    def launch_forked(self, name: str, node: ast.Call, frame: Frame, positional: list[Value]) -> Value:
        """A launcher that forces fork (accelerate's notebook_launcher) runs its function: what it starts is forked."""
        if positional and isinstance(positional[0], Function):
            args = positional[1].items if len(positional) > 1 and isinstance(positional[1], Seq) else []
            saved = frame.forced_method, frame.forced_by
            frame.forced_method, frame.forced_by = "fork", name.rsplit(".", 1)[-1]
            try:
                self.call_function(positional[0], node, frame, list(args), {}, None)
            finally:
                frame.forced_method, frame.forced_by = saved
        return Unknown(node=node)

    def option_of(self, owner: Value, key: str, default: Value) -> Value:
        """`getattr(args, "workers", 0)`, `config.get("num_workers", 0)`: the user's setting, else the default."""
        if isinstance(owner, NamespaceObj) and key in owner.parser.options:
            flag, known = owner.parser.options[key]
            return Option(flag, known)
        if isinstance(owner, Mapping_) and key in owner.items:
            return owner.items[key]
        if isinstance(default, Const) and isinstance(default.value, int) and "worker" in key.lower():
            return Option(f"{key!r} in the config", default)
        return Unknown(f"{key}")

    def argparse_method(self, parser: ParserObj, attr: str, positional: list[Value],
                        keywords: dict[str, Value]) -> Value:
        """add_argument records an option; parse_args gives the namespace whose attributes they are."""
        if attr == "add_argument":
            flags = [str(v.value) for v in positional if isinstance(v, Const) and isinstance(v.value, str)]
            dest_value = keywords.get("dest")
            long = next((f for f in flags if f.startswith("--")), flags[0] if flags else "")
            dest = (str(dest_value.value) if isinstance(dest_value, Const)
                    else long.lstrip("-").replace("-", "_"))
            if dest:
                default = keywords.get("default", Const(None))
                if isinstance(default, Const) and default.origin is None:
                    default = Const(default.value)
                parser.options[dest] = (long, default)
                self.wrote(parser, None)
            return Unknown()
        if attr == "set_defaults":
            for dest, value in keywords.items():
                flag = parser.options.get(dest, (f"--{dest}", value))[0]
                parser.options[dest] = (flag, value)
                self.wrote(parser, None)
            return Const(None)
        if attr in ("add_argument_group", "add_mutually_exclusive_group"):
            return parser
        if attr in ("parse_args", "parse_intermixed_args"):
            return NamespaceObj(parser)
        if attr in ("parse_known_args", "parse_known_intermixed_args"):
            return Seq([NamespaceObj(parser), Unknown()])
        return Unknown()

    def run_trainer(self, trainer: TrainerObj, attr: str, node: ast.Call, frame: Frame,
                    positional: list[Value], keywords: dict[str, Value]) -> Value:
        """A trainer's run method iterates the loaders it received: a start only when one may have workers."""
        spec = trainer.spec
        strategy = trainer.keywords.get("strategy")
        if isinstance(strategy, Const) and str(strategy.value) in spec.spawn_strategies:
            self.record("torch-spawn", node, frame, context="spawn",
                        starts=f"{spec.name}.{attr}() with strategy={strategy.value!r} starts processes with spawn")
            return Unknown(node=node)
        received = [*trainer.received, *trainer.keywords.values(), *positional, *keywords.values()]
        models = [v for v in [*positional[:1], keywords.get("model"), keywords.get("datamodule")]
                  if v is not None]
        if models:
            trainer.model = models[0]
            self.wrote(trainer, None)
        elif trainer.model is not None:
            received.append(trainer.model)
        loaders: list[Loader] = []
        for value in received:
            for option in value.options if isinstance(value, Either) else [value]:
                if isinstance(option, Instance):
                    self.prepare(option, spec, attr, node, frame)
            loaders += self.loaders_in(value, spec, node, frame)
        if spec.workers_from is not None:
            loaders += self.built_loaders(trainer)
        started = [lo for lo in loaders
                   if not (isinstance(lo.num_workers, Const) and isinstance(lo.num_workers.value, int)
                           and lo.num_workers.value <= 0)]
        if started:
            loader = max(started, key=lambda lo: isinstance(lo.num_workers, Const))
            self.start_loader(loader, node, frame, f"{spec.name}.{attr}()", trainer=spec.name)
        return Unknown(node=node)

    def prepare(self, module: Instance, spec: TrainerSpec, stage: str, node: ast.Call, frame: Frame) -> None:
        """What the trainer runs on a model or data module before it asks for the loaders: Lightning's
        `prepare_data()` and `setup(stage)`, where a data module builds the datasets its hooks hand out."""
        for hook in spec.prepares:
            method = module.cls.lookup(hook)
            if isinstance(method, Function):
                arguments: list[Value] = [Const(stage)] if hook == "setup" else []
                self.call_function(method, node, frame, arguments, {}, first_argument(module, method))

    def loaders_in(self, value: Value, spec: object, node: ast.Call, frame: Frame, depth: int = 0) -> list[Loader]:
        """The DataLoaders a value holds: itself, a list or dict of them, or a model's loader hooks."""
        loader = loaderish(value)
        if loader is not None:
            return [loader]
        if depth > 2:
            return []
        if isinstance(value, (Seq, Either)):  # a list of them, or one of several objects
            items = value.items if isinstance(value, Seq) else value.options
            return [lo for item in items for lo in self.loaders_in(item, spec, node, frame, depth + 1)]
        if isinstance(value, Mapping_):
            return [lo for item in value.every_value() for lo in self.loaders_in(item, spec, node, frame, depth + 1)]
        if isinstance(value, Unknown) and value.lib is not None and value.workers is not None:
            # A library data module built with num_workers=: the hooks its source says return loaders.
            site = site_of(node, frame)
            return [self.loader_from_args(f"{value.lib.rsplit('.', 1)[-1]}.{hook}()", [],
                                          {"num_workers": value.workers}, False, site)
                    for hook in getattr(spec, "hooks", ()) if self.libraries.returns_loader(f"{value.lib}.{hook}")]
        if isinstance(value, Instance):
            found: list[Loader] = []
            for hook in getattr(spec, "hooks", ()):
                method = value.cls.lookup(hook)
                if isinstance(method, Function):
                    returned = self.call_function(method, node, frame, [], {}, first_argument(value, method))
                    found += self.loaders_in(returned, spec, node, frame, depth + 1)
            self.read(value, None)
            for attr in value.attrs.values():
                if loaderish(attr) is not None:
                    found.append(loaderish(attr))  # type: ignore[arg-type]
            return found
        return []

    def built_loaders(self, trainer: TrainerObj) -> list[Loader]:
        """The loaders a trainer builds itself (Hugging Face: num_workers from TrainingArguments)."""
        argument, position, field_name, default = trainer.spec.workers_from
        settings = trainer.keywords.get(argument)
        if settings is None and len(trainer.received) > position:
            settings = trainer.received[position]
        if settings is not None and loaderish(settings) is not None:
            return []  # given a DataLoader (MMEngine takes one too): it is among the loaders it received
        if settings is None:
            workers: Value = Const(default)
        elif not field_name:  # the argument is the count itself (TorchDrug's `Engine(..., num_worker=4)`)
            workers = settings
        elif isinstance(settings, Mapping_):  # a dict config (MMEngine's `Runner(train_dataloader=dict(...))`)
            workers = settings.items.get(field_name, Unknown(field_name) if settings.open else Const(default))
        elif isinstance(settings, SettingsObj):
            workers = settings.keywords.get(field_name, Const(default) if not settings.open else Unknown(field_name))
        elif isinstance(settings, Instance):  # a project subclass of the trainer (`MyTrainer(cfg).train()`)
            workers = Unknown(f"{field_name} of what {settings.cls.node.name}() was given")
        else:
            workers = Unknown(f"{field_name} of {settings.text()}")
        shipped = {role: value for role, keyword in trainer.spec.ships
                   if (value := trainer.keywords.get(keyword)) is not None}
        return [Loader(site=trainer.site, num_workers=workers, class_name=f"{trainer.spec.name}'s DataLoader",
                       dataset=shipped.get("dataset"), shipped=shipped)]

    @staticmethod
    def method_table() -> dict[type, Callable[..., Value | None]]:
        """The methods of the values the walk models, by the value's type."""
        return {Loader: CallWalker.m_loader, ProcessObj: CallWalker.m_process, Executor: CallWalker.m_executor,
                TrainerObj: CallWalker.m_trainer, ParserObj: CallWalker.m_parser, Context: CallWalker.m_context,
                Mapping_: CallWalker.m_mapping, Seq: CallWalker.m_seq, SuperObj: CallWalker.m_super,
                Unknown: CallWalker.m_library, Instance: CallWalker.m_instance}

    # complexity: 21 — the methods no value type owns (`.cuda()`/`.to("cuda")`, `run_until_complete`, a config's
    # `get`, an iterating wrapper, a library object's loader factory) are tried in this order around the per-type
    # table (`_METHODS`), and the order is the meaning: a table entry wins over the generic guesses below it.
    def call_method(self, bound: Bound, call: Call) -> Value:
        obj, attr = bound.obj, call.name
        if bound.func is not None:
            return self.call_function(bound.func, call.node, call.frame, call.positional, call.keywords, obj)
        node, frame = call.node, call.frame
        if attr == "cuda" or (attr == "to" and any(is_cuda(v) for v in [*call.positional, *call.keywords.values()])):
            self.record("cuda-init", node, frame, call=f".{attr}({self.source(node.args[0]) if node.args else ''})")
            return obj if isinstance(obj, (Instance, Unknown)) else Unknown(node=node)
        if attr == "run_until_complete" and call.positional and isinstance(call.positional[0], Deferred):
            return self.run_deferred(call.positional[0], node, frame)
        handler = _METHODS.get(type(obj))
        if handler is not None:
            result = handler(self, call, obj)
            if result is not None:
                return result
        positional = call.positional
        if attr == "get" and len(positional) == 2 and isinstance(positional[0], Const) and not isinstance(
                obj, Mapping_):
            return self.option_of(obj, str(positional[0].value), positional[1])
        if attr in iterating_callees().wrapper_methods:
            return self.call_unknown(node, positional, call.keywords, known=True)
        if isinstance(obj, Unknown) and obj.lib is not None:
            # `model.loader(num_workers=4)` on an object a library the walk cannot read made (an
            # object of unknown origin may be the project's own, whose method returns anything).
            guessed = self.behaves_as_loader(call, obj.lib)
            if guessed is not None:
                return guessed
        return self.call_unknown(node, positional, call.keywords)

    def m_loader(self, call: Call, obj: Loader) -> Value | None:
        if call.name == "__iter__":
            self.start_loader(obj, call.node, call.frame, "__iter__()")
            return Iterating(obj, started=True)
        if obj.guessed and call.name in iterating_callees().loader_hooks:
            # A library object known only by the num_workers= it was given, which the walk cannot
            # read (`EuroSATDataModule(num_workers=2)`): its loader hooks (`train_dataloader()`, a
            # Lightning data module's) hand back loaders with that count.
            return replace(obj, site=call.site, class_name=f"{obj.class_name}.{call.name}()")
        return None

    def m_process(self, call: Call, obj: ProcessObj) -> Value | None:
        if call.name == "start":
            self.record("process-start", call.node, call.frame, starts=f"{obj.kind}.start() starts a process "
                        f"(created at line {obj.site.line})", context=obj.context)
            return Const(None)
        return None

    def m_executor(self, call: Call, obj: Executor) -> Value | None:
        if call.name in ("submit", "map"):
            self.record("process-pool", call.node, call.frame,
                        starts=f"ProcessPoolExecutor.{call.name}() starts worker processes", context=obj.context)
            return Unknown(node=call.node)
        return None

    def m_instance(self, call: Call, obj: Instance) -> Value | None:
        """`MyRunner().run()`: a run method a project class inherits from a library trainer (Catalyst's
        IRunner) iterates the loaders the instance's own hooks return (`get_loaders()`)."""
        spec = self.trainer_base(obj.cls)
        if spec is None or call.name not in spec.runs:
            return None
        return self.run_trainer(TrainerObj(call.site, spec, [obj], {}), call.name, call.node, call.frame,
                                call.positional, call.keywords)

    def trainer_base(self, cls: ClassInfo, depth: int = 0) -> TrainerSpec | None:
        """The catalog's trainer a class of the walk derives from, if any."""
        trainers = iterating_callees().trainers
        for base in cls.bases:
            if isinstance(base, QualName) and base.name in trainers:
                return trainers[base.name]
            if isinstance(base, ClassInfo) and depth < 16 and (found := self.trainer_base(base, depth + 1)):
                return found
        return None

    def m_trainer(self, call: Call, obj: TrainerObj) -> Value | None:
        if call.name in obj.spec.runs:
            return self.run_trainer(obj, call.name, call.node, call.frame, call.positional, call.keywords)
        return None

    def m_parser(self, call: Call, obj: ParserObj) -> Value | None:
        return self.argparse_method(obj, call.name, call.positional, call.keywords)

    def m_context(self, call: Call, obj: Context) -> Value | None:
        if call.name == "Process":
            return ProcessObj(call.site, obj.method)
        if call.name in ("Pool", "Manager"):
            kind = "pool" if call.name == "Pool" else "manager"
            self.record(kind, call.node, call.frame,
                        starts=f"{call.name}() starts its worker processes when it is created", context=obj.method)
            return PoolObj(kind)
        return None

    def m_mapping(self, call: Call, obj: Mapping_) -> Value | None:
        attr, positional = call.name, call.positional
        if attr in ("values", "items", "get"):
            return self.mapping_method(obj, attr, positional)
        if attr == "copy":
            return Mapping_(dict(obj.items), obj.open)
        if attr == "update":
            self.to_change(obj)
            if positional and isinstance(positional[0], Mapping_):
                obj.items.update(positional[0].items)
            obj.items.update(call.keywords)
            return Const(None)
        return None

    def m_seq(self, call: Call, obj: Seq) -> Value | None:
        if call.name not in ("append", "extend", "insert"):
            return None
        positional = call.positional
        added = positional[-1:] if call.name != "extend" else (
            positional[0].items if positional and isinstance(positional[0], Seq) else [])
        self.to_change(obj).items.extend(v for v in added if not is_plain(v))
        return Const(None)

    def m_super(self, call: Call, obj: SuperObj) -> Value | None:
        if call.name == "get" or call.name in iterating_callees().wrapper_methods:
            return None  # as on any object: `super().get("workers", 2)`
        frame = call.frame
        if call.name == "__init__" and isinstance(frame.self_value, Loader) and obj.cls is not None:
            built = self.loader_from_args(obj.cls.node.name, call.positional, call.keywords, call.open,
                                          frame.self_value.site)
            target = frame.self_value
            target.num_workers, target.context = built.num_workers, built.context
            target.persistent, target.dataset, target.worker_fns = (built.persistent, built.dataset,
                                                                    built.worker_fns)
        return Const(None)

    def m_library(self, call: Call, obj: Unknown) -> Value | None:
        """`Node2Vec(...).loader(num_workers=4)`: a method of a library object that returns a loader;
        `DataModule(num_workers=2).train_dataloader()`: one whose loader takes the object's count."""
        if obj.lib is None:
            return None
        keywords = call.keywords
        if "num_workers" not in keywords and obj.workers is not None:
            keywords = {**keywords, "num_workers": obj.workers}
        if self.libraries.returns_loader(f"{obj.lib}.{call.name}", "num_workers" in keywords):
            return self.loader_from_args(f"{obj.lib.rsplit('.', 1)[-1]}.{call.name}()", call.positional[:1],
                                         keywords, call.open, call.site)
        return None

    def mapping_method(self, obj: Mapping_, attr: str, positional: list[Value]) -> Value:
        """`loaders.values()`, `loaders.items()`, `loaders.get(phase)`: what they hold."""
        values = obj.every_value()
        if attr == "get":
            key = positional[0] if positional else None
            if isinstance(key, Const) and str(key.value) in obj.items:
                return obj.items[str(key.value)]
            if isinstance(key, Const) and len(positional) == 2 and obj.default is None:
                # A key the dict may not hold: its default, or what a config we cannot read sets.
                return self.option_of(Unknown(), str(key.value), positional[1]) if obj.open else positional[1]
            return any_of(values) if values and not all(is_plain(v) for v in values) else Unknown()
        if all(is_plain(v) for v in values) or len(values) > 4:
            return Unknown()
        if attr == "values":
            return Seq(list(values))
        keys: list[Value] = [Const(k) for k in obj.items] + ([Unknown()] if obj.default is not None else [])
        return Seq([Seq([k, v]) for k, v in zip(keys, values)])

    def inherits_loader(self, cls: ClassInfo, read: bool, depth: int = 0) -> bool:
        """Whether a class of the walk derives from a DataLoader class, a library's included (its
        source read only with `read`: when the class or the call may set num_workers)."""
        for base in cls.bases:
            if isinstance(base, QualName) and self.libraries.is_loader_class(base.name, read):
                return True
            if isinstance(base, ClassInfo) and depth < 16 and self.inherits_loader(base, read, depth + 1):
                return True
        return False

    def may_set_workers(self, cls: ClassInfo, keywords: dict[str, Value]) -> bool:
        """The call passes num_workers, or the class's own source names it (`super().__init__(ds, num_workers=4)`)."""
        if "num_workers" in keywords:
            return True
        known: bool | None = getattr(cls.node, "_envdoctor_workers", None)
        if known is None:
            lines = cls.module.lines if cls.module is not None else []
            text = "\n".join(lines[cls.node.lineno - 1:cls.node.end_lineno or len(lines)])
            known = "num_workers" in text
            setattr(cls.node, "_envdoctor_workers", known)  # noqa: B010 - a mark of our own on the node
        return known

    def instantiate(self, cls: ClassInfo, node: ast.Call, frame: Frame, positional: list[Value],
                    keywords: dict[str, Value], open_: bool, site: Site) -> Value:
        init = cls.lookup("__init__")
        if self.inherits_loader(cls, self.may_set_workers(cls, keywords)):
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
        # Made while a project module's import runs, by whatever code, it is part of what that import
        # leaves, as the objects its own top level makes are: what its __init__ writes is no change to an
        # object an earlier import left, to keep, put back and make again for each later script. Made
        # while none runs, it is the script's own, whatever code made it: a later script can reach it only
        # through a write into a shared module, which is put back when this script's walk ends.
        home = self.imports[-1].module if self.imports and not frame.module.is_main else None
        instance = Instance(cls, home=home)
        if isinstance(init, Function):
            self.constructing = instance
            try:
                self.call_function(init, node, frame, positional, keywords, instance)
            finally:
                self.constructing = None
        return instance


_METHODS: dict[type, Callable[..., Value | None]] = CallWalker.method_table()
