"""Binding + arguments + credentials → one outbound request, or the pre-flight refusal (sans-I/O).

`check_arguments` is the same pass `build_request` makes, minus credentials and URL assembly, so a call
that is certain to fail is refused before an approval is asked and before anything is sent. Messages are
upstream's (`invoke.ts`), exact.
"""

import base64
import binascii
import json
import re
import secrets
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote, quote_plus

import attrs

from executor_mcp.codec import JsonObject, dumps
from executor_mcp.integrations.credentials import CredentialMissing, render_credentials
from executor_mcp.integrations.openapi.binding import Binding, MediaType, Parameter, Server
from executor_mcp.outbound.model import UNREACHABLE, OutboundFailure, OutboundRequest
from executor_mcp.outbound.useragent import DEFAULT_USER_AGENT
from executor_mcp.records.integration_errors import ArgumentsRefused
from executor_mcp.records.integrations import AuthMethod

CONTAINERS: dict[str, tuple[str, ...]] = {
    "path": ("path", "pathParams", "params"),
    "query": ("query", "queryParams", "params"),
    "header": ("headers", "header"),
    "cookie": ("cookies", "cookie"),
}
OCTET_STREAM = "application/octet-stream"
PLACEHOLDER = re.compile(r"\{([^{}]+)\}")
# encodeURIComponent leaves these; `allowReserved` also leaves RFC 3986's reserved set.
URI_COMPONENT_SAFE = "!*'()"
RESERVED_SAFE = URI_COMPONENT_SAFE + ":/?#[]@$&+,;="
CONTROL = re.compile(r"[\r\n\x00]")
_MISSING = object()


@attrs.frozen
class _Body:
    content: bytes
    content_type: str


@attrs.frozen
class _Plan:
    """Everything the arguments decide, before credentials and the host are known."""

    path: str
    query: tuple[tuple[str, str], ...]
    headers: tuple[tuple[str, str], ...]
    cookies: tuple[str, ...]
    body: _Body | None


# --- value rendering (JavaScript's String() and JSON.stringify, which upstream's wire format follows) ---


def well_formed(text: str) -> str:
    """Lone surrogates (JSON may carry them) become U+FFFD; an escaped pair becomes its code point."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def js_number(value: int | float) -> str:
    """Number's String(): integral values without `.0`, exponents as `1e+21`."""
    if isinstance(value, int):
        return str(value)
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    if value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    text = repr(value)
    if "e" not in text:
        return text
    mantissa, exponent = text.split("e")
    sign = "-" if exponent.startswith("-") else "+"
    return f"{mantissa.removesuffix('.0')}e{sign}{exponent.lstrip('+-').lstrip('0') or '0'}"


def js_string(value: Any) -> str:
    """String(value), except that an object becomes its JSON rather than `[object Object]`."""
    if isinstance(value, str):
        return well_formed(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return js_number(value)
    if value is None:
        return "null"
    if isinstance(value, list):
        return ",".join("" if item is None else js_string(item) for item in value)
    return json_text(value)


def json_text(value: Any) -> str:
    return dumps(value).decode()


def primitive_text(value: Any) -> str:
    """Upstream's `primitiveToString`: arrays and objects as JSON, everything else as String()."""
    return json_text(value) if isinstance(value, dict | list) else js_string(value)


def encode_component(text: str, *, allow_reserved: bool = False) -> str:
    return quote(well_formed(text), safe=RESERVED_SAFE if allow_reserved else URI_COMPONENT_SAFE)


def encode_query_part(text: str) -> str:
    """The WHATWG urlencoded serializer (what URLSearchParams writes): space as `+`, only `*-._` left bare."""
    return quote_plus(well_formed(text), safe="*").replace("~", "%7E")


# --- reading arguments ---


def _read(args: Mapping[str, Any], param: Parameter) -> Any:
    if param.name in args:
        return args[param.name]
    for container_name in CONTAINERS.get(param.location, ()):
        container = args.get(container_name)
        if isinstance(container, dict) and param.name in container:
            return container[param.name]
    return _MISSING


def _absent(value: Any) -> bool:
    return value is _MISSING or value is None


def _media(media_type: str | None) -> str:
    return (media_type or "").split(";", 1)[0].strip().lower()


def is_json_media(media_type: str | None) -> bool:
    return "json" in _media(media_type)


def is_octet_stream(media_type: str | None) -> bool:
    return _media(media_type) == OCTET_STREAM


def _has_server_argument(servers: tuple[Server, ...]) -> bool:
    return len(servers) > 1 or any(server.variables for server in servers)


def accepted_arguments(binding: Binding) -> list[str]:
    """Every argument name the operation accepts, in upstream's order (the order its message lists them)."""
    accepted: dict[str, None] = {}
    for param in binding.parameters:
        accepted.setdefault(param.name, None)
        for container in CONTAINERS.get(param.location, ()):
            accepted.setdefault(container, None)
    for match in PLACEHOLDER.finditer(binding.path_template):
        accepted.setdefault(match.group(1), None)
    body = binding.request_body
    if body is not None:
        accepted.setdefault("body", None)
        accepted.setdefault("input", None)
        if any(is_octet_stream(content.media_type) for content in body.contents):
            accepted.setdefault("bodyBase64", None)
        if len(body.contents) > 1:
            accepted.setdefault("contentType", None)
    if _has_server_argument(binding.servers):
        accepted.setdefault("server", None)
    return list(accepted)


def _refuse_unknown(binding: Binding, args: Mapping[str, Any]) -> None:
    accepted = accepted_arguments(binding)
    unknown = [name for name in args if name not in set(accepted)]
    if not unknown:
        return
    label = "Unknown argument" if len(unknown) == 1 else "Unknown arguments"
    names = ", ".join(json.dumps(name, ensure_ascii=False) for name in unknown)
    tail = f"This operation accepts: {', '.join(accepted)}." if accepted else "This operation accepts no arguments."
    raise ArgumentsRefused(f"{label} {names}. {tail}")


# --- path ---


def _resolve_path(binding: Binding, args: Mapping[str, Any]) -> str:
    resolved = binding.path_template
    for param in binding.parameters:
        if param.location != "path":
            continue
        value = _read(args, param)
        if _absent(value):
            if param.required:
                raise ArgumentsRefused(f"Missing required path parameter: {param.name}")
            continue
        encoded = encode_component(js_string(value), allow_reserved=param.allow_reserved)
        resolved = resolved.replace(f"{{{param.name}}}", encoded).replace(f"{{+{param.name}}}", encoded)
    for name in dict.fromkeys(PLACEHOLDER.findall(resolved)):
        value = args.get(name)
        if value is not None:
            resolved = resolved.replace(f"{{{name}}}", encode_component(js_string(value)))
    unresolved = list(dict.fromkeys(PLACEHOLDER.findall(resolved)))
    if unresolved:
        raise ArgumentsRefused(f"Unresolved path parameters: {', '.join(unresolved)}")
    return resolved if resolved.startswith("/") else f"/{resolved}"


# --- query, headers, cookies ---


def _explode(style: str, explode: bool | None) -> bool:
    # OAS: `explode` defaults to true for `form` only (spaceDelimited / pipeDelimited default to false).
    return explode if explode is not None else style == "form"


def _separator(style: str) -> str:
    return {"spaceDelimited": " ", "pipeDelimited": "|"}.get(style, ",")


def query_entries(param: Parameter, value: Any) -> list[tuple[str, str]]:
    if _absent(value):
        return []
    style = param.style or "form"
    explode = _explode(style, param.explode)
    if isinstance(value, dict):
        fields = [(key, nested) for key, nested in value.items() if nested is not None]
        if style == "form" and explode:
            return [(key, primitive_text(nested)) for key, nested in fields]
        if style == "form":
            return [(param.name, ",".join(part for key, nested in fields for part in (key, primitive_text(nested))))]
        if style == "deepObject":
            return [(f"{param.name}[{key}]", primitive_text(nested)) for key, nested in fields]
        return [(param.name, json_text(value))]
    if isinstance(value, list):
        if explode:
            return [(param.name, primitive_text(item)) for item in value]
        return [(param.name, _separator(style).join(primitive_text(item) for item in value))]
    return [(param.name, primitive_text(value))]


def _header_value(kind: str, name: str, text: str) -> str:
    if CONTROL.search(text):
        raise ArgumentsRefused(f'{kind} parameter "{name}" must not contain line breaks or NUL characters')
    return text


# --- request body ---


def _decode_base64(text: str) -> bytes | None:
    compact = re.sub(r"\s", "", text)
    padded = compact + "=" * (-len(compact) % 4)
    try:
        return base64.b64decode(padded, validate=True)
    except (binascii.Error, ValueError):
        return None


def _binary_argument(value: Any, label: str, *, accepts_octet: bool, requested: str | None) -> bytes:
    if not isinstance(value, str):
        raise ArgumentsRefused(f"`{label}` must be a base64 string")
    decoded = _decode_base64(value)
    if decoded is None:
        raise ArgumentsRefused(f"`{label}` is not valid base64")
    if not accepts_octet:
        raise ArgumentsRefused(f"`{label}` requires an application/octet-stream request body")
    if requested and not is_octet_stream(requested):
        raise ArgumentsRefused(f"`{label}` requires an application/octet-stream contentType")
    return decoded


def _byte_list(value: Any) -> bytes | None:
    """A JSON array of byte values, which upstream accepts as bytes."""
    if isinstance(value, list) and all(
        isinstance(item, int) and not isinstance(item, bool) and 0 <= item <= 255 for item in value
    ):
        return bytes(value)
    return None


def _encoding_of(encoding: JsonObject, key: str) -> tuple[str, bool, bool, str | None]:
    """A property's (style, explode, allowReserved, contentType) from a hostile spec's Encoding Object."""
    entry = encoding.get(key)
    entry = entry if isinstance(entry, dict) else {}
    raw_style = entry.get("style")
    style = raw_style if isinstance(raw_style, str) else "form"
    explode_value = entry.get("explode")
    explode = _explode(style, explode_value if isinstance(explode_value, bool) else None)
    allow_reserved = entry.get("allowReserved") is True
    raw_content_type = entry.get("contentType")
    content_type = raw_content_type if isinstance(raw_content_type, str) else None
    return style, explode, allow_reserved, content_type


def value_text(value: Any, allow_reserved: bool) -> str:
    return encode_component(primitive_text(value), allow_reserved=allow_reserved)


def serialize_form(value: Mapping[str, Any], encoding: JsonObject) -> str:
    """`application/x-www-form-urlencoded` with OAS encoding: encodeURIComponent on keys and values."""
    parts: list[str] = []
    for key, raw in value.items():
        if raw is None:
            continue
        style, explode, allow_reserved, _ = _encoding_of(encoding, key)
        name = encode_component(key)

        def field(text: str, name: str = name, allow_reserved: bool = allow_reserved) -> str:
            return f"{name}={encode_component(text, allow_reserved=allow_reserved)}"

        if isinstance(raw, list):
            if explode:
                parts.extend(field(primitive_text(item)) for item in raw)
            else:
                parts.append(field(_separator(style).join(primitive_text(item) for item in raw)))
        elif isinstance(raw, dict):
            fields = [(sub, nested) for sub, nested in raw.items() if nested is not None]
            if style == "deepObject":
                parts.extend(
                    f"{encode_component(f'{key}[{sub}]')}={value_text(nested, allow_reserved)}"
                    for sub, nested in fields
                )
            elif explode:
                parts.extend(f"{encode_component(sub)}={value_text(nested, allow_reserved)}" for sub, nested in fields)
            else:
                parts.append(field(",".join(part for sub, nested in fields for part in (sub, primitive_text(nested)))))
        else:
            parts.append(field(primitive_text(raw)))
    return "&".join(parts)


def _is_tool_file(value: Any) -> bool:
    return isinstance(value, dict) and value.get("_tag") == "ToolFile" and isinstance(value.get("data"), str)


def _disposition_name(name: str) -> str:
    return well_formed(name).replace('"', "%22").replace("\r", "%0D").replace("\n", "%0A")


@attrs.frozen
class _Part:
    name: str
    content: bytes
    filename: str | None = None
    content_type: str | None = None


def _file_part(key: str, file: JsonObject, part_type: str | None) -> _Part:
    content = _decode_base64(file["data"])
    if content is None:
        raise ArgumentsRefused(f"Request body field `{key}` is not a valid file: `data` is not valid base64")
    name = file.get("name") if isinstance(file.get("name"), str) else "file"
    mime = file.get("mimeType") if isinstance(file.get("mimeType"), str) else OCTET_STREAM
    return _Part(key, content, filename=name, content_type=part_type or mime)


def multipart_parts(value: Mapping[str, Any], encoding: JsonObject) -> list[_Part]:
    """Upstream's FormData coercion: files become file parts, a declared part type a typed part, arrays
    repeated parts, objects JSON."""
    parts: list[_Part] = []
    for key, raw in value.items():
        if raw is None:
            continue
        part_type = _encoding_of(encoding, key)[3]
        if _is_tool_file(raw):
            parts.append(_file_part(key, raw, part_type))
        elif isinstance(raw, list) and any(_is_tool_file(item) for item in raw):
            for item in raw:
                if _is_tool_file(item):
                    parts.append(_file_part(key, item, part_type))
                else:
                    parts.append(_Part(key, js_string(item).encode() if _scalar(item) else dumps(item)))
        elif part_type is not None:
            text = raw if isinstance(raw, str) else json_text(raw)
            parts.append(_Part(key, well_formed(text).encode(), filename="blob", content_type=part_type))
        elif _scalar(raw):
            parts.append(_Part(key, js_string(raw).encode()))
        elif isinstance(raw, list):
            parts.extend(_Part(key, js_string(item).encode() if _scalar(item) else dumps(item)) for item in raw)
        else:
            parts.append(_Part(key, dumps(raw)))
    return parts


def _scalar(value: Any) -> bool:
    return isinstance(value, str | int | float | bool)


def encode_multipart(parts: Iterable[_Part], boundary: str) -> bytes:
    chunks: list[bytes] = []
    for part in parts:
        disposition = f'form-data; name="{_disposition_name(part.name)}"'
        if part.filename is not None:
            disposition += f'; filename="{_disposition_name(part.filename)}"'
        head = f"--{boundary}\r\nContent-Disposition: {disposition}\r\n"
        if part.content_type is not None:
            head += f"Content-Type: {_header_value('Multipart', part.name, part.content_type)}\r\n"
        chunks.append(head.encode() + b"\r\n" + part.content + b"\r\n")
    chunks.append(f"--{boundary}--\r\n".encode())
    return b"".join(chunks)


def _text_body(value: Any, content_type: str) -> _Body:
    if isinstance(value, bytes):
        return _Body(value, content_type)
    text = value if isinstance(value, str) else json_text(value)
    return _Body(well_formed(text).encode(), content_type)


def _encode_body(value: Any, content_type: str, encoding: JsonObject, boundary: str) -> _Body:
    media = _media(content_type)
    if is_json_media(content_type):
        if isinstance(value, str):
            return _Body(well_formed(value).encode(), content_type)
        return _Body(dumps(value), "application/json")
    if media == "application/x-www-form-urlencoded":
        if isinstance(value, dict):
            return _Body(serialize_form(value, encoding).encode(), content_type)
        return _text_body(value, content_type)
    if media.startswith("multipart/form-data"):
        if isinstance(value, dict):
            content = encode_multipart(multipart_parts(value, encoding), boundary)
            return _Body(content, f"multipart/form-data; boundary={boundary}")
        return _Body(js_string(value).encode(), content_type)
    if media == OCTET_STREAM:
        return _text_body(value, content_type)
    # XML, text/* and unknown types alike: a string or bytes as they are, anything else as JSON text.
    return _text_body(value, content_type)


def _plan_body(binding: Binding, args: Mapping[str, Any], boundary: str) -> _Body | None:
    request_body = binding.request_body
    if request_body is None:
        return None
    contents = request_body.contents
    default: MediaType | None = contents[0] if contents else None
    requested = args.get("contentType") if isinstance(args.get("contentType"), str) else None
    octet = next((content for content in contents if is_octet_stream(content.media_type)), None)
    accepts_octet = octet is not None

    binary: bytes | None = None
    if "bodyBase64" in args:
        binary = _binary_argument(args["bodyBase64"], "bodyBase64", accepts_octet=accepts_octet, requested=requested)
    raw = args.get("body")
    if raw is None:
        raw = args.get("input")
    if isinstance(raw, dict) and "bodyBase64" in raw:
        nested = _binary_argument(
            raw["bodyBase64"], "body.bodyBase64", accepts_octet=accepts_octet, requested=requested
        )
        binary = binary if binary is not None else nested

    value: Any = binary if binary is not None else raw
    if value is None:
        if request_body.required:
            raise ArgumentsRefused(
                "Missing required request body: provide `bodyBase64`"
                if accepts_octet
                else "Missing required request body"
            )
        return None

    selected: MediaType | None
    if binary is not None and octet is not None:
        selected = octet
    elif requested is not None:
        selected = next((content for content in contents if content.media_type == requested), None)
    else:
        selected = None
    chosen = selected or default
    content_type = chosen.media_type if chosen is not None else "application/json"

    if is_octet_stream(content_type) and not isinstance(value, str | bytes):
        as_bytes = _byte_list(value)
        if as_bytes is None:
            raise ArgumentsRefused("application/octet-stream request body must be bytes; provide `bodyBase64`")
        value = as_bytes
    encoding = chosen.encoding if chosen is not None else {}
    return _encode_body(value, content_type, encoding, boundary)


def _plan(binding: Binding, args: Any, boundary: str) -> _Plan:
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise ArgumentsRefused("Tool arguments must be an object.")
    _refuse_unknown(binding, args)
    path = _resolve_path(binding, args)
    query: list[tuple[str, str]] = []
    headers: list[tuple[str, str]] = []
    cookies: list[str] = []
    for param in binding.parameters:
        value = _read(args, param)
        if param.location == "query":
            query.extend(query_entries(param, value))
        elif param.location == "header" and not _absent(value):
            headers.append((param.name, _header_value("Header", param.name, js_string(value))))
        elif param.location == "cookie" and not _absent(value):
            cookies.append(_header_value("Cookie", param.name, f"{param.name}={primitive_text(value)}"))
    body = _plan_body(binding, args, boundary)
    return _Plan(path=path, query=tuple(query), headers=tuple(headers), cookies=tuple(cookies), body=body)


def check_arguments(binding: Binding, args: Any) -> None:
    """Raise `ArgumentsRefused` when these arguments cannot make a request; nothing else is checked."""
    _plan(binding, args, boundary="-")
    _server_host(binding.servers, args.get("server") if isinstance(args, dict) else None)


# --- host ---


def _server_host(servers: tuple[Server, ...], server_arg: Any) -> str:
    """The chosen server's URL with its variables filled: from the call (non-empty values), else defaults.

    A variable that declares an `enum` takes only those values. A free variable may change the path, never
    the origin: `https://api.example.com{basePath}` with `.evil.com`, or `{scheme}://...` with `http`, would
    otherwise carry the connection's credential to another host or in clear text, so such a call is refused.
    """
    if not servers:
        return ""
    arg = server_arg if isinstance(server_arg, dict) else {}
    chosen = next((server for server in servers if server.url == arg.get("url")), servers[0])
    given = arg.get("variables")
    overrides = {
        name: js_string(value)
        for name, value in (given.items() if isinstance(given, dict) else ())
        if value is not None and value != ""
    }
    url = listed = chosen.url  # `listed`: the URL with only the spec's own values (defaults and enums)
    for variable in chosen.variables:
        value = overrides.get(variable.name, variable.default)
        if variable.enum is not None and value not in variable.enum:
            raise ArgumentsRefused(f'Server variable "{variable.name}" must be one of: {", ".join(variable.enum)}')
        rendered = value if value == variable.default else encode_component(value)
        url = url.replace(f"{{{variable.name}}}", rendered)
        listed = listed.replace(f"{{{variable.name}}}", value if variable.enum is not None else variable.default)
    if _origin(url) != _origin(listed):
        raise ArgumentsRefused(
            "Server variables may change the path, not the scheme, host or port, unless the spec lists their values"
        )
    return url


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = -1
    return parts.scheme.lower(), (parts.hostname or "").lower(), port


def resolve_host(binding: Binding, args: Mapping[str, Any], base_url: str | None) -> str:
    """`baseUrl` wins outright; else the `server` argument's exact match, else the first server."""
    if base_url:
        return base_url
    return _server_host(binding.servers, args.get("server"))


class _Headers:
    """Case-insensitive set-wins header map keeping the last setter's spelling."""

    def __init__(self) -> None:
        self._items: dict[str, tuple[str, str]] = {}

    def set(self, name: str, value: str) -> None:
        self._items[name.lower()] = (name, value)

    def get(self, name: str) -> str | None:
        item = self._items.get(name.lower())
        return item[1] if item else None

    def items(self) -> tuple[tuple[str, str], ...]:
        return tuple(self._items.values())


def build_request(
    binding: Binding,
    args: Any,
    *,
    base_url: str | None,
    static_headers: Mapping[str, str],
    static_query: Mapping[str, str],
    auth_method: AuthMethod | None,
    credentials: Mapping[str, str | None],
    user_agent: str = DEFAULT_USER_AGENT,
    boundary: str | None = None,
) -> OutboundRequest | CredentialMissing:
    """The request this call makes, or `CredentialMissing`; raises `ArgumentsRefused` (pre-flight) and
    `OutboundFailure` (no server URL to send it to).

    Header precedence, lowest first: the User-Agent default, operation header parameters, the body's
    content type, static config headers, auth headers. An agent cannot override an auth header.
    """
    rendered = render_credentials(auth_method, credentials)
    if isinstance(rendered, CredentialMissing):
        return rendered
    auth_headers, auth_query = rendered
    plan = _plan(binding, args, boundary or f"executor-mcp-{secrets.token_hex(16)}")
    arguments = args if isinstance(args, dict) else {}

    host = resolve_host(binding, arguments, base_url)
    if "://" not in host:
        raise OutboundFailure(UNREACHABLE, "This operation has no absolute server URL; set the integration's baseUrl.")
    url = (host[:-1] if host.endswith("/") else host) + plan.path

    fixed_query: dict[str, str] = {}
    for name, value in [*static_query.items(), *auth_query.items()]:
        fixed_query[name] = value
    pairs = [*fixed_query.items(), *plan.query]
    if pairs:
        serialized = "&".join(f"{encode_query_part(k)}={encode_query_part(v)}" for k, v in pairs)
        url += ("&" if "?" in url else "?") + serialized

    headers = _Headers()
    headers.set("User-Agent", user_agent)
    for name, value in plan.headers:
        headers.set(name, value)
    if plan.body is not None:
        headers.set("Content-Type", plan.body.content_type)
    for name, value in [*static_headers.items(), *auth_headers.items()]:
        headers.set(name, value)
    if plan.cookies:
        existing = headers.get("cookie")
        joined = "; ".join(plan.cookies)
        headers.set("Cookie", f"{existing}; {joined}" if existing else joined)

    return OutboundRequest(
        method=binding.method.upper(),
        url=url,
        headers=headers.items(),
        body=plan.body.content if plan.body is not None else None,
        credential_headers=frozenset(name.lower() for name in [*static_headers, *auth_headers]),
        credential_query=frozenset(name.lower() for name in [*static_query, *auth_query]),
    )
