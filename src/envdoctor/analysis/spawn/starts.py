"""What starts workers: iterating a loader, and the arguments a call passes on."""
from __future__ import annotations

import ast
from typing import Any

from envdoctor.analysis.spawn.expressions import ExpressionWalker
from envdoctor.analysis.spawn.names import LOADER_POSITIONS
from envdoctor.analysis.spawn.syntax import body_of, mentions_cuda
from envdoctor.analysis.spawn.values import (
    Const,
    Context,
    Deferred,
    Either,
    Function,
    Instance,
    Iterating,
    Loader,
    Mapping_,
    Option,
    QualName,
    Seq,
    Site,
    Unknown,
    Value,
    defined_in_main,
    loaderish,
)
from envdoctor.analysis.spawn.walker import Frame


def worker_count(workers: Value) -> tuple[int | None, str, str | None]:
    """(count, where it comes from, the condition under which workers start) for a num_workers value.

    A count known before run time is a number; an option or config entry whose
    default is 0 starts workers only when the user raises it (`--workers > 0`),
    one whose default is larger starts them by default.
    """
    if isinstance(workers, Const) and isinstance(workers.value, int):
        return workers.value, workers.origin or "literal", None
    if isinstance(workers, Option):
        default = workers.default
        if isinstance(default, Const) and isinstance(default.value, int) and not isinstance(default.value, bool):
            if default.value <= 0:
                return None, workers.text(), f"{workers.flag} > 0"
            return default.value, workers.text(), None
        return None, workers.text(), None
    return None, workers.text(), None


#: DataLoader parameters whose values the workers unpickle (besides the dataset).
SHIPPED = ("dataset", "sampler", "batch_sampler", "collate_fn", "worker_init_fn")


class StartTracker(ExpressionWalker):
    """Records where loaders are iterated and processes start."""

    def consume(self, value: Value, node: ast.AST, frame: Frame, how: str, unpacked: bool = False) -> None:
        """`value` is iterated here: a loader starts its workers, a generator runs.

        An unknown wrapper around a loader (`for x in wrapper(loader)`) counts only
        when its items are unpacked (`for images, labels in wrapper(loader)`):
        only then does what it yields look like the loader's batches.
        """
        if isinstance(value, Iterating) and not value.started and not value.known and not unpacked:
            return
        loader = loaderish(value)
        if loader is not None:
            self.start_loader(loader, node, frame, how)
        elif isinstance(value, Deferred):
            self.run_deferred(value, node, frame)

    def start_loader(self, loader: Loader, node: ast.AST, frame: Frame, how: str, **extra: Any) -> None:
        count, source, only_with = worker_count(loader.num_workers)
        if count is not None and count <= 0:
            return  # num_workers=0 loads in the main process: nothing starts
        built = (f"line {loader.site.line}" if loader.site.path == frame.module.path
                 else f"{loader.site.path}:{loader.site.line}")
        self.record(
            "dataloader", node, frame,
            starts=f"{how} over {loader.class_name} built at {built}",
            num_workers=count,
            num_workers_source=source,
            only_with=only_with,
            constructed_at={"path": loader.site.path, "line": loader.site.line, "column": loader.site.column},
            context=loader.context or frame.forced_method,
            persistent_workers=loader.persistent,
            worker_uses_cuda=self.worker_side_uses_cuda(loader),
            main_objects=self.main_objects(loader),
            # Built under the guard, started outside it: a worker's re-import never builds it, and dies here.
            **({"built_under_guard": True} if loader.site.main_only and not frame.guarded else {}),
            **({"launcher": frame.forced_by} if frame.forced_by and not loader.context else {}),
            **extra,
        )

    def main_objects(self, loader: Loader) -> list[dict[str, Any]]:
        """What the workers must unpickle that the notebook (a `__main__` spawn does not re-run) defines."""
        found = []
        for role, value in loader.shipped.items():
            for obj in defined_in_main(value):
                if isinstance(obj, Instance):
                    name, kind, line, local = obj.cls.node.name, "class", obj.cls.node.lineno, obj.cls.local_in
                elif isinstance(obj, Function):
                    name, kind, line, local = obj.name, "function", obj.node.lineno, obj.local_in
                else:
                    continue
                found.append({"role": role, "name": name, "kind": kind, "line": line,
                              **({"local_in": local} if local and name != "<lambda>" else {})})
        return found

    def worker_side_uses_cuda(self, loader: Loader) -> bool:
        """Does the dataset's __getitem__/__iter__, collate_fn or worker_init_fn touch CUDA?"""
        nodes: list[ast.AST] = []
        dataset = loader.dataset
        for instance in dataset.options if isinstance(dataset, Either) else [dataset]:
            if not isinstance(instance, Instance):
                continue
            for name in ("__getitem__", "__getitems__", "__iter__"):
                found = instance.cls.lookup(name)
                if isinstance(found, Function):
                    nodes.append(found.node)
                    body_of(found.node, found.module.lines if found.module is not None else [], self.restored)
        for fn in loader.worker_fns:
            if isinstance(fn, Function):
                nodes.append(fn.node)
                body_of(fn.node, fn.module.lines if fn.module is not None else [], self.restored)
        return any(mentions_cuda(n) for n in nodes)

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
                    loader = loaderish(value)
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

    def call_unknown(self, node: ast.Call, positional: list[Value], keywords: dict[str, Value],
                     known: bool = False) -> Value:
        # An unknown wrapper around a loader (tqdm, rich's track, accelerate's
        # prepare …) iterates it when the wrapper is iterated.
        if not positional and not keywords:
            return Unknown(node=node, holds=[])
        loaders = [loader for v in [*positional, *keywords.values()] if (loader := loaderish(v))]
        if len(loaders) == 1 and len(positional) <= 1:
            return Iterating(loaders[0], started=False, known=known)
        if loaders:
            return Seq([Iterating(lo, False, known=known) if (lo := loaderish(v)) else Unknown()
                        for v in positional])
        held = [found for v in [*positional, *keywords.values()] for found in defined_in_main(v)]
        return Unknown(node=node, holds=held)

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
        shipped = {name: value for name in SHIPPED
                   if (value := dataset if name == "dataset" else argument(name)) is not None}
        return Loader(site=site, num_workers=workers, context=method,
                      persistent=isinstance(persistent, Const) and bool(persistent.value),
                      dataset=dataset,
                      worker_fns=[v for v in (argument("collate_fn"), argument("worker_init_fn")) if v],
                      class_name=class_name, shipped=shipped)


    def passed_to_unreadable(self, callee: QualName, node: ast.Call, frame: Frame, positional: list[Value],
                             keywords: dict[str, Value]) -> None:
        """A loader with workers handed to a function of a module that could not be read.

        What that function does cannot be seen; if it iterates the loader, the
        workers start at import time. Worth a warning that says why.
        """
        for value in [*positional, *keywords.values()]:
            loader = loaderish(value)
            if loader is None:
                continue
            count, source, only_with = worker_count(loader.num_workers)
            if count is not None and count <= 0:
                continue
            self.record(
                "loader-passed", node, frame,
                starts=(f"passes {loader.class_name} built at line {loader.site.line} to {callee.name}(), "
                        f"which envdoctor cannot read ({callee.missing})"),
                callee=callee.name, reason=callee.missing,
                num_workers=count, num_workers_source=source, only_with=only_with,
                constructed_at={"path": loader.site.path, "line": loader.site.line, "column": loader.site.column},
                context=loader.context, persistent_workers=loader.persistent, worker_uses_cuda=False,
                main_objects=self.main_objects(loader),
            )
            return
