"""JSON-RPC 2.0 messages as MCP uses them: parsing and encoding, no I/O.

A body is one message or a batch (a JSON array). Parsing is strict: MCP ids are strings or integers
(never booleans, floats or null on requests) and `params` is an object when present. Anything that is
JSON but not such a message is refused as a whole, as the upstream transport does.

Encoding builds the wire object by hand instead of through cattrs: payloads are already plain JSON, and
walking them recursively would fail on deep (but valid) values long before the JSON encoder does.
`serialize` is the one place a message becomes bytes; a message that cannot be (too deep, not JSON, a
non-finite number) raises `Unencodable`, which callers turn into an answer they can send.
"""

from typing import Any

import attrs
import cattrs

from executor_mcp.codec import JsonObject, converter, dumps, loads

JSONRPC_VERSION = "2.0"

RequestId = int | str


@attrs.frozen
class Request:
    id: RequestId
    method: str
    params: JsonObject | None = None


@attrs.frozen
class Notification:
    method: str
    params: JsonObject | None = None


@attrs.frozen
class ErrorObject:
    code: int
    message: str
    data: Any = None


@attrs.frozen
class Response:
    id: RequestId
    result: JsonObject


@attrs.frozen
class ErrorResponse:
    id: RequestId | None
    error: ErrorObject


Message = Request | Notification | Response | ErrorResponse


class InvalidJson(ValueError):
    """The body is not JSON at all."""


class InvalidMessage(ValueError):
    """The body is JSON, but not a JSON-RPC 2.0 message (or batch of them)."""


class Unencodable(ValueError):
    """A message whose payload is not JSON that can be sent: too deeply nested, or not JSON at all."""


def _structure_request_id(value: Any, _: object) -> RequestId:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise TypeError(f"a request id is a string or an integer, not {type(value).__name__}")
    return value


def _structure_optional_request_id(value: Any, _: object) -> RequestId | None:
    return None if value is None else _structure_request_id(value, RequestId)


converter.register_structure_hook(RequestId, _structure_request_id)
converter.register_structure_hook(RequestId | None, _structure_optional_request_id)


def _classify(obj: Any) -> type[Message]:
    if not isinstance(obj, dict) or obj.get("jsonrpc") != JSONRPC_VERSION:
        raise InvalidMessage("not a JSON-RPC 2.0 object")
    if "method" in obj:
        return Request if "id" in obj else Notification
    if "result" in obj and "id" in obj:
        return Response
    if "error" in obj and "id" in obj:
        return ErrorResponse
    raise InvalidMessage("neither a request, a notification nor a response")


def parse_message(obj: Any) -> Message:
    cls = _classify(obj)
    try:
        return converter.structure(obj, cls)
    except (cattrs.BaseValidationError, TypeError, ValueError) as exc:
        raise InvalidMessage(str(exc)) from None


def parse_body(raw: bytes) -> tuple[list[Message], bool]:
    """Parse a POST body into its messages; the flag tells whether it was a batch."""
    try:
        decoded = loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        # RecursionError: absurdly deep nesting is malformed input, not a server fault.
        raise InvalidJson(type(exc).__name__) from None
    if isinstance(decoded, list):
        if not decoded:
            raise InvalidMessage("empty batch")
        return [parse_message(item) for item in decoded], True
    return [parse_message(decoded)], False


def encode_message(message: Message) -> JsonObject:
    body: JsonObject = {"jsonrpc": JSONRPC_VERSION}
    match message:
        case Request(id=request_id, method=method, params=params):
            body.update(id=request_id, method=method)
            if params is not None:
                body["params"] = params
        case Notification(method=method, params=params):
            body["method"] = method
            if params is not None:
                body["params"] = params
        case Response(id=request_id, result=result):
            body.update(id=request_id, result=result)
        case ErrorResponse(id=request_id, error=error):
            body.update(id=request_id, error=_error_object(error))
    return body


def _error_object(error: ErrorObject) -> JsonObject:
    wire: JsonObject = {"code": error.code, "message": error.message}
    if error.data is not None:
        wire["data"] = error.data
    return wire


def serialize(message: Message) -> bytes:
    """The message as the bytes of one JSON document, or `Unencodable`."""
    try:
        return dumps(encode_message(message))
    except (ValueError, TypeError, RecursionError) as exc:
        raise Unencodable(type(exc).__name__) from None


def error_response(request_id: RequestId | None, code: int, message: str, data: Any = None) -> ErrorResponse:
    return ErrorResponse(id=request_id, error=ErrorObject(code=code, message=message, data=data))
