"""PKG rules seen only by importing torch in the target (the import probe).

PKG008 numpy-abi-mismatch and PKG010 torch-import-failed read the `torch`
section's probe: what importing numpy, then torch, printed and raised in the
target interpreter.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

from envdoctor.facts import Facts
from envdoctor.remedies.install_commands import advice
from envdoctor.remedies.torch_install import install_text, led, reinstall_torch, wheel_index
from envdoctor.rules import Hit

if TYPE_CHECKING:  # pragma: no cover
    from envdoctor.facts.torch import TorchProbe

#: Messages numpy and torch print when an extension meets a NumPy of the other ABI, as
#: numpy's own headers (numpy/_core/include/numpy/__multiarray_api.h, _import_array)
#: and numpy/core/_multiarray_umath.py word them. Which way round is read from the
#: message: "module compiled against ABI version 0x1000009 but this version of numpy is
#: 0x2000000" is raised when the extension's ABI is the OLDER one (NPY_VERSION <
#: PyArray_GetNDArrayCVersion()); "API version X but this version of numpy is Y" (NumPy
#: 1.x headers) and "compiled against NumPy C-API version X (NumPy V) but the running
#: NumPy has C-API version Y" (NumPy 2 headers) when the extension is the NEWER one.
NUMPY_ABI_PATTERNS = (
    ("numpy1-extension-on-numpy2", re.compile(r"compiled using NumPy 1\.x cannot be run in\s+NumPy [\d.]+")),
    ("numpy1-extension-on-numpy2", re.compile(r"_ARRAY_API not found")),
    ("numpy1-extension-on-numpy2", re.compile(r"module compiled against ABI version 0x[0-9a-f]+ but this "
                                              r"version of numpy is 0x[0-9a-f]+")),
    ("numpy2-extension-on-numpy1", re.compile(r"numpy\.dtype size changed, may indicate binary incompatibility")),
    ("extension-newer-than-numpy", re.compile(r"module compiled against API version 0x[0-9a-f]+ but this "
                                              r"version of numpy is 0x[0-9a-f]+")),
    ("extension-newer-than-numpy", re.compile(r"module was compiled against NumPy C-API version 0x[0-9a-f]+ "
                                              r"\(NumPy (?P<built_for>[\d.]+)\) but the running NumPy has C-API "
                                              r"version 0x[0-9a-f]+")),
    ("numpy-import-failed", re.compile(r"numpy\._?core\.multiarray failed to import")),
)
_SITE_FRAME = re.compile(r'File "([^"]*[/\\](?:site|dist)-packages[/\\]([^/\\"]+))')

def _probe(facts: Facts) -> TorchProbe | None:
    torch = facts["torch"]
    if not torch["installed"]:
        return None
    probe = torch["probe"]
    return probe if probe.get("ran") else None


def _culprit(text: str) -> str | None:
    """The last third-party package in the traceback numpy prints: the one that imported it."""
    frames = [m.group(2) for m in _SITE_FRAME.finditer(text)]
    for package in reversed(frames):
        name = re.split(r"[.-]", package)[0]
        if name not in ("numpy", "importlib", "_distutils_hack"):
            return name
    return None


def find_numpy_abi_mismatch(facts: Facts) -> Iterator[Hit]:
    probe = _probe(facts)
    if probe is None:
        return
    texts = [probe.get("import_output") or "", *(probe.get("import_warnings") or []), probe.get("import_error") or "",
             probe.get("torch_import_traceback") or ""]
    joined = "\n".join(texts)
    found = next(((kind, match) for kind, pattern in NUMPY_ABI_PATTERNS if (match := pattern.search(joined))), None)
    if found is None:
        return
    kind, match = found
    numpy_version = probe.get("numpy_version")
    culprit = _culprit(joined)
    line = joined[max(0, match.start() - 40):match.end() + 40].strip().replace("\n", " ")
    # Every fix here is a choice between moving numpy and moving the extension, which depends on what
    # else needs that numpy: the commands (the owner's tool, naming the target) are advice, not steps.
    def install(name: str, *specs: str, upgrade: bool = False) -> str:
        return f"`{install_text(facts, name, *specs, upgrade=upgrade)}`"

    rebuilt = f", or a {culprit} built for NumPy {numpy_version}" if culprit else ""
    if kind == "numpy1-extension-on-numpy2":
        upgrade = install(culprit, culprit, upgrade=True) if culprit else "upgrade the extension to a NumPy 2 build"
        fix = f"{upgrade} (a build for NumPy 2), or {install('numpy', 'numpy<2')}"
        summary = f"an extension compiled for NumPy 1.x is imported under NumPy {numpy_version}"
    elif kind == "extension-newer-than-numpy" and match.groupdict().get("built_for"):
        built_for = match.group("built_for")
        fix = install("numpy", f"numpy>={built_for}") + rebuilt
        summary = f"an extension compiled for NumPy {built_for} is imported under the older NumPy {numpy_version}"
    elif kind == "extension-newer-than-numpy" and str(numpy_version or "").startswith("1."):
        # NumPy 1.x headers: built against a later 1.x, which a NumPy 2 would not run either.
        fix = install("numpy", "numpy<2", upgrade=True) + rebuilt
        summary = f"an extension compiled for a newer NumPy 1.x is imported under NumPy {numpy_version}"
    elif kind in ("numpy2-extension-on-numpy1", "extension-newer-than-numpy"):
        fix = install("numpy", "numpy>=2") + rebuilt
        summary = f"an extension compiled for a newer NumPy is imported under NumPy {numpy_version}"
    else:
        fix = install("numpy", "--force-reinstall", "numpy", *((culprit,) if culprit else ()))
        summary = f"numpy's C API could not be imported by an extension (NumPy {numpy_version})"
    yield Hit(
        message=f"{summary}{f' ({culprit})' if culprit else ''}: importing torch printed '{match.group(0)}'",
        evidence={"kind": kind, "numpy_version": numpy_version, "extension": culprit, "matched": match.group(0),
                  "context": line[:400], "torch_version": facts["torch"].get("version")},
        fix=fix,
    )


def find_torch_import_failure(facts: Facts) -> Iterator[Hit]:
    probe = _probe(facts)
    if probe is None:
        return
    torch = facts["torch"]
    interpreter = (facts.get("target") or {}).get("interpreter") or "python"
    base = {"torch_version": torch.get("version"), "interpreter": probe.get("executable") or interpreter,
            "probe_source": probe.get("source")}
    if probe.get("timed_out"):
        yield Hit(
            message=(f"importing torch in the target environment did not finish within {probe.get('timeout_s'):g} s: "
                     "every training start will hang or crawl the same way"),
            evidence={**base, "timeout_s": probe.get("timeout_s"), "seconds": probe.get("seconds"),
                      "stderr_tail": (probe.get("stderr_tail") or "")[-600:]},
            fix=(f"find what blocks: `{interpreter} -X importtime -c 'import torch'` and look for a sitecustomize, "
                 "usercustomize or .pth file that runs code, or torch installed on a hung network file system; "
                 "raise the limit with ENVDOCTOR_TORCH_PROBE_TIMEOUT=SECONDS if the file system is merely slow"),
        )
        return
    error = probe.get("import_error")
    if error is None and probe.get("error"):
        error = probe["error"]
    if not error:
        return
    traceback_tail = (probe.get("torch_import_traceback") or probe.get("stderr_tail") or "").strip().splitlines()[-6:]
    cuda_build = torch.get("cuda_build")
    missing_cuda = any(name in error for name in ("libcudnn", "libcu", "libnccl", "libnv"))
    reinstall = reinstall_torch(facts, wheel_index(cuda_build) if missing_cuda and cuda_build else None,
                                note="check that LD_LIBRARY_PATH does not point at another CUDA" if missing_cuda else "")
    if reinstall is None:
        fix = advice(f"run `{interpreter} -c 'import torch'` to see the full error, and reinstall torch the way it "
                     "was installed")
    elif missing_cuda:
        fix = led("the CUDA libraries torch was built against are missing: reinstall the matching build: ", reinstall)
    elif error.startswith("ModuleNotFoundError"):
        fix = led("a dependency of torch is missing: reinstall torch with its dependencies: ", reinstall)
    else:
        # The error may have another cause (a shadowing module, a broken .pth): the reinstall is advice.
        fix = advice(f"run `{interpreter} -c 'import torch'` to see the full error; reinstall torch "
                     f"(`{reinstall.text}`) if its files are damaged")
    yield Hit(
        message=f"`import torch` fails in the target environment: {error}",
        evidence={**base, "error": error, "traceback_tail": traceback_tail, "returncode": probe.get("returncode")},
        **fix.hit(),
    )


RULES = {
    "PKG008": find_numpy_abi_mismatch,  # with the static half: numpy_builds.RULES
    "PKG010": find_torch_import_failure,
}
