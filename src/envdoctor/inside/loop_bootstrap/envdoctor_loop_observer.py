"""Observe every DataLoader this process iterates: time blocked in next() against time between batches.

Runs inside the user's own interpreter (loaded by the bootstrap's
sitecustomize, see `envdoctor.loop.supervisor`), so it is stdlib-only and
does nothing until torch's DataLoader module is imported: a finder on
`sys.meta_path` notices that import and patches two methods right after it,
and removes itself. `_BaseDataLoaderIter.__next__` is wrapped with two
`perf_counter()` calls — the wait is the time inside `next()`, the step the
time from the previous batch's return to this request — and
`DataLoader.__iter__` notes the loader's own settings on its iterator. Nothing
the loader yields, and nothing training computes, is touched.

Per DataLoader (per process), after `warmup_steps` batches the next `steps`
batches (or `seconds` of them, whichever closes first) form the window; a
batch whose gap held another loader's batches (a validation pass) is left
out, and so is each epoch's first batch (worker start-up). Events, one JSON
line each, go to `events-<pid>.jsonl` in the folder the supervisor named:
`loader` when a loader yields its first batch, `window` when its window
closes, `partial` at exit for a window that never closed. Every interpreter
that loads the observer also appends its pid to `loaded.jsonl`, so the
supervisor can tell "never iterated a DataLoader" from "never observed".

For a loader with workers, a `workers` event names their pids (again when an
epoch starts new ones), with the dataset's length, whether its sampler draws
at random, and the large containers of Python objects the dataset holds (the
smoke test's bounded walk, `inside/loader_hazards.py`, loaded by path); a
`progress` event at most every PROGRESS_S gives the samples the loader has
yielded so far. The supervisor reads each named worker's private memory from
outside against them (DL010: growth a sample, projected to the epoch).

Under `envdoctor run --tune` the loader whose window closes first on rank 0 is
pickled (dataset, sampler, collate_fn and settings) into the events folder,
for the smoke test the supervisor runs afterwards with the measured step as
its consumer.

Under `envdoctor run --prove` the plan holds `inject`: DataLoaders built for
the named dataset class and batch size get those settings (num_workers,
prefetch_factor, persistent_workers) instead of their own.
"""
import atexit
import json
import os
import sys
import threading
import time
import weakref

EVENTS_ENV = "ENVDOCTOR_LOOP_EVENTS"
PLAN_ENV = "ENVDOCTOR_LOOP_PLAN"
_TARGET = "torch.utils.data.dataloader"
#: Seconds between a loader's `progress` events (samples yielded so far), while it has workers.
PROGRESS_S = 0.25

_perf = time.perf_counter
_plan: dict = {}
_loaders: dict = {}
_lock = threading.Lock()
_last: list = [None]


def _write(name, line):
    folder = os.environ.get(EVENTS_ENV)
    if not folder:
        return
    try:
        fd = os.open(os.path.join(folder, name), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, line.encode("utf-8"))
        finally:
            os.close(fd)
    except OSError:
        pass  # the supervisor gone or its folder removed: training goes on unobserved


def _emit(event):
    event.setdefault("pid", os.getpid())
    event.setdefault("time", time.time())
    _write("events-%d.jsonl" % os.getpid(), json.dumps(event, separators=(",", ":")) + "\n")


def _rank(name):
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


def _ranks():
    return {"rank": _rank("RANK"), "local_rank": _rank("LOCAL_RANK"), "world_size": _rank("WORLD_SIZE"),
            "framework": _framework()}


def _threads():
    """torch's intra-op threads in this process: at num_workers=0 the loading runs on them too."""
    torch = sys.modules.get("torch")
    try:
        return int(torch.get_num_threads()) if torch is not None else None
    except Exception:
        return None


def _framework():
    """Who built the loop, so the fix names the setting where the user sets it (the HF Trainer builds the loader)."""
    if "transformers.trainer" in sys.modules:
        return "transformers"
    if "lightning.pytorch" in sys.modules or "pytorch_lightning" in sys.modules:
        return "lightning"
    return None


class _Loader:
    __slots__ = ("key", "settings", "seen", "wait", "step", "t0", "wall0", "last", "done", "first", "epochs",
                 "interrupted", "samples", "pids", "noted", "walked")

    def __init__(self, key, settings):
        self.key = key
        self.settings = settings
        self.seen = 0
        self.wait = []
        self.step = []
        self.t0 = None
        self.wall0 = None
        self.last = None
        self.done = False
        self.first = []
        self.epochs = 0
        self.interrupted = 0
        self.samples = 0
        self.pids = None
        self.noted = 0.0
        self.walked = None


def _start_method(loader):
    context = loader.multiprocessing_context
    if context is not None:
        return context.get_start_method()
    if not loader.num_workers:
        return None
    import multiprocessing

    method = multiprocessing.get_start_method(allow_none=True)
    if method:
        return method
    if sys.platform == "linux":
        return "fork" if sys.version_info < (3, 14) else "forkserver"
    return "spawn"


def _loader_settings(loader):
    return {"num_workers": loader.num_workers, "prefetch_factor": loader.prefetch_factor,
            "pin_memory": bool(loader.pin_memory), "persistent_workers": bool(loader.persistent_workers),
            "batch_size": _batch_size(loader), "start_method": _start_method(loader),
            "dataset": type(loader.dataset).__name__}


def _batch_size(loader):
    """The loader's batch size, or its batch sampler's when it was given one (the Hugging Face Trainer's
    loaders carry a batch sampler and `batch_size=None`)."""
    if loader.batch_size is not None:
        return loader.batch_size
    size = getattr(loader.batch_sampler, "batch_size", None)
    return size if isinstance(size, int) else None


def _iterator_settings(it):
    """What an iterator made without DataLoader.__iter__ (a subclass that builds its own) still tells."""
    return {"num_workers": it._num_workers, "prefetch_factor": getattr(it, "_prefetch_factor", None),
            "pin_memory": bool(it._pin_memory), "persistent_workers": bool(it._persistent_workers),
            "batch_size": getattr(it._index_sampler, "batch_size", None), "start_method": None,
            "dataset": type(it._dataset).__name__}


def _window_closes(state, now):
    steps = _plan.get("steps")
    if steps and len(state.step) >= steps:
        return True
    seconds = _plan.get("seconds")
    return bool(seconds) and now - state.t0 >= seconds and len(state.step) >= 2


def _summary(state, kind):
    event = {"event": kind, "loader": state.key, "settings": state.settings, "seen": state.seen,
             "wait_s": [round(x, 7) for x in state.wait], "step_s": [round(x, 7) for x in state.step],
             "first_batch_s": [round(x, 6) for x in state.first[:8]], "epochs": state.epochs,
             "interrupted": state.interrupted, "window_start": state.wall0, "intra_op_threads": _threads(),
             "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}
    event.update(_ranks())
    return event


def _patch(module):
    base = module._BaseDataLoaderIter
    loader_class = module.DataLoader
    original_next = base.__next__
    original_iter = loader_class.__iter__
    original_init = loader_class.__init__
    warmup = int(_plan.get("warmup_steps") or 0)
    inject = _plan.get("inject")
    tune = bool(_plan.get("tune")) and _rank("RANK") in (None, 0)

    def __iter__(self):
        it = original_iter(self)
        try:
            if "_envdoctor_settings" not in it.__dict__:
                settings = _loader_settings(self)
                if getattr(self, "_envdoctor_injected", False):
                    settings["injected"] = True
                it.__dict__["_envdoctor_settings"] = settings
                if tune:
                    it.__dict__["_envdoctor_loader"] = weakref.ref(self)
        except Exception:
            pass
        return it

    def __next__(self):
        fresh = self._num_yielded == 0
        t0 = _perf()
        try:
            batch = original_next(self)
        except StopIteration:
            state = _loaders.get(id(self._index_sampler))
            if state is not None:
                state.epochs += 1
                state.last = None
            raise
        t1 = _perf()
        key = id(self._index_sampler)
        state = _loaders.get(key)
        if state is None:
            state = _new_loader(key, self)
        previous = _last[0]
        _last[0] = state
        state.seen += 1
        if fresh or state.last is None:
            state.first.append(t1 - t0)
        elif previous is not state:
            state.interrupted += 1
        elif not state.done and state.seen > warmup:
            if state.t0 is None:
                state.t0 = t0
                state.wall0 = time.time() - (t1 - t0)
            state.wait.append(t1 - t0)
            state.step.append(t0 - state.last)
            if _window_closes(state, t1):
                state.done = True
                _emit(_summary(state, "window"))
                if tune:
                    _hand_over(self, state)
        state.last = t1
        _track_workers(self, state, fresh, t1)
        return batch

    def __init__(self, dataset, *args, **kwargs):
        chosen = _injected_arguments(original_init, self, dataset, args, kwargs, inject)
        if chosen is None:
            original_init(self, dataset, *args, **kwargs)
            return
        try:
            original_init(self, **chosen)
        except Exception as exc:  # torch refused the candidate: the loader keeps its own settings
            sys.stderr.write("envdoctor run --prove: kept the DataLoader's own settings: %s\n" % exc)
            object.__setattr__(self, "_DataLoader__initialized", False)
            original_init(self, dataset, *args, **kwargs)
        else:
            object.__setattr__(self, "_envdoctor_injected", True)

    for owner, name, wrapper, original in ((base, "__next__", __next__, original_next),
                                           (loader_class, "__iter__", __iter__, original_iter),
                                           (loader_class, "__init__", __init__, original_init)):
        if name == "__init__" and not inject:
            continue
        wrapper.__dict__["__wrapped__"] = original  # (as functools.wraps would: the original stays reachable)
        setattr(owner, name, wrapper)


def _injected_arguments(original_init, loader, dataset, args, kwargs, inject):
    """The arguments with the candidate settings (--prove), or None for a loader they are not meant for."""
    if not inject or type(dataset).__name__ != inject.get("dataset"):
        return None
    import inspect

    try:
        bound = inspect.signature(original_init).bind(loader, dataset, *args, **kwargs)
    except TypeError:
        return None
    chosen = dict(bound.arguments)
    chosen.pop("self", None)
    chosen.update(chosen.pop("kwargs", None) or {})
    if chosen.get("batch_size", 1) != inject.get("batch_size"):
        return None
    workers = int(inject.get("num_workers") or 0)
    chosen["num_workers"] = workers
    chosen["persistent_workers"] = bool(inject.get("persistent_workers")) and workers > 0
    chosen["prefetch_factor"] = inject.get("prefetch_factor") if workers > 0 else None
    if workers == 0:
        chosen["multiprocessing_context"] = None
    return chosen


def _track_workers(it, state, fresh, now):
    """DL010's side in the user's process: who the workers are, and how many samples the loader yielded."""
    try:
        before = state.samples
        state.samples += state.settings.get("batch_size") or 1
        if fresh:
            pids = [w.pid for w in getattr(it, "_workers", None) or []]
            if pids and pids != state.pids:
                state.pids = pids
                _emit({"event": "workers", "loader": state.key, "pids": pids, "samples": before,
                       **_dataset_shape(it, state)})
        if state.pids and now - state.noted >= PROGRESS_S:
            state.noted = now
            _emit({"event": "progress", "loader": state.key, "samples": state.samples})
    except Exception:
        pass  # observing must never break the loop


def _dataset_shape(it, state):
    """The dataset's length, whether the order is random, and (once a loader) its large Python containers."""
    dataset = it._dataset
    try:
        length = len(dataset)
    except Exception:
        length = None
    sampler = getattr(getattr(it, "_index_sampler", None), "sampler", None)
    if state.walked is None:
        state.walked = _walk_dataset(dataset)
    return {"length": length, "shuffled": type(sampler).__name__ == "RandomSampler", "hazards": state.walked}


def _walk_dataset(dataset):
    """The smoke test's bounded walk (inside/loader_hazards.py, loaded by path: the standard library only)."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "loader_hazards.py")
    try:
        spec = importlib.util.spec_from_file_location("envdoctor_loop_hazards", path)
        if spec is None or spec.loader is None:
            return {"error": "cannot load %s" % path}
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        found = module.walk([("dataset", dataset)])
    except Exception as exc:
        return {"error": "%s: %s" % (type(exc).__name__, str(exc)[:200])}
    return {"containers": found["containers"], "python_bytes": found["python_bytes"],
            "objects_visited": found["objects_visited"], "cut": found["cut"]}


_handed: list = []


def _hand_over(it, state):
    """--tune: the loader whose window closed first, pickled for the smoke test (once, rank 0 only)."""
    if _handed:
        return
    _handed.append(state.key)
    ref = it.__dict__.get("_envdoctor_loader")
    loader = ref() if ref is not None else None
    event = {"event": "tune", "loader": state.key, "executable": sys.executable, "prefix": sys.prefix,
             "sys_path": [p or os.getcwd() for p in sys.path], "main_path": None}
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    if main_file:
        event["main_path"] = os.path.abspath(main_file)
    if loader is None:
        event["error"] = "the DataLoader was built by a subclass that makes its own iterator"
        _emit(event)
        return
    import pickle

    path = os.path.join(os.environ.get(EVENTS_ENV) or ".", "tune-%d.pkl" % os.getpid())
    try:
        from envdoctor_loader_settings import loader_settings

        kwargs, description = loader_settings(loader)
        payload = {"dataset": loader.dataset, "kwargs": kwargs, "description": description}
        with open(path, "wb") as handle:
            pickle.dump(payload, handle, protocol=pickle.HIGHEST_PROTOCOL)
        event["path"] = path
    except Exception as exc:
        event["error"] = "the DataLoader cannot be pickled for the smoke test: %s: %s" % (type(exc).__name__, exc)
        try:
            os.unlink(path)
        except OSError:
            pass
    _emit(event)


def _new_loader(key, it):
    with _lock:
        state = _loaders.get(key)
        if state is None:
            settings = it.__dict__.get("_envdoctor_settings") or _iterator_settings(it)
            state = _loaders[key] = _Loader(key, settings)
            event = {"event": "loader", "loader": key, "settings": settings}
            event.update(_ranks())
            _emit(event)
    return state


class _Watcher:
    """Patches torch.utils.data.dataloader right after it is first imported, and only then."""

    def find_spec(self, name, path=None, target=None):
        if name != _TARGET:
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        from importlib.util import find_spec

        spec = find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            try:
                _patch(module)
            except Exception as exc:
                sys.stderr.write("envdoctor run: could not observe DataLoaders: %s: %s\n" % (type(exc).__name__, exc))

        spec.loader.exec_module = exec_and_patch  # type: ignore[method-assign]  # wrapped on this one loader object, on purpose
        return spec


def _at_exit():
    for state in list(_loaders.values()):
        if not state.done:
            _emit(_summary(state, "partial"))


def install():
    """Start observing (called once, by the bootstrap's sitecustomize)."""
    global _plan
    folder = os.environ.get(EVENTS_ENV)
    if not folder:
        return
    _plan = json.loads(os.environ.get(PLAN_ENV) or "{}")
    _write("loaded.jsonl", json.dumps({"pid": os.getpid(), "ppid": os.getppid(), "time": time.time()}) + "\n")
    if _TARGET in sys.modules:
        _patch(sys.modules[_TARGET])
    else:
        sys.meta_path.insert(0, _Watcher())
    atexit.register(_at_exit)
