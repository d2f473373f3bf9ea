"""The torch import probe, run by the TARGET environment's own interpreter.

A standalone script: standard library only at the top level, and it never
imports envdoctor (the target may not have it, and must not see it). Run as
`python -B torch_probe.py` it prints one line, `json.dumps(collect())`; the
loader stage imports it from this folder and calls `collect()` itself.

It imports numpy and torch the way a training script does, recording what
they print and warn while importing (this is how "A module that was compiled
using NumPy 1.x cannot be run in NumPy 2.x" is seen), then reads torch's
build (CUDA/ROCm, cuDNN), whether CUDA initialises (and the error when it does
not), the devices, the start method, the sharing strategy, the thread counts,
and, through threadpoolctl, the BLAS and OpenMP libraries actually loaded.

A failure is a fact in the result, never an exception out of `collect()`.
Two things for a caller that imports this module: call `collect()` before
importing torch yourself (what torch prints at import is printed only once),
and know that while it imports numpy and torch it points file descriptors 1
and 2 at a temporary file, restoring them afterwards.

threadpoolctl may be missing from the target. envdoctor then passes the path
of its own copy in ENVDOCTOR_THREADPOOLCTL_PATH and it is loaded from that
single file, under its own name, without touching sys.path, so nothing else
of envdoctor's environment leaks into the target's imports.
"""
import json
import os
import sys
import tempfile
import time
import traceback
import warnings

THREADPOOLCTL_ENV = "ENVDOCTOR_THREADPOOLCTL_PATH"
#: Environment variables that change threading or OpenMP behaviour, reported as set.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                    "KMP_DUPLICATE_LIB_OK", "MKL_THREADING_LAYER", "KMP_AFFINITY", "OMP_PROC_BIND")
_MAX_OUTPUT = 20000


class _CapturedOutput:
    """Everything written to stderr/stdout while a block runs: Python-level and C-level (fd 1, 2)."""

    def __enter__(self):
        self.file = tempfile.TemporaryFile(mode="w+b")
        self.saved = []
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        for fd in (1, 2):
            try:
                self.saved.append((fd, os.dup(fd)))
                os.dup2(self.file.fileno(), fd)
            except OSError:
                pass
        self.py_streams = (sys.stdout, sys.stderr)
        text = open(self.file.fileno(), "w", closefd=False, encoding="utf-8", errors="replace",
                    buffering=1)
        self.text_stream = text
        sys.stdout = sys.stderr = text
        self.warnings = warnings.catch_warnings(record=True)
        self.caught = self.warnings.__enter__()
        warnings.simplefilter("always")
        return self

    def __exit__(self, *exc):
        self.warnings.__exit__(*exc)
        try:
            self.text_stream.flush()
        except Exception:
            pass
        sys.stdout, sys.stderr = self.py_streams
        for fd, copy in self.saved:
            os.dup2(copy, fd)
            os.close(copy)
        self.file.seek(0)
        self.output = self.file.read().decode("utf-8", "replace")[-_MAX_OUTPUT:]
        self.file.close()
        return False

    def warning_list(self):
        return [{"category": w.category.__name__, "message": str(w.message)[:2000],
                 "filename": w.filename} for w in self.caught]


def _error_text(exc):
    return "%s: %s" % (type(exc).__name__, exc)


def _import(name, result, key):
    """Import `name`, recording seconds, printed output, warnings and the error if any."""
    start = time.monotonic()
    module = None
    with _CapturedOutput() as captured:
        try:
            module = __import__(name)
        except BaseException as exc:  # SystemExit and KeyboardInterrupt from a broken package too
            result[key + "_import_error"] = _error_text(exc)
            result[key + "_import_traceback"] = traceback.format_exc(limit=8)[-4000:]
    result[key + "_import_seconds"] = round(time.monotonic() - start, 3)
    result[key + "_import_output"] = captured.output
    result[key + "_import_warnings"] = captured.warning_list()
    return module


def _threadpoolctl():
    try:
        import threadpoolctl
        return threadpoolctl, "target"
    except ImportError:
        pass
    path = os.environ.get(THREADPOOLCTL_ENV)
    if not path or not os.path.isfile(path):
        return None, None
    import importlib.util
    spec = importlib.util.spec_from_file_location("threadpoolctl", path)
    if spec is None or spec.loader is None:
        return None, None
    module = importlib.util.module_from_spec(spec)
    sys.modules["threadpoolctl"] = module
    try:
        spec.loader.exec_module(module)
    except Exception:
        sys.modules.pop("threadpoolctl", None)
        return None, None
    return module, "envdoctor"


def _native_libraries(result):
    module, source = _threadpoolctl()
    if module is None:
        result["threadpools"] = None
        result["threadpools_error"] = "threadpoolctl is not available in the target environment"
        return
    result["threadpoolctl_source"] = source
    try:
        pools = [dict(pool) for pool in module.threadpool_info()]
        for pool in pools:
            # Two names (symlinks) of one library file are one runtime, not two.
            if isinstance(pool.get("filepath"), str):
                pool["realpath"] = os.path.realpath(pool["filepath"])
        result["threadpools"] = pools
    except Exception as exc:
        result["threadpools"] = None
        result["threadpools_error"] = _error_text(exc)


def _default_start_method():
    import multiprocessing
    chosen = multiprocessing.get_start_method(allow_none=True)
    if chosen:
        return chosen, True
    # The first listed method is the platform default; asking get_start_method()
    # without allow_none would fix the context for whoever imported this module.
    return multiprocessing.get_all_start_methods()[0], False


def _arch_list(torch, cuda):
    """The architectures torch was compiled for: sm_XY (machine code), compute_XY (PTX).

    torch.cuda.get_arch_list() answers [] whenever CUDA does not initialise; the
    compiled flags it reads are asked for directly then, so a GPU torch cannot
    use still has its arch list to compare with.
    """
    try:
        arches = list(torch.cuda.get_arch_list())
        source = "torch.cuda.get_arch_list"
    except Exception:
        arches, source = [], None
    if not arches:
        flags = getattr(torch._C, "_cuda_getArchFlags", None)
        try:
            text = flags() if flags is not None else None
        except Exception:
            text = None
        if text:
            arches, source = str(text).split(), "torch._C._cuda_getArchFlags"
    cuda["arch_list"] = [str(arch) for arch in arches]
    cuda["arch_list_source"] = source


def _cuda(torch, result):
    cuda = {"built": getattr(torch.version, "cuda", None), "hip": getattr(torch.version, "hip", None)}
    devices = []
    with _CapturedOutput() as captured:
        try:
            cuda["available"] = bool(torch.cuda.is_available())
        except Exception as exc:
            cuda["available"] = False
            cuda["error"] = _error_text(exc)
        try:
            count = int(torch.cuda.device_count())
        except Exception as exc:
            count = 0
            cuda.setdefault("error", _error_text(exc))
        cuda["device_count"] = count
        if not cuda["available"] and (cuda["built"] or cuda["hip"]) and "error" not in cuda:
            # is_available() only says False; init() says why (no driver, driver too old …).
            try:
                torch.cuda.init()
            except Exception as exc:
                cuda["error"] = _error_text(exc)
        if cuda["available"]:
            for index in range(count):
                try:
                    # Asking the capability initialises CUDA: torch warns here when the
                    # device's architecture is not in its build ("not compatible with the
                    # current PyTorch installation"), and the warning is kept.
                    major, minor = torch.cuda.get_device_capability(index)
                    devices.append({"index": index, "name": str(torch.cuda.get_device_name(index)),
                                    "capability": "%d.%d" % (major, minor)})
                except Exception as exc:
                    devices.append({"index": index, "error": _error_text(exc)})
        _arch_list(torch, cuda)
    cuda["devices"] = devices
    cuda["init_output"] = captured.output
    cuda["init_warnings"] = captured.warning_list()
    result["cuda"] = cuda


def _mps(torch, result):
    """Apple's Metal backend: built into this torch (macOS wheels), usable here (Apple silicon, macOS 12.3+)."""
    try:
        backend = torch.backends.mps
        result["mps"] = {"built": bool(backend.is_built()), "available": bool(backend.is_available())}
    except Exception as exc:
        result["mps"] = {"built": None, "available": None, "error": _error_text(exc)}


def captured_warnings(result, key):
    """The warnings recorded while importing `key` (a list of dicts)."""
    caught = result.get(key + "_import_warnings")
    return list(caught) if isinstance(caught, list) else []


def collect():
    """Everything the probe learns, as a JSON-able dict. Never raises."""
    result = {
        "probe_version": 1,
        "python": "%d.%d.%d" % sys.version_info[:3],
        "executable": sys.executable,
        "pid": os.getpid(),
        "environ": {name: os.environ[name] for name in THREAD_VARIABLES if name in os.environ},
        # Already imported by the caller: what torch printed while importing is lost to us.
        "torch_preimported": "torch" in sys.modules,
    }
    numpy = _import("numpy", result, "numpy")
    if numpy is not None:
        result["numpy_version"] = getattr(numpy, "__version__", None)
        result["numpy_file"] = getattr(numpy, "__file__", None)
    torch = _import("torch", result, "torch")
    # The names the rules read, whatever was printed where.
    result["import_error"] = result.get("torch_import_error")
    caught = captured_warnings(result, "numpy") + captured_warnings(result, "torch")
    result["import_warnings"] = [w["message"] for w in caught]
    result["import_output"] = (str(result["numpy_import_output"]) + str(result["torch_import_output"]))[-_MAX_OUTPUT:]
    if torch is not None:
        try:
            _describe_torch(torch, result)
        except Exception as exc:
            result["describe_error"] = _error_text(exc)
    try:
        result["start_method"], result["start_method_set"] = _default_start_method()
    except Exception as exc:
        result["start_method"] = None
        result["start_method_error"] = _error_text(exc)
    _native_libraries(result)
    return result


def _describe_torch(torch, result):
    result["version"] = getattr(torch, "__version__", None)
    result["file"] = getattr(torch, "__file__", None)
    version = getattr(torch, "version", None)
    result["git_version"] = getattr(version, "git_version", None)
    result["debug"] = getattr(version, "debug", None)
    try:
        result["cudnn"] = torch.backends.cudnn.version()
    except Exception as exc:
        result["cudnn"] = None
        result["cudnn_error"] = _error_text(exc)
    _cuda(torch, result)
    _mps(torch, result)
    try:
        import torch.multiprocessing as tmp
        result["sharing_strategy"] = tmp.get_sharing_strategy()
        result["sharing_strategies"] = sorted(tmp.get_all_sharing_strategies())
    except Exception as exc:
        result["sharing_strategy"] = None
        result["sharing_strategy_error"] = _error_text(exc)
    try:
        result["intra_op_threads"] = torch.get_num_threads()
        result["inter_op_threads"] = torch.get_num_interop_threads()
    except Exception as exc:
        result["threads_error"] = _error_text(exc)
    try:
        result["parallel_info"] = torch.__config__.parallel_info()[:3000]
    except Exception:
        result["parallel_info"] = None


if __name__ == "__main__":
    # One line of JSON, after whatever the imports printed themselves.
    sys.stdout.write("\n" + json.dumps(collect()) + "\n")
