"""`envdoctor mcp`: the checks as tools for AI coding agents (Model Context Protocol, over stdio).

Tools: `check` (the environment checks and, unless asked not to, the
DataLoader smoke test), `loader` (the smoke test alone), `explain` (one
rule's docs), `list_rules` (the catalog) and `compare` (reports from several
machines side by side). Each answers with the same JSON as `envdoctor report`,
or the same text as `envdoctor explain`.

Each call runs the `envdoctor` command itself in a child process, with a time
limit, stopped with its loader workers when the limit passes or the server ends:
this process's standard output is the protocol channel, so nothing the checks
or the user's dataset print may reach it, and a hung dataset must not hang the
agent. The child runs in the server's working directory, so the project's
`[tool.envdoctor]` settings apply as they do on the command line.

Needs the `mcp` extra (the official MCP Python SDK); `import envdoctor` does not
import it.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from typing import Any

from envdoctor.errors import UsageError

#: Seconds a static check may take on top of the loader budget (--deep hashes files).
STATIC_ALLOWANCE_S = 240.0
#: The longest answer in characters: agents read it whole, and their context is finite.
MAX_TEXT_CHARS = 200_000

INSTRUCTIONS = (
    "envdoctor checks a PyTorch training environment: packages installed twice or from mixed conda channels, "
    "open-file, /dev/shm and CPU limits, the spawn guard of training scripts, the GPU and torch build, storage, "
    "and a live DataLoader smoke test that names the bottleneck and the num_workers to use. Call `check` with "
    "no_loader=true for a quick static check, then `explain` on a finding's rule id for its docs and fix."
)


#: The `envdoctor` children running now: stopped with the server, however it ends.
_RUNNING: set[subprocess.Popen[str]] = set()
_LOCK = threading.Lock()
#: Seconds a stopped child gets to clean up its loader workers before it is killed.
STOP_GRACE_S = 5.0


def run_envdoctor(argv: list[str], timeout_s: float) -> tuple[int, str, str]:
    """Run `envdoctor ARGV` in a child process; (exit code, stdout, stderr). Stopped at the limit.

    The child stays in the server's process group, so a client that ends the
    server's group ends it too; at the limit it gets SIGTERM, on which
    envdoctor stops its loader stage and leaves nothing behind.
    """
    command = [sys.executable, "-m", "envdoctor", *argv]
    with subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, encoding="utf-8", errors="replace") as child:
        with _LOCK:
            _RUNNING.add(child)
        try:
            out, err = child.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            stop_child(child)
            child.communicate()
            raise _tool_error(f"envdoctor {argv[0]} did not finish within {timeout_s:.0f} s and was stopped") from None
        finally:
            with _LOCK:
                _RUNNING.discard(child)
    return child.returncode, out, err


def stop_child(child: subprocess.Popen[str]) -> None:
    """SIGTERM (envdoctor cleans up its loader stage), then SIGKILL to the child and whatever it left."""
    import psutil

    try:
        tree = [psutil.Process(child.pid), *psutil.Process(child.pid).children(recursive=True)]
    except psutil.Error:
        return
    child.terminate()
    _, alive = psutil.wait_procs(tree, timeout=STOP_GRACE_S)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            pass


def stop_running_children() -> None:
    with _LOCK:
        children = list(_RUNNING)
    for child in children:
        stop_child(child)


def _tool_error(message: str) -> Exception:
    from mcp.server.mcpserver.exceptions import ToolError

    return ToolError(message)


def _report(argv: list[str], timeout_s: float) -> dict[str, Any]:
    """The JSON report of `envdoctor ARGV --format json`, with its exit code; a usage error becomes a tool error."""
    code, out, err = run_envdoctor([*argv, "--format", "json"], timeout_s)
    if code == 2 or not out.strip():
        last = (err.strip().splitlines() or [f"envdoctor exited with status {code} and printed no report"])[-1]
        raise _tool_error(last)
    try:
        report = json.loads(out)
    except ValueError:
        raise _tool_error(f"envdoctor printed something that is not JSON: {out[:200]!r}") from None
    report["exit_code"] = code
    return report


def _options(*, select: list[str] | None = None, ignore: list[str] | None = None, budget_s: float | None = None,
             step_time_s: float | None = None, data: str | None = None, dataset: str | None = None,
             prefix: str | None = None, against: str | None = None, fail_on: str | None = None) -> list[str]:
    argv: list[str] = []
    for flag, value in (("--budget", budget_s), ("--step-time", step_time_s), ("--data", data),
                        ("--dataset", dataset), ("--prefix", prefix), ("--against", against), ("--fail-on", fail_on)):
        if value is not None:
            argv += [flag, str(value)]
    for flag, rules in (("--select", select), ("--ignore", ignore)):
        if rules:
            argv += [flag, *rules]
    return argv


def _trim(report: dict[str, Any], include_facts: bool) -> dict[str, Any]:
    if not include_facts:
        report.pop("facts", None)
    return report


def check(scripts: list[str] | None = None, no_loader: bool = False, select: list[str] | None = None,
          ignore: list[str] | None = None, prefix: str | None = None, data: str | None = None,
          dataset: str | None = None, budget_s: float | None = None, step_time_s: float | None = None,
          deep: bool = False, against: str | None = None, fail_on: str | None = None,
          include_facts: bool = False) -> dict[str, Any]:
    """Check this PyTorch training environment: the same findings as `envdoctor report --json`.

    Each finding has a rule id, severity, message, evidence and the exact fix. `exit_code` is 0 when
    nothing reaches `fail_on` (default error), 1 when something does. scripts: training scripts or
    folders to check for the spawn guard. no_loader: static checks only (seconds instead of ~15 s for
    the DataLoader smoke test). select/ignore: rule ids or families (e.g. ["SYS", "PKG001"]).
    prefix: another conda env, venv or pixi env to inspect. data: where the training data lives.
    dataset: MODULE:CALLABLE returning the user's Dataset (this runs the user's code). budget_s: the
    smoke test's time budget. step_time_s: seconds one training step takes per batch. deep: slow checks
    too. against: environment.yml or requirements file to compare with. include_facts: add the raw
    facts (large).
    """
    argv = ["report", *(scripts or [])]
    argv += ["--no-loader"] if no_loader else []
    argv += ["--deep"] if deep else []
    argv += _options(select=select, ignore=ignore, budget_s=budget_s, step_time_s=step_time_s, data=data,
                     dataset=dataset, prefix=prefix, against=against, fail_on=fail_on)
    limit = (0 if no_loader else (budget_s or 15.0)) + STATIC_ALLOWANCE_S
    return _trim(_report(argv, limit), include_facts)


def loader(dataset: str | None = None, data: str | None = None, budget_s: float | None = None,
           step_time_s: float | None = None, prefix: str | None = None) -> dict[str, Any]:
    """Run the DataLoader smoke test alone: the `loader` section (throughput by num_workers, bottleneck,
    recommended settings) and its DL findings.

    dataset: MODULE:CALLABLE returning the user's Dataset, or (Dataset, DataLoader kwargs); this runs
    the user's code. Without it and without data, a built-in synthetic dataset is measured. data: an
    image folder to read. budget_s: time budget (default 15). step_time_s: seconds one training step
    takes per batch, so the loader is judged against its consumer.
    """
    argv = ["loader", *_options(budget_s=budget_s, step_time_s=step_time_s, data=data, dataset=dataset,
                                prefix=prefix)]
    return _trim(_report(argv, (budget_s or 15.0) + STATIC_ALLOWANCE_S), include_facts=False)


def explain(rule: str) -> str:
    """One rule's documentation: what it checks, why it matters, an example and the fix. rule: an id
    (SYS002) or a name (shm-too-small)."""
    code, out, err = run_envdoctor(["explain", rule], 60.0)
    if code != 0:
        raise _tool_error((err.strip().splitlines() or [f"envdoctor explain exited with status {code}"])[-1])
    return out[:MAX_TEXT_CHARS]


def list_rules() -> str:
    """The rule catalog, one line each: id, name, default severity, summary."""
    code, out, err = run_envdoctor(["rules"], 60.0)
    if code != 0:
        raise _tool_error((err.strip().splitlines() or [f"envdoctor rules exited with status {code}"])[-1])
    return out[:MAX_TEXT_CHARS]


def compare(reports: list[str], fail_on: str | None = None) -> dict[str, Any]:
    """Line up JSON reports from several machines (files or folders of `envdoctor report --json` output):
    version drift (torch, CUDA, NCCL, driver, numpy) and stragglers, as findings."""
    if not reports:
        raise _tool_error("compare needs at least one report file or folder")
    return _report(["compare", *reports, *_options(fail_on=fail_on)], STATIC_ALLOWANCE_S)


def build_server() -> Any:
    """The MCP server with envdoctor's tools."""
    try:
        from mcp.server.mcpserver import MCPServer
        from mcp_types import ToolAnnotations
    except ImportError:
        raise UsageError("envdoctor mcp needs the MCP SDK: pip install 'envdoctor-pytorch[mcp]'") from None
    from envdoctor import __version__

    # WARNING: a tool error is an answer to the agent, not news for the server's log.
    server = MCPServer("envdoctor", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING")
    # The checks read the environment and change nothing; the smoke test runs the user's dataset code.
    reads = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
    for tool in (check, loader, explain, list_rules, compare):
        server.add_tool(tool, annotations=reads)
    return server


def serve() -> int:
    """Serve the tools over stdio until the client closes the connection or stops the server.

    A check still running then is stopped, with its loader workers: the
    server leaves nothing behind, whichever way it ends.
    """
    server = build_server()
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        server.run("stdio")
    finally:
        stop_running_children()
        signal.signal(signal.SIGTERM, previous)
    return 0


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)  # so that serve()'s finally stops the running checks
