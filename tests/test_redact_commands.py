"""Command lines in reports are redacted by shape, not by a list of option names (issue 33).

`envdoctor run`'s saved report kept `Authorization: Bearer …`, `--jwt …`, `--bearer …` and `-pSECRET`
in clear. Each case is checked on `redact_command` alone, with the near-misses that must stay (paths,
numbers, model names), and then for real: a command run under `envdoctor run` with every one of them on
its command line, whose saved report (JSON, and rendered as text) holds none of the secrets.
"""
from __future__ import annotations

import base64
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from envdoctor.redact import REDACTED, looks_like_token, redact_command, redact_command_text, redact_text, redact_tree
from support import envdoctor_argv

#: A real JSON Web Token's shape: base64url header and payload, then a signature.
JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIn0."
       "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c")
BEARER = "AbCdEf0123456789GhIjKlMnOpQr"
OPAQUE = "q8Zr2LmXv9T4pWc7Ns1Bk6Yd"  # a token under an option name nobody listed


@pytest.mark.parametrize(("argv", "expected"), [
    (["curl", "-H", f"Authorization: Bearer {BEARER}", "https://api.example"],
     ["curl", "-H", f"Authorization: {REDACTED}", "https://api.example"]),
    (["curl", "--header=Authorization: Basic dXNlcjpwYXNz"], ["curl", f"--header=Authorization: {REDACTED}"]),
    (["wget", "--header", "Proxy-Authorization: Bearer abc"], ["wget", "--header", f"Proxy-Authorization: {REDACTED}"]),
    (["curl", "-H", "X-Api-Key: abc123"], ["curl", "-H", f"X-Api-Key: {REDACTED}"]),
    (["curl", "-H", "Cookie: session=abc"], ["curl", "-H", f"Cookie: {REDACTED}"]),
    (["train.py", "--jwt", JWT], ["train.py", "--jwt", REDACTED]),
    (["train.py", "--jwt=short"], ["train.py", f"--jwt={REDACTED}"]),
    (["train.py", "--bearer", "short"], ["train.py", "--bearer", REDACTED]),
    (["train.py", "--bearer-token", "x"], ["train.py", "--bearer-token", REDACTED]),
    (["mysql", "-uroot", "-pS3cret!", "db"], ["mysql", "-uroot", f"-p{REDACTED}", "db"]),
    (["train.py", "--upload-with", OPAQUE], ["train.py", "--upload-with", REDACTED]),
    (["train.py", f"--credentials-blob={OPAQUE}"], ["train.py", f"--credentials-blob={REDACTED}"]),
    (["train.py", f"--x={JWT}"], ["train.py", f"--x={REDACTED}"]),
    (["train.py", "--wandb", "0123456789abcdef0123456789abcdef01234567"], ["train.py", "--wandb", REDACTED]),
    (["env", f"SOME_SETTING={OPAQUE}", "python"], ["env", f"SOME_SETTING={REDACTED}", "python"]),
    (["train.py", "--hf-token", "hf_abcdefghijklmnopqrstuvwx", "--api-key=s3cret"],
     ["train.py", "--hf-token", REDACTED, f"--api-key={REDACTED}"]),
])
def test_secrets_on_a_command_line_are_redacted(argv: list[str], expected: list[str]) -> None:
    assert redact_command(argv) == expected
    assert redact_command(expected) == expected  # redacting twice changes nothing


NEAR_MISSES = [
    "python", "train.py", "/data/imagenet/train", "./checkpoints/run-2024-01-01", "~/datasets/coco",
    "data/train-00000-of-00042.parquet", "--lr", "3e-4", "0.0001", "100000000000000000000000", "-p8080",
    "--model", "meta-llama/Llama-3.1-8B-Instruct", "sentence-transformers/all-MiniLM-L6-v2",
    "TheBloke/Llama-2-7B-Chat-GGUF", "HuggingFaceTB/SmolLM2-135M-Instruct", "EleutherAI/pythia-160m-deduped",
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", "timm/vit_base_patch16_224.augreg2_in21k_ft_in1k",
    "--callback=WandbLoggerCallbackHandler", "ResNet50ImageNetBaseline", "run_20240101_120000_abc123",
    "--run-name=exp42_lr3e-4_bs256_wd0.1", "2024-01-01T12:00:00", "--tokenizer", "bert-base-uncased",
    "-H", "Accept: application/json", "Content-Type: application/json", "--nproc-per-node", "2",
]


def test_paths_numbers_and_model_names_stay() -> None:
    assert redact_command(NEAR_MISSES) == NEAR_MISSES
    assert redact_command_text(" ".join(NEAR_MISSES)) == " ".join(NEAR_MISSES)


def test_the_token_shape_holds_for_random_tokens_and_not_for_names() -> None:
    """Random tokens of the usual alphabets and lengths look like tokens (a miss is rare, not never:
    measured 0.2-0.6% of URL-safe and standard base64 tokens over 50,000 draws each, none of hex ones,
    so at most 1% of these 2,000); the near-misses never do. The bytes come from a seeded generator: the same
    tokens every run, so the test fails on a change of the code, never on a draw."""
    draw = random.Random(20261204).randbytes
    made = [make() for make in (lambda: base64.urlsafe_b64encode(draw(24)).decode().rstrip("="),
                                lambda: base64.urlsafe_b64encode(draw(32)).decode().rstrip("="),
                                lambda: base64.b64encode(draw(24)).decode(),
                                lambda: draw(20).hex()) for _ in range(500)]
    missed = [token for token in made if not looks_like_token(token)]
    assert len(missed) <= 20, missed
    assert not [word for word in NEAR_MISSES if looks_like_token(word)]


@pytest.mark.parametrize("token", ["/ByU8vNWlCKjLD69xpGfX+2TChxzHqwt", "/yCC+pkCKQuQJouQ/uXH1aAG+hNBugU3",
                                   "/O3Aww5GYOUzOVJFCHMiqUeCgm4zHhQD"])
def test_a_base64_token_that_begins_with_a_slash_is_no_path(token: str) -> None:
    assert looks_like_token(token)
    assert redact_command(["curl", "--token", token]) == ["curl", "--token", REDACTED]


@pytest.mark.parametrize("path", ["/data/imagenet", "/usr/include/c++/12", "/scratch", "/tmp/tmpab3x9q2kzz7mw1",
                                  "/home/me/.cache/huggingface/hub/models--bert-base-uncased/snapshots/"
                                  "86b5e0934494bd15c9632b12f734a8a67f723594"])
def test_a_path_stays(path: str) -> None:
    assert not looks_like_token(path)


def test_headers_bearer_and_jwt_in_free_text() -> None:
    assert redact_text(f"curl -H 'Authorization: Bearer {BEARER}' x") == f"curl -H 'Authorization: {REDACTED}' x"
    assert redact_text(f"sent Bearer {BEARER}") == f"sent Bearer {REDACTED}"
    assert redact_text(f"token {JWT} expired") == f"token {REDACTED} expired"
    for prose in ("the bearer of bad news", "Authorization required", "authorization header missing"):
        assert redact_text(prose) == prose


def test_a_command_anywhere_in_a_report_is_redacted_as_a_command() -> None:
    tree = {"loop": {"command": ["python", "train.py", "--bearer", BEARER, "-pS3cret"]},
            "step": {"argv": ["mysql", "-pS3cret"], "command": f"curl --jwt {JWT} -H x"}}
    assert redact_tree(tree) == {
        "loop": {"command": ["python", "train.py", "--bearer", REDACTED, f"-p{REDACTED}"]},
        "step": {"argv": ["mysql", f"-p{REDACTED}"], "command": f"curl --jwt {REDACTED} -H x"}}


@pytest.mark.slow
def test_envdoctor_run_saves_no_secret_of_the_command_line(tmp_path: Path) -> None:
    """The attack for real: every secret of issue 33 on a command run under `envdoctor run`."""
    secrets_given = [BEARER, JWT, "Sh0rtBearer", "S3cretPw", OPAQUE, "dXNlcjpwYXNz"]
    command = [sys.executable, "-c", "import sys; print(len(sys.argv))",
               "-H", f"Authorization: Bearer {BEARER}", "--jwt", JWT, "--bearer", "Sh0rtBearer", "-pS3cretPw",
               "--upload-with", OPAQUE, "--header=Authorization: Basic dXNlcjpwYXNz",
               "--model", "meta-llama/Llama-3.1-8B-Instruct", "--data", "/data/imagenet/train", "--lr", "3e-4"]
    out = tmp_path / "r.json"
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = subprocess.run(envdoctor_argv("run", "--format", "json", "--output", str(out), "--", *command),
                          capture_output=True, text=True, timeout=240, cwd=str(tmp_path),
                          env={**os.environ, "TMPDIR": str(tmp)})
    assert proc.stdout.strip() == str(len(command) - 2)  # the command itself got every argument (argv[0] is -c)
    saved = out.read_text()
    report = json.loads(saved)
    shown = report["loop"]["command"]
    assert shown[shown.index("--model") + 1] == "meta-llama/Llama-3.1-8B-Instruct"
    assert shown[shown.index("--data") + 1] == "/data/imagenet/train" and shown[shown.index("--lr") + 1] == "3e-4"
    assert shown[shown.index("--jwt") + 1] == REDACTED and f"-p{REDACTED}" in shown
    rendered = subprocess.run(envdoctor_argv("render", str(out), "--format", "text", "-v"), capture_output=True,
                              text=True, timeout=120, cwd=str(tmp_path))
    for secret in secrets_given:
        assert secret not in saved, secret
        assert secret not in rendered.stdout, secret
