"""What one OpenAPI operation needs at call time: the contract between `compile` and `request`/`response`.

Schemas stay as compiled (refs rewritten to `#/$defs/<name>`); the request builder needs only names,
locations and serialization styles, and the body's media types and their per-property encodings.
"""

import attrs

from executor_mcp.codec import JsonObject

LOCATIONS = ("path", "query", "header", "cookie")


@attrs.frozen
class Parameter:
    name: str
    location: str  # one of LOCATIONS
    required: bool = False
    style: str | None = None
    explode: bool | None = None  # None: the style's default (true for `form`)
    allow_reserved: bool = False
    schema: JsonObject = attrs.Factory(lambda: {"type": "string"})
    description: str | None = None


@attrs.frozen
class MediaType:
    media_type: str
    schema: JsonObject | None = None
    encoding: JsonObject = attrs.Factory(dict)  # property name → OpenAPI Encoding Object


@attrs.frozen
class RequestBody:
    required: bool
    contents: tuple[MediaType, ...]  # in spec order; the first is the default


@attrs.frozen
class ServerVariable:
    name: str
    default: str
    enum: tuple[str, ...] | None = None
    description: str | None = None


@attrs.frozen
class Server:
    url: str  # the raw template, `{var}`s unfilled
    variables: tuple[ServerVariable, ...] = ()


@attrs.frozen
class ResponseShape:
    """How a 2xx answer is read: the chosen media type, and whether it is a file."""

    media_type: str | None = None
    file: str | None = None  # None | "binary" (the body is the file) | "byteField" (`{data, size?}` holds it)
    byte_encoding: str = "base64"  # a byteField's `data`: "base64" | "base64url"


@attrs.frozen
class Binding:
    method: str  # lowercase: get, put, post, delete, patch, head, options, trace
    path_template: str
    servers: tuple[Server, ...] = ()
    parameters: tuple[Parameter, ...] = ()
    request_body: RequestBody | None = None
    response: ResponseShape = attrs.Factory(ResponseShape)
