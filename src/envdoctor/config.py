"""Settings for one run: defaults, then `[tool.envdoctor]` in pyproject.toml, then flags.

Every setting is declared once in `SETTINGS` with its type; the pyproject
table is checked against it (unknown keys and wrong types are errors that
name the key), and the command line overrides what the file says.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from envdoctor.model import FAIL_ON_CHOICES, Severity

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

FORMATS = ("text", "json", "sarif", "markdown")


class ConfigError(Exception):
    """A setting is wrong; the message names it and says what was expected."""


@dataclass(frozen=True)
class Config:
    """All the settings of one check."""

    prefix: str | None = None
    env_name: str | None = None
    data: str | None = None
    dataset: str | None = None
    scripts: tuple[str, ...] = ()
    no_loader: bool = False
    budget: float = 15.0
    step_time: float | None = None
    deep: bool = False
    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    severity: dict[str, str] = field(default_factory=dict)
    fail_on: str = "error"
    format: str = "text"
    output: str | None = None
    against: str | None = None
    svg: str | None = None
    distributed: bool = False
    distributed_timeout: float = 120.0
    #: Filled in by preflight(): the user's own DataLoader object.
    loader_object: Any = None
    #: Filled in by preflight(): training processes on this node that share its usable CPUs.
    procs_per_node: int = 1
    #: Where the settings file was read from, if any.
    config_file: str | None = None

    def with_overrides(self, **changes: Any) -> Config:
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


#: Keys allowed in [tool.envdoctor] and the type each must have.
SETTINGS: dict[str, tuple[type, ...]] = {
    "prefix": (str,),
    "env_name": (str,),
    "data": (str,),
    "dataset": (str,),
    "no_loader": (bool,),
    "budget": (int, float),
    "step_time": (int, float),
    "deep": (bool,),
    "select": (list,),
    "ignore": (list,),
    "severity": (dict,),
    "fail_on": (str,),
    "format": (str,),
    "against": (str,),
}


def _type_name(types: tuple[type, ...]) -> str:
    names = {"str": "a string", "bool": "true or false", "int": "a number", "float": "a number",
             "list": "a list of strings", "dict": "a table"}
    return " or ".join(dict.fromkeys(names[t.__name__] for t in types))


def validate(config: Config) -> Config:
    """Check values that types alone do not catch."""
    if config.fail_on not in FAIL_ON_CHOICES:
        raise ConfigError(f"fail_on must be one of {', '.join(FAIL_ON_CHOICES)}, not {config.fail_on!r}")
    if config.format not in FORMATS:
        raise ConfigError(f"format must be one of {', '.join(FORMATS)}, not {config.format!r}")
    for rule_id, level in config.severity.items():
        try:
            Severity.parse(level)
        except ValueError as exc:
            raise ConfigError(f"severity for {rule_id}: {exc}") from None
    if config.budget <= 0:
        raise ConfigError(f"budget must be a positive number of seconds, not {config.budget}")
    if config.distributed_timeout <= 0:
        raise ConfigError(f"distributed_timeout must be a positive number of seconds, not {config.distributed_timeout}")
    if config.procs_per_node < 1:
        raise ConfigError(f"procs_per_node must be a whole number of at least 1, not {config.procs_per_node}")
    if config.step_time is not None and config.step_time <= 0:
        raise ConfigError(f"step_time must be a positive number of seconds, not {config.step_time}")
    return config


def find_pyproject(start: Path | None = None) -> Path | None:
    """The nearest pyproject.toml from `start` (the working directory) upwards."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
        if (folder / ".git").exists():
            break
    return None


def read_pyproject(path: Path) -> dict[str, Any]:
    """The `[tool.envdoctor]` table of one pyproject.toml, checked key by key."""
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from None
    table = data.get("tool", {}).get("envdoctor", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.envdoctor] must be a table")
    settings: dict[str, Any] = {}
    for raw_key, value in table.items():
        key = raw_key.replace("-", "_")
        if key not in SETTINGS:
            known = ", ".join(k.replace("_", "-") for k in SETTINGS)
            raise ConfigError(f"{path}: unknown key {raw_key!r} in [tool.envdoctor] (known: {known})")
        types = SETTINGS[key]
        if isinstance(value, bool) and bool not in types:
            raise ConfigError(f"{path}: [tool.envdoctor] {raw_key} must be {_type_name(types)}, not {value!r}")
        if not isinstance(value, types):
            raise ConfigError(f"{path}: [tool.envdoctor] {raw_key} must be {_type_name(types)}, not {value!r}")
        if key in ("select", "ignore"):
            if not all(isinstance(v, str) for v in value):
                raise ConfigError(f"{path}: [tool.envdoctor] {raw_key} must be a list of strings")
            value = tuple(value)
        if key == "severity":
            if not all(isinstance(v, str) for v in value.values()):
                raise ConfigError(f"{path}: [tool.envdoctor] severity values must be strings")
            value = {k.upper(): v for k, v in value.items()}
        settings[key] = value
    return settings


def load_config(cli: dict[str, Any], pyproject: Path | None | bool = True,
                defaults: dict[str, Any] | None = None) -> Config:
    """Defaults, overridden by pyproject.toml, overridden by the command line."""
    base: dict[str, Any] = dict(defaults or {})
    path: Path | None = None
    if pyproject is True:
        path = find_pyproject()
    elif isinstance(pyproject, Path):
        path = pyproject
    if path is not None:
        base.update(read_pyproject(path))
        base["config_file"] = str(path)
    known = {f.name for f in fields(Config)}
    merged = {**base, **{k: v for k, v in cli.items() if v is not None and k in known}}
    if "severity" in base and "severity" in cli and cli["severity"]:
        merged["severity"] = {**base["severity"], **cli["severity"]}
    return validate(Config(**merged))

