"""Outbound HTTP for integrations: httpx over a network backend that enforces the SSRF rules at connect time.

Why a backend and not a pre-flight check: the backend resolves the name itself, refuses the connection
unless every resolved address passes `guard`, and then dials the vetted IP (TLS still verifies and sends
SNI for the hostname, since httpcore passes the URL's host to `start_tls`). There is no second lookup, so
a name that answers a public address to the check and a private one to the connect (DNS rebinding) gets
nowhere.

Time is bounded by phase deadlines (trio cancel scopes: one for the response headers, including connect
and every redirect hop, one for the body), not httpx's per-read timeouts; size by a buffered cap, and
streaming content types (NDJSON, SSE) are collected up to a byte and time window instead.
"""

import ipaddress
import logging
import socket
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any, Self

import attrs
import httpcore
import httpx
import trio
from opentelemetry.trace import SpanKind

from executor_mcp import traces
from executor_mcp.config import Settings
from executor_mcp.outbound import guard
from executor_mcp.outbound.model import (
    BLOCKED,
    BODY_TIMEOUT,
    HEADERS_TIMEOUT,
    HTTP_ERROR,
    TOO_LARGE,
    UNREACHABLE,
    OutboundFailure,
    OutboundRequest,
    OutboundResponse,
    StreamStats,
    body_timeout_message,
    headers_timeout_message,
    too_large_message,
)
from executor_mcp.outbound.useragent import DEFAULT_USER_AGENT

# httpx logs every request's full URL at INFO, query string included, where a query credential would sit.
logging.getLogger("httpx").setLevel(logging.WARNING)
logging.getLogger("httpcore").setLevel(logging.INFO)

Resolver = Callable[[str, int], Awaitable[Sequence[str]]]

SPEC_ACCEPT = "application/json, application/yaml, text/yaml, */*"
STREAMING_TYPES = frozenset(
    {"application/stream+json", "application/x-ndjson", "application/jsonl", "text/event-stream"}
)
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
# Dropped on every hop that changes origin, whatever the caller marks: they carry identity by definition.
ALWAYS_CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie"})
DEFAULT_PORTS = {"http": 80, "https": 443}


@attrs.frozen(kw_only=True)
class OutboundSettings:
    """What the client may do: two of `serve`'s options (always given; their defaults live in `Settings`),
    and the client's own bounds."""

    allow_local_network: bool
    max_response_bytes: int
    headers_timeout: float = 110.0
    body_timeout: float = 60.0
    stream_max_bytes: int = 1_000_000
    stream_max_seconds: float = 10.0
    max_redirects: int = 10

    @classmethod
    def of(cls, settings: Settings) -> "OutboundSettings":
        return cls(
            allow_local_network=settings.allow_local_network,
            max_response_bytes=settings.integration_max_response_bytes,
        )


async def system_resolver(host: str, port: int) -> Sequence[str]:
    """Every address the system resolver gives for `host`, in its order, without duplicates."""
    infos = await trio.socket.getaddrinfo(host, port, type=trio.socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class _Refused(Exception):
    """Raised inside the backend so it crosses httpcore unchanged; `Outbound` turns it into a value."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's trio backend, dialling only addresses the guard let through, resolved here exactly once."""

    def __init__(self, *, allow_local_network: bool, resolver: Resolver) -> None:
        self._allow_local_network = allow_local_network
        self._resolver = resolver
        self._trio = httpcore.TrioBackend()

    async def vetted_addresses(self, host: str, port: int) -> list[guard.Address]:
        refused = guard.check_host(host, allow_local_network=self._allow_local_network)
        if refused is not None:
            raise _Refused(BLOCKED, refused.message)
        literal = guard.parse_address(host)
        if literal is not None:
            return [literal]
        try:
            addresses = [ipaddress.ip_address(answer) for answer in await self._resolver(host, port)]
        except (OSError, UnicodeError, ValueError):
            raise _Refused(UNREACHABLE, f"Could not resolve upstream host {guard.normalize_host(host)}.") from None
        if not addresses:
            raise _Refused(UNREACHABLE, f"Could not resolve upstream host {guard.normalize_host(host)}.")
        for address in addresses:
            refused = guard.check_address(address, allow_local_network=self._allow_local_network, resolved=True)
            if refused is not None:
                raise _Refused(BLOCKED, refused.described(guard.normalize_host(host)))
        return addresses

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface; the cancel scopes bound time)
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = await self.vetted_addresses(host, port)
        last_error: Exception | None = None
        for address in addresses:
            try:
                return await self._trio.connect_tcp(
                    str(address), port, timeout=timeout, local_address=local_address, socket_options=socket_options
                )
            except httpcore.ConnectError as error:
                last_error = error
        assert last_error is not None  # at least one address, and each either returned or failed
        raise last_error

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise _Refused(BLOCKED, "Unix sockets are not allowed")

    async def sleep(self, seconds: float) -> None:
        await trio.sleep(seconds)


class _CoreBody(httpx.AsyncByteStream):
    def __init__(self, stream: Any) -> None:
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for part in self._stream:
            yield part

    async def aclose(self) -> None:
        await self._stream.aclose()


class GuardedTransport(httpx.AsyncBaseTransport):
    """httpx's default transport shape over a pool on `GuardedBackend`; httpcore errors pass through raw."""

    def __init__(self, backend: httpcore.AsyncNetworkBackend) -> None:
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(),
            max_connections=100,
            max_keepalive_connections=20,
            keepalive_expiry=5.0,
            network_backend=backend,
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.AsyncByteStream)
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        answer = await self._pool.handle_async_request(core_request)
        return httpx.Response(
            status_code=answer.status,
            headers=answer.headers,
            stream=_CoreBody(answer.stream),
            extensions=answer.extensions,
        )

    async def aclose(self) -> None:
        await self._pool.aclose()


def origin_of(url: httpx.URL) -> str:
    """`scheme://host[:port]`: what a failure message may name (no userinfo, path or query)."""
    host = f"[{url.host}]" if ":" in url.host else url.host
    return f"{url.scheme}://{host}" + (f":{url.port}" if url.port is not None else "")


def origin_of_url(url: str) -> str:
    """`origin_of` for a URL given as text; a URL that does not parse is named as such."""
    try:
        return origin_of(httpx.URL(url))
    except httpx.InvalidURL:
        return "an invalid URL"


def _origin_key(url: httpx.URL) -> tuple[str, str, int | None]:
    return (url.scheme, url.host, url.port or DEFAULT_PORTS.get(url.scheme))


def _without_query_names(url: httpx.URL, names: frozenset[str]) -> httpx.URL:
    if not names or not url.query:
        return url
    kept = tuple((key, value) for key, value in url.params.multi_items() if key.lower() not in names)
    return url.copy_with(query=None).copy_merge_params(kept) if kept else url.copy_with(query=None)


def _redirect_target(url: httpx.URL, location: str) -> httpx.URL:
    """Where a redirect points; `OutboundFailure` for a Location that names no host to go to.

    An absolute Location without an authority (`http:127.0.0.1/`) is refused rather than read as a path
    relative to the current URL, as lenient parsers do; so is anything that does not parse."""
    try:
        target: httpx.URL | None = url.join(location)
        named: httpx.URL | None = httpx.URL(location)
    except httpx.InvalidURL:
        target = named = None
    if named is not None and named.scheme not in ("", "http", "https"):
        return url.join(location)  # the guard refuses the scheme, by name
    if target is None or named is None or not target.host or (named.scheme and not named.host):
        raise OutboundFailure(UNREACHABLE, f"Upstream {origin_of(url)} sent an invalid redirect.")
    return target


def _with_default_encoding(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """One layer of gzip at most unless the request asks otherwise: `_Decoder` expands it in bounded steps
    (httpx would expand any stack of encodings a chunk at a time, past every size cap)."""
    if any(name.lower() == "accept-encoding" for name, _ in headers):
        return headers
    return [("Accept-Encoding", "gzip"), *headers]


def _media_type(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


def _lowercased(headers: httpx.Headers) -> dict[str, str]:
    joined: dict[str, str] = {}
    for name, value in headers.multi_items():
        key = name.lower()
        joined[key] = f"{joined[key]}, {value}" if key in joined else value
    return joined


_TRANSPORT_ERRORS = (httpcore.NetworkError, httpcore.ProtocolError, httpcore.TimeoutException, httpx.HTTPError, OSError)


class Outbound:
    """The one way integrations reach the network. Use as `async with Outbound(settings) as outbound:`."""

    def __init__(self, settings: OutboundSettings, *, resolver: Resolver | None = None) -> None:
        self.settings = settings
        self._backend = GuardedBackend(
            allow_local_network=self.settings.allow_local_network, resolver=resolver or system_resolver
        )
        self._transport: GuardedTransport | None = None

    async def __aenter__(self) -> Self:
        # Requests go to the transport, not through an `httpx.AsyncClient`: a client keeps a cookie jar (an
        # upstream's Set-Cookie for one caller would ride along on the next caller's request to that host),
        # adds `Accept: */*` and its own User-Agent, and parses each redirect's Location as it arrives,
        # raising on one it cannot parse. Redirects are followed here, by `_open`.
        self._transport = GuardedTransport(self._backend)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        transport, self._transport = self._transport, None
        if transport is not None:
            # Shielded: the pool closes its connections one by one, and a cancelled close (the server's
            # nursery is being cancelled) would leave the rest to the garbage collector. Closing a socket
            # does not wait on the network, so the shield cannot hold shutdown up.
            with trio.CancelScope(shield=True):
                await transport.aclose()

    async def send(
        self,
        request: OutboundRequest,
        *,
        collect_streams: bool = True,
        timeout: float | None = None,  # noqa: ASYNC109 (a phase budget, applied with cancel scopes)
    ) -> OutboundResponse:
        """Send `request`, following redirects, and read its answer within the configured deadlines and caps.

        `collect_streams`: read a 2xx NDJSON/SSE body as a bounded stream (off for file downloads).
        `timeout`: a shorter budget for each phase than the configured ones (an OAuth endpoint's).
        Raises `OutboundFailure` when there is no answer to classify.
        """
        settings = self.settings
        return await self._exchange(
            request,
            headers_timeout=min(settings.headers_timeout, timeout or settings.headers_timeout),
            body_timeout=min(settings.body_timeout, timeout or settings.body_timeout),
            max_bytes=settings.max_response_bytes,
            collect_streams=collect_streams,
        )

    async def fetch(
        self,
        url: str,
        *,
        accept: str = SPEC_ACCEPT,
        max_bytes: int | None = None,
        timeout: float = 60.0,  # noqa: ASYNC109 (a phase budget, applied with cancel scopes like `send`'s)
    ) -> bytes:
        """GET a document (an OpenAPI spec) through the same guard: its bytes, or `OutboundFailure`.

        `timeout` bounds the headers and then, again, the body; `max_bytes` defaults to the response cap.
        """
        request = OutboundRequest(
            method="GET", url=url, headers=(("Accept", accept), ("User-Agent", DEFAULT_USER_AGENT))
        )
        response = await self._exchange(
            request,
            headers_timeout=timeout,
            body_timeout=timeout,
            max_bytes=self.settings.max_response_bytes if max_bytes is None else max_bytes,
            collect_streams=False,
        )
        if not 200 <= response.status < 300:
            raise OutboundFailure(
                HTTP_ERROR, f"Failed to fetch OpenAPI document: HTTP {response.status}", status=response.status
            )
        return response.body

    @asynccontextmanager
    async def stream(
        self,
        request: OutboundRequest,
        *,
        headers_timeout: float | None = None,
    ) -> AsyncIterator["StreamedResponse"]:
        """The answer's status and headers once they arrive (redirects followed and guarded as in `send`), and
        its body read by the caller, for as long as the block runs: an MCP server's SSE answer or its legacy
        event stream. The block's own cancel scopes bound the body's time; `StreamedResponse` bounds its size.
        Raises `OutboundFailure` when no answer arrives."""
        limit = self.settings.headers_timeout if headers_timeout is None else headers_timeout
        response: httpx.Response | None = None
        try:
            with trio.move_on_after(limit) as headers_phase:
                response = await self._open(request)
            if response is None or headers_phase.cancelled_caught:
                raise OutboundFailure(HEADERS_TIMEOUT, headers_timeout_message(limit))
            yield StreamedResponse(response, _lowercased(response.headers))
        finally:
            if response is not None:
                with trio.CancelScope(shield=True):
                    await response.aclose()

    def _require_transport(self) -> GuardedTransport:
        if self._transport is None:
            raise RuntimeError("Outbound is used outside its `async with` block")
        return self._transport

    async def _exchange(
        self,
        request: OutboundRequest,
        *,
        headers_timeout: float,
        body_timeout: float,
        max_bytes: int,
        collect_streams: bool,
    ) -> OutboundResponse:
        response: httpx.Response | None = None
        try:
            with trio.move_on_after(headers_timeout) as headers_phase:
                response = await self._open(request)
            if response is None or headers_phase.cancelled_caught:
                raise OutboundFailure(HEADERS_TIMEOUT, headers_timeout_message(headers_timeout))
            status = response.status_code
            headers = _lowercased(response.headers)
            streaming = collect_streams and 200 <= status < 300 and status != 204
            if streaming and _media_type(headers.get("content-type")) in STREAMING_TYPES:
                body, stats = await self._collect_stream(response)
                return OutboundResponse(status=status, headers=headers, body=body, stream=stats)
            body = await self._read_buffered(response, headers, body_timeout=body_timeout, max_bytes=max_bytes)
            return OutboundResponse(status=status, headers=headers, body=body)
        except _TRANSPORT_ERRORS:
            origin = origin_of(response.request.url) if response is not None else origin_of(httpx.URL(request.url))
            raise OutboundFailure(
                UNREACHABLE, f"The connection to upstream {origin} failed before a complete answer arrived."
            ) from None
        finally:
            if response is not None:
                await response.aclose()

    async def _open(self, request: OutboundRequest) -> httpx.Response:
        """The first non-redirect answer (headers only), each hop checked by the guard and by the backend."""
        transport = self._require_transport()
        try:
            url = httpx.URL(request.url)
        except httpx.InvalidURL:
            raise OutboundFailure(UNREACHABLE, "The upstream URL is not a valid URL.") from None
        first_origin = _origin_key(url)
        method = request.method.upper()
        attributes: dict[str, traces.AttributeValue] = {
            "http.request.method": method,
            "server.address": url.host,
            "server.port": url.port or DEFAULT_PORTS.get(url.scheme, 0),
        }
        with traces.span(method, kind=SpanKind.CLIENT, attributes=attributes) as span:
            # The upstream joins the trace: this span's context, in place of any the request set.
            response = await self._follow(
                transport, request, url, first_origin, method, traces.outgoing(list(request.headers))
            )
            traces.note(span, "http.response.status_code", response.status_code)
            return response

    async def _follow(
        self,
        transport: GuardedTransport,
        request: OutboundRequest,
        url: httpx.URL,
        first_origin: tuple[str, str, int | None],
        method: str,
        headers: list[tuple[str, str]],
    ) -> httpx.Response:
        """`_open`'s hops: each target checked by the guard, credentials kept to the first origin."""
        body = request.body
        strip_headers = ALWAYS_CREDENTIAL_HEADERS | {name.lower() for name in request.credential_headers}
        strip_query = frozenset(name.lower() for name in request.credential_query)
        for hop in range(self.settings.max_redirects + 1):
            refused = guard.check_target(url.scheme, url.host, allow_local_network=self.settings.allow_local_network)
            if refused is not None:
                raise OutboundFailure(BLOCKED, refused.message)
            response = await self._send_one(transport, method, url, headers, body)
            location = response.headers.get("location")
            if response.status_code not in REDIRECT_STATUSES or location is None or not request.follow_redirects:
                return response
            await response.aclose()
            if hop == self.settings.max_redirects:
                raise OutboundFailure(
                    UNREACHABLE,
                    f"Upstream {origin_of(url)} redirected more than {self.settings.max_redirects} times; "
                    "the request was abandoned.",
                )
            target = _redirect_target(url, location)
            if (response.status_code == 303 and method != "HEAD") or (
                response.status_code in (301, 302) and method == "POST"
            ):
                method, body = "GET", None
                headers = [(k, v) for k, v in headers if k.lower() not in ("content-type", "content-length")]
            if _origin_key(target) != _origin_key(url):
                headers = [(k, v) for k, v in headers if k.lower() not in strip_headers]
            if _origin_key(target) != first_origin:
                target = _without_query_names(target, strip_query)
            url = target
        raise AssertionError("unreachable: the loop returns or raises")

    async def _send_one(
        self,
        transport: GuardedTransport,
        method: str,
        url: httpx.URL,
        headers: list[tuple[str, str]],
        body: bytes | None,
    ) -> httpx.Response:
        built = httpx.Request(method, url, headers=_with_default_encoding(headers), content=body)
        try:
            response = await transport.handle_async_request(built)
        except _Refused as refused:
            raise OutboundFailure(refused.code, refused.message) from None
        except (httpcore.ConnectError, httpcore.ConnectTimeout, httpx.ConnectError, socket.gaierror, OSError):
            raise OutboundFailure(UNREACHABLE, f"Could not connect to upstream {origin_of(url)}.") from None
        except (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol):
            raise OutboundFailure(BLOCKED, guard.BlockReason.SCHEME.value) from None
        except _TRANSPORT_ERRORS:
            raise OutboundFailure(
                UNREACHABLE, f"The connection to upstream {origin_of(url)} failed before the answer arrived."
            ) from None
        response.request = built
        return response

    async def _read_buffered(
        self, response: httpx.Response, headers: dict[str, str], *, body_timeout: float, max_bytes: int
    ) -> bytes:
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > max_bytes:
            raise OutboundFailure(TOO_LARGE, too_large_message(max_bytes), status=response.status_code)
        chunks: list[bytes] = []
        size = 0

        def take(chunk: bytes) -> bool:
            nonlocal size
            size += len(chunk)
            if size > max_bytes:
                return False
            chunks.append(chunk)
            return True

        stopped, timed_out = await _read_until(response, body_timeout, take)
        if stopped:
            raise OutboundFailure(TOO_LARGE, too_large_message(max_bytes), status=response.status_code)
        if timed_out:
            raise OutboundFailure(BODY_TIMEOUT, body_timeout_message(body_timeout), status=response.status_code)
        return b"".join(chunks)

    async def _collect_stream(self, response: httpx.Response) -> tuple[bytes, StreamStats]:
        """Upstream's streaming window: whatever arrives within the byte and time caps, marked truncated when
        a cap ended it (reaching exactly the byte cap counts, as upstream counts it)."""
        max_bytes = self.settings.stream_max_bytes
        max_seconds = self.settings.stream_max_seconds
        chunks: list[bytes] = []
        size = 0

        def take(chunk: bytes) -> bool:
            nonlocal size
            kept = chunk[: max_bytes - size]
            chunks.append(kept)
            size += len(kept)
            return size < max_bytes

        started = trio.current_time()
        stopped, timed_out = await _read_until(response, max_seconds, take)
        elapsed = trio.current_time() - started
        truncated = stopped or timed_out or elapsed >= max_seconds
        return b"".join(chunks), StreamStats(truncated=truncated, byte_count=size, duration_ms=int(elapsed * 1000))


class StreamedResponse:
    """An answer whose body the caller reads in chunks (`Outbound.stream`)."""

    def __init__(self, response: httpx.Response, headers: dict[str, str]) -> None:
        self._response = response
        self.status = response.status_code
        self.headers = headers  # names lowercased; repeated fields joined with ", "

    @property
    def media_type(self) -> str:
        return _media_type(self.headers.get("content-type"))

    async def read(self, take: Callable[[bytes], Awaitable[bool]], *, max_bytes: int) -> bool:
        """Feed decoded body chunks to `take` until it answers False (then True) or the body ends (False).
        `OutboundFailure` past `max_bytes` or when the connection breaks; what `take` raises is raised. Like
        `_read_until`, it stops by cancelling its scope (also when `take` raises), so the generators underneath
        end by exception rather than being abandoned."""
        decoder = _Decoder(self._response.headers.get("content-encoding", ""))
        stopped = too_large = False
        # What `take` or the decoder raised: kept while the scope's cancellation ends the loop, then raised.
        failure: BaseException | None = None
        size = 0
        origin = origin_of(self._response.request.url)
        try:
            with trio.CancelScope() as scope:
                async for raw in self._response.aiter_raw():
                    if stopped or too_large or failure is not None:
                        continue  # already cancelled: the next read raises
                    try:
                        for chunk in decoder.feed(raw):
                            size += len(chunk)
                            if size > max_bytes:
                                too_large = True
                            elif not await take(chunk):
                                stopped = True
                            if stopped or too_large:
                                break
                    except BaseException as raised:
                        failure = raised
                    if stopped or too_large or failure is not None:
                        scope.cancel()
        except _TRANSPORT_ERRORS:
            raise OutboundFailure(
                UNREACHABLE, f"The connection to upstream {origin} failed before a complete answer arrived."
            ) from None
        if failure is not None:
            raise failure
        if too_large:
            raise OutboundFailure(TOO_LARGE, too_large_message(max_bytes), status=self.status)
        return stopped

    async def body(self, *, max_bytes: int) -> bytes:
        """The whole body, up to `max_bytes` (`OutboundFailure` past it)."""
        chunks: list[bytes] = []

        async def take(chunk: bytes) -> bool:
            chunks.append(chunk)
            return True

        await self.read(take, max_bytes=max_bytes)
        return b"".join(chunks)


# Decompressed output per step: a bomb costs at most this past the cap that stops it.
DECODE_STEP_BYTES = 64 * 1024


class _Decoder:
    """The body as the upstream meant it, decompressed in bounded steps: identity, or one layer of gzip or
    deflate. Anything else (brotli, stacked encodings) is refused rather than passed on as garbage."""

    def __init__(self, content_encoding: str) -> None:
        encodings = [part.strip().lower() for part in content_encoding.split(",") if part.strip()]
        encodings = [encoding for encoding in encodings if encoding != "identity"]
        if not encodings:
            self._inflate = None
        elif encodings in (["gzip"], ["x-gzip"]):
            self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif encodings == ["deflate"]:
            self._inflate = zlib.decompressobj()
        else:
            raise OutboundFailure(
                UNREACHABLE, f"Upstream answered with an unsupported content encoding: {content_encoding[:40]}"
            )

    def feed(self, data: bytes) -> Iterator[bytes]:
        if self._inflate is None:
            yield data
            return
        try:
            while data:
                out = self._inflate.decompress(data, DECODE_STEP_BYTES)
                data = self._inflate.unconsumed_tail
                if out:
                    yield out
        except zlib.error:
            raise OutboundFailure(UNREACHABLE, "Upstream's compressed answer does not decompress.") from None


async def _read_until(response: httpx.Response, seconds: float, take: Callable[[bytes], bool]) -> tuple[bool, bool]:
    """Feed body chunks to `take` until it answers False, the body ends, or `seconds` pass: (stopped, timed
    out). It stops by cancelling its scope, never by leaving the loop, so the chain of httpx and httpcore
    async generators underneath ends by exception (closing the connection) instead of being abandoned."""
    decoder = _Decoder(response.headers.get("content-encoding", ""))
    stopped = False
    with trio.move_on_after(seconds) as scope:
        async for raw in response.aiter_raw():
            if stopped:
                continue  # already cancelled: the next read raises
            for chunk in decoder.feed(raw):
                if not take(chunk):
                    stopped = True
                    scope.cancel()
                    break
    return stopped, scope.cancelled_caught and not stopped
