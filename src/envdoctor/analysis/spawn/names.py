"""Known names: the classes and functions that start workers, iterate, set start methods, touch CUDA."""
from __future__ import annotations

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

#: Wrappers known to iterate the loader they wrap when they are iterated (progress bars …).
KNOWN_WRAPPERS = frozenset({
    "tqdm.tqdm", "tqdm.auto.tqdm", "tqdm.notebook.tqdm", "tqdm.std.tqdm", "tqdm.rich.tqdm", "tqdm.autonotebook.tqdm",
    "rich.progress.track", "alive_progress.alive_it", "progressbar.progressbar",
})
#: Methods of unknown objects that hand back the loader they are given, ready to iterate.
KNOWN_WRAPPER_METHODS = frozenset({"prepare", "prepare_data_loader"})
#: Top-level modules never looked for among the project's files (the libraries the tables name).
EXTERNAL_ROOTS = frozenset({
    "torch", "torchdata", "torch_geometric", "monai", "lightning", "pytorch_lightning", "tqdm", "rich",
    "numpy", "typing_extensions",
})
