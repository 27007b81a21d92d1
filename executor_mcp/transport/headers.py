"""Header rules of the Streamable HTTP transport, as plain functions of the header values."""

from collections.abc import Mapping

from executor_mcp.protocol.errors import MAX_BODY_BYTES, Refusal, Refused
from executor_mcp.protocol.mcp import HEADERLESS_VERSION, SUPPORTED_VERSIONS
from executor_mcp.protocol.stateless import SESSION_HEADER, VERSION_HEADER

JSON = "application/json"
EVENT_STREAM = "text/event-stream"

CORS = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Expose-Headers": "mcp-session-id, WWW-Authenticate",
}
PREFLIGHT = {
    **CORS,
    "Access-Control-Allow-Methods": "GET, POST, DELETE, OPTIONS",
    "Access-Control-Allow-Headers": (
        "content-type, authorization, mcp-session-id, accept, mcp-protocol-version, last-event-id, mcp-method, mcp-name"
    ),
    "Access-Control-Max-Age": "86400",
}


def _media_types(value: str) -> set[str]:
    """The media types a header lists as acceptable: `q=0` means "not acceptable" (RFC 9110 §12.4.2)."""
    accepted = set()
    for part in value.split(","):
        media_type, *parameters = (piece.strip() for piece in part.split(";"))
        if not any(_is_zero_weight(parameter) for parameter in parameters):
            accepted.add(media_type.lower())
    return accepted


def _is_zero_weight(parameter: str) -> bool:
    name, _, weight = parameter.partition("=")
    if name.strip().lower() != "q":
        return False
    try:
        return float(weight) == 0
    except ValueError:
        return False


def require_post_accept(headers: Mapping[str, str]) -> None:
    accepted = _media_types(headers.get("accept", ""))
    if not {JSON, EVENT_STREAM} <= accepted:
        raise Refused(Refusal.NOT_ACCEPTABLE)


def require_stream_accept(headers: Mapping[str, str]) -> None:
    if EVENT_STREAM not in _media_types(headers.get("accept", "")):
        raise Refused(Refusal.NOT_ACCEPTABLE_STREAM)


def require_json_body(headers: Mapping[str, str]) -> None:
    if JSON not in _media_types(headers.get("content-type", "")):
        raise Refused(Refusal.UNSUPPORTED_MEDIA_TYPE)
    length = headers.get("content-length")
    if length is not None and length.strip().isdigit() and int(length) > MAX_BODY_BYTES:
        raise Refused(Refusal.BODY_TOO_LARGE)


def require_session_id(headers: Mapping[str, str]) -> str:
    session_id = headers.get(SESSION_HEADER, "").strip()
    if not session_id:
        raise Refused(Refusal.SESSION_ID_REQUIRED)
    return session_id


def protocol_version(headers: Mapping[str, str]) -> str:
    """The version a session request speaks; headerless requests speak the spec's default."""
    version = headers.get(VERSION_HEADER, "").strip() or HEADERLESS_VERSION
    if version not in SUPPORTED_VERSIONS:
        raise Refused(Refusal.UNSUPPORTED_PROTOCOL_VERSION, version=version, supported=", ".join(SUPPORTED_VERSIONS))
    return version
