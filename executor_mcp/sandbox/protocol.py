"""Frames between the server and a sandbox worker: a 4-byte big-endian length, then UTF-8 JSON.

Sans-I/O on purpose: the worker reads with blocking file calls, the server with trio streams, and both
use the same encoder and the same incremental decoder. A worker is untrusted (it runs agent code), so
the decoder refuses frames over a size bound instead of buffering whatever it is sent, and JSON that
is not standard (`NaN`, `Infinity`), which could not be sent on anywhere.

A JavaScript string may hold a lone surrogate, which UTF-8 cannot; the encoder replaces it with U+FFFD
rather than fail (as `codec.dumps` does; this module stays free of the server's imports so a worker
starts light).
"""

import json
import re
import struct
from typing import Any

MAX_FRAME = 96 * 1024 * 1024
_HEADER = struct.Struct(">I")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class FrameError(ValueError):
    """The peer sent something that is not a frame of ours."""


def frame(message: dict[str, Any]) -> bytes:
    text = json.dumps(message, separators=(",", ":"), ensure_ascii=False)
    try:
        payload = text.encode()
    except UnicodeEncodeError:  # in a Python str every surrogate is lone: an escaped pair decodes to one
        payload = _LONE_SURROGATE.sub("\ufffd", text).encode()
    return _HEADER.pack(len(payload)) + payload


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


class FrameDecoder:
    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self._buffer = bytearray()
        self._max = max_frame

    def feed(self, data: bytes | bytearray) -> None:
        self._buffer += data

    def next(self) -> dict[str, Any] | None:
        """The next complete message, or None until more bytes arrive."""
        if len(self._buffer) < _HEADER.size:
            return None
        (length,) = _HEADER.unpack_from(self._buffer)
        if length > self._max:
            raise FrameError(f"frame of {length} bytes exceeds {self._max}")
        end = _HEADER.size + length
        if len(self._buffer) < end:
            return None
        payload = bytes(self._buffer[_HEADER.size : end])
        del self._buffer[:end]
        try:
            message = json.loads(payload, parse_constant=_not_json)
        except ValueError as exc:
            raise FrameError(f"frame is not JSON: {exc}") from None
        except RecursionError:
            raise FrameError("frame is nested too deeply") from None
        if not isinstance(message, dict):
            raise FrameError("frame is not a JSON object")
        return message
