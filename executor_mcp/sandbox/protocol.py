"""Frames between the server and a sandbox worker: a 4-byte big-endian length, then UTF-8 JSON.

Sans-I/O on purpose: the worker reads with blocking file calls, the server with trio streams, and both
use the same encoder and the same incremental decoder. A worker is untrusted (it runs agent code), so
the decoder refuses frames over a size bound instead of buffering whatever it is sent.
"""

import json
import struct
from typing import Any

MAX_FRAME = 96 * 1024 * 1024
_HEADER = struct.Struct(">I")


class FrameError(ValueError):
    """The peer sent something that is not a frame of ours."""


def encode(message: dict[str, Any]) -> bytes:
    payload = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()
    return _HEADER.pack(len(payload)) + payload


class FrameDecoder:
    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self._buffer = bytearray()
        self._max = max_frame

    def feed(self, data: bytes) -> None:
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
            message = json.loads(payload)
        except ValueError as exc:
            raise FrameError(f"frame is not JSON: {exc}") from None
        if not isinstance(message, dict):
            raise FrameError("frame is not a JSON object")
        return message
