"""Known names: the classes and functions that start workers, iterate, set start methods, touch CUDA."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cache

LOADER_CLASSES = frozenset({
    "torch.utils.data.DataLoader",
    "torch.utils.data.dataloader.DataLoader",
    "torchdata.stateful_dataloader.StatefulDataLoader",
    "torch_geometric.loader.DataLoader",
    "monai.data.DataLoader",
})
#: Where DataLoader's own parameters sit positionally (torch 2.x signature).
LOADER_POSITIONS = {"sampler": 3, "batch_sampler": 4, "num_workers": 5,
                    "collate_fn": 6, "worker_init_fn": 10, "multiprocessing_context": 11}

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
    "transformers": {"Trainer", "TrainingArguments"},
}
BUILTIN_NAMES = frozenset({
    "iter", "enumerate", "zip", "map", "filter", "list", "tuple", "set", "frozenset", "sorted", "sum", "min",
    "max", "any", "all", "dict", "next", "len", "print", "range", "super", "isinstance", "object", "getattr",
    "vars"})

#: Builtins that look at their argument without iterating it or handing it back (`len(loader)`).
NON_ITERATING = frozenset(f"builtins.{n}" for n in (
    "len", "print", "isinstance", "issubclass", "type", "id", "repr", "str", "hash", "bool", "callable",
    "hasattr", "format"))

#: Bounds that keep pathological files fast: calls followed per file, nesting of calls.
MAX_CALLS_FOLLOWED = 50_000
MAX_CALL_DEPTH = 25

#: Top-level modules never looked for among the project's files (the libraries the tables name).
EXTERNAL_ROOTS = frozenset({
    "torch", "torchdata", "torch_geometric", "monai", "lightning", "pytorch_lightning", "tqdm", "rich",
    "numpy", "typing_extensions", "transformers", "accelerate", "ignite", "argparse",
})


@dataclass(frozen=True)
class TrainerSpec:
    """A training loop whose run methods iterate the DataLoaders it receives (catalog: [[trainer]])."""

    name: str
    runs: frozenset[str]
    hooks: tuple[str, ...] = ()
    #: Methods it runs on a model or data module before asking for the loaders (Lightning's prepare_data,
    #: setup(stage)): where a data module builds the datasets its hooks hand to the workers.
    prepares: tuple[str, ...] = ()
    spawn_strategies: frozenset[str] = frozenset()
    #: (argument name, position, field, default): where the loaders it builds get num_workers.
    workers_from: tuple[str, int, str, int] | None = None
    #: DataLoader parameter -> constructor keyword, for the loaders it builds (dataset, collate_fn).
    ships: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class IteratingCallees:
    """The catalog's iterating_callees table, indexed for the walk."""

    #: Calls that iterate their arguments at once: name -> (positions or None for all, keyword names).
    when_called: dict[str, tuple[frozenset[int] | None, frozenset[str]]]
    #: Wrappers that iterate what they wrap when they are iterated.
    when_iterated: frozenset[str]
    wrapper_methods: frozenset[str]
    trainers: dict[str, TrainerSpec]
    #: Settings objects a trainer reads its loaders' num_workers from (TrainingArguments).
    settings_classes: frozenset[str]
    fork_launchers: frozenset[str]
    #: The methods of a model or data module that return its loaders (every trainer's `hooks`).
    loader_hooks: frozenset[str] = frozenset()


@cache
def iterating_callees() -> IteratingCallees:
    """The table of library calls that iterate a loader, read once from the catalog when first needed."""
    from envdoctor.catalog import load_data

    data = load_data("iterating_callees")
    when_called: dict[str, tuple[frozenset[int] | None, frozenset[str]]] = {}
    for entry in data.get("iterates_when_called", []):
        arguments = entry.get("arguments", "all")
        positions = None if arguments == "all" else frozenset(int(i) for i in arguments)
        for name in entry["names"]:
            when_called[name] = (positions, frozenset(entry.get("keywords", ())))
    trainers: dict[str, TrainerSpec] = {}
    settings: set[str] = set()
    for entry in data.get("trainer", []):
        settings.update(entry.get("settings_classes", ()))
        workers = entry.get("workers_from")
        spec = TrainerSpec(
            name=entry["name"], runs=frozenset(entry["runs"]), hooks=tuple(entry.get("hooks", ())),
            prepares=tuple(entry.get("prepares", ())),
            spawn_strategies=frozenset(entry.get("spawn_strategies", ())),
            workers_from=(workers["argument"], int(workers["position"]), workers["field"], int(workers["default"]))
            if workers else None,
            ships=tuple(sorted(entry.get("ships", {}).items())))
        for name in entry["classes"]:
            trainers[name] = spec
    return IteratingCallees(
        when_called=when_called,
        when_iterated=frozenset(n for e in data.get("iterates_when_iterated", []) for n in e["names"]),
        wrapper_methods=frozenset(data.get("wrapper_methods", {}).get("names", ())),
        trainers=trainers,
        settings_classes=frozenset(settings),
        fork_launchers=frozenset(data.get("fork_launchers", {}).get("names", ())),
        loader_hooks=frozenset(hook for spec in trainers.values() for hook in spec.hooks),
    )
