"""The "spec" facts: what `--against FILE` asks the environment to hold.

Reads a conda environment.yml (channels, conda dependencies and the `pip:`
section) or a pip requirements file (with `-r` includes) into plain lists of
wanted packages. The YAML subset environment files use is parsed here, so
envdoctor needs no YAML library; lines that cannot be understood are kept
under `skipped` with the reason instead of failing the whole file.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, TypedDict


class CondaWanted(TypedDict):
    """One conda dependency of an environment.yml: `conda-forge::numpy=1.26.4=py311_0`."""

    spec: str
    name: str
    channel: str | None
    #: The version constraint, e.g. "=1.26.4", "==1.26.4", ">=1.26" (None: any).
    version: str | None
    build: str | None
    line: int


class _PipWantedRequired(TypedDict):
    spec: str
    name: str
    specifier: str | None
    marker: str | None
    url: str | None
    line: int


class PipWanted(_PipWantedRequired, total=False):
    """One pip requirement; `file` is the requirements file it is written in (for `-r` includes)."""

    file: str


class SkippedLine(TypedDict):
    """A line that is not a package (an option, an include not followed) or cannot be understood."""

    line: int
    text: str
    reason: str


class ParsedSpec(TypedDict):
    """What a file asks for: its name, channels, conda and pip packages, and the lines skipped."""

    name: str | None
    channels: list[str]
    conda: list[CondaWanted]
    pip: list[PipWanted]
    skipped: list[SkippedLine]


class SpecFacts(ParsedSpec):
    """The `spec` facts section (the report's facts.spec): the --against file, parsed."""

    path: str
    #: "environment.yml" or "requirements".
    format: str


_CONDA_SPEC = re.compile(r"^(?:(?P<channel>[^:\s]+)::)?(?P<name>[A-Za-z0-9_][A-Za-z0-9_.\-]*)\s*(?P<rest>.*)$")
MAX_INCLUDE_DEPTH = 5


class SpecError(Exception):
    """The --against file cannot be read at all."""


def _empty() -> ParsedSpec:
    return {"name": None, "channels": [], "conda": [], "pip": [], "skipped": []}


def parse_conda_spec(text: str, line: int = 0) -> CondaWanted | None:
    """`conda-forge::numpy=1.26.4=py311_0` -> channel, name, version constraint, build."""
    text = text.strip()
    bracket = text.find("[")
    if bracket > 0:
        text = text[:bracket]
    match = _CONDA_SPEC.match(text)
    if not match:
        return None
    rest = match.group("rest").strip()
    version = build = None
    if rest.startswith("==") or rest[:1] in "<>!~":
        version = rest.replace(" ", "")
    elif rest.startswith("="):
        pieces = rest[1:].split("=", 1)
        version = "=" + pieces[0].strip()
        build = pieces[1].strip() if len(pieces) > 1 else None
    elif rest:
        pieces = rest.split()
        version = "==" + pieces[0] if "*" not in pieces[0] and pieces[0][:1] not in "<>=!~" else pieces[0]
        build = pieces[1] if len(pieces) > 1 else None
    return {"spec": match.group(0).strip(), "name": match.group("name").lower(),
            "channel": match.group("channel"), "version": version or None, "build": build, "line": line}


def parse_pip_line(text: str, line: int = 0) -> PipWanted | None:
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        req = Requirement(text)
    except InvalidRequirement:
        return None
    return {"spec": text.strip(), "name": req.name, "specifier": str(req.specifier) or None,
            "marker": str(req.marker) if req.marker else None, "url": req.url, "line": line}


def _strip_comment(line: str) -> str:
    # A '#' starts a comment at the line's start or after whitespace (not inside URLs' fragments).
    return re.split(r"(?:^|\s)#", line, maxsplit=1)[0].rstrip()


def _unquote(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def _flow_list(text: str) -> list[str]:
    inner = text.strip()[1:-1]
    return [_unquote(item) for item in inner.split(",") if item.strip()]


# complexity: 25 — a small YAML-subset reader (block and flow lists, comments, the pip: block) as one line loop; its
#   states are the branches.
def parse_environment_yml(text: str, path: Path | None = None) -> ParsedSpec:
    """name, channels, conda and pip dependencies of an environment.yml (block or flow lists).

    A `-r requirements.txt` in the pip section is followed (relative to the
    file's folder, as `conda env create` passes it to pip) when `path` is known.
    """
    result = _empty()
    section = None
    in_pip = False
    pip_indent = -1
    for number, raw in enumerate(text.splitlines(), 1):
        line = _strip_comment(raw)
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        stripped = line.strip()
        if indent == 0 and not stripped.startswith("-"):
            key, _, value = stripped.partition(":")
            section, in_pip = key.strip(), False
            value = value.strip()
            if section == "name" and value:
                result["name"] = _unquote(value)
            elif value.startswith("[") and value.endswith("]"):
                items = _flow_list(value)
                if section == "channels":
                    result["channels"] += items
                elif section == "dependencies":
                    for item in items:
                        _add_conda(result, item, number)
            continue
        if not stripped.startswith("-"):
            continue
        item = _unquote(stripped[1:].strip())
        if in_pip and indent > pip_indent:
            if path is not None and _is_include(item):
                _include(result, item, number, path.parent, 0, {path.resolve()})
            else:
                _add_pip(result, item, number)
            continue
        in_pip = False
        if section == "channels":
            result["channels"].append(item)
        elif section == "dependencies":
            if item.rstrip(":") == "pip" and item.endswith(":"):
                in_pip, pip_indent = True, indent
                continue
            if item.startswith("pip:") and item[4:].strip().startswith("["):
                for pip_item in _flow_list(item[4:].strip()):
                    parsed = parse_pip_line(pip_item, number)
                    if parsed:
                        result["pip"].append(parsed)
                continue
            _add_conda(result, item, number)
    return result


def _add_pip(result: ParsedSpec, item: str, number: int, file: str | None = None) -> None:
    """One pip requirement line into `result`; options (-r, --index-url …) are not packages."""
    if item.startswith("-"):
        result["skipped"].append({"line": number, "text": item, "reason": "a pip option, not a package"})
        return
    parsed = parse_pip_line(item, number)
    if parsed is None:
        result["skipped"].append({"line": number, "text": item, "reason": "not a valid requirement"})
        return
    if file is not None:
        parsed["file"] = file
    result["pip"].append(parsed)


def _add_conda(result: ParsedSpec, item: str, number: int) -> None:
    parsed = parse_conda_spec(item, number)
    if parsed is None:
        result["skipped"].append({"line": number, "text": item, "reason": "not a conda match spec"})
    else:
        result["conda"].append(parsed)


#: Options pip allows after a requirement on its line; they do not change what is pinned.
_PER_REQUIREMENT_OPTION = re.compile(r"(?<=\s)--(?:hash|config-settings|global-option|install-option)(?:=|\s+)\S+")


def parse_requirements(path: Path, depth: int = 0, seen: set[Path] | None = None) -> ParsedSpec:
    """The requirements of a pip requirements file and of the files it includes (`-r`).

    `seen` holds the files already read in this run: each is read once, so a file
    that includes itself, or fifty lines including the same file, costs one read.
    """
    result = _empty()
    seen = set() if seen is None else seen
    seen.add(path.resolve())
    text = _read(path)
    pending = ""
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        if not pending:
            start = number  # a requirement continued over lines is reported at its first line
        line = _strip_comment(pending + raw).strip()
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        # pip-compile --generate-hashes writes `pkg==1.0 --hash=sha256:…`: the pin is still a pin.
        line = _PER_REQUIREMENT_OPTION.sub("", line).strip()
        number = start
        if not line:
            continue
        if _is_include(line):
            _include(result, line, number, path.parent, depth, seen)
            continue
        _add_pip(result, line, number, file=str(path))
    return result


def _is_include(line: str) -> bool:
    return line.startswith(("-r ", "-r\t", "--requirement"))


def _include(result: ParsedSpec, line: str, number: int, folder: Path, depth: int, seen: set[Path]) -> None:
    """A `-r FILE` line: FILE's requirements (relative to `folder`) join `result`."""
    target = line.split(None, 1)[1] if " " in line or "\t" in line else line.partition("=")[2]
    include = (folder / target.strip()).resolve()
    if include in seen:
        result["skipped"].append({"line": number, "text": line, "reason": "already read"})
        return
    if depth >= MAX_INCLUDE_DEPTH:
        result["skipped"].append({"line": number, "text": line, "reason": "includes nested too deep"})
        return
    try:
        nested = parse_requirements(include, depth + 1, seen)
    except SpecError as exc:
        result["skipped"].append({"line": number, "text": line, "reason": str(exc)})
        return
    result["pip"] += nested["pip"]
    result["skipped"] += nested["skipped"]


#: An environment or requirements file larger than this is not one a person wrote.
MAX_SPEC_BYTES = 16 << 20


def _read(path: Path) -> str:
    """The file's text: a regular file only (never a blocking FIFO), at most MAX_SPEC_BYTES."""
    from envdoctor.facts.readfile import read_bytes

    try:
        return read_bytes(str(path), MAX_SPEC_BYTES).decode("utf-8")
    except FileNotFoundError:
        raise SpecError(f"the --against file {path} does not exist") from None
    except UnicodeDecodeError as exc:
        raise SpecError(f"the --against file {path} is not UTF-8 text ({exc.reason})") from None
    except OSError as exc:
        raise SpecError(f"cannot read the --against file {path}: {exc.strerror or exc}") from None


def is_environment_file(path: Path, text: str) -> bool:
    if path.suffix in (".yml", ".yaml"):
        return True
    return bool(re.search(r"^dependencies\s*:", text, re.MULTILINE))


def gather_spec(facts: Any) -> SpecFacts | None:
    """The "spec" section, or None when no --against file was given."""
    against = facts.config.against
    if not against:
        return None
    path = Path(against).expanduser()
    text = _read(path)
    if is_environment_file(path, text):
        parsed = parse_environment_yml(text, path)
        fmt = "environment.yml"
    else:
        parsed = parse_requirements(path)
        fmt = "requirements"
    return {"path": str(path), "format": fmt, **parsed}
