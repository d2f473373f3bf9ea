"""`envdoctor mcp`'s stdio channel: one JSON-RPC message a line, a malformed one answered, SIGTERM obeyed.

The SDK's stdio transport (mcp 2.3.0) parses each line itself and, when it
cannot, hands the error to a dispatcher that drops it without a word: the
client waits for its timeout. It also reads a request whose `id` is an object
or an array as a notification (its `id` dropped), which gets no answer either.
So the lines are read here first, by the same parser the SDK uses, and only
well-formed messages go on to it; the others are answered as JSON-RPC 2.0 says:

* not JSON: -32700 (parse error), `id` null;
* JSON but not a message — a batch (MCP sends one message a line), an `id`
  that is not a string or an integer, a request without `method`, a line
  longer than `MAX_LINE_BYTES`: -32600 (invalid request), with the request's
  `id` when it has a valid one, else null.

The lines are read and checked by a daemon thread, so a stop never waits for
the client to write, and a long line is parsed without holding up the calls.
SIGTERM stops the running checks (their children first: `on_stop`), then the
server, within a few seconds, whether or not a call is running.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any, cast

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread

#: The longest line read: a 10 MB argument still reaches the tool (which refuses it by name).
MAX_LINE_BYTES = 32 * 1024 * 1024
#: What the reader thread hands on for a line longer than MAX_LINE_BYTES (a real line is never empty).
_TOO_LONG = b""


def _error(request_id: str | int | None, code: int, message: str) -> Any:
    from mcp_types import ErrorData, JSONRPCError

    return JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(code=code, message=message))


def _valid_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _raw_id(line: str) -> tuple[bool, Any]:
    """(whether the line has an `id` key, its value), read with the standard parser."""
    try:
        raw = json.loads(line)
    except (ValueError, RecursionError):
        return False, None
    return (isinstance(raw, dict) and "id" in raw), (raw.get("id") if isinstance(raw, dict) else None)


def check_line(data: bytes) -> tuple[str | None, Any]:
    """(the line for the SDK, None) for a well-formed message; (None, the error to answer) otherwise.

    (None, None) for a blank line, which is skipped.
    """
    from mcp_types import INVALID_REQUEST, PARSE_ERROR, JSONRPCNotification, jsonrpc_message_adapter
    from pydantic import ValidationError

    if not data:
        return None, _error(None, INVALID_REQUEST, f"Invalid Request: longer than {MAX_LINE_BYTES} bytes")
    line = data.decode("utf-8", "replace")
    if not line.strip():
        return None, None
    try:
        message = jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValidationError as exc:
        if any(error["type"] == "json_invalid" for error in exc.errors()):
            return None, _error(None, PARSE_ERROR, "Parse error: the line is not JSON")
        if line.lstrip().startswith("["):
            return None, _error(None, INVALID_REQUEST, "Invalid Request: batches are not supported; "
                                                       "send one JSON-RPC message a line")
        has_id, request_id = _raw_id(line)
        if has_id and not _valid_id(request_id):
            return None, _error(None, INVALID_REQUEST, "Invalid Request: id must be a string or an integer")
        return None, _error(request_id if has_id else None, INVALID_REQUEST,
                            "Invalid Request: not a JSON-RPC 2.0 request, notification or response")
    if isinstance(message, JSONRPCNotification):
        has_id, request_id = _raw_id(line)
        if has_id:  # a request whose id the SDK would drop, making it a notification nobody answers
            return None, _error(None, INVALID_REQUEST, "Invalid Request: id must be a string or an integer")
    return line, None


def _read_lines(fd: int, hand_on: Callable[[bytes | None], None]) -> None:
    """Split what arrives on `fd` into lines (bounded) and hand each on; None at the end.

    Runs in a daemon thread, on the file descriptor itself: no buffered reader
    whose lock a stopping interpreter would wait for.
    """
    pending = bytearray()
    dropping = False  # inside a line longer than MAX_LINE_BYTES: skipped to its end
    try:
        while True:
            chunk = os.read(fd, 1024 * 1024)
            if not chunk:
                if pending:
                    hand_on(bytes(pending))
                hand_on(None)
                return
            start = 0
            while (end := chunk.find(b"\n", start)) >= 0:
                if dropping or len(pending) + end + 1 - start > MAX_LINE_BYTES:
                    hand_on(_TOO_LONG)
                else:
                    pending += chunk[start:end + 1]
                    hand_on(bytes(pending))
                pending.clear()
                dropping = False
                start = end + 1
            if not dropping:
                pending += chunk[start:]
                if len(pending) > MAX_LINE_BYTES:
                    pending.clear()
                    dropping = True
    except Exception:  # the loop is gone (the server stopped) or stdin broke: nothing left to do
        return


class _CheckedLines:
    """The lines the SDK's stdio transport reads: well-formed messages only; the others are answered."""

    def __init__(self, lines: Any, answers: Any) -> None:
        self._lines = lines
        self._answers = answers

    def __aiter__(self) -> _CheckedLines:
        return self

    async def __anext__(self) -> str:
        while True:
            try:
                checked = await self._lines.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                raise StopAsyncIteration from None
            if checked is None:
                raise StopAsyncIteration
            line, answer = checked
            if line is not None:
                return line
            if answer is not None:
                await self._answers.send(answer)


async def serve_stdio(server: Any, on_stop: Callable[[], None]) -> bool:
    """Serve `server` (an MCPServer) over stdin/stdout until stdin ends or SIGTERM arrives; True on SIGTERM.

    On SIGTERM `on_stop` runs first (in a thread: it stops the running
    checks' processes), then everything here is cancelled.
    """
    from mcp.server.stdio import stdio_server
    from mcp.shared.message import SessionMessage

    lines_in, lines_out = anyio.create_memory_object_stream[tuple[str | None, Any] | None](16)
    answers_in, answers_out = anyio.create_memory_object_stream[Any](16)
    token = anyio.lowlevel.current_token()
    stopped = anyio.Event()

    def hand_on(data: bytes | None) -> None:
        # Checked here, in the reader's thread: a 30 MB line is parsed without holding up the event loop.
        anyio.from_thread.run(lines_in.send, None if data is None else check_line(data), token=token)

    reader = threading.Thread(target=_read_lines, args=(sys.stdin.fileno(), hand_on), name="mcp-stdin", daemon=True)
    reader.start()

    async def answer_malformed(write: Any) -> None:
        async for answer in answers_out:
            try:
                await write.send(SessionMessage(answer))
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                return

    async def stop_on_sigterm(scope: anyio.CancelScope) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM) as signals:
            async for _ in signals:
                stopped.set()
                await anyio.to_thread.run_sync(on_stop)
                scope.cancel()
                return

    # The SDK's private server object: MCPServer.run_stdio_async takes no streams of ours (mcp 2.3.0).
    lowlevel = server._lowlevel_server
    async with anyio.create_task_group() as tasks:
        if sys.platform != "win32":  # no signal receivers there; the client ends the server by closing stdin
            tasks.start_soon(stop_on_sigterm, tasks.cancel_scope)
        async with stdio_server(stdin=cast(Any, _CheckedLines(lines_out, answers_in))) as (read, write):
            tasks.start_soon(answer_malformed, write)
            await lowlevel.run(read, write, lowlevel.create_initialization_options())
        tasks.cancel_scope.cancel()
    return stopped.is_set()
