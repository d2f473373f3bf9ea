"""What will end the run later, read before any worker starts: open native handles (DL011), the Python
containers that make forked workers' memory grow (DL010's evidence), and OpenCV in the loader's code (SYS007).

Part of the standalone runner (see loader_runner.py): the standard library at
import time. A bounded walk of the attributes of the dataset, the sampler,
collate_fn and worker_init_fn (depth, objects visited and elements per
container all capped) finds

- open handles, told by what they are, not by attribute names: h5py objects
  (their type's module), LMDB environments, transactions and cursors, sqlite3
  connections, zip and tar archives, sockets, open file objects, and anything
  else whose `fileno()` answers a live descriptor (the standard streams and
  multiprocessing's own objects, which are meant to cross a fork, excepted);
- large containers of Python objects (lists, tuples, dicts, sets, deques,
  NumPy arrays of dtype object): their length and an approximate size from a
  sample of their elements. Every access to such an object writes its
  reference count, so a forked worker copies the pages it reads.

Only `type(...)`, `getattr` on instance attributes and the handles' own
cheap status calls run on the user's objects; nothing is read from a handle.
"""
from __future__ import annotations

import ast
import functools
import inspect
import sys
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Protocol, TypedDict, TypeGuard

if TYPE_CHECKING:  # the runner's parts import each other by their top-level names (see loader_runner.py)
    from loader_session import Session

#: How deep the walk goes from each root, how many objects it visits in all, how many elements of one
#: container it descends into.
MAX_DEPTH = 5
MAX_OBJECTS = 3000
MAX_ELEMENTS = 64
#: A container is reported from this many elements on; at most this many are reported (largest first).
MIN_CONTAINER_LEN = 10_000
MAX_CONTAINERS = 5
#: Elements sampled (evenly spread) to size a container.
SIZE_SAMPLE = 200
#: Handles reported at most.
MAX_HANDLES = 20

_LEAVES = (str, bytes, bytearray, int, float, complex, bool, type(None), range, memoryview)


class Handle(TypedDict):
    """An open native handle reachable from a root: where, what, and the file it holds when it says."""
    path: str
    kind: str
    file: str | None


class Container(TypedDict):
    """A large container of Python objects: where, its type, length, approximate bytes and objects."""
    path: str
    type: str
    length: int
    approx_bytes: int
    objects: int


class _Walked(TypedDict):
    handles: list[Handle]
    containers: list[Container]
    python_bytes: int
    objects_visited: int
    cut: bool


class Hazards(_Walked, total=False):
    """The walk's result (`hazards`); `before_workers` adds the start method."""
    start_method: str


class SetNumThreadsCall(TypedDict):
    """A `cv2.setNumThreads(...)` call in the loader's code: where, file, line, its literal argument."""
    where: str
    file: str
    line: int
    value: object


class OpenCV(TypedDict):
    version: object
    main_threads: int | None
    set_num_threads_calls: list[SetNumThreadsCall]


class _Flat(Protocol):
    def __getitem__(self, index: int, /) -> object: ...


class _ObjectArray(Protocol):
    """What is read from a NumPy array of dtype object: its size and its flat view."""
    @property
    def size(self) -> int: ...
    @property
    def flat(self) -> _Flat: ...


def _module_of(obj: object) -> str:
    return getattr(type(obj), "__module__", "") or ""


def _safe(call: Callable[[], object]) -> bool:
    """Whether a status call answers without raising (an LMDB object raises once closed)."""
    try:
        call()
    except Exception:
        return False
    return True


def _lmdb_handle(obj: object) -> tuple[str, str | None] | None:
    lmdb = sys.modules.get("lmdb")
    if lmdb is None:
        return None
    for name, probe in (("Environment", "path"), ("Transaction", "id"), ("Cursor", "key")):
        cls = getattr(lmdb, name, None)
        if isinstance(cls, type) and isinstance(obj, cls):
            if not _safe(getattr(obj, probe)):
                return None
            detail = getattr(obj, "path", None) if name == "Environment" else None
            return f"lmdb.{name}", str(detail()) if callable(detail) else None
    return None


def _h5py_handle(obj: object) -> tuple[str, str | None] | None:
    if not _module_of(obj).startswith("h5py._hl") or not hasattr(obj, "id"):  # File, Group, Dataset, Datatype
        return None
    try:
        if not bool(obj):  # an h5py object is falsy once its file is closed
            return None
        filename = getattr(getattr(obj, "file", None), "filename", None)
    except Exception:
        return None
    return f"h5py.{type(obj).__name__}", str(filename) if filename else None


def _stdlib_handle(obj: object) -> tuple[str, str | None] | None:
    modules = sys.modules
    sqlite3 = modules.get("sqlite3")
    if sqlite3 is not None and isinstance(obj, sqlite3.Connection):
        return ("sqlite3.Connection", None) if _safe(lambda: obj.total_changes) else None
    zipfile = modules.get("zipfile")
    if zipfile is not None and isinstance(obj, zipfile.ZipFile):
        return ("zipfile.ZipFile", str(obj.filename)) if getattr(obj, "fp", None) is not None else None
    tarfile = modules.get("tarfile")
    if tarfile is not None and isinstance(obj, tarfile.TarFile):
        return ("tarfile.TarFile", str(obj.name)) if not getattr(obj, "closed", True) else None
    socket = modules.get("socket")
    if socket is not None and isinstance(obj, socket.socket):
        return ("socket.socket", None) if _live_fd(obj) is not None else None
    return None


def _live_fd(obj: object) -> int | None:
    """The descriptor `obj.fileno()` answers, when it is a live one (not a standard stream).

    Only a `fileno` its class defines is called: a proxy whose `__getattr__` answers every name (an RPC
    client, a mock) must not be made to call out."""
    if not callable(getattr(type(obj), "fileno", None)):
        return None
    fileno = getattr(obj, "fileno", None)
    if not callable(fileno) or getattr(obj, "closed", False) is True:
        return None
    try:
        fd = fileno()
    except Exception:
        return None
    return fd if isinstance(fd, int) and fd > 2 else None


def _standard_stream(obj: object) -> bool:
    return any(obj is stream for stream in (sys.stdin, sys.stdout, sys.stderr,
                                            sys.__stdin__, sys.__stdout__, sys.__stderr__))


def handle_kind(obj: object) -> tuple[str, str | None] | None:
    """(kind, file or None) when `obj` is an open native handle, else None."""
    if isinstance(obj, (type, *_LEAVES)) or _module_of(obj).startswith(("multiprocessing", "mmap", "torch")) \
            or _standard_stream(obj):
        return None
    for probe in (_h5py_handle, _lmdb_handle, _stdlib_handle):
        found = probe(obj)
        if found is not None:
            return found
    fd = _live_fd(obj)
    if fd is None:
        return None
    name = getattr(obj, "name", None)
    kind = "file" if _module_of(obj) in ("_io", "io") else f"{_module_of(obj)}.{type(obj).__qualname__}"
    return kind, str(name) if isinstance(name, (str, bytes)) else None


def _is_object_array(obj: object) -> TypeGuard[_ObjectArray]:
    if _module_of(obj) != "numpy":
        return False  # never ask anything else for a dtype: a closed h5py dataset raises
    try:
        return bool(getattr(getattr(obj, "dtype", None), "hasobject", False))
    except Exception:
        return False


def _element_size(item: object) -> tuple[int, int]:
    """(bytes, objects) of one element and, one level down, what it holds."""
    size, count = sys.getsizeof(item), 1
    inner: Iterable[object] = ()
    if isinstance(item, dict):
        inner = [*item.keys(), *item.values()]
    elif isinstance(item, (list, tuple, set, frozenset)):
        inner = item
    elif hasattr(item, "__dict__") and not isinstance(item, type):
        inner = list(vars(item).values())
        size += sys.getsizeof(vars(item))
        count += 1
    for part in list(inner)[:64]:
        size += sys.getsizeof(part)
        count += 1
    return size, count


def _sample(obj: object, length: int) -> list[object]:
    step = max(1, length // SIZE_SAMPLE)
    items: list[object] = []
    if isinstance(obj, dict):
        for k, (key, value) in enumerate(obj.items()):
            if k % step == 0:
                items.append((key, value))
            if len(items) >= SIZE_SAMPLE:
                break
        return items
    if isinstance(obj, (list, tuple)):
        return [obj[i] for i in range(0, length, step)][:SIZE_SAMPLE]
    if _is_object_array(obj):
        flat = obj.flat
        return [flat[i] for i in range(0, length, step)][:SIZE_SAMPLE]
    if not isinstance(obj, Iterable):
        return items
    for k, item in enumerate(obj):
        if k % step == 0:
            items.append(item)
        if len(items) >= SIZE_SAMPLE:
            break
    return items


def describe_container(obj: object, path: str) -> Container | None:
    """Length, approximate bytes and objects of a large container of Python objects, else None."""
    if isinstance(obj, (list, tuple, dict, set, frozenset, deque)):
        length = len(obj)
    elif _is_object_array(obj):
        length = int(obj.size)
    else:
        return None
    if length < MIN_CONTAINER_LEN:
        return None
    sample = _sample(obj, length)
    sizes = [_element_size(item) for item in sample] or [(0, 0)]
    per_bytes = sum(s for s, _ in sizes) / len(sizes)
    per_objects = sum(c for _, c in sizes) / len(sizes)
    return {"path": path, "type": f"{_module_of(obj)}.{type(obj).__qualname__}".removeprefix("builtins."),
            "length": length, "approx_bytes": int(sys.getsizeof(obj) + length * per_bytes),
            "objects": int(length * per_objects)}


def _children(obj: object, path: str) -> list[tuple[object, str]]:
    """The objects one step down from `obj`, with the path that reaches each."""
    out: list[tuple[object, str]] = []
    if isinstance(obj, dict):
        for k, (key, value) in enumerate(obj.items()):
            if k >= MAX_ELEMENTS:
                break
            out.append((value, f"{path}[{key!r}]" if isinstance(key, (str, int)) else f"{path}[…]"))
        return out
    if isinstance(obj, (list, tuple, set, frozenset, deque)):
        for k, item in enumerate(obj):
            if k >= MAX_ELEMENTS:
                break
            out.append((item, f"{path}[{k}]"))
        return out
    if inspect.ismethod(obj):
        return [(obj.__self__, f"{path}.__self__")]
    if inspect.isfunction(obj):
        names = obj.__code__.co_freevars
        for name, cell in zip(names, obj.__closure__ or ()):
            try:
                out.append((cell.cell_contents, f"{path}.<closure {name}>"))
            except ValueError:
                continue
        return out
    if _module_of(obj) == "functools" and type(obj).__name__ == "partial" and isinstance(obj, functools.partial):
        out.append((obj.func, f"{path}.func"))
        out += [(a, f"{path}.args[{k}]") for k, a in enumerate(obj.args[:MAX_ELEMENTS])]
        out += [(v, f"{path}.keywords[{k!r}]") for k, v in list(obj.keywords.items())[:MAX_ELEMENTS]]
        return out
    try:
        attributes = dict(vars(obj))
    except TypeError:
        attributes = {}
    for slot in getattr(type(obj), "__slots__", ()) or ():
        if isinstance(slot, str) and slot not in attributes and hasattr(obj, slot):
            attributes[slot] = getattr(obj, slot, None)
    for k, (name, value) in enumerate(attributes.items()):
        if k >= MAX_ELEMENTS:
            break
        out.append((value, f"{path}.{name}"))
    return out


def _opaque(obj: object) -> bool:
    """Objects the walk does not look inside: leaves, modules, classes, arrays and tensors."""
    if isinstance(obj, _LEAVES) or inspect.ismodule(obj) or isinstance(obj, type):
        return True
    module = _module_of(obj)
    return module.startswith(("torch", "numpy", "multiprocessing", "threading", "logging", "h5py", "lmdb"))


def walk(roots: list[tuple[str, object]]) -> Hazards:
    """Open handles and large Python containers reachable from the roots (bounded; see the module)."""
    handles: list[Handle] = []
    containers: list[Container] = []
    seen: set[int] = set()
    queue: deque[tuple[object, str, int]] = deque((obj, name, 0) for name, obj in roots if obj is not None)
    visited = 0
    cut = False
    while queue:
        obj, path, depth = queue.popleft()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        visited += 1
        if visited > MAX_OBJECTS:
            cut = True
            break
        try:
            kind = handle_kind(obj)
        except Exception:
            kind = None
        if kind is not None:
            if len(handles) < MAX_HANDLES:
                handles.append({"path": path, "kind": kind[0], "file": kind[1]})
            continue  # what a handle holds inside is the library's business
        try:
            described = describe_container(obj, path)
        except Exception:
            described = None
        if described is not None:
            containers.append(described)
        if depth >= MAX_DEPTH or (_opaque(obj) and not _is_object_array(obj)):
            continue
        try:
            children = _children(obj, path)
        except Exception:
            continue
        queue.extend((child, child_path, depth + 1) for child, child_path in children
                     if not isinstance(child, _LEAVES))
    containers.sort(key=lambda c: -c["approx_bytes"])
    return {"handles": handles, "containers": containers[:MAX_CONTAINERS],
            "python_bytes": sum(c["approx_bytes"] for c in _outermost(containers)),
            "objects_visited": min(visited, MAX_OBJECTS), "cut": cut}


def _outermost(containers: list[Container]) -> list[Container]:
    """Containers not held inside another one reported (a dict of lists is counted once)."""
    paths = [c["path"] for c in containers]
    return [c for c in containers
            if not any(c["path"] != p and c["path"].startswith(p) and c["path"][len(p)] in ".[" for p in paths)]


# -- OpenCV (SYS007) -----------------------------------------------------

def opencv_calls(objects: Iterable[object]) -> list[SetNumThreadsCall]:
    """`cv2.setNumThreads(...)` calls in the source of the modules that define these objects (the dataset's
    class, worker_init_fn …): where (module level or the function it is in), file, line, argument."""
    calls: list[SetNumThreadsCall] = []
    files: set[str] = set()
    for obj in objects:
        module = sys.modules.get(getattr(obj, "__module__", None) or _module_of(obj))
        filename = getattr(module, "__file__", None)
        if not filename or filename in files or not str(filename).endswith(".py") \
                or str(getattr(module, "__name__", "")).startswith(("torch", "numpy")):
            continue
        files.add(filename)
        try:
            with open(filename, encoding="utf-8", errors="replace") as fh:
                tree = ast.parse(fh.read(), filename)
        except (OSError, SyntaxError, ValueError):
            continue
        calls += _set_num_threads(tree, filename)
    return calls[:10]


def _set_num_threads(tree: ast.AST, filename: str) -> list[SetNumThreadsCall]:
    found: list[SetNumThreadsCall] = []

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = where
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inner = child.name
            if isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute) \
                    and child.func.attr == "setNumThreads":
                value = child.args[0] if child.args else None
                found.append({"where": where, "file": filename, "line": child.lineno,
                              "value": value.value if isinstance(value, ast.Constant) else None})
            visit(child, inner)

    visit(tree, "module level")
    return found


def opencv_facts(roots: list[tuple[str, object]]) -> OpenCV | None:
    """OpenCV as the loader's code has it, before workers start: None when nothing imported cv2 and the
    code calls no setNumThreads (cv2 imported in `__getitem__` shows in the workers: loader_memory)."""
    objects = [type(obj) if not inspect.isfunction(obj) else obj for _, obj in roots if obj is not None]
    calls = opencv_calls(objects)
    cv2 = sys.modules.get("cv2")
    if cv2 is None and not calls:
        return None
    return {"version": getattr(cv2, "__version__", None), "main_threads": opencv_threads(),
            "set_num_threads_calls": calls}


def opencv_threads() -> int | None:
    """`cv2.getNumThreads()` in this process (the runner's or a worker's) once OpenCV is imported, else None."""
    cv2 = sys.modules.get("cv2")
    if cv2 is None:
        return None
    try:
        return int(cv2.getNumThreads())
    except Exception:  # a broken or stub cv2: no figure, never a failed measurement
        return None


def before_workers(s: Session) -> None:
    """The walk (result `hazards`) and OpenCV as the code has it (result `opencv`), before any worker
    starts; `s` is the runner's Session."""
    kwargs = s.user_kwargs or {}
    roots = [("dataset", s.dataset)] + [(key, kwargs.get(key)) for key in
                                        ("sampler", "batch_sampler", "collate_fn", "worker_init_fn")]
    s.guarded(max(1.0, min(5.0, s.left() - 1.0)), "walking the dataset's attributes", "hazards",
              check="open handles and Python containers (DL010, DL011)")
    try:
        found = walk(roots)
        found["start_method"] = s.start_method
        opencv = opencv_facts(roots)
    except Exception as exc:  # the user's objects may answer anything; the walk is no reason to stop
        s.events.skip("open handles and Python containers (DL010, DL011)",
                      f"walking the dataset raised {type(exc).__name__}: {str(exc)[:200]}")
        return
    finally:
        s.watchdog.disarm()
    s.events.result("hazards", found)
    if opencv is not None:
        s.events.result("opencv", opencv)


# -- the dataset as built, for every worker start (fork) -----------------

#: How deep from the dataset, and how many objects at most, the state kept as built reaches.
STATE_DEPTH = 2
STATE_OBJECTS = 64


def _kept_as_built(obj: object) -> bool:
    """Objects whose attributes are kept: the user's, and torch's dataset wrappers (Subset …)."""
    if isinstance(obj, _LEAVES) or inspect.ismodule(obj) or isinstance(obj, type) or inspect.isroutine(obj):
        return False
    module = _module_of(obj)
    if module.startswith("torch.utils.data"):
        return True
    return not module.startswith(("torch", "numpy", "multiprocessing", "threading", "logging", "h5py", "lmdb")) \
        and handle_kind(obj) is None


def built_state(dataset: object) -> list[tuple[object, dict[str, object]]]:
    """The instance attributes of the dataset and of the objects it holds (bounded: STATE_DEPTH,
    STATE_OBJECTS), as they are right after the dataset is built: shallow copies of their `__dict__`s.

    The smoke test reads samples in its own process (num_workers=0) before and between worker runs;
    a dataset that opens its handles lazily, on first `__getitem__` (the right way), then holds them
    open in this process, and forked workers inherit them, which training never does (its main process
    reads no sample before workers start). LMDB even refuses to open, in the worker, an environment
    the process it was forked from holds. `restore` puts these attributes back before workers start.
    """
    kept: list[tuple[object, dict[str, object]]] = []
    seen: set[int] = set()
    queue: deque[tuple[object, int]] = deque([(dataset, 0)])
    while queue and len(kept) < STATE_OBJECTS:
        obj, depth = queue.popleft()
        if id(obj) in seen or not _kept_as_built(obj):
            continue
        seen.add(id(obj))
        attributes = getattr(obj, "__dict__", None)
        if not isinstance(attributes, dict):
            continue
        kept.append((obj, dict(attributes)))
        if depth + 1 <= STATE_DEPTH:
            queue.extend((value, depth + 1) for value in list(attributes.values())[:MAX_ELEMENTS]
                         if not isinstance(value, (*_LEAVES, list, tuple, dict, set, frozenset, deque)))
    return kept


def restore(state: list[tuple[object, dict[str, object]]]) -> list[str]:
    """Put the attributes `built_state` kept back where reading samples in this process changed them;
    the names of those changed (`Type.attribute`). What they held (a handle opened lazily) is released
    here, before workers fork."""
    changed: list[str] = []
    for obj, saved in state:
        current = obj.__dict__
        names = [k for k in current if k not in saved or current[k] is not saved[k]]
        names += [k for k in saved if k not in current]
        if not names:
            continue
        changed += [f"{type(obj).__qualname__}.{k}" for k in names]
        for k in names:
            if k in saved:
                current[k] = saved[k]
            else:
                del current[k]
    if changed:
        import gc

        gc.collect()  # handles held in reference cycles are closed now, not after the fork
    return changed
