"""`envdoctor mcp`: the checks as tools for AI coding agents (Model Context Protocol, over stdio).

An agent reads untrusted text and can be steered by it, so every argument of
every call is treated as hostile (docs/mcp.md has the threat model):

* arguments are data: checked by type and shape before a process starts
  (`mcp_arguments`), passed as `--flag=VALUE`, positionals after `--`;
* paths resolve inside the roots: the client's declared roots, else the
  server's `--root` folders, else its working directory;
* running code is a capability a tool says it has, never a side effect:
  `check`, `explain`, `list_rules` and `compare` read files and run no
  interpreter but envdoctor's own (annotated read-only);
  `check_environment` runs the inspected environment's Python and `loader`
  runs the dataset code (annotated not read-only, open world), and their
  descriptions say so.

Each call runs the `envdoctor` command itself in a child process, with a time
limit, stopped with its loader workers when the limit passes or the server
ends: this process's standard output is the protocol channel, so nothing the
checks or the user's dataset print may reach it, and a hung dataset must not
hang the agent. The child runs in the server's working directory (`loader`
with a `dataset`: in the root that holds the dataset's module), so the
project's `[tool.envdoctor]` settings apply, except the target: it is always
given (`--prefix`), so a settings file cannot make a read-only tool start
another interpreter.

Since issue 33, `compare` hands on each report file of a folder, resolved
inside the roots (a link in the folder to a report outside is refused), and
`loader` imports `MODULE:CALLABLE` only from a file inside the roots
(`mcp_arguments.dataset_root`). Requests a client wrote before closing its
input are all answered, in order (`mcp_wire`).

Needs the `mcp` extra (the official MCP Python SDK); `import envdoctor` does not
import it.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal

from envdoctor.errors import UsageError
from envdoctor.integrations import mcp_arguments as arg
from envdoctor.integrations.mcp_arguments import ArgumentProblem, Roots

if TYPE_CHECKING:  # pragma: no cover
    from mcp.server.mcpserver import Context

#: Seconds a static check may take on top of the loader budget (--deep hashes files).
STATIC_ALLOWANCE_S = 240.0
#: The longest answer in characters: agents read it whole, and their context is finite.
MAX_TEXT_CHARS = 200_000
#: Seconds a stopped child gets to clean up its loader workers before it is killed (at a time limit).
STOP_GRACE_S = 5.0
#: The same on SIGTERM to the server, which must be gone within a few seconds.
SIGTERM_GRACE_S = 2.0

INSTRUCTIONS = (
    "envdoctor checks a PyTorch training environment: packages installed twice or from mixed conda channels, "
    "open-file, /dev/shm and CPU limits, the spawn guard of training scripts, the GPU and torch build, storage, "
    "and a live DataLoader smoke test that names the bottleneck and the num_workers to use. Call `check` for a "
    "quick static check (read-only), then `explain` on a finding's rule id for its docs and fix. "
    "`check_environment` runs another environment's Python and `loader` runs the dataset code: ask the user first."
)

FailOn = Literal["error", "warning", "info", "never"]

#: The `envdoctor` children running now: stopped with the server, however it ends.
_RUNNING: set[subprocess.Popen[str]] = set()
_LOCK = threading.Lock()
#: Set on SIGTERM: no new child starts once the server is stopping.
_STOPPING = threading.Event()
#: Where paths must resolve when the client declares no roots: set by serve().
_SERVER_ROOTS: list[Roots] = []


def run_envdoctor(argv: list[str], timeout_s: float, cwd: str | None = None) -> tuple[int, str, str]:
    """Run `envdoctor ARGV` in a child process (in `cwd`, else the server's working directory); (exit code,
    stdout, stderr). Stopped at the limit.

    The child stays in the server's process group, so a client that ends the
    server's group ends it too; at the limit it gets SIGTERM, on which
    envdoctor stops its loader stage and leaves nothing behind.
    """
    command = [sys.executable, "-m", "envdoctor", *argv]
    with _LOCK:
        if _STOPPING.is_set():
            raise _tool_error("the server is stopping")
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, encoding="utf-8", errors="replace", cwd=cwd)
        _RUNNING.add(child)
    with child:
        try:
            out, err = child.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            stop_child(child, STOP_GRACE_S)
            child.communicate()
            raise _tool_error(f"envdoctor {argv[0]} did not finish within {timeout_s:.0f} s and was stopped") from None
        finally:
            with _LOCK:
                _RUNNING.discard(child)
    if _STOPPING.is_set():
        raise _tool_error("the server is stopping; the check was stopped")
    return child.returncode, out, err


def stop_child(child: subprocess.Popen[str], grace_s: float) -> None:
    """SIGTERM (envdoctor cleans up its loader stage), then SIGKILL to the child and whatever it left."""
    import psutil

    from envdoctor.process import hard_kill

    try:
        root = psutil.Process(child.pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.Error:
        return
    child.terminate()
    _, alive = psutil.wait_procs(tree, timeout=grace_s)
    for proc in alive:
        try:
            late = proc.children(recursive=True)  # workers started after the first look
        except psutil.Error:
            late = []
        for each in (proc, *late):
            hard_kill(each)


def stop_running_children(grace_s: float = STOP_GRACE_S) -> None:
    with _LOCK:
        children = list(_RUNNING)
    threads = [threading.Thread(target=stop_child, args=(child, grace_s)) for child in children]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _stop_for_sigterm() -> None:
    _STOPPING.set()
    stop_running_children(SIGTERM_GRACE_S)


def _tool_error(message: str) -> Exception:
    from mcp.server.mcpserver.exceptions import ToolError

    return ToolError(message)


def _report(argv: list[str], positionals: Sequence[str], timeout_s: float, cwd: str | None = None) -> dict[str, Any]:
    """The JSON report of `envdoctor ARGV --format=json -- POSITIONALS`, with its exit code.

    A usage error becomes a tool error.
    """
    code, out, err = run_envdoctor([*argv, "--format=json", "--", *positionals], timeout_s, cwd)
    if code == 2 or not out.strip():
        last = (err.strip().splitlines() or [f"envdoctor exited with status {code} and printed no report"])[-1]
        raise _tool_error(last)
    try:
        report = json.loads(out)
    except ValueError:
        raise _tool_error(f"envdoctor printed something that is not JSON: {out[:200]!r}") from None
    report["exit_code"] = code
    return report


def _flags(**values: str | float | None) -> list[str]:
    """`--name=value` for each value given: attached with `=`, so no value is ever read as an option."""
    return [f"--{name.replace('_', '-')}={value}" for name, value in values.items() if value is not None]


def _rule_flags(select: list[str], ignore: list[str]) -> list[str]:
    return [*(f"--select={rule}" for rule in select), *(f"--ignore={rule}" for rule in ignore)]


def _trim(report: dict[str, Any], include_facts: bool) -> dict[str, Any]:
    if not include_facts:
        report.pop("facts", None)
    return report


def _refusing(tool: Callable[..., Any]) -> Callable[..., Any]:
    """An argument problem becomes a tool error that names the argument (nothing has started)."""
    import functools

    @functools.wraps(tool)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return tool(*args, **kwargs)
        except ArgumentProblem as exc:
            raise _tool_error(str(exc)) from None

    return call


# -- the roots ---------------------------------------------------------------

def ask_for_roots(ctx: Context) -> Any:
    """The client's `roots/list`, when it declared the roots capability; else None (the server's roots).

    The resolver of every tool's `client_roots` parameter: the SDK runs it before the tool, and fills
    `client_roots` with the client's answer (on a 2026-07-28 connection through an input-required round),
    so the agent never sets it and the tool's input schema does not show it.
    """
    from mcp.server.mcpserver.resolve import ListRoots

    capabilities = ctx.client_capabilities
    return ListRoots() if capabilities is not None and capabilities.roots is not None else None


def roots_of(client_roots: Any) -> Roots:
    """Where this call's paths must lie: the client's roots, else the server's."""
    fallback = _SERVER_ROOTS[0] if _SERVER_ROOTS else arg.server_roots([])
    if client_roots is None:
        return fallback
    return Roots.from_client([str(root.uri) for root in client_roots.roots], fallback)


# -- the tools -----------------------------------------------------------------

def _static_argv(roots: Roots, *, select: list[str] | None, ignore: list[str] | None, data: str | None,
                 deep: bool, against: str | None, fail_on: str | None) -> list[str]:
    return ["report", "--no-loader", *(["--deep"] if deep else []),
            *_flags(data=roots.path("data", data) if data is not None else None,
                    against=roots.path("against", against) if against is not None else None,
                    fail_on=fail_on),
            *_rule_flags(arg.rule_ids("select", select), arg.rule_ids("ignore", ignore))]


def _script_paths(roots: Roots, scripts: list[str] | None) -> list[str]:
    """The scripts, each inside the roots; a folder's files too, as the check will expand it (a link in a
    folder to a file outside the roots is refused like the file itself)."""
    from envdoctor.facts.scripts import expand_paths

    paths = roots.paths("scripts", scripts)
    for index, given in enumerate(paths):
        if os.path.isdir(given):
            for found, _ in expand_paths([given]):
                roots.path(f"scripts[{index}]", found)
    return paths


def check(scripts: list[str] | None = None, select: list[str] | None = None, ignore: list[str] | None = None,
          data: str | None = None, deep: bool = False, against: str | None = None, fail_on: FailOn | None = None,
          include_facts: bool = False, client_roots: Any = None) -> dict[str, Any]:
    """Check the environment this server runs in, statically: the same findings as `envdoctor report --json
    --no-loader`. Read-only: reads files and the system's limits, runs no interpreter but envdoctor's own and
    none of your code.

    Each finding has a rule id, severity, message, evidence and the exact fix. `exit_code` is 0 when
    nothing reaches `fail_on` (default error), 1 when something does. scripts: training scripts or
    folders to check for the spawn guard (read and parsed, never run). select/ignore: rule ids or
    families (e.g. ["SYS", "PKG001"]). data: where the training data lives (storage checks). deep: slow
    checks too (file hashes; and PKG012 imports each compiled package installed here, in bounded child
    processes of this same interpreter). against: environment.yml or requirements file to compare with.
    include_facts: add the raw facts (large). Paths must lie inside the client's roots (or the server's
    --root). For another environment use `check_environment`; for the DataLoader smoke test, `loader`.
    """
    roots = roots_of(client_roots)
    argv = _static_argv(roots, select=select, ignore=ignore, data=data, deep=deep, against=against,
                        fail_on=fail_on)
    # The target is always named: a [tool.envdoctor] prefix must not make this tool start another interpreter.
    argv += _flags(prefix=sys.prefix)
    return _trim(_report(argv, _script_paths(roots, scripts), STATIC_ALLOWANCE_S), include_facts)


def check_environment(prefix: str, scripts: list[str] | None = None, select: list[str] | None = None,
                      ignore: list[str] | None = None, data: str | None = None, deep: bool = False,
                      against: str | None = None, fail_on: FailOn | None = None, include_facts: bool = False,
                      client_roots: Any = None) -> dict[str, Any]:
    """Check another conda env, venv or pixi env (its folder, `prefix`), statically: the same findings as
    `envdoctor report --json --no-loader --prefix PREFIX`. This runs the environment's Python
    (PREFIX/bin/python) to ask it its version, platform and import path: whatever program sits there runs,
    so call it only on an environment the user trusts. `prefix` must lie inside the client's roots (or the
    server's --root). The other arguments are those of `check`.
    """
    roots = roots_of(client_roots)
    argv = _static_argv(roots, select=select, ignore=ignore, data=data, deep=deep, against=against,
                        fail_on=fail_on)
    argv += _flags(prefix=roots.path("prefix", prefix))
    return _trim(_report(argv, _script_paths(roots, scripts), STATIC_ALLOWANCE_S), include_facts)


def loader(dataset: str | None = None, data: str | None = None, budget_s: float | None = None,
           step_time_s: float | None = None, prefix: str | None = None, client_roots: Any = None) -> dict[str, Any]:
    """Run the DataLoader smoke test alone: the `loader` section (throughput by num_workers, bottleneck,
    recommended settings) and its DL findings. This runs your dataset code, and the environment's Python.

    dataset: MODULE:CALLABLE returning the user's Dataset, or (Dataset, DataLoader kwargs): it is imported
    and called, so this runs your dataset code; MODULE must be a Python file (or package) inside the roots,
    and the test runs in the root that holds it; nothing else on the import path is imported. Without it and
    without data, a built-in synthetic dataset is measured. data: an image folder to read. budget_s: time
    budget (default 15). step_time_s: seconds one training step takes per batch, so the loader is judged
    against its consumer. prefix: measure in another environment (its Python runs the test). Paths must
    lie inside the client's roots (or the server's --root).
    """
    roots = roots_of(client_roots)
    budget = arg.seconds("budget_s", budget_s)
    spec = arg.dataset_spec("dataset", dataset) if dataset is not None else None
    home = arg.dataset_root(roots, "dataset", spec) if spec is not None else None
    argv = ["loader", *_flags(
        budget=budget, step_time=arg.seconds("step_time_s", step_time_s),
        data=roots.path("data", data) if data is not None else None,
        dataset=spec,
        prefix=roots.path("prefix", prefix) if prefix is not None else sys.prefix)]
    return _trim(_report(argv, [], (budget or 15.0) + STATIC_ALLOWANCE_S, cwd=home), include_facts=False)


def explain(rule: str) -> str:
    """One rule's documentation: what it checks, why it matters, an example and the fix. rule: an id
    (SYS002) or a name (shm-too-small). Read-only."""
    code, out, err = run_envdoctor(["explain", "--", arg.rule_id("rule", rule)], 60.0)
    if code != 0:
        raise _tool_error((err.strip().splitlines() or [f"envdoctor explain exited with status {code}"])[-1])
    return out[:MAX_TEXT_CHARS]


def list_rules() -> str:
    """The rule catalog, one line each: id, name, default severity, summary. Read-only."""
    code, out, err = run_envdoctor(["rules"], 60.0)
    if code != 0:
        raise _tool_error((err.strip().splitlines() or [f"envdoctor rules exited with status {code}"])[-1])
    return out[:MAX_TEXT_CHARS]


def compare(reports: list[str], fail_on: FailOn | None = None, client_roots: Any = None) -> dict[str, Any]:
    """Line up JSON reports from several machines (files or folders of `envdoctor report --json` output):
    version drift (torch, CUDA, NCCL, driver, numpy) and stragglers, as findings. Read-only; the reports
    must lie inside the client's roots (or the server's --root), and so must every report file of a folder
    (a link in it to a file outside the roots is refused)."""
    roots = roots_of(client_roots)
    paths = _report_files(roots, reports)
    if not paths:
        raise ArgumentProblem("argument reports: give at least one report file or folder")
    return _report(["compare", *_flags(fail_on=fail_on)], paths, STATIC_ALLOWANCE_S)


def _report_files(roots: Roots, reports: list[str] | None) -> list[str]:
    """The report files `compare` will open, each resolved inside the roots.

    A folder is expanded here as `compare` expands it (the `*.json` files directly in it), and its files
    are handed on one by one, resolved: `compare` then opens exactly the files checked, never a link in
    the folder to a report outside the roots. A folder with no report goes on as it is (compare says so).
    """
    files: list[str] = []
    for index, given in enumerate(roots.paths("reports", reports)):
        if not os.path.isdir(given):
            files.append(given)
            continue
        found = sorted(os.path.join(given, name) for name in os.listdir(given) if name.endswith(".json"))
        found = [path for path in found if not os.path.isdir(path)]
        files += [roots.path(f"reports[{index}]", path) for path in found] or [given]
    return list(dict.fromkeys(files))


def _declare_roots_parameter() -> None:
    """Annotate `client_roots` as the SDK's resolved parameter; done here, so that importing this module
    does not import the SDK (the annotations are strings until then)."""
    from mcp.server.mcpserver import Context
    from mcp.server.mcpserver.resolve import Resolve
    from mcp_types import ListRootsResult

    ask_for_roots.__annotations__["ctx"] = Context
    resolved = Annotated[ListRootsResult | None, Resolve(ask_for_roots)]
    for tool in (check, check_environment, loader, compare):
        tool.__annotations__["client_roots"] = resolved


def build_server() -> Any:
    """The MCP server with envdoctor's tools, each annotated with what it does."""
    try:
        from mcp.server.mcpserver import MCPServer
        from mcp_types import ToolAnnotations
    except ImportError:
        raise UsageError("envdoctor mcp needs the MCP SDK: pip install 'envdoctor-pytorch[mcp]'") from None
    from envdoctor import __version__

    _declare_roots_parameter()
    # WARNING: a tool error is an answer to the agent, not news for the server's log.
    server = MCPServer("envdoctor", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING")
    # Reading files and the system, running no code but envdoctor's own.
    reads = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
    # Starting a program envdoctor does not own (the environment's Python, the dataset's code): what it
    # does is its own business, so the hints claim nothing for it (the spec's defaults, said aloud).
    runs_code = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False,
                                open_world_hint=True)
    for tool, hints in ((check, reads), (check_environment, runs_code), (loader, runs_code),
                        (explain, reads), (list_rules, reads), (compare, reads)):
        server.add_tool(_refusing(tool), name=tool.__name__, annotations=hints)
    return server


def serve(roots: Sequence[str] = ()) -> int:
    """Serve the tools over stdio until the client closes the connection or SIGTERM stops the server.

    A check still running then is stopped, with its loader workers: the
    server leaves nothing behind, whichever way it ends.
    """
    try:
        _SERVER_ROOTS[:] = [arg.server_roots(roots)]
    except ArgumentProblem as exc:
        raise UsageError(str(exc)) from None
    server = build_server()  # first: without the mcp extra it says which to install
    import anyio

    from envdoctor.integrations.mcp_wire import serve_stdio

    try:
        stopped = anyio.run(serve_stdio, server, _stop_for_sigterm)
    finally:
        stop_running_children()
    return 128 + signal.SIGTERM if stopped else 0
