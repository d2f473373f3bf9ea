"""Calls: into known library names, methods, classes and the functions the walk has read."""
from __future__ import annotations

import ast

from envdoctor.analysis.spawn.bodies import BodyRunner
from envdoctor.analysis.spawn.names import (
    CUDA_INIT_CALLS,
    EAGER_ITER,
    EXECUTOR_CLASSES,
    GET_CONTEXT,
    KNOWN_WRAPPER_METHODS,
    KNOWN_WRAPPERS,
    LOADER_CLASSES,
    MANAGER_CLASSES,
    POOL_CLASSES,
    PROCESS_CLASSES,
    SET_START_METHOD,
    TENSOR_FACTORIES,
    TORCH_SPAWN,
    TRAINER_CLASSES,
    TRAINER_RUNS,
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
    PoolObj,
    ProcessObj,
    QualName,
    Seq,
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
        known = isinstance(func, Bound) and func.attr in KNOWN_WRAPPER_METHODS
        return self.call_unknown(node, positional, keywords, known=known)

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
        if name in EAGER_ITER:
            for value in [*positional, *keywords.values()]:
                loader = loaderish(value)
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
            if is_cuda(device):
                self.record("cuda-init", node, frame, call=f"{self.source(node.func)}(..., device=cuda)")
            return Unknown(node=node)
        if name == "asyncio.run" and positional:
            if isinstance(positional[0], Deferred):
                return self.run_deferred(positional[0], node, frame)
        return self.call_unknown(node, positional, keywords, known=name in KNOWN_WRAPPERS)

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
        if isinstance(obj, Mapping_) and attr in ("values", "items", "get"):
            return self.mapping_method(obj, attr, positional)
        if isinstance(obj, Seq) and attr in ("append", "extend", "insert"):
            added = positional[-1:] if attr != "extend" else (
                positional[0].items if positional and isinstance(positional[0], Seq) else [])
            obj.items.extend(v for v in added if not is_plain(v))
            return Const(None)
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

    def mapping_method(self, obj: Mapping_, attr: str, positional: list[Value]) -> Value:
        """`loaders.values()`, `loaders.items()`, `loaders.get(phase)`: what they hold."""
        values = obj.every_value()
        if attr == "get":
            key = positional[0] if positional else None
            if isinstance(key, Const) and str(key.value) in obj.items:
                return obj.items[str(key.value)]
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
        instance = Instance(cls)
        if isinstance(init, Function):
            self.call_function(init, node, frame, positional, keywords, instance)
        return instance
