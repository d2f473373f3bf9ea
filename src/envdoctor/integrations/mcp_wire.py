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

Every request read before the end of input is answered, in the order the
requests came (`_InFlight`): the SDK's dispatcher cancels whatever is still
running when its input ends, so a client that writes its requests at once and
then closes its end (`printf … | envdoctor mcp`) got the answer to
`initialize` alone. Here the end of input reaches the SDK only once every
request handed to it has been answered; a question the server asks the client
meanwhile (`roots/list`) is answered on the client's behalf with an error,
since nobody is left to answer it, and the call that asked fails with that
reason instead of hanging. Answers leave in the order of their requests (a
quick one waits for a slower one sent before it); a request the client
cancels is not waited for.
"""
from __future__ import annotations

import contextlib
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


#: The error a question to the client gets once the client's input has ended (JSON-RPC's server error range).
CLIENT_GONE = -32000


def _key(request_id: Any) -> tuple[str, Any]:
    """A request id as a key: 1 and "1" are different ids."""
    return type(request_id).__name__, request_id


def what_line_is(line: str) -> tuple[str, Any]:
    """(kind, id) of a checked line: ("request", id), ("response", id), ("cancelled", the request id) or
    ("other", None). Read with the standard parser (the line is already known to be a message)."""
    try:
        raw = json.loads(line)
    except (ValueError, RecursionError):
        return "other", None
    if not isinstance(raw, dict):
        return "other", None
    if "method" in raw and "id" in raw:
        return "request", raw["id"]
    if "id" in raw and ("result" in raw or "error" in raw):
        return "response", raw["id"]
    params = raw.get("params")
    if raw.get("method") == "notifications/cancelled" and isinstance(params, dict) and "requestId" in params:
        return "cancelled", params["requestId"]
    return "other", None


class _InFlight:
    """The client's requests handed to the SDK and not yet answered, in arrival order, and the server's
    questions to the client not yet answered. Answers are let out in the order of the requests."""

    def __init__(self) -> None:
        #: [key, the answer once it is written] per request, in arrival order.
        self.order: list[list[Any]] = []
        #: The ids of the server's questions (roots/list) the client has not answered.
        self.asked: list[Any] = []
        self.input_ended = False
        #: Answers let out and being written now: the end of input waits for them too.
        self.writing = 0
        self.changed = anyio.Event()

    def poke(self) -> None:
        self.changed.set()
        self.changed = anyio.Event()

    def request(self, request_id: Any) -> None:
        self.order.append([_key(request_id), None])

    def cancelled(self, request_id: Any) -> None:
        key = _key(request_id)
        self.order = [entry for entry in self.order if not (entry[0] == key and entry[1] is None)]

    def answered_by_client(self, request_id: Any) -> None:
        with contextlib.suppress(ValueError):
            self.asked.remove(request_id)

    def ready(self, message: Any) -> list[Any]:
        """The messages to write now that the SDK wrote `message` (held back while an earlier request waits)."""
        from mcp_types import JSONRPCError, JSONRPCRequest, JSONRPCResponse

        inner = message.message
        if isinstance(inner, JSONRPCRequest):
            self.asked.append(inner.id)
            self.poke()
            return [message]
        if not isinstance(inner, (JSONRPCResponse, JSONRPCError)) or inner.id is None:
            return [message]
        key = _key(inner.id)
        entry = next((entry for entry in self.order if entry[0] == key and entry[1] is None), None)
        if entry is None:  # an answer to a request this side never handed on (or one cancelled)
            return [message]
        entry[1] = message
        out = []
        while self.order and self.order[0][1] is not None:
            out.append(self.order.pop(0)[1])
        self.poke()
        return out

    def unanswerable(self) -> list[str]:
        """Error answers, in the client's name, to the questions it can no longer answer (its input ended)."""
        lines = [json.dumps({"jsonrpc": "2.0", "id": asked, "error": {
            "code": CLIENT_GONE, "message": "the client closed its input before answering"}}) for asked in self.asked]
        self.asked = []
        return lines


class _OrderedAnswers:
    """The SDK's write stream, behind which answers wait for the answers to earlier requests."""

    def __init__(self, inner: Any, in_flight: _InFlight) -> None:
        self._inner = inner
        self._in_flight = in_flight

    async def send(self, item: Any) -> None:
        self._in_flight.writing += 1
        try:
            for message in self._in_flight.ready(item):
                await self._inner.send(message)
        finally:
            self._in_flight.writing -= 1
            self._in_flight.poke()

    def close(self) -> None:
        self._inner.close()

    async def aclose(self) -> None:
        await self._inner.aclose()

    def clone(self) -> Any:  # pragma: no cover - the dispatcher does not clone it
        return _OrderedAnswers(self._inner.clone(), self._in_flight)

    async def __aenter__(self) -> _OrderedAnswers:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class _CheckedLines:
    """The lines the SDK's stdio transport reads: well-formed messages only; the others are answered.

    The end of input is handed on only once every request handed on has been answered.
    """

    def __init__(self, lines: Any, answers: Any, in_flight: _InFlight | None = None) -> None:
        self._lines = lines
        self._answers = answers
        self._in_flight = in_flight or _InFlight()
        self._pending_lines: list[str] = []

    def __aiter__(self) -> _CheckedLines:
        return self

    async def __anext__(self) -> str:
        while True:
            if self._in_flight.input_ended:
                return await self._drain()
            try:
                checked = await self._lines.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                checked = None
            if checked is None:
                self._in_flight.input_ended = True
                continue
            line, answer, (kind, message_id) = checked
            if line is not None:
                if kind == "request":
                    self._in_flight.request(message_id)
                elif kind == "response":
                    self._in_flight.answered_by_client(message_id)
                elif kind == "cancelled":
                    self._in_flight.cancelled(message_id)
                return line
            if answer is not None:
                await self._answers.send(answer)

    async def _drain(self) -> str:
        """After the end of input: the client's answers to questions it cannot answer, until nothing waits."""
        while True:
            self._pending_lines += self._in_flight.unanswerable()
            if self._pending_lines:
                return self._pending_lines.pop(0)
            if not self._in_flight.order and not self._in_flight.writing:
                raise StopAsyncIteration
            await self._in_flight.changed.wait()


async def serve_stdio(server: Any, on_stop: Callable[[], None]) -> bool:
    """Serve `server` (an MCPServer) over stdin/stdout until stdin ends or SIGTERM arrives; True on SIGTERM.

    On SIGTERM `on_stop` runs first (in a thread: it stops the running
    checks' processes), then everything here is cancelled.
    """
    from mcp.server.stdio import stdio_server
    from mcp.shared.message import SessionMessage

    lines_in, lines_out = anyio.create_memory_object_stream[tuple[str | None, Any, tuple[str, Any]] | None](16)
    answers_in, answers_out = anyio.create_memory_object_stream[Any](16)
    token = anyio.lowlevel.current_token()
    stopped = anyio.Event()

    def hand_on(data: bytes | None) -> None:
        # Checked here, in the reader's thread: a 30 MB line is parsed without holding up the event loop.
        if data is None:
            anyio.from_thread.run(lines_in.send, None, token=token)
            return
        line, answer = check_line(data)
        anyio.from_thread.run(lines_in.send, (line, answer, what_line_is(line) if line is not None else ("other", None)),
                              token=token)

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
    in_flight = _InFlight()
    async with anyio.create_task_group() as tasks:
        if sys.platform != "win32":  # no signal receivers there; the client ends the server by closing stdin
            tasks.start_soon(stop_on_sigterm, tasks.cancel_scope)
        async with stdio_server(stdin=cast(Any, _CheckedLines(lines_out, answers_in, in_flight))) as (read, write):
            tasks.start_soon(answer_malformed, write)
            await lowlevel.run(read, _OrderedAnswers(write, in_flight), lowlevel.create_initialization_options())
        tasks.cancel_scope.cancel()
    return stopped.is_set()
