"""Every refusal the server can give, and the one table that turns it into an envelope.

Clients decide between "retry", "reconnect" and "give up" by the HTTP status (503 retry the same
session, 404 reconnect), so the status, the JSON-RPC code and the exact message of each refusal are
contract (upstream §1.1, §1.6). Code anywhere below the transport raises `Refused(kind)`; only the
transport renders it, through `envelope()`.
"""

import enum
from typing import Any

import attrs

from executor_mcp.protocol.jsonrpc import RequestId, encode_message, error_response

MAX_BODY_BYTES = 4 * 1024 * 1024
# A request body must arrive within this many seconds of its headers (4 MiB in 10 s is 3.2 Mbit/s).
BODY_TIMEOUT_SECONDS = 10
RETRY_AFTER_SECONDS = 2


class Code(enum.IntEnum):
    PARSE_ERROR = -32700
    INVALID_REQUEST = -32600
    METHOD_NOT_FOUND = -32601
    INVALID_PARAMS = -32602
    INTERNAL_ERROR = -32603
    TRANSPORT = -32000
    SESSION = -32001
    FOREIGN_SESSION = -32003


@attrs.frozen
class Envelope:
    status: int
    code: Code
    message: str

    @property
    def retry_after(self) -> int | None:
        return RETRY_AFTER_SECONDS if self.status == 503 else None


class Refusal(enum.Enum):
    METHOD_NOT_ALLOWED = Envelope(405, Code.SESSION, "Method not allowed")
    NOT_ACCEPTABLE = Envelope(
        406, Code.TRANSPORT, "Not Acceptable: Client must accept both application/json and text/event-stream"
    )
    NOT_ACCEPTABLE_STREAM = Envelope(406, Code.TRANSPORT, "Not Acceptable: Client must accept text/event-stream")
    UNSUPPORTED_MEDIA_TYPE = Envelope(
        415, Code.TRANSPORT, "Unsupported Media Type: Content-Type must be application/json"
    )
    BODY_TOO_LARGE = Envelope(413, Code.TRANSPORT, f"Request body too large. Maximum size is {MAX_BODY_BYTES} bytes")
    BODY_TIMEOUT = Envelope(
        408, Code.TRANSPORT, f"Request Timeout: the body did not arrive within {BODY_TIMEOUT_SECONDS} seconds"
    )
    INVALID_JSON = Envelope(400, Code.PARSE_ERROR, "Parse error: Invalid JSON")
    INVALID_MESSAGE = Envelope(400, Code.PARSE_ERROR, "Parse error: Invalid JSON-RPC message")
    SESSION_ID_REQUIRED = Envelope(400, Code.TRANSPORT, "Bad Request: Mcp-Session-Id header is required")
    INITIALIZE_WITH_SESSION = Envelope(
        400, Code.INVALID_REQUEST, "Invalid Request: Initialization requests must not include a sessionId"
    )
    INITIALIZE_IN_BATCH = Envelope(
        400, Code.INVALID_REQUEST, "Invalid Request: Only one initialization request is allowed"
    )
    UNSUPPORTED_PROTOCOL_VERSION = Envelope(
        400, Code.TRANSPORT, "Bad Request: Unsupported protocol version: {version} (supported versions: {supported})"
    )
    METHOD_NOT_FOUND = Envelope(404, Code.METHOD_NOT_FOUND, "Method not found")
    NOT_FOUND = Envelope(404, Code.TRANSPORT, "Not Found")
    TOOLKIT_NOT_FOUND = Envelope(404, Code.TRANSPORT, "Toolkit not found")
    # An API key created with `keys create --toolkit`: its toolkit's MCP endpoint is all it opens.
    TOOLKIT_BOUND = Envelope(403, Code.SESSION, "This API key is bound to a toolkit: use its endpoint, {endpoint}")
    SESSION_NOT_FOUND = Envelope(404, Code.SESSION, "Session not found")
    SESSION_TERMINATED = Envelope(404, Code.SESSION, "Session timed out, please reconnect")
    FOREIGN_SESSION = Envelope(403, Code.FOREIGN_SESSION, "MCP session does not belong to the current bearer")
    FORBIDDEN_ORIGIN = Envelope(403, Code.TRANSPORT, "Forbidden: Origin not allowed")
    FORBIDDEN_HOST = Envelope(403, Code.TRANSPORT, "Forbidden: Host not allowed")
    CSRF_INVALID = Envelope(403, Code.TRANSPORT, "Forbidden: missing or invalid CSRF token")
    RESTARTING = Envelope(503, Code.SESSION, "MCP session is restarting, please retry")
    # A 2026 request has no session to lose: when the workspace serving it ends under it, it is retried.
    WORKSPACE_ENDED = Envelope(503, Code.SESSION, "The workspace serving this request ended, please retry")
    UNAUTHORIZED = Envelope(401, Code.SESSION, "Unauthorized")
    NO_ORGANIZATION = Envelope(403, Code.SESSION, "No organization in session — log in via the web app first")
    AUTH_UNAVAILABLE = Envelope(503, Code.SESSION, "Authentication temporarily unavailable - please retry")
    # The shared database (`--database-url`) did not answer: nothing was acknowledged, the same request may be retried.
    STORE_UNAVAILABLE = Envelope(503, Code.SESSION, "The database is unavailable, please retry")
    INTERNAL = Envelope(500, Code.INTERNAL_ERROR, "Internal server error")
    # Requests the HTTP/1.1 parser cannot frame (answered by `transport/connections.py`, by h11's status hint).
    MALFORMED_HTTP = Envelope(400, Code.INVALID_REQUEST, "Bad Request: malformed HTTP request")
    HEADERS_TOO_LARGE = Envelope(431, Code.INVALID_REQUEST, "Request Header Fields Too Large")
    UNSUPPORTED_TRANSFER_ENCODING = Envelope(
        501, Code.INVALID_REQUEST, "Not Implemented: unsupported Transfer-Encoding (only chunked is supported)"
    )


class Refused(Exception):
    """A request refused as a whole, before or instead of a JSON-RPC response.

    `challenge` is the `WWW-Authenticate` value a 401 carries (RFC 6750 / RFC 9728); `request_id` the id
    of the request the refusal answers, when it answers one request rather than the whole exchange.
    """

    def __init__(
        self,
        refusal: Refusal,
        *,
        challenge: str | None = None,
        request_id: RequestId | None = None,
        **params: str,
    ) -> None:
        super().__init__(refusal.name)
        self.refusal = refusal
        self.challenge = challenge
        self.request_id = request_id
        self.params = params

    @property
    def envelope(self) -> Envelope:
        return self.refusal.value

    @property
    def message(self) -> str:
        return self.envelope.message.format(**self.params) if self.params else self.envelope.message


class RpcError(Exception):
    """A JSON-RPC error answering one request inside an otherwise normal exchange."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


def envelope_body(refused: Refused) -> dict[str, Any]:
    return encode_message(error_response(refused.request_id, int(refused.envelope.code), refused.message))


def envelope_headers(refused: Refused) -> dict[str, str]:
    headers = {}
    if refused.envelope.retry_after is not None:
        headers["Retry-After"] = str(refused.envelope.retry_after)
    if refused.challenge is not None:
        headers["WWW-Authenticate"] = refused.challenge
    return headers
