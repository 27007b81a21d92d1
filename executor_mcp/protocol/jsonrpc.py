"""JSON-RPC 2.0 messages as MCP uses them: parsing and encoding, no I/O.

A body is one message or a batch (a JSON array). Parsing is strict: MCP ids are strings or integers
(never booleans, floats or null on requests) and `params` is an object when present. Anything that is
JSON but not such a message is refused as a whole, as the upstream transport does.
"""

from typing import Any

import attrs
import cattrs
from cattrs.gen import make_dict_unstructure_fn, override

from executor_mcp.codec import JsonObject, converter, loads

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


def _structure_request_id(value: Any, _: type) -> RequestId:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise TypeError(f"a request id is a string or an integer, not {type(value).__name__}")
    return value


def _structure_optional_request_id(value: Any, _: type) -> RequestId | None:
    return None if value is None else _structure_request_id(value, RequestId)


converter.register_structure_hook(RequestId, _structure_request_id)
converter.register_structure_hook(RequestId | None, _structure_optional_request_id)
# Leaf first: a generated hook captures the hooks of nested classes when it is made.
converter.register_unstructure_hook(
    ErrorObject, make_dict_unstructure_fn(ErrorObject, converter, _cattrs_omit_if_default=True)
)
for _cls in (Request, Notification):
    converter.register_unstructure_hook(
        _cls, make_dict_unstructure_fn(_cls, converter, params=override(omit_if_default=True))
    )


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


def encode(message: Message) -> JsonObject:
    body: JsonObject = {"jsonrpc": JSONRPC_VERSION}
    body.update(converter.unstructure(message))
    return body


def error_response(request_id: RequestId | None, code: int, message: str, data: Any = None) -> ErrorResponse:
    return ErrorResponse(id=request_id, error=ErrorObject(code=code, message=message, data=data))
