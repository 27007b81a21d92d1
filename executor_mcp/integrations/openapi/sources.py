"""Where an OpenAPI document comes from (pasted, or fetched from its URL through `Outbound`) and how it is
compiled for the server (in a child process, at the caller's turn of the compiler: `isolated.py` says why)."""

import re
from functools import partial
from typing import Any

from executor_mcp.codec import dumps
from executor_mcp.integrations.compiling import Compiler
from executor_mcp.integrations.openapi import document
from executor_mcp.integrations.openapi.isolated import Compiled, compile_isolated
from executor_mcp.integrations.validation import url as checked_url
from executor_mcp.outbound.client import Outbound
from executor_mcp.outbound.model import OutboundFailure
from executor_mcp.records.integration_errors import InvalidInput, SourceUnavailable, SpecRefused
from executor_mcp.storage.records import Owner as Principal

# `integrations.detect` is a quick look: a URL that takes longer to answer is taken for nothing there.
DETECT_TIMEOUT = 20.0


class SpecSources:
    def __init__(self, outbound: Outbound, compiler: Compiler, *, max_source_bytes: int, max_operations: int) -> None:
        self._outbound = outbound
        self._compiler = compiler
        self.max_source_bytes = max_source_bytes
        self._max_operations = max_operations

    async def read(self, spec: Any) -> tuple[bytes, str | None]:
        """The spec's bytes, and its URL when it was fetched: `{kind:"url", url}`, `{kind:"blob", value}`,
        or a string (a URL when it looks like one, else the document itself)."""
        if isinstance(spec, str):
            spec = (
                {"kind": "url", "url": spec}
                if re.match(r"https?://", spec.strip())
                else {"kind": "blob", "value": spec}
            )
        if not isinstance(spec, dict) or spec.get("kind") not in ("url", "blob"):
            raise InvalidInput('spec must be {kind: "url", url} or {kind: "blob", value}')
        if spec["kind"] == "blob":
            value = spec.get("value")
            if isinstance(value, dict | list):
                return dumps(value), None
            if not isinstance(value, str) or not value.strip():
                raise InvalidInput("spec.value must be the document's text")
            raw = value.encode()
            if len(raw) > self.max_source_bytes:
                raise SpecRefused(f"OpenAPI document is larger than {self.max_source_bytes} bytes")
            return raw, None
        address = checked_url(spec.get("url"), "spec.url")
        try:
            return await self._outbound.fetch(address, max_bytes=self.max_source_bytes), address
        except OutboundFailure as failure:
            raise SourceUnavailable(failure.message) from None

    async def glance(self, address: str) -> bytes:
        """What `address` answers within `DETECT_TIMEOUT`, bounded in size (`OutboundFailure` otherwise)."""
        return await self._outbound.fetch(address, max_bytes=self.max_source_bytes, timeout=DETECT_TIMEOUT)

    async def compile(self, caller: Principal | None, source: bytes) -> Compiled:
        """The document compiled in a child process, at the caller's turn."""
        async with self._compiler.turn(caller):
            return await compile_isolated(source, max_bytes=self.max_source_bytes, max_operations=self._max_operations)

    async def parse(self, caller: Principal | None, source: bytes) -> document.Document:
        """The document parsed (not compiled) in a worker thread, at the caller's turn; `SpecRefused` for text
        that is no OpenAPI document."""
        return await self._compiler.run(caller, partial(document.parse, source, max_bytes=self.max_source_bytes))
