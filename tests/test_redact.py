"""Secrets never reach a report: by the variable's name, by the value's shape, in every format."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from envdoctor.config import Config
from envdoctor.engine import assemble_report
from envdoctor.facts import Facts
from envdoctor.model import Finding, FixStep, Severity
from envdoctor.redact import REDACTED, looks_secret, redact_environ, redact_finding, redact_text, redact_tree


def test_secret_names() -> None:
    for name in ("HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "WANDB_API_KEY", "DB_PASSWORD", "NCCL_AUTH",
                 "GITHUB_PAT_TOKEN", "MY_PRIVATE_KEY", "SSH_KEY", "SESSION_ID",
                 # the names issue 15 found printed in clear
                 "HF_CREDS", "WANDB_PASS", "NCCL_IB_KEYS",
                 "AWS_SESSION_TOKEN", "MY_COOKIE", "SLACK_WEBHOOK_URL", "AZURE_STORAGE_SAS", "GITHUB_PAT",
                 "SENTRY_DSN", "DB_CONN_STR", "PROXY_AUTHORIZATION", "X_CRED", "REQUEST_SIG"):
        assert looks_secret(name), name
    for name in ("OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "PWD", "OLDPWD", "KMP_DUPLICATE_LIB_OK", "MONKEY_NUM",
                 # segments, not substrings: these are ordinary settings
                 "TOKENIZERS_PARALLELISM", "GIT_AUTHOR_NAME", "LD_LIBRARY_PATH", "KEYBOARD_LAYOUT", "BYPASS_CACHE",
                 "NCCL_IB_HCA", "PYTORCH_CUDA_ALLOC_CONF", "SSL_CERT_FILE"):
        assert not looks_secret(name), name


@pytest.mark.parametrize(("text", "expected"), [
    ("https://user:pw@wandb.example.com", f"https://{REDACTED}@wandb.example.com"),
    ("https://hf_tok@hf.example/api", f"https://{REDACTED}@hf.example/api"),
    ("https://conda.anaconda.org/t/ab-12cd-xyz/mychannel/linux-64",
     f"https://conda.anaconda.org/t/{REDACTED}/mychannel/linux-64"),
    ("https://me:secret@repo.example/t/tk-9/pkgs/main,conda-forge",
     f"https://{REDACTED}@repo.example/t/{REDACTED}/pkgs/main,conda-forge"),
    ("https://bucket.s3.amazonaws.com/x.tar?X-Amz-Credential=AK%2F1&X-Amz-Signature=0a1b&v=2",
     f"https://bucket.s3.amazonaws.com/x.tar?X-Amz-Credential={REDACTED}&X-Amz-Signature={REDACTED}&v=2"),
    ("https://acct.blob.core.windows.net/c?sv=2022&sig=AbC%3D", f"https://acct.blob.core.windows.net/c?sv=2022&sig={REDACTED}"),
    ("login with hf_AbCdEfGhIjKlMnOpQrStUvWx12 now", f"login with {REDACTED} now"),
    ("key AKIAIOSFODNN7EXAMPLE", f"key {REDACTED}"),
    ("WANDB_API_KEY=abc123 HF_HUB_OFFLINE=1 python train.py", f"WANDB_API_KEY={REDACTED} HF_HUB_OFFLINE=1 python train.py"),
    # credentials as files write them (issue 24: a .netrc and a .pgpass line came back verbatim)
    ("machine api.example.com login alice password s3cr3t!", f"machine api.example.com login alice password {REDACTED}"),
    ("default login bob passwd hunter2", f"default login bob passwd {REDACTED}"),
    ("password: hunter2", f"password: {REDACTED}"),
    ("  api_key: abc123, region: eu", f"  api_key: {REDACTED}, region: eu"),
    ("alice:hunter2@db.example.com", f"alice:{REDACTED}@db.example.com"),
    ("psql alice:hunter2@10.0.0.1:5432/train", f"psql alice:{REDACTED}@10.0.0.1:5432/train"),
    ("db.example.com:5432:train:alice:pg-Pa55", f"db.example.com:5432:train:alice:{REDACTED}"),
    ("*:*:*:postgres:pw\\:x", f"*:*:*:postgres:{REDACTED}"),
    ("root:$6$rounds$Efgh1234567890/xyz.:20228:0:99999:7:::", f"root:{REDACTED}:20228:0:99999:7:::"),
])
def test_values_redacted_by_shape(text: str, expected: str) -> None:
    assert redact_text(text) == expected


@pytest.mark.parametrize("text", [
    "/home/me/t/data/file.bin",  # a folder called t is not a conda token
    "cf30153c4c131c8164ee7798e5022d810682e2cb",  # a git revision
    "numpy-1.26.4-py311h64a7726_0", "https://conda.anaconda.org/conda-forge/linux-64",
    "pip install --index-url https://download.pytorch.org/whl/cu128 torch", "OMP_NUM_THREADS=4",
    # near misses of the credential shapes
    "git@github.com:org/repo.git", "root:*:20228:0:99999:7:::", "localhost:5432:db:user", "10.0.0.1:5432",
    "train.py:12:3: cannot be parsed: SyntaxError: invalid syntax", "torch 2.13.0 @ file:///wheels/torch.whl",
    "the price is $5 and $6", "user@example.com",
])
def test_ordinary_values_stay(text: str) -> None:
    assert redact_text(text) == text


def test_redact_environ_keeps_relevant_names_only() -> None:
    shown = redact_environ({"HOME": "/root", "OMP_NUM_THREADS": "4", "HF_TOKEN": "x", "CUDA_VISIBLE_DEVICES": "0",
                            "WANDB_BASE_URL": "https://user:pw@wandb.example", "HF_CREDS": "c"})
    assert shown == {"CUDA_VISIBLE_DEVICES": "0", "HF_CREDS": REDACTED, "HF_TOKEN": REDACTED, "OMP_NUM_THREADS": "4",
                     "WANDB_BASE_URL": f"https://{REDACTED}@wandb.example"}


def test_redact_tree_anywhere() -> None:
    tree = {"a": [{"environ": {"NCCL_SOCKET_IFNAME": "eth0", "AWS_SECRET_ACCESS_KEY": "abc", "NCCL_IB_KEYS": ["k"]}}],
            "note": "keep", "channels": {"https://conda.anaconda.org/t/tok/x": ["https://u:p@h/y"]}}
    assert redact_tree(tree) == {
        "a": [{"environ": {"NCCL_SOCKET_IFNAME": "eth0", "AWS_SECRET_ACCESS_KEY": REDACTED, "NCCL_IB_KEYS": REDACTED}}],
        "note": "keep", "channels": {f"https://conda.anaconda.org/t/{REDACTED}/x": [f"https://{REDACTED}@h/y"]}}


def test_findings_are_redacted_message_evidence_fix_and_steps() -> None:
    finding = Finding(rule="CHN001", name="mixed-channels", severity=Severity.WARNING,
                      message="numpy from https://u:pw@mirror.example/conda",
                      evidence={"channel": "https://conda.anaconda.org/t/tk-1/private", "HF_CREDS": "c"},
                      fix="conda install -c https://u:pw@mirror.example/conda numpy",
                      fix_steps=(FixStep.command("conda", "conda", "install", "-c", "https://u:pw@mirror.example/conda"),))
    shown = redact_finding(finding)
    text = json.dumps(shown.to_dict())
    assert "pw@" not in text and "tk-1" not in text and '"c"' not in text
    assert shown.fix_steps[0].argv[-1] == f"https://{REDACTED}@mirror.example/conda"
    assert shown.severity is Severity.WARNING and shown.rule == "CHN001"


SECRETS = {"HF_CREDS": "hfcreds-0451", "WANDB_PASS": "wandbpass-0452", "NCCL_IB_KEYS": "ibkeys-0453",
           "WANDB_BASE_URL": "https://alice:pw-0454@wandb.example.com",
           "HF_ENDPOINT": "https://tok-0455@hf.example.com",
           "CONDA_CHANNELS": "https://conda.anaconda.org/t/tk-0456/private,conda-forge"}


def test_no_secret_in_any_format_of_a_real_report() -> None:
    """A real envdoctor process with the secrets in its environment: every format leaves them out."""
    env = {**os.environ, **SECRETS}
    code = ("import sys; from envdoctor.config import Config; from envdoctor.engine import run_check;"
            "from envdoctor.report import render;"
            "report = run_check(Config(no_loader=True, select=['SYS003']));"
            "[print(render(report, f)) for f in ('json', 'text', 'markdown', 'sarif')]")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    for marker in ("hfcreds-0451", "wandbpass-0452", "ibkeys-0453", "pw-0454", "tok-0455", "tk-0456"):
        assert marker not in out.stdout, marker
    assert "wandb.example.com" in out.stdout  # the rest of the value is still shown
    report, _ = json.JSONDecoder().raw_decode(out.stdout)
    environ = report["facts"]["system"]["environ"]
    assert environ["HF_CREDS"] == REDACTED and environ["NCCL_IB_KEYS"] == REDACTED
    assert environ["WANDB_BASE_URL"] == f"https://{REDACTED}@wandb.example.com"
    assert environ["CONDA_CHANNELS"] == f"https://conda.anaconda.org/t/{REDACTED}/private,conda-forge"


def test_probe_errors_are_redacted_too() -> None:
    facts = Facts.from_dict({"system": {}}, Config(no_loader=True))
    facts.errors.append({"probe": "torch", "message": "failed reading https://u:pw-77@h/x", "traceback": ""})
    report = assemble_report(facts, [], [])
    assert "pw-77" not in json.dumps(report.errors)


def test_redact_url_for_probes_that_store_urls() -> None:
    from envdoctor.redact import redact_url

    assert redact_url("https://me:pw@repo.example/t/tk-1/main/linux-64/x-1-0.conda") == (
        f"https://{REDACTED}@repo.example/t/{REDACTED}/main/linux-64/x-1-0.conda")
    assert redact_url("https://conda.anaconda.org/conda-forge") == "https://conda.anaconda.org/conda-forge"
