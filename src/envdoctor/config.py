"""Settings for one run: defaults, then `[tool.envdoctor]` in pyproject.toml, then flags.

Every setting is declared once, as a field of `Config` made by one of the
helpers below (`text`, `number`, `switch`, `choice`, `rule_list`,
`severity_map`). That declaration holds the default, the command-line flags,
the help text, the allowed choices and whether `[tool.envdoctor]` may set it;
everything else is derived from it:

* the argparse options (`add_arguments`, used by cli.py),
* the pyproject reader (`read_pyproject`: unknown keys and wrong types are
  errors that name the key),
* the checks on values (`validate`, also what the Python API goes through),
* the Python API's keyword arguments (`config_from_settings`).

Adding a setting is one entry: a new field here, e.g.

    procs_per_node: int | None = number(None, "--procs-per-node", metavar="N", group=HOW,
                                        integer=True, help="processes per node sharing the CPUs")

and code that reads `config.procs_per_node`. A field made without a helper
(`loader_object`, `config_file`, `scripts`) is not a setting: no flag, no key.

A setting that leads to running code (`runs_code=True`: `prefix` and `--name`
start that environment's interpreter, `dataset` imports the project's module,
`deep` imports every compiled package) is taken from a repository's
pyproject.toml only with the user's consent (`trusted_project`): a cloned
repository must not choose the interpreter the pre-commit hook, the Action
or `check` starts. Given on the command line it is always honoured; from an
untrusted pyproject.toml it is ignored, and the run says so and why.
"""
from __future__ import annotations

import math
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import MISSING, Field, dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from envdoctor.model import FAIL_ON_CHOICES, FORMATS, Severity

if TYPE_CHECKING:  # pragma: no cover
    import argparse
    from collections.abc import Callable

#: What `--platform` may ask the spawn guard about (sys.platform values).
PLATFORMS = ("linux", "darwin", "win32")

#: The help groups the options are listed under.
TARGET, HOW, RULES, OUTPUT = "what to inspect", "how to check", "which rules", "output"


class ConfigError(Exception):
    """A setting is wrong; the message names it and says what was expected."""


@dataclass(frozen=True)
class Setting:
    """How one Config field is set: its kind of value, flags, help, choices, pyproject key."""

    kind: str  # "text", "number", "switch", "choice", "rules", "severity"
    flags: tuple[str, ...]
    help: str
    group: str
    metavar: str | None = None
    choices: tuple[str, ...] = ()
    #: Extra flags that set a fixed value, e.g. {"--json": "json"} for --format.
    shortcuts: Mapping[str, str] = field(default_factory=dict)
    #: May `[tool.envdoctor]` set it? (Where the report goes is the caller's business.)
    in_pyproject: bool = True
    #: Does it lead to running code (an interpreter, a module)? Then pyproject.toml sets it only with consent.
    runs_code: bool = False
    integer: bool = False
    name: str = ""
    default: object = None

    @property
    def pyproject_key(self) -> str:
        return self.name.replace("_", "-")

    @property
    def flag(self) -> str:
        """The flag as messages name it (the long one)."""
        return self.flags[-1]


_Value = TypeVar("_Value")
_Number = TypeVar("_Number", bound="float | None")
_Word = TypeVar("_Word", bound="str | None")


def _declare(default: _Value, setting: Setting) -> _Value:
    """The dataclass field of a setting (typed as its default: it stands for the field's value)."""
    return field(default=default, metadata={"setting": setting})


def _declare_made(factory: Callable[[], _Value], setting: Setting) -> _Value:
    """The same, for a setting whose default is made afresh for each Config (a dict)."""
    return field(default_factory=factory, metadata={"setting": setting})


def text(*flags: str, help: str, group: str, metavar: str | None = None, in_pyproject: bool = True,
         runs_code: bool = False) -> str | None:
    """A string setting (a path, a name); never empty. Default None."""
    return _declare(None, Setting("text", flags, help, group, metavar, in_pyproject=in_pyproject,
                                  runs_code=runs_code))


def number(default: _Number, *flags: str, help: str, group: str, metavar: str = "SECONDS",
           integer: bool = False, in_pyproject: bool = True) -> _Number:
    """A positive, finite number (seconds unless said otherwise)."""
    return _declare(default, Setting("number", flags, help, group, metavar, integer=integer,
                                     in_pyproject=in_pyproject))


def switch(*flags: str, help: str, group: str, in_pyproject: bool = True, runs_code: bool = False) -> bool:
    """An on/off setting, off by default; the flag turns it on."""
    return _declare(False, Setting("switch", flags, help, group, in_pyproject=in_pyproject, runs_code=runs_code))


def choice(default: _Word, choices: Iterable[str], *flags: str, help: str, group: str,
           shortcuts: Mapping[str, str] | None = None, in_pyproject: bool = True) -> _Word:
    """One of a fixed set of words."""
    return _declare(default, Setting("choice", flags, help, group, choices=tuple(choices),
                                     shortcuts=dict(shortcuts or {}), in_pyproject=in_pyproject))


def rule_list(*flags: str, help: str, group: str) -> tuple[str, ...]:
    """Rule ids, names or families; commas allowed."""
    no_rules: tuple[str, ...] = ()
    return _declare(no_rules, Setting("rules", flags, help, group, "RULE"))


def severity_map(*flags: str, help: str, group: str) -> dict[str, str]:
    """RULE=LEVEL pairs (RULE an id, name or family)."""
    return _declare_made(dict[str, str], Setting("severity", flags, help, group, "RULE=LEVEL"))


@dataclass(frozen=True)
class Config:
    """All the settings of one check, each declared once (see the module docstring)."""

    prefix: str | None = text("--prefix", metavar="PATH", group=TARGET, runs_code=True,
                              help="inspect the conda env, venv or pixi env at PATH")
    env_name: str | None = text("-n", "--name", metavar="NAME", group=TARGET, runs_code=True,
                                help="inspect the conda env called NAME")
    data: str | None = text("--data", metavar="PATH", group=TARGET,
                            help="where the training data lives (storage checks, file-reading smoke test)")
    dataset: str | None = text("--dataset", metavar="MODULE:CALLABLE", group=TARGET, runs_code=True,
                               help="a factory returning your Dataset, or (Dataset, DataLoader kwargs)")
    against: str | None = text("--against", metavar="FILE", group=TARGET,
                               help="environment.yml or requirements file to compare with")
    no_loader: bool = switch("--no-loader", group=HOW, help="static checks only: skip the DataLoader smoke test")
    budget: float = number(15.0, "--budget", group=HOW, help="time budget of the loader stage")
    step_time: float | None = number(None, "--step-time", group=HOW,
                                     help="seconds your training step takes per batch")
    deep: bool = switch("--deep", group=HOW, runs_code=True, help="run the slow checks too (file hashes, the torch import probe, "
                                                  "an import of each compiled package: runs the environment's code)")
    distributed: bool = switch("--distributed", group=HOW, in_pyproject=False,
                               help="under torchrun: gather every rank's facts to rank 0 and print the fleet view")
    distributed_timeout: float = number(120.0, "--distributed-timeout", group=HOW, in_pyproject=False,
                                        help="with --distributed: how long rank 0 waits for the other ranks")
    select: tuple[str, ...] = rule_list("--select", group=RULES, help="run only these rules or families")
    ignore: tuple[str, ...] = rule_list("--ignore", group=RULES, help="skip these rules or families")
    severity: dict[str, str] = severity_map("--severity", group=RULES,
                                            help="override the severity (error, warning, info) of a rule, "
                                                 "or of every rule of a family")
    fail_on: str = choice("error", FAIL_ON_CHOICES, "--fail-on", group=RULES,
                          help="lowest severity that makes the exit code 1")
    format: str = choice("text", FORMATS, "--format", group=OUTPUT, shortcuts={"--json": "json"},
                         help="output format")
    output: str | None = text("-o", "--output", metavar="FILE", group=OUTPUT, in_pyproject=False,
                              help="write the report to FILE instead of standard output "
                                   "(placeholders such as {node} and {rank} are filled in: docs/clusters.md)")
    verbose: bool = switch("-v", "--verbose", group=OUTPUT, help="show each finding's evidence")
    svg: str | None = text("--svg", metavar="FILE", group=OUTPUT, in_pyproject=False,
                           help="also save the text report as an SVG picture")

    procs_per_node: int | None = number(None, "--procs-per-node", metavar="N", integer=True, group=HOW,
                                        help="training processes per node that share its CPUs "
                                             "(default: LOCAL_WORLD_SIZE, else 1)")
    #: The spawn guard's what-if: judge scripts for this platform / Python (X.Y) instead of the target's.
    platform: str | None = choice(None, PLATFORMS, "--platform", group=TARGET,
                                  help="judge the spawn guard for this platform instead of the target's")
    python_version: str | None = text("--python-version", metavar="X.Y", group=TARGET,
                                      help="judge the spawn guard for this Python version (e.g. 3.14) instead of the target's")

    #: Not settings. The scripts are positional arguments of `check` and `report`.
    scripts: tuple[str, ...] = ()
    #: Filled in by preflight(): the user's own DataLoader object.
    loader_object: object = None
    #: Filled in by `envdoctor run --tune`: the user's DataLoader, pickled by the loop observer.
    loader_source: Mapping[str, object] | None = None
    #: Where the settings file was read from, if any.
    config_file: str | None = None
    #: The pyproject.toml settings that were ignored for want of consent, each with why (said on stderr).
    ignored_settings: tuple[str, ...] = ()

    def with_overrides(self, **changes: Any) -> Config:
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


def _setting_of(f: Field[object]) -> Setting | None:
    setting = f.metadata.get("setting")
    if setting is None:
        return None
    default = f.default if f.default is not MISSING else (
        f.default_factory() if f.default_factory is not MISSING else None)
    return replace(setting, name=f.name, default=default)


#: Every setting, in the order `--help` lists them: derived from Config.
SETTINGS: tuple[Setting, ...] = tuple(s for s in map(_setting_of, fields(Config)) if s is not None)
SETTINGS_BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}


# --- values ---------------------------------------------------------------

def _number_problem(setting: Setting, value: object) -> str | None:
    """Why `value` is not a valid value of a number setting (None when it is)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "a number"
    if not math.isfinite(value) or value <= 0:
        return "a positive, finite number" + (" of seconds" if setting.metavar == "SECONDS" else "")
    if setting.integer and value != int(value):
        return "a whole number"
    return None


def parse_number(setting: Setting, raw: str) -> float | int:
    """A number flag's value, refused (as the flag) when it is not positive and finite."""
    try:
        value: float | int = int(raw) if setting.integer else float(raw)
    except ValueError:
        raise ValueError(f"expected {'a whole number' if setting.integer else 'a number'}, not {raw!r}") from None
    problem = _number_problem(setting, value)
    if problem:
        raise ValueError(f"expected {problem}, not {raw!r}")
    return value


def parse_text(raw: str) -> str:
    if not raw.strip():
        raise ValueError("expected a value, not an empty string")
    return raw


def parse_severity_pairs(raw: str) -> list[tuple[str, str]]:
    """`SYS003=error` or `SYS003=error,DL=info` as (rule, level) pairs."""
    pairs = []
    for part in raw.split(","):
        rule, sep, level = part.partition("=")
        if not sep or not rule.strip() or not level.strip():
            raise ValueError(f"expected RULE=LEVEL (e.g. SYS003=error), not {raw!r}")
        pairs.append((rule.strip().upper(), level.strip().lower()))
    return pairs


def _check_value(setting: Setting, value: object, where: str) -> Any:
    """`value` as the Config field holds it, or a ConfigError naming `where`."""
    kind = setting.kind
    if kind == "text":
        if not isinstance(value, str):
            raise ConfigError(f"{where} must be a string, not {value!r}")
        if not value.strip():
            raise ConfigError(f"{where} must not be empty")
        return value
    if kind == "switch":
        if not isinstance(value, bool):
            raise ConfigError(f"{where} must be true or false, not {value!r}")
        return value
    if kind == "number":
        problem = _number_problem(setting, value)
        if problem:
            raise ConfigError(f"{where} must be {problem}, not {value!r}")
        return value
    if kind == "choice":
        if value not in setting.choices:
            raise ConfigError(f"{where} must be one of {', '.join(setting.choices)}, not {value!r}")
        return value
    if kind == "rules":
        if isinstance(value, str) or not isinstance(value, (list, tuple)) \
                or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{where} must be a list of strings, not {value!r}")
        return tuple(value)
    if kind == "severity":
        if not isinstance(value, Mapping) or not all(isinstance(v, str) for v in value.values()):
            raise ConfigError(f"{where} must be a table of RULE = \"LEVEL\" strings, not {value!r}")
        for rule_id, level in value.items():
            try:
                Severity.parse(level)
            except ValueError as exc:
                raise ConfigError(f"{where} for {rule_id}: {exc}") from None
        return {str(k).upper(): str(v).lower() for k, v in value.items()}
    raise AssertionError(f"unknown kind of setting {kind!r}")  # pragma: no cover


def validate(config: Config) -> Config:
    """Check every setting's value against its declaration (what types alone do not catch)."""
    for setting in SETTINGS:
        value = getattr(config, setting.name)
        if value is None or (setting.kind == "switch" and value is False) or value == setting.default:
            continue
        _check_value(setting, value, setting.name)
    if config.python_version is not None and not re.fullmatch(r"3\.\d{1,2}", config.python_version):
        raise ConfigError(f"python_version must be X.Y, such as 3.14, not {config.python_version!r}")
    return config


def config_from_settings(settings: Mapping[str, Any], **extra: Any) -> Config:
    """A validated Config from keyword settings (the Python API); unknown names are errors."""
    for name in settings:
        if name not in SETTINGS_BY_NAME:
            raise ConfigError(f"unknown setting {name!r} (known: {', '.join(SETTINGS_BY_NAME)})")
    values = {name: _check_value(SETTINGS_BY_NAME[name], value, name)
              for name, value in settings.items() if value is not None}
    return validate(Config(**values, **extra))


# --- the command line -------------------------------------------------------

def help_formatter() -> type[argparse.HelpFormatter]:
    """The `--help` formatter of every command: the description wrapped to the terminal as argparse wraps it,
    and each line of an epilog (the exit codes, one a line) kept its own, wrapped under its indent."""
    import argparse
    import textwrap

    class HelpFormatter(argparse.HelpFormatter):
        def _fill_text(self, text: str, width: int, indent: str) -> str:
            lines = []
            for line in text.splitlines():
                body = line.lstrip(" ")
                hang = " " * (len(line) - len(body))
                # "  1  findings ...": the continuation lines start under the text, past the code.
                label = re.match(r"\S+ {2,}", body) if hang else None
                under = hang + " " * (label.end() if label else 0)
                lines.append(textwrap.fill(body, width, initial_indent=indent + hang,
                                           subsequent_indent=indent + under, break_on_hyphens=False,
                                           break_long_words=False) if body else "")
            return "\n".join(lines)

    return HelpFormatter


def add_arguments(parser: argparse.ArgumentParser, names: Iterable[str] | None = None,
                  defaults: Mapping[str, Any] | None = None, *, leave_out: Iterable[str] = ()) -> None:
    """Add the options of these settings (all by default, less `leave_out`) to an argparse parser.

    Every option defaults to None, so `config_from_args` can tell a flag given
    from one left out (and the pyproject value stands).
    """
    import argparse

    wanted = set(names) if names is not None else None
    left_out = set(leave_out)
    groups: dict[str, Any] = {}
    for setting in SETTINGS:
        if (wanted is not None and setting.name not in wanted) or setting.name in left_out:
            continue
        target = parser if wanted is not None else groups.setdefault(
            setting.group, parser.add_argument_group(setting.group))
        default = (defaults or {}).get(setting.name, setting.default)
        shown = f"{default:g}" if isinstance(default, float) else default
        help_text = setting.help + (f" (default: {shown})" if default else "")
        options: dict[str, Any] = {"dest": setting.name, "help": help_text, "default": None}
        if setting.kind == "switch":
            options["action"] = "store_true"
        elif setting.kind == "choice":
            options["choices"] = setting.choices
        else:
            options["metavar"] = setting.metavar
            options["type"] = _argparse_type(setting, argparse.ArgumentTypeError)
            if setting.kind in ("rules", "severity"):
                # Lists may repeat and take commas; file names after them are scripts (cli._take_scripts),
                # so a --severity token is parsed there, not here.
                options.update(nargs="+", action="extend")
                if setting.kind == "severity":
                    options["type"] = str
        target.add_argument(*setting.flags, **options)
        for flag, const in setting.shortcuts.items():
            target.add_argument(flag, action="store_const", const=const, dest=setting.name,
                                help=f"same as {setting.flag} {const}")


def _argparse_type(setting: Setting, error: type[Exception]) -> Callable[[str], object]:
    def parse(raw: str) -> object:
        try:
            if setting.kind == "number":
                return parse_number(setting, raw)
            if setting.kind == "severity":
                return parse_severity_pairs(raw)
            return parse_text(raw)
        except ValueError as exc:
            raise error(str(exc)) from None

    parse.__name__ = setting.kind  # argparse names the type in some messages
    return parse


def settings_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The settings given on the command line (the others are absent, not None)."""
    given: dict[str, Any] = {}
    for setting in SETTINGS:
        value = getattr(args, setting.name, None)
        if value is None:
            continue
        if setting.kind == "rules":
            value = tuple(value)
        elif setting.kind == "severity":
            value = {rule: level for pairs in value for rule, level in pairs}
        given[setting.name] = value
    return given


# --- pyproject.toml ---------------------------------------------------------

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
    if sys.version_info >= (3, 11):  # imported here: `render` reads no settings and no catalog
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
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
    allowed = {s.pyproject_key: s for s in SETTINGS if s.in_pyproject}
    settings: dict[str, Any] = {}
    for raw_key, value in table.items():
        setting = allowed.get(raw_key.replace("_", "-"))
        if setting is None:
            raise ConfigError(f"{path}: unknown key {raw_key!r} in [tool.envdoctor] (known: {', '.join(allowed)})")
        settings[setting.name] = _check_value(setting, value, f"{path}: [tool.envdoctor] {raw_key}")
    return settings


# --- consent: code a repository's settings may make envdoctor run -----------------------------------

#: The user's consent, as folders (os.pathsep between them) whose pyproject.toml may name code to run.
TRUST_ENV = "ENVDOCTOR_TRUST_PROJECT"
#: The same as a file of the user's own: one folder a line (`#` starts a comment).
TRUSTED_PROJECTS_FILE = "trusted-projects"


def trusted_projects_file() -> Path:
    """`$XDG_CONFIG_HOME/envdoctor/trusted-projects` (else ~/.config/…; %APPDATA%\\envdoctor\\… on Windows)."""
    import os

    if sys.platform == "win32" and os.environ.get("APPDATA"):
        base = Path(os.environ["APPDATA"])
    elif os.environ.get("XDG_CONFIG_HOME"):
        base = Path(os.environ["XDG_CONFIG_HOME"])
    else:
        base = Path(os.path.expanduser("~")) / ".config"  # no home at all: "~", a file that is not there
    return base / "envdoctor" / TRUSTED_PROJECTS_FILE


def _listed_in_file(path: Path) -> tuple[list[str], str | None]:
    """The folders the user's file lists, or why it is not read (another user could have written it)."""
    import os
    import stat

    try:
        info = path.stat()
    except OSError:
        return [], None
    if sys.platform != "win32":
        if info.st_uid != os.getuid():
            return [], f"{path} is not owned by you, so it is not read"
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return [], f"{path} is writable by other users, so it is not read"
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as exc:
        return [], f"cannot read {path}: {exc.strerror or exc}"
    return [line.split("#", 1)[0].strip() for line in lines if line.split("#", 1)[0].strip()], None


def trusted_project(folder: Path, environ: Mapping[str, str] | None = None) -> tuple[bool, str | None]:
    """(whether the user consented to `folder`'s pyproject.toml naming code to run, a problem with the file).

    Consent is the folder itself, named by the user outside the repository: in ENVDOCTOR_TRUST_PROJECT or
    in the user's trusted-projects file. Nothing in the repository can give it.
    """
    import os

    environ = os.environ if environ is None else environ
    listed = [entry for entry in environ.get(TRUST_ENV, "").split(os.pathsep) if entry.strip()]
    from_file, problem = _listed_in_file(trusted_projects_file())
    here = os.path.realpath(folder)
    for entry in [*listed, *from_file]:
        if os.path.realpath(os.path.expanduser(entry)) == here:
            return True, None
    return False, problem


def _without_consent(settings: dict[str, Any], path: Path) -> tuple[dict[str, Any], tuple[str, ...]]:
    """`settings` less those that would run code, unless the user trusts this project; and why each went."""
    risky = [name for name in settings if SETTINGS_BY_NAME[name].runs_code and settings[name] not in (None, False)]
    if not risky:
        return settings, ()
    trusted, problem = trusted_project(path.parent)
    if trusted:
        return settings, ()
    folder = path.parent.resolve()
    notes = []
    for name in risky:
        setting = SETTINGS_BY_NAME[name]
        value = settings.pop(name)
        shown = f"{setting.pyproject_key} = {value!r}" if not isinstance(value, bool) else f"{setting.pyproject_key} = true"
        notes.append(f"ignored {shown} from {path}: a project's settings may not choose code for envdoctor to run "
                     f"({_what_it_runs(name, value)}); give {setting.flag} on the command line, or trust this "
                     f"project: {TRUST_ENV}={folder}, or add {folder} to {trusted_projects_file()}"
                     + (f" ({problem})" if problem else ""))
    return settings, tuple(notes)


def _what_it_runs(name: str, value: object) -> str:
    if name == "prefix":
        return f"it would start the interpreter in {value}"
    if name == "env_name":
        return f"it would start the interpreter of the conda env {value}"
    if name == "dataset":
        return f"it would import and call {value}"
    return "it would import every compiled package of the environment"


def load_config(cli: Mapping[str, Any], pyproject: Path | None | bool = True,
                defaults: Mapping[str, Any] | None = None, say: Callable[[str], None] | None = None) -> Config:
    """Defaults, overridden by pyproject.toml, overridden by the command line.

    A setting of pyproject.toml that would run code is dropped without the user's consent
    (`trusted_project`), unless the command line gives it anyway; `say` (standard error by
    default) is told each one dropped and why, and the Config keeps them in `ignored_settings`.
    """
    base: dict[str, Any] = dict(defaults or {})
    path: Path | None = None
    if pyproject is True:
        path = find_pyproject()
    elif isinstance(pyproject, Path):
        path = pyproject
    ignored: tuple[str, ...] = ()
    if path is not None:
        from_file = read_pyproject(path)
        overridden = {name for name, value in cli.items() if value is not None}
        kept, ignored = _without_consent({k: v for k, v in from_file.items() if k not in overridden}, path)
        base.update(kept)
        base["config_file"] = str(path)
        for note in ignored:
            if say is None:
                print(f"envdoctor: note: {note}", file=sys.stderr)
            else:
                say(note)
        base["ignored_settings"] = ignored
    known = {f.name for f in fields(Config)}
    merged = {**base, **{k: v for k, v in cli.items() if v is not None and k in known}}
    if "severity" in base and cli.get("severity"):
        merged["severity"] = {**base["severity"], **cli["severity"]}
    return validate(Config(**merged))


class Configured(Protocol):
    """What a gatherer that reads only the configuration needs of the `Facts` it fills (`facts.config`): named
    here so those gatherers need not import `envdoctor.facts`, which imports them."""

    @property
    def config(self) -> Config: ...


class FactsReader(Configured, Protocol):
    """What a gatherer reads of the `Facts` it fills: the configuration, and the sections it declares it reads.

    A section's type follows from its name (the overloads of `Facts.__getitem__`, in `envdoctor.facts`, which
    imports the gatherers: so not named here); `get` is None, or `default`, when that section's probe failed."""

    def __getitem__(self, section: str, /) -> Any: ...

    def get(self, section: str, default: object = None, /) -> Any: ...

    def handed_over(self, section: str, /) -> dict[str, Any]: ...
