"""MCP servers as a `Kind`: every connection dials the server, lists its tools, and calls them.

Remote sessions (Streamable HTTP) are pooled per identity and re-established when they die: a reused
session answering 404 (the server forgot it, e.g. after a restart) is retried once on a fresh dial, and the
restart envelope (HTTP 503 + `Retry-After` + JSON-RPC -32001, which our own product answers while it comes
back) is retried after a short wait. Legacy SSE and stdio sessions live for one call or discovery.
Every failure becomes a typed envelope (or `DiscoveryFailed`), never a traceback.
"""

import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import attrs
import trio

from executor_mcp.codec import JsonObject, dumps
from executor_mcp.integrations.credentials import (
    CredentialMissing,
    credential_missing_result,
    insufficient_scope,
    rejected_result,
    render_credentials,
    scope_failure,
)
from executor_mcp.integrations.kinds import Discovery, Invocation, Registration
from executor_mcp.integrations.mcp import results
from executor_mcp.integrations.mcp.compile import compile_tools, real_name
from executor_mcp.integrations.mcp.pool import SessionPool, identity_key
from executor_mcp.integrations.mcp.protocol import (
    INVALID_PARAMS,
    MAX_PAGES,
    METHOD_NOT_FOUND,
    ProtocolError,
    ServerRefused,
)
from executor_mcp.integrations.mcp.registration import ENV_CARRIER, STDIO, STDIO_DISABLED, reconfigured, registration
from executor_mcp.integrations.mcp.transports import (
    CLOSE_TIMEOUT,
    Command,
    HttpStatus,
    Remote,
    StreamableSession,
    open_sse,
    open_stdio,
)
from executor_mcp.outbound.client import Outbound, origin_of_url
from executor_mcp.outbound.model import OutboundFailure
from executor_mcp.protocol.errors import Code
from executor_mcp.records.integration_errors import ArgumentsRefused, DiscoveryFailed, IntegrationError, InvalidInput
from executor_mcp.records.integrations import (
    MAX_DISCOVERED_TOOLS,
    MCP,
    AuthMethod,
    CompiledCatalog,
    IntegrationRecord,
    ToolDef,
    config_strings,
    decode_catalog,
    encode_catalog,
)
from executor_mcp.storage.records import Owner as Principal

log = logging.getLogger(__name__)

T = TypeVar("T")

# A tool call's whole budget: dial, handshake, the call and its streamed answer.
CALL_TIMEOUT = 120.0
# Probing an endpoint is a quick look, like `integrations.detect`.
PROBE_TIMEOUT = 15.0
# The longest wait a restart envelope's `Retry-After` may ask for before the one retry.
MAX_RESTART_WAIT = 2.0
# Endpoints (by identity) that answered only the legacy SSE transport to `auto`: not tried on Streamable again.
MAX_SSE_MEMORY = 256
# A static env value shorter than this is too common a string to blank out of a server's stderr.
MIN_REDACTED = 4
# Statuses of a Streamable HTTP handshake that say "not this transport": `auto` then tries legacy SSE.
FALLBACK_STATUSES = frozenset({400, 404, 405, 406, 415})


class ConnectFailed(Exception):
    """The server could not be dialled or did not complete the handshake (not a credential refusal)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@attrs.frozen
class Target:
    """Where one connection's session goes: a remote endpoint, or a command to start."""

    remote: Remote | None
    command: Command | None
    transport: str  # "auto" | "streamable-http" | "sse" | "stdio"
    key: str = attrs.field(repr=False)
    secrets: tuple[str, ...] = attrs.field(repr=False)

    @property
    def where(self) -> str:
        if self.remote is not None:
            return origin_of_url(self.remote.endpoint)
        assert self.command is not None
        return f"the command {self.command.command}"


def _restart_wait(failure: HttpStatus) -> float | None:
    """How long to wait before retrying a restart envelope, or None when the answer is not one."""
    if failure.status != 503 or failure.rpc_code != Code.SESSION:
        return None
    retry_after = failure.headers.get("retry-after", "")
    if not retry_after.isdigit():
        return None
    return min(float(retry_after), MAX_RESTART_WAIT)


def _describe(failure: BaseException) -> str:
    if isinstance(failure, HttpStatus):
        return f"it answered HTTP {failure.status}"
    if isinstance(failure, ServerRefused):
        return f"it answered a JSON-RPC error ({failure.code}): {failure.message[:300]}"
    if isinstance(failure, OutboundFailure | ProtocolError):
        return failure.message
    return type(failure).__name__


class McpKind:
    name = MCP

    def __init__(
        self,
        outbound: Outbound,
        *,
        allow_stdio: bool = False,
        max_source_bytes: int,
        clock: Callable[[], float] = trio.current_time,
    ) -> None:
        self._outbound = outbound
        self.allow_stdio = allow_stdio
        self._max_bytes = outbound.settings.max_response_bytes
        self._max_source_bytes = max_source_bytes
        self._pool = SessionPool(clock)
        self._sse_only: OrderedDict[str, None] = OrderedDict()

    # -- a server in (registration never dials it) --------------------------------------------------

    def check_addable(self, body: Any) -> None:
        registration(body, stdio_allowed=self.allow_stdio)

    async def register(self, body: Any, caller: Principal) -> Registration:
        return registration(body, stdio_allowed=self.allow_stdio)

    def reconfigure(self, record: IntegrationRecord, body: Any) -> tuple[JsonObject, tuple[AuthMethod, ...]]:
        return reconfigured(record.config, body, record.auth_methods, stdio_allowed=self.allow_stdio)

    def not_found(self, slug: str) -> IntegrationError:
        return InvalidInput(f"Integration {slug} is not an MCP server")

    # -- catalog ------------------------------------------------------------------------------------

    def compile(self, source: bytes) -> tuple[CompiledCatalog, bytes]:
        catalog = compile_tools(source)
        return catalog, encode_catalog(catalog)

    def decode(self, raw: bytes) -> CompiledCatalog:
        return decode_catalog(raw)

    def discovers(self, integration: IntegrationRecord) -> bool:
        return True

    def check_arguments(self, tool: ToolDef, args: Any) -> None:
        if args is not None and not isinstance(args, dict):
            raise ArgumentsRefused("MCP tool arguments must be an object")

    def read_only(self, tool: ToolDef) -> bool:
        """The server's own `readOnlyHint` (a hint: the server is trusted as far as its connection is)."""
        mcp = tool.binding.get("mcp")
        annotations = mcp.get("annotations") if isinstance(mcp, dict) else None
        return isinstance(annotations, dict) and annotations.get("readOnlyHint") is True

    # -- targets ------------------------------------------------------------------------------------

    def target(
        self, integration: IntegrationRecord, template: str, credentials: Mapping[str, str | None]
    ) -> Target | CredentialMissing:
        config = integration.config
        method = integration.auth_method(template)
        rendered = render_credentials(method, credentials)
        if isinstance(rendered, CredentialMissing):
            return rendered
        secrets = tuple(sorted(value for value in credentials.values() if value))
        if config.get("transport") == STDIO:
            env = config_strings(config.get("env"))
            env.update(_env_values(method, credentials))
            args = config.get("args")
            cwd = config.get("cwd")
            command = Command(
                command=str(config.get("command", "")),
                args=tuple(arg for arg in args if isinstance(arg, str)) if isinstance(args, list) else (),
                env=env,
                cwd=cwd if isinstance(cwd, str) else None,
            )
            # Static env values are shown to admins only, so a server printing them is redacted like a credential.
            static = tuple(value for value in config_strings(config.get("env")).values() if len(value) >= MIN_REDACTED)
            return Target(
                remote=None, command=command, transport=STDIO, key="", secrets=tuple(sorted({*secrets, *static}))
            )
        auth_headers, auth_query = rendered
        headers = config_strings(config.get("headers"))
        # The credential's headers win over static ones of the same name, whatever their case.
        overridden = {name.lower() for name in auth_headers}
        headers = {name: value for name, value in headers.items() if name.lower() not in overridden}
        headers.update(auth_headers)
        query = {**config_strings(config.get("queryParams")), **auth_query}
        endpoint = str(config.get("endpoint", ""))
        transport = str(config.get("remoteTransport", "auto"))
        return Target(
            remote=Remote(
                endpoint=endpoint,
                headers=headers,
                query=query,
                credential_headers=frozenset(name.lower() for name in auth_headers),
                credential_query=frozenset(name.lower() for name in auth_query),
            ),
            command=None,
            transport=transport,
            key=identity_key(
                endpoint=endpoint,
                transport=transport,
                headers=headers,
                query=query,
                template=template,
                credentials=credentials,
            ),
            secrets=secrets,
        )

    # -- sessions -----------------------------------------------------------------------------------

    async def _close(self, sessions: list[StreamableSession]) -> None:
        if not sessions:
            return
        with trio.CancelScope(shield=True) as scope:
            scope.deadline = trio.current_time() + CLOSE_TIMEOUT
            async with trio.open_nursery() as nursery:
                for session in sessions:
                    nursery.start_soon(session.close)

    async def aclose(self) -> None:
        """End the idle sessions (the server is stopping)."""
        await self._close(self._pool.drain())

    def _remember_sse(self, key: str) -> None:
        self._sse_only[key] = None
        while len(self._sse_only) > MAX_SSE_MEMORY:
            self._sse_only.popitem(last=False)

    async def _dial(self, target: Target) -> StreamableSession:
        assert target.remote is not None
        session = StreamableSession(self._outbound, target.remote, max_bytes=self._max_bytes)
        try:
            await session.initialize()
        except BaseException:
            await self._close([session])
            raise
        return session

    async def run(self, target: Target, action: Callable[[Any], Awaitable[T]]) -> tuple[T, bool, str]:
        """`action` on a session of `target`: its result, whether the server said its tools changed, and the
        transport that served. Handshake failures other than a credential refusal raise `ConnectFailed`."""
        if target.command is not None:
            if not self.allow_stdio:
                raise ConnectFailed(STDIO_DISABLED)
            opener = open_stdio(target.command, max_bytes=self._max_bytes, secrets=target.secrets)
            async with self._connecting(target, opener) as session:
                result = await action(session)
                return result, session.list_changed, session.transport
        if target.transport == "sse" or target.key in self._sse_only:
            return await self._run_sse(target, action)
        for attempt in range(3):
            session, expired = self._pool.take(target.key)
            await self._close(expired)
            reused = session is not None
            if session is None:
                try:
                    session = await self._dial(target)
                except HttpStatus as failure:
                    if failure.status in (401, 403):
                        raise
                    wait = _restart_wait(failure)
                    if wait is not None and attempt < 2:
                        await trio.sleep(wait)
                        continue
                    if target.transport == "auto" and failure.status in FALLBACK_STATUSES:
                        return await self._fall_back(target, action)
                    raise ConnectFailed(self._connect_message(target, failure)) from None
                except ProtocolError as failure:
                    if target.transport == "auto":
                        return await self._fall_back(target, action)
                    raise ConnectFailed(self._connect_message(target, failure)) from None
                except (OutboundFailure, ServerRefused) as failure:
                    raise ConnectFailed(self._connect_message(target, failure)) from None
            try:
                result = await action(session)
            except HttpStatus as failure:
                await self._close([session])
                if failure.status == 404 and reused:
                    continue  # the server forgot the session (restarted, expired): once more on a fresh dial
                wait = _restart_wait(failure)
                if wait is not None and attempt < 2:
                    await trio.sleep(wait)
                    continue
                raise
            except ServerRefused:
                await self._close(self._pool.give(target.key, session))  # the session itself is fine
                raise
            except BaseException:
                await self._close([session])
                raise
            changed, session.list_changed = session.list_changed, False
            await self._close(self._pool.give(target.key, session))
            return result, changed, session.transport
        raise ConnectFailed(f"Could not reach the MCP server at {target.where}: it kept answering that it restarts")

    async def _fall_back(self, target: Target, action: Callable[[Any], Awaitable[T]]) -> tuple[T, bool, str]:
        result = await self._run_sse(target, action)
        self._remember_sse(target.key)
        return result

    async def _run_sse(self, target: Target, action: Callable[[Any], Awaitable[T]]) -> tuple[T, bool, str]:
        assert target.remote is not None
        opener = open_sse(self._outbound, target.remote, max_bytes=self._max_bytes)
        async with self._connecting(target, opener) as session:
            result = await action(session)
            return result, session.list_changed, session.transport

    @asynccontextmanager
    async def _connecting(self, target: Target, opener: Any) -> AsyncIterator[Any]:
        """A per-use session: failures of its opening are `ConnectFailed` (credential refusals stay
        `HttpStatus`); failures of the block pass through."""
        entered = False
        try:
            async with opener as session:
                entered = True
                yield session
        except HttpStatus as failure:
            if entered or failure.status in (401, 403):
                raise
            raise ConnectFailed(self._connect_message(target, failure)) from None
        except (ProtocolError, OutboundFailure, ServerRefused) as failure:
            if entered:
                raise
            raise ConnectFailed(self._connect_message(target, failure)) from None

    def _connect_message(self, target: Target, failure: BaseException) -> str:
        return f"Could not connect to the MCP server at {target.where}: {_describe(failure)}"

    # -- discovery ----------------------------------------------------------------------------------

    async def discover(self, discovery: Discovery) -> bytes:
        target = self.target(discovery.integration, discovery.connection.template, discovery.credentials)
        if isinstance(target, CredentialMissing):
            raise DiscoveryFailed(
                f"{discovery.connection.address} has no resolvable credential value for input(s): "
                + ", ".join(target.inputs)
            )
        try:
            (server, tools), _, _ = await self.run(target, _list_tools)
        except HttpStatus as failure:
            if failure.status in (401, 403):
                raise DiscoveryFailed(
                    f"The MCP server at {target.where} refused the connection's credential (HTTP {failure.status})"
                ) from None
            raise DiscoveryFailed(f"Listing tools at {target.where} failed: {_describe(failure)}") from None
        except ConnectFailed as failure:
            raise DiscoveryFailed(failure.message) from None
        except (ServerRefused, ProtocolError, OutboundFailure) as failure:
            raise DiscoveryFailed(f"Listing tools at {target.where} failed: {_describe(failure)}") from None
        source = dumps({"server": server, "tools": tools})
        if len(source) > self._max_source_bytes:
            raise DiscoveryFailed(
                f"The MCP server at {target.where} lists more than {self._max_source_bytes} bytes of tools"
            )
        return source

    # -- invocation ---------------------------------------------------------------------------------

    async def invoke(self, invocation: Invocation) -> JsonObject:
        integration, connection = invocation.integration, invocation.connection
        target = self.target(integration, connection.template, invocation.credentials)
        if isinstance(target, CredentialMissing):
            return credential_missing_result(
                integration=integration.slug, owner=connection.owner, connection=connection.name, oauth=target.oauth
            )
        name = real_name(invocation.tool)
        arguments = invocation.args if isinstance(invocation.args, dict) else {}

        async def call(session: Any) -> Any:
            return await session.request("tools/call", {"name": name, "arguments": arguments})

        outcome: JsonObject | None = None
        with trio.move_on_after(CALL_TIMEOUT):
            outcome = await self._call(invocation, target, call, name)
        if outcome is None:
            return {
                "ok": False,
                "error": {
                    "code": "mcp_tool_timeout",
                    "message": f"The MCP server did not answer tools/call within {CALL_TIMEOUT:g}s; the call was "
                    "abandoned.",
                },
            }
        return outcome

    async def _call(
        self, invocation: Invocation, target: Target, call: Callable[[Any], Awaitable[Any]], name: str
    ) -> JsonObject:
        integration, connection = invocation.integration, invocation.connection
        try:
            result, changed, _ = await self.run(target, call)
        except HttpStatus as failure:
            if failure.status in (401, 403):
                scoped, required = insufficient_scope(failure.headers, failure.body)
                if failure.status == 403 and scoped:
                    return scope_failure(
                        failure.status,
                        failure.body,
                        integration=integration.slug,
                        owner=connection.owner,
                        connection=connection.name,
                        required=required,
                        granted=None,
                    )
                return rejected_result(
                    failure.status,
                    failure.body,
                    integration=integration.slug,
                    owner=connection.owner,
                    connection=connection.name,
                )
            return results.connect_failure(f"The MCP server at {target.where} answered HTTP {failure.status}")
        except ConnectFailed as failure:
            return results.connect_failure(failure.message)
        except ServerRefused as failure:
            if failure.code in (METHOD_NOT_FOUND, INVALID_PARAMS):
                invocation.mark_stale()
                return results.unknown_tool(name)
            return results.rpc_failure(failure.code, failure.message)
        except ProtocolError as failure:
            return results.protocol_failure(failure.message)
        except OutboundFailure as failure:
            return {"ok": False, "error": failure.as_error()}
        if changed:
            invocation.mark_stale()
        if results.says_unknown_tool(result):
            invocation.mark_stale()
            return results.unknown_tool(name)
        return results.call_result(result)

    # -- probing ------------------------------------------------------------------------------------

    async def probe(self, endpoint: str, headers: Mapping[str, str], transport: str) -> JsonObject:
        """What answers at `endpoint`, dialled without any connection's credential (bounded in time)."""
        target = Target(
            remote=Remote(endpoint=endpoint, headers=dict(headers), query={}),
            command=None,
            transport=transport,
            key=identity_key(
                endpoint=endpoint, transport=transport, headers=headers, query={}, template="", credentials={}
            ),
            secrets=(),
        )
        answer: JsonObject = {"endpoint": endpoint, "reachable": False, "requiresAuth": False}
        with trio.move_on_after(PROBE_TIMEOUT) as deadline:
            try:
                (server, tools), _, used = await self.run(target, _list_tools)
            except HttpStatus as failure:
                answer["reachable"] = True
                answer["requiresAuth"] = failure.status in (401, 403)
                answer["message"] = f"The MCP server answered HTTP {failure.status}"
                return answer
            except ConnectFailed as failure:
                answer["message"] = failure.message
                return answer
            except (ServerRefused, ProtocolError, OutboundFailure) as failure:
                answer["message"] = f"The MCP server at {target.where} could not be listed: {_describe(failure)}"
                return answer
            answer.update(
                reachable=True,
                transport=used,
                serverName=server.get("name", ""),
                serverVersion=server.get("version", ""),
                protocolVersion=server.get("protocolVersion", ""),
                toolCount=len(tools),
            )
        if deadline.cancelled_caught:
            answer["message"] = f"The endpoint did not answer within {PROBE_TIMEOUT:g}s"
        return answer


def _env_values(method: AuthMethod | None, credentials: Mapping[str, str | None]) -> dict[str, str]:
    if method is None:
        return {}
    values = {}
    for placement in method.placements:
        if placement.carrier == ENV_CARRIER:
            value = credentials.get(placement.input or "")
            if value:
                values[placement.name] = value
    return values


async def _list_tools(session: Any) -> tuple[JsonObject, list[Any]]:
    """Every page of `tools/list` (at most `MAX_PAGES`), and who answered."""
    tools: list[Any] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        result = await session.request("tools/list", {"cursor": cursor} if cursor else {})
        page = result.get("tools") if isinstance(result, dict) else None
        if not isinstance(page, list):
            raise ProtocolError("The MCP server's tools/list result has no tools array")
        tools.extend(page)
        if len(tools) > MAX_DISCOVERED_TOOLS:
            raise ProtocolError(f"The MCP server lists more than {MAX_DISCOVERED_TOOLS} tools")
        next_cursor = result.get("nextCursor")
        if not isinstance(next_cursor, str) or not next_cursor or next_cursor == cursor:
            break
        cursor = next_cursor
    server = session.server
    described: JsonObject = {}
    if server is not None:
        described = {"name": server.name, "version": server.version, "protocolVersion": server.protocol_version}
    return described, tools
