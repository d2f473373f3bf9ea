"""Reading a source file the way the interpreter would, bounded by type, size and time.

Only regular files are read: a FIFO would block, `/dev/zero` never ends. The
file is opened without blocking, checked with fstat, and read up to a size
limit. The bytes are decoded as the interpreter decodes them (a coding cookie
or BOM, else UTF-8); a cookie naming a codec that is not a text encoding
(rot13, base64) or that cannot decode the file is a problem with the file,
reported for it alone.
"""
from __future__ import annotations

import codecs
import io
import tokenize
from typing import TypedDict

from envdoctor.facts import readfile

#: Larger sources are not read: no hand-written training script comes near it.
MAX_SOURCE_BYTES = 16 * 1024 * 1024


class SourceProblem(TypedDict, total=False):
    """Why a file could not be read or decoded (the `status` and `error` of a scripts entry)."""

    status: str
    error: str
    line: int
    column: int
    encoding: str


def read_bytes(path: str, limit: int = MAX_SOURCE_BYTES) -> tuple[bytes | None, SourceProblem]:
    """The bytes of a regular file up to `limit`, or a problem saying why not. Never blocks."""
    try:
        return readfile.read_bytes(path, limit), {}
    except readfile.NotRegularFile as exc:
        kind = "a device" if exc.kind.endswith("device") else exc.kind
        return None, {"status": "unreadable", "error": f"not a regular file ({kind}); only regular files are read"}
    except readfile.TooLarge as exc:
        size = "" if exc.size is None else f"{exc.size} bytes, "
        return None, {"status": "unreadable", "error": f"{size}more than the {limit} bytes a script may have"}
    except OSError as exc:
        return None, {"status": "unreadable", "error": exc.strerror or str(exc)}


def _position(data: bytes, offset: int) -> tuple[int, int]:
    line = data.count(b"\n", 0, offset) + 1
    column = offset - (data.rfind(b"\n", 0, offset) + 1) + 1
    return line, column


def decode_source(data: bytes) -> tuple[str | None, str | None, SourceProblem]:
    """(text, encoding, problem): the decoded source, or a problem saying why not."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:  # an unknown encoding named in the coding cookie
        return None, None, {"status": "unparsable", "error": str(exc), "line": 1, "column": 1}
    try:
        text_codec = codecs.lookup(encoding)._is_text_encoding
    except LookupError:
        text_codec = False
    if not text_codec:
        return None, encoding, {"status": "unparsable", "line": 1, "column": 1, "encoding": encoding,
                                "error": f"the coding cookie names {encoding!r}, which is not a text encoding "
                                         "Python can read source in"}
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        line, column = _position(data, exc.start)
        declared = encoding != "utf-8"
        return None, encoding, {
            "status": "unparsable",
            "error": (f"byte 0x{data[exc.start]:02x} at line {line}, column {column} is not valid "
                      f"{encoding}" + ("" if declared else " and the file declares no other encoding")),
            "line": line, "column": column, "encoding": encoding,
        }
    except (UnicodeError, LookupError, ValueError, TypeError) as exc:  # punycode and other odd codecs
        return None, encoding, {"status": "unparsable", "line": 1, "column": 1, "encoding": encoding,
                                "error": f"cannot be decoded as {encoding}: {type(exc).__name__}: {exc}"}
    if text.startswith("\ufeff"):
        text = text[1:]
    return text, encoding, {}


def read_source(path: str) -> tuple[str | None, str | None, SourceProblem]:
    """(text, encoding, problem) for one file: bounded read, then decode."""
    data, problem = read_bytes(path)
    if data is None:
        return None, None, problem
    return decode_source(data)
