"""The values that cross the outbound boundary: a request to send, the answer, and the typed failure.

Plain attrs, no I/O, so request building and response classification are tested without a network.
"""

from typing import ClassVar

import attrs

from executor_mcp.codec import JsonObject

BLOCKED = "upstream_blocked"
UNREACHABLE = "upstream_unreachable"
HEADERS_TIMEOUT = "upstream_response_headers_timeout"
BODY_TIMEOUT = "upstream_response_body_timeout"
TOO_LARGE = "upstream_response_too_large"
HTTP_ERROR = "upstream_http_error"


@attrs.frozen
class OutboundRequest:
    """One HTTP request, fully built. `credential_headers`/`credential_query` name (lowercased) what carries
    a credential, so a redirect to another origin can drop exactly those. The URL, headers and body stay out
    of its repr: credentials ride in them."""

    method: str  # upper case
    url: str = attrs.field(repr=False)
    headers: tuple[tuple[str, str], ...] = attrs.field(default=(), repr=False)
    body: bytes | None = attrs.field(default=None, repr=False)
    credential_headers: frozenset[str] = frozenset()
    credential_query: frozenset[str] = frozenset()
    # False for requests whose body holds a credential (OAuth's token and registration requests): a redirect
    # would carry the body to wherever it points, so its answer is taken as it is.
    follow_redirects: bool = True


@attrs.frozen
class StreamStats:
    """How a streamed (NDJSON / SSE) body was collected: the `x-executor-stream*` headers."""

    truncated: bool
    byte_count: int
    duration_ms: int

    def headers(self) -> dict[str, str]:
        return {
            "x-executor-stream": "truncated" if self.truncated else "complete",
            "x-executor-stream-bytes": str(self.byte_count),
            "x-executor-stream-duration-ms": str(self.duration_ms),
        }


@attrs.frozen
class OutboundResponse:
    status: int
    headers: dict[str, str]  # names lowercased; repeated fields joined with ", "
    body: bytes
    stream: StreamStats | None = None  # set when the body was collected as a stream

    @property
    def content_type(self) -> str | None:
        return self.headers.get("content-type")


class OutboundFailure(Exception):
    """A request that produced no usable answer. The message names at most a scheme, host and port: never a
    path's query string or a credential."""

    codes: ClassVar[frozenset[str]] = frozenset({BLOCKED, UNREACHABLE, HEADERS_TIMEOUT, BODY_TIMEOUT, TOO_LARGE})

    def __init__(self, code: str, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status

    def as_error(self) -> JsonObject:
        error: JsonObject = {"code": self.code, "message": self.message}
        if self.status is not None:
            error["status"] = self.status
        return error


def format_seconds(seconds: float) -> str:
    """Upstream's rendering of a timeout: whole seconds as `110s`, anything else in milliseconds."""
    ms = round(seconds * 1000)
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def headers_timeout_message(seconds: float) -> str:
    return (
        f"Upstream returned no response headers within {format_seconds(seconds)}. The endpoint may be a live "
        "stream with no data to send (for example, runtime logs of an idle deployment); the request was aborted. "
        "Retry when the resource has activity, or use a non-streaming endpoint."
    )


def body_timeout_message(seconds: float) -> str:
    return (
        f"Upstream response body did not finish within {format_seconds(seconds)}. The request was aborted. Retry "
        "the operation; if it times out again, check the upstream service health or use an endpoint with a "
        "bounded response."
    )


def too_large_message(limit: int) -> str:
    return (
        f"Upstream response body is larger than {limit} bytes; the request was aborted. Use an endpoint with a "
        "smaller or paginated response."
    )
