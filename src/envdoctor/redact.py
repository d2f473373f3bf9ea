"""Keeping secrets out of reports.

Anything a report shows of the environment passes through `redact_environ`;
`redact_tree` is the last guard on a whole report: any key shaped like an
environment variable whose name looks like a secret has its value replaced.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

REDACTED = "[redacted]"

_SECRET_NAME = re.compile(
    r"(TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|PWD$|API_?KEY|ACCESS_?KEY|PRIVATE|CREDENTIAL|"
    r"(^|_)KEY($|_)|(^|_)AUTH|SESSION|COOKIE|SIGNATURE|DSN$)",
    re.IGNORECASE,
)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

#: Environment variables that matter to a training run, shown in system facts.
RELEVANT_PREFIXES = (
    "OMP_", "MKL_", "OPENBLAS_", "KMP_", "GOMP_", "CUDA_", "NCCL_", "TORCH", "PYTORCH_",
    "PYTHON", "CONDA_", "PIXI_", "VIRTUAL_ENV", "LD_", "SLURM_", "LOCAL_RANK", "RANK",
    "WORLD_SIZE", "MASTER_", "NVIDIA_", "HF_", "WANDB_", "CUBLAS_", "CUDNN_",
)


def looks_secret(name: str) -> bool:
    return bool(_SECRET_NAME.search(name)) and name not in ("PWD", "OLDPWD")


def redact_environ(environ: Mapping[str, str], relevant_only: bool = True) -> dict[str, str]:
    """The environment variables worth showing, with secrets redacted."""
    shown = {}
    for name in sorted(environ):
        if relevant_only and not name.startswith(RELEVANT_PREFIXES):
            continue
        shown[name] = REDACTED if looks_secret(name) else environ[name]
    return shown


def redact_tree(value: Any) -> Any:
    """A copy of a JSON-like tree with secret-looking variables redacted everywhere."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if isinstance(key, str) and _ENV_NAME.match(key) and key.isupper() and looks_secret(key) and isinstance(item, str):
                out[key] = REDACTED
            else:
                out[key] = redact_tree(item)
        return out
    if isinstance(value, list):
        return [redact_tree(item) for item in value]
    return value


_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/@\s]*@")
_URL_TOKEN = re.compile(r"/t/[^/\s]+")


def redact_url(text: str) -> str:
    """`text` with credentials a URL carries by shape removed: `user:pw@` and anaconda's `/t/<token>/`."""
    return _URL_TOKEN.sub("/t/***", _URL_USERINFO.sub(r"\1***@", text))
