"""Calls: into known library names, methods, classes and the functions the walk has read."""
from __future__ import annotations

import ast

from envdoctor.analysis.spawn.bodies import BodyRunner
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
    iterating_callees,
)
from envdoctor.analysis.spawn.values import (
    Bound,
    ClassInfo,
    Const,
    Context,
    Deferred,
    Device,
    Executor,
    Function,
    Instance,
    Iterating,
    Loader,
    Mapping_,
    NamespaceObj,
    Option,
    ParserObj,
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
    is_cuda,
    is_plain,
    loaderish,
)
from envdoctor.analysis.spawn.walker import Frame


class CallWalker(BodyRunner):
    """Follows calls: what they return, what they start, into the bodies the walk can read."""

    def expr_Call(self, node: ast.Call, frame: Frame) -> Value:
        func = self.eval(node.func, frame)
        positional, keywords, open_ = self.call_args(node, frame)
        site = Site(node.lineno, frame.module.column(node.lineno, node.col_offset), frame.module.path)
        if isinstance(func, QualName):
            if func.missing is not None and not frame.guarded:
                self.passed_to_unreadable(func, node, frame, positional, keywords)
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

    def call_qualified(self, name: str, node: ast.Call, frame: Frame, positional: list[Value],
                       keywords: dict[str, Value], open_: bool, site: Site) -> Value:
        short = name.rsplit(".", 1)[-1]
        if name in LOADER_CLASSES:
            return self.loader_from_args(short, positional, keywords, open_, site)
        if name == "builtins.dict" and not any(loaderish(v) for v in positional):
            base = positional[0] if len(positional) == 1 and isinstance(positional[0], Mapping_) else None
            items = dict(base.items) if base else {}
            items.update(keywords)
            return Mapping_(items, open=(bool(positional) and base is None) or open_)
        if name in NON_ITERATING:
            return Unknown(node=node)  # `total=len(loader)` is a number, not a wrapper around the loader
        callees = iterating_callees()
        iterated = callees.when_called.get(name)
        if iterated is not None:
            positions, names = iterated
            chosen = [v for i, v in enumerate(positional) if positions is None or i in positions]
            chosen += [v for k, v in keywords.items() if k in names or (positions is None and k != "start")]
            for value in chosen:
                loader = loaderish(value)
                if loader is not None:
                    self.start_loader(loader, node, frame, f"{short}()")
                    return Iterating(loader, started=True)
                if isinstance(value, Deferred) and short != "iter":
                    self.run_deferred(value, node, frame)
            return Unknown(node=node)
        if name in callees.fork_launchers:
            return self.launch_forked(name, node, frame, positional)
        if name == "argparse.ArgumentParser":
            return ParserObj()
        if name == "builtins.getattr" and len(positional) == 3 and isinstance(positional[1], Const):
            return self.option_of(positional[0], str(positional[1].value), positional[2])
        if name == "builtins.vars" and positional and isinstance(positional[0], NamespaceObj):
            parser = positional[0].parser
            return Mapping_({dest: Option(flag, default) for dest, (flag, default) in parser.options.items()})
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
        if name in callees.settings_classes:
            return SettingsObj(dict(keywords), open=open_)
        spec = callees.trainers.get(name)
        if spec is not None:
            return TrainerObj(site, spec, list(positional), dict(keywords))
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
            if is_cuda(device):
                self.record("cuda-init", node, frame, call=f"{self.source(node.func)}(..., device=cuda)")
            return Unknown(node=node)
        if name == "asyncio.run" and positional:
            if isinstance(positional[0], Deferred):
                return self.run_deferred(positional[0], node, frame)
        return self.call_unknown(node, positional, keywords, known=name in callees.when_iterated)

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
            return Unknown()
        if attr == "set_defaults":
            for dest, value in keywords.items():
                flag = parser.options.get(dest, (f"--{dest}", value))[0]
                parser.options[dest] = (flag, value)
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
        elif trainer.model is not None:
            received.append(trainer.model)
        loaders: list[Loader] = []
        for value in received:
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

    def loaders_in(self, value: Value, spec: object, node: ast.Call, frame: Frame, depth: int = 0) -> list[Loader]:
        """The DataLoaders a value holds: itself, a list or dict of them, or a model's loader hooks."""
        loader = loaderish(value)
        if loader is not None:
            return [loader]
        if depth > 2:
            return []
        if isinstance(value, Seq):
            return [lo for item in value.items for lo in self.loaders_in(item, spec, node, frame, depth + 1)]
        if isinstance(value, Mapping_):
            return [lo for item in value.every_value() for lo in self.loaders_in(item, spec, node, frame, depth + 1)]
        if isinstance(value, Instance):
            found: list[Loader] = []
            for hook in getattr(spec, "hooks", ()):
                method = value.cls.lookup(hook)
                if isinstance(method, Function):
                    returned = self.call_function(method, node, frame, [], {}, value)
                    found += self.loaders_in(returned, spec, node, frame, depth + 1)
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
        if settings is None:
            workers: Value = Const(default)
        elif isinstance(settings, SettingsObj):
            workers = settings.keywords.get(field_name, Const(default) if not settings.open else Unknown(field_name))
        else:
            workers = Unknown(f"{field_name} of {settings.text()}")
        shipped = {role: value for role, keyword in trainer.spec.ships
                   if (value := trainer.keywords.get(keyword)) is not None}
        return [Loader(site=trainer.site, num_workers=workers, class_name=f"{trainer.spec.name}'s DataLoader",
                       dataset=shipped.get("dataset"), shipped=shipped)]

    def call_method(self, bound: Bound, node: ast.Call, frame: Frame, positional: list[Value],
                    keywords: dict[str, Value], open_: bool, site: Site) -> Value:
        obj, attr = bound.obj, bound.attr
        if bound.func is not None:
            return self.call_function(bound.func, node, frame, positional, keywords, obj)
        if attr == "cuda" or (attr == "to" and any(is_cuda(v) for v in [*positional, *keywords.values()])):
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
        if isinstance(obj, TrainerObj) and attr in obj.spec.runs:
            return self.run_trainer(obj, attr, node, frame, positional, keywords)
        if isinstance(obj, ParserObj):
            return self.argparse_method(obj, attr, positional, keywords)
        if attr == "get" and len(positional) == 2 and isinstance(positional[0], Const) and not isinstance(
                obj, Mapping_):
            return self.option_of(obj, str(positional[0].value), positional[1])
        if attr in iterating_callees().wrapper_methods:
            return self.call_unknown(node, positional, keywords, known=True)
        if isinstance(obj, Context):
            if attr == "Process":
                return ProcessObj(site, obj.method)
            if attr in ("Pool", "Manager"):
                kind = "pool" if attr == "Pool" else "manager"
                self.record(kind, node, frame, starts=f"{attr}() starts its worker processes when it is created",
                            context=obj.method)
                return PoolObj(kind)
        if isinstance(obj, Mapping_) and attr in ("values", "items", "get"):
            return self.mapping_method(obj, attr, positional)
        if isinstance(obj, Seq) and attr in ("append", "extend", "insert"):
            added = positional[-1:] if attr != "extend" else (
                positional[0].items if positional and isinstance(positional[0], Seq) else [])
            self.to_change(obj).items.extend(v for v in added if not is_plain(v))
            return Const(None)
        if isinstance(obj, Mapping_) and attr == "copy":
            return Mapping_(dict(obj.items), obj.open)
        if isinstance(obj, Mapping_) and attr == "update":
            self.to_change(obj)
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
        instance = Instance(cls, home=None if frame.module.is_main else frame.module)
        if isinstance(init, Function):
            self.call_function(init, node, frame, positional, keywords, instance)
        return instance
