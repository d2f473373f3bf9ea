"""Keeping secrets out of reports: by the variable's name, and by the value's shape.

Anything a report shows of the environment passes through `redact_environ`;
`redact_tree` is the last guard on a whole report (facts, findings, errors),
whatever the output format:

* by name: a key shaped like an environment variable whose name looks like a
  secret (HF_TOKEN, WANDB_PASS, HF_CREDS, NCCL_IB_KEYS, …) has its value
  replaced, and so has `NAME=value` inside any text;
* by shape, in every string: the user-info of a URL (`https://user:pw@host`),
  a conda channel token (`/t/<token>/`), secret query parameters
  (`?token=…`, `&sig=…`, `X-Amz-Signature=…`) and tokens with a well-known
  prefix (`hf_…`, `ghp_…`, `github_pat_…`, `xoxb-…`, `AKIA…`, `sk-…`);
* credentials written as text, the way files hold them: `.netrc`'s
  `password X`, `password: X` (YAML, INI), `user:password@host` without a
  scheme, a `.pgpass` line `host:port:database:user:password` and a crypt(3)
  hash (`$6$salt$hash`, as in /etc/shadow);
* HTTP credentials: an `Authorization:` (or `Proxy-Authorization:`) header's
  value, `Bearer <token>`, and a JSON Web Token (`eyJ….eyJ….…`) wherever it appears.

A command line (`redact_command`, and any `command`/`argv` list or string in a
report) is redacted by its shape too, not by a list of option names: the value of
an option whose name says secret (`--hf-token X`, `--password=X`, `--jwt X`,
`--bearer X`), a header argument (`-H "Authorization: Bearer X"`,
`-H "X-Api-Key: X"`), mysql's attached `-pSECRET`, and any argument that looks
like a token (`looks_like_token`: a JWT, 32+ hex digits, or 20+ characters of
base64 that breaks into as many short pieces as random text does), so
that a credential passed under a name nobody listed is still hidden. Paths,
numbers and model names (`meta-llama/Llama-3.1-8B`) do not look like tokens and
stay.

What is redacted is replaced by REDACTED; the rest of the string stays, so a
channel or endpoint is still recognisable.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from envdoctor.model import Finding

REDACTED = "[redacted]"

#: Name segments that mark a secret. Segments, not substrings, where a substring would
#: hit ordinary names: KEY is not MONKEY or KEYBOARD, PASS is not BYPASS, AUTH is not AUTHOR.
_SECRET_NAME = re.compile(
    r"(SECRET|PASSWORD|PASSWD|PASSPHRASE|PWD$|API_?KEY|ACCESS_?KEY|PRIVATE|CREDENTIAL|"
    r"TOKENS?($|_)|(^|_)(PASS|CREDS?|KEYS?|AUTH|AUTHORIZATION|JWT|BEARER|COOKIES?|SESSION|SIG|SIGNATURE|PAT|SAS|"
    r"WEBHOOK|DSN|CONN_?STR|CONNECTION_STRING)($|_)|COOKIE|SESSION|SIGNATURE|DSN$)",
    re.IGNORECASE,
)
_NOT_SECRET = frozenset({"PWD", "OLDPWD"})
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

#: scheme://userinfo@ — the userinfo (user, user:password, a token) is dropped whole.
_URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/\s@?#]+)@")
#: anaconda.org's token channels: https://conda.anaconda.org/t/<token>/<channel> (in URLs only,
#: so a folder called t in a path is left alone).
_CONDA_TOKEN = re.compile(r"(?P<lead>://[^/\s]+(?:/[^/\s]+)*?/t/)(?P<token>[^/\s]+)(?=/)")
#: Query parameters that carry credentials (OAuth, presigned S3/GCS, Azure SAS).
_SECRET_QUERY = re.compile(
    r"(?P<lead>[?&](?:access_token|token|api_?key|key|secret|password|passwd|auth|sig|signature|"
    r"x-amz-signature|x-amz-credential|x-amz-security-token|x-goog-signature|x-goog-credential|code)=)"
    r"(?P<value>[^&#\s]+)",
    re.IGNORECASE,
)
#: Tokens whose prefix says what they are, wherever they appear.
_KNOWN_TOKENS = re.compile(
    r"\b(?:hf_[A-Za-z0-9]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|"
    r"glpat-[A-Za-z0-9_-]{20,}|xox[abposr]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16}|sk-[A-Za-z0-9_-]{20,})\b"
)
#: .netrc's `password X` (and `passwd X`); `password: X` and the like, as YAML and INI files write them.
_NETRC_PASSWORD = re.compile(r"(?P<lead>\b(?:password|passwd)[ \t]+)(?P<value>\S+)", re.IGNORECASE)
_KEY_COLON = re.compile(r"(?P<lead>\b(?:password|passwd|passphrase|secret|token|api_?key)\s*:[ \t]*)(?P<value>[^\s,;]+)",
                        re.IGNORECASE)
#: `user:password@host` without a scheme (a URL's user-info is dropped whole above); the user stays.
_BARE_USERINFO = re.compile(r"(?<![\w/:@.%+-])(?P<user>[A-Za-z0-9._%+-]+):(?P<password>[^\s@/:]+)@(?=[A-Za-z0-9.-])")
#: A .pgpass line, host:port:database:user:password (the port a number or *); five fields, no more.
_PGPASS = re.compile(r"^(?P<lead>[^:\s]+:(?:\d+|\*):[^:\s]+:[^:\s]+:)(?:[^\s:\\]|\\.)+$", re.MULTILINE)
#: A crypt(3) password hash: $id$salt$hash (MD5, bcrypt, SHA-256/512, yescrypt …).
_CRYPT_HASH = re.compile(r"\$(?:1|2[abxy]?|5|6|y|gy|7|sha1|md5)\$[^\s:$]*\$[^\s:]+")
#: An HTTP header that carries a credential: the whole value goes (the scheme word too, `Basic`/`Bearer`).
_AUTH_HEADER = re.compile(r"(?P<lead>\b(?:Proxy-)?Authorization\s*[:=]\s*)(?P<value>[^\r\n\"']+)", re.IGNORECASE)
#: `Bearer <token>` on its own (a log line); 8 characters at least, so that prose ("the bearer of") stays.
_BEARER = re.compile(r"(?P<lead>\bBearer\s+)(?P<value>(?!\[redacted\])[A-Za-z0-9._~+/=-]{8,})", re.IGNORECASE)
#: A JSON Web Token: base64url header and payload (both JSON objects, so `eyJ`), then the signature.
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*")
#: NAME=value inside text (a command line, a traceback, an env dump).
_ASSIGNMENT = re.compile(r"\b(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>\"[^\"]*\"|'[^']*'|[^\s&;]+)")

#: Environment variables that matter to a training run, shown in system facts.
RELEVANT_PREFIXES = (
    "OMP_", "MKL_", "OPENBLAS_", "KMP_", "GOMP_", "CUDA_", "NCCL_", "TORCH", "PYTORCH_",
    "PYTHON", "CONDA_", "PIXI_", "VIRTUAL_ENV", "LD_", "SLURM_", "LOCAL_RANK", "RANK",
    "WORLD_SIZE", "MASTER_", "NVIDIA_", "HF_", "WANDB_", "CUBLAS_", "CUDNN_",
)


def looks_secret(name: str) -> bool:
    """Whether an environment variable's name says its value is a secret."""
    return bool(_SECRET_NAME.search(name)) and name not in _NOT_SECRET


def redact_text(text: str) -> str:
    """`text` with credentials of a known shape replaced by REDACTED (see the module's list)."""
    if not text:
        return text
    if "://" in text:
        text = _URL_USERINFO.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)
        text = _CONDA_TOKEN.sub(lambda m: f"{m['lead']}{REDACTED}", text)
    if "=" in text:
        text = _SECRET_QUERY.sub(lambda m: f"{m['lead']}{REDACTED}", text)
    text = _KNOWN_TOKENS.sub(REDACTED, text)
    if "eyJ" in text:
        text = _JWT.sub(REDACTED, text)
    text = _redact_credential_text(text)
    if "=" not in text:
        return text
    return _ASSIGNMENT.sub(
        lambda m: f"{m['name']}={REDACTED}" if looks_secret(m["name"]) and m["value"] != REDACTED else m[0], text)


def _redact_credential_text(text: str) -> str:
    """Credentials as files write them: .netrc, `password: X`, `user:pw@host`, .pgpass, crypt(3) hashes."""
    lowered = text.lower()
    if "pass" in lowered:
        text = _NETRC_PASSWORD.sub(lambda m: f"{m['lead']}{REDACTED}", text)
    if ":" in text:
        text = _KEY_COLON.sub(lambda m: f"{m['lead']}{REDACTED}" if m["value"] != REDACTED else m[0], text)
        text = _PGPASS.sub(lambda m: f"{m['lead']}{REDACTED}", text)
        if "@" in text:
            text = _BARE_USERINFO.sub(lambda m: f"{m['user']}:{REDACTED}@", text)
    if "$" in text:
        text = _CRYPT_HASH.sub(REDACTED, text)
    if "authorization" in lowered:
        text = _AUTH_HEADER.sub(lambda m: f"{m['lead']}{REDACTED}", text)
    if "earer" in lowered:
        text = _BEARER.sub(lambda m: f"{m['lead']}{REDACTED}", text)
    return text


def redact_url(text: str) -> str:
    """A URL (a conda channel, an index) with the credentials it carries by shape removed.

    The same rules as `redact_text`: `user:pw@`, anaconda's `/t/<token>/`, signed
    query parameters. For probes that store URLs, so that a secret is not even
    kept in memory past the probe.
    """
    return redact_text(text)


def redact_value(name: str, value: str) -> str:
    """One environment variable's value as a report may show it."""
    return REDACTED if looks_secret(name) else redact_text(value)


def redact_environ(environ: Mapping[str, str], relevant_only: bool = True) -> dict[str, str]:
    """The environment variables worth showing, with secrets redacted by name and by shape."""
    shown = {}
    for name in sorted(environ):
        if relevant_only and not name.startswith(RELEVANT_PREFIXES):
            continue
        shown[name] = redact_value(name, environ[name])
    return shown


def _secret_key(key: object) -> bool:
    return isinstance(key, str) and bool(_ENV_NAME.match(key)) and key.isupper() and looks_secret(key)


def redact_tree(value: object) -> Any:
    """A copy of a JSON-like tree with secrets redacted everywhere: by key name, and every string by shape."""
    if isinstance(value, dict):
        out: dict[object, object] = {}
        for key, item in value.items():
            name = redact_text(key) if isinstance(key, str) else key
            if _secret_key(key) and item not in (None, ""):
                out[name] = REDACTED
            elif key in COMMAND_KEYS and isinstance(item, (list, tuple)) and all(isinstance(a, str) for a in item):
                out[name] = redact_command(item)
            elif key in COMMAND_KEYS and isinstance(item, str):
                out[name] = redact_command_text(item)
            else:
                out[name] = redact_tree(item)
        return out
    if isinstance(value, (list, tuple)):
        return [redact_tree(item) for item in value]
    if isinstance(value, str):
        return redact_text(value)
    return value


def redact_finding(finding: Finding) -> Finding:
    """The finding as a report shows it: message, evidence, fix and fix steps redacted."""
    steps = tuple(
        replace(step, argv=tuple(redact_text(a) for a in step.argv)) if step.argv else step
        for step in finding.fix_steps
    )
    return replace(finding, message=redact_text(finding.message), evidence=redact_tree(dict(finding.evidence)),
                   fix=redact_text(finding.fix), fix_steps=steps)


# -- command lines -------------------------------------------------------------------------------------

#: Characters of base64 (standard and URL-safe), the alphabet most tokens are written in.
_BASE64ISH = re.compile(r"[A-Za-z0-9+/_-]{20,}={0,2}")
_HEX = re.compile(r"[0-9a-fA-F]{32,}")
#: `Name: value`, as `curl -H` and `wget --header` take a header.
_HEADER_ARG = re.compile(r"^\s*(?P<name>[A-Za-z][A-Za-z0-9-]*)\s*:\s*(?P<value>\S.*)$", re.DOTALL)
#: A short option with its value attached: mysql's and mysqldump's `-pSECRET` (its `-p` alone prompts).
_ATTACHED_P = re.compile(r"^-p(?P<value>.+)$")
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
#: The pieces a person's names are made of: `ResNet50ImageNet` is Res, Net, 50, Image, Net.
_PIECE = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
#: Pieces per letter or digit above which a string reads as random: base64 tokens have about 0.55
#: (under 0.3 in one of 1,000), names and model names 0.15-0.4, and they also have more separators.
_RANDOM_PIECES = 0.3
#: Keys whose value is a command line, wherever a report holds one.
COMMAND_KEYS = frozenset({"command", "argv", "cmdline", "run_argv"})


def _looks_like_path(value: str) -> bool:
    """A relative or home path, or an absolute one of two or more parts without a `+`.

    Standard base64 uses `/` and `+`: one token in 64 begins with `/`, and it is either one part
    long or likely to hold a `+`, which a path of words rarely does. Either goes on to the shape
    test, which a path of words (`/data`, `/usr/include/c++/12`) does not pass.
    """
    if value.startswith(("./", "../", "~")):
        return True
    return value.startswith("/") and "+" not in value and len([part for part in value.split("/") if part]) > 1


def looks_like_token(value: str) -> bool:
    """Whether `value` has the shape of a credential: a JWT, a long hex or random-looking base64 string.

    Shape, not name: a path (`/data/imagenet`, `./ckpt`), a number (`3e-4`, `1000000`) or a model
    name (`meta-llama/Llama-3.1-8B-Instruct`: words between separators) is not a token.
    """
    if _JWT.fullmatch(value):
        return True
    if _looks_like_path(value) or _NUMBER.fullmatch(value):
        return False
    if _HEX.fullmatch(value):
        return any(c.isdigit() for c in value) and any(c.isalpha() for c in value)
    if not _BASE64ISH.fullmatch(value):
        return False
    body = value.rstrip("=")
    letters = [c for c in body if c.isalnum()]
    separators = len(body) - len(letters)  # + / _ -: rare in a token, between every word of a name
    if len(letters) < 18 or separators * 5 > len(letters):
        return False
    return (len(_PIECE.findall(body)) >= _RANDOM_PIECES * len(letters)
            and len(set(letters)) >= 0.6 * len(letters))


def _secret_option(name: str) -> bool:
    return looks_secret(name.lstrip("-").replace("-", "_").upper())


def _redact_argument(arg: str) -> str:
    """One argument on its own: a header, `-pSECRET`, `--name=value`, or a value shaped like a token."""
    header = _HEADER_ARG.match(arg)
    if header and _secret_option(header["name"]):
        return f"{arg[: header.start('value')]}{REDACTED}"
    attached = _ATTACHED_P.match(arg)
    if attached and not _NUMBER.fullmatch(attached["value"]) and attached["value"] != REDACTED:
        return f"-p{REDACTED}"
    if "=" in arg:  # --name=value, NAME=value
        name, _, value = arg.partition("=")
        if value and value != REDACTED and ((arg.startswith("-") and _secret_option(name)) or looks_like_token(value)):
            return f"{name}={REDACTED}"
    elif looks_like_token(arg):
        return REDACTED
    return redact_text(arg)


def redact_command(argv: Sequence[str]) -> list[str]:
    """A command line as a report may show it, secrets redacted by the option's name and the value's shape.

    `--hf-token X`, `--jwt X`, `--bearer X` (any option whose name says secret) lose the next argument;
    `--password=X` its value; `-H "Authorization: Bearer X"` the header's value; `-pSECRET` its value;
    an argument shaped like a token (`looks_like_token`) goes whole; the rest as `redact_text` says.
    """
    shown: list[str] = []
    hide_next = False
    for arg in argv:
        arg = str(arg)
        if hide_next:  # the value of a secret option, whatever it looks like
            hide_next = False
            shown.append(REDACTED)
            continue
        if arg.startswith("-") and len(arg) > 1 and "=" not in arg and _secret_option(arg):
            shown.append(arg)
            hide_next = True
            continue
        shown.append(_redact_argument(arg))
    return shown


def redact_command_text(text: str) -> str:
    """A command line written as one string: each word as `redact_command` judges it, the spacing kept."""
    parts = re.split(r"(\s+)", text)
    words = redact_command(parts[0::2])
    parts[0::2] = words
    return "".join(parts)
