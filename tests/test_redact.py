"""Secrets never reach a report."""
from __future__ import annotations

from envdoctor.redact import REDACTED, looks_secret, redact_environ, redact_tree


def test_secret_names() -> None:
    for name in ("HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "WANDB_API_KEY", "DB_PASSWORD", "NCCL_AUTH",
                 "GITHUB_PAT_TOKEN", "MY_PRIVATE_KEY", "SSH_KEY", "SESSION_ID"):
        assert looks_secret(name), name
    for name in ("OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "PWD", "KMP_DUPLICATE_LIB_OK", "MONKEY_NUM"):
        assert not looks_secret(name), name


def test_redact_environ_keeps_relevant_names_only() -> None:
    shown = redact_environ({"HOME": "/root", "OMP_NUM_THREADS": "4", "HF_TOKEN": "x", "CUDA_VISIBLE_DEVICES": "0"})
    assert shown == {"CUDA_VISIBLE_DEVICES": "0", "HF_TOKEN": REDACTED, "OMP_NUM_THREADS": "4"}


def test_redact_tree_anywhere() -> None:
    tree = {"a": [{"environ": {"NCCL_SOCKET_IFNAME": "eth0", "AWS_SECRET_ACCESS_KEY": "abc"}}], "note": "keep"}
    assert redact_tree(tree) == {"a": [{"environ": {"NCCL_SOCKET_IFNAME": "eth0", "AWS_SECRET_ACCESS_KEY": REDACTED}}],
                                 "note": "keep"}
