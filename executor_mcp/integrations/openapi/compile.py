"""An OpenAPI 3.x document → a `CompiledSpec`: one tool per operation, with upstream's schemas and bindings.

Sans-I/O and deterministic: the same bytes always compile to the same catalog, so the result is stored once
per content hash (`encode_compiled` / `decode_compiled`). The rules are upstream's `extract.ts`
(upstream-integrations §1.5): parameters, request body, response selection, the file hint, input and
output schemas, descriptions, annotations, vendor extensions and tool naming.

Schemas keep `#/components/schemas/X` as `#/$defs/X` (the catalog's shared `defs`, so recursive types
compile); any other local reference (a parameter, a request body, a deep pointer) is resolved inline. The
inlining is the one place a small document can grow a large catalog, so its output is measured as it is
built and refused past `MAX_COMPILED_VALUES`.
"""

import re
from typing import Any

import attrs

from executor_mcp.codec import JsonObject, converter, dumps, loads
from executor_mcp.config import DEFAULT_MAX_SPEC_BYTES
from executor_mcp.integrations.openapi import auth, naming
from executor_mcp.integrations.openapi.binding import (
    LOCATIONS,
    Binding,
    MediaType,
    Parameter,
    RequestBody,
    ResponseShape,
    Server,
    ServerVariable,
)
from executor_mcp.integrations.openapi.document import Document, parse
from executor_mcp.records.integration_errors import SpecRefused
from executor_mcp.records.integrations import AuthMethod, CompiledCatalog, ToolDef

METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")
WRITE_METHODS = ("post", "put", "patch", "delete")
# Without side effects by HTTP's definition: what a toolkit's `read` level shows (OPTIONS and TRACE are not
# operations anyone means to expose as reads).
READ_METHODS = ("get", "head")
OCTET_STREAM = "application/octet-stream"
NDJSON_MEDIA_TYPES = ("application/stream+json", "application/x-ndjson", "application/jsonl")
MAX_COMPILED_VALUES = 20_000_000  # every value of every tool's schemas and the defs, counted as stored
MAX_SCHEMA_DEPTH = 96
_TOOL_PATH = re.compile(r"^[A-Za-z0-9_$-]+(\.[A-Za-z0-9_$-]+)*$")
_COMPONENT_SCHEMA = re.compile(r"^#/components/schemas/([^/]+)$")
_BASE64URL_HINT = re.compile(r"base64url|base64-url|url[- ]safe", re.IGNORECASE)

FILE_OUTPUT_HINT = (
    'Returns a ToolFile: the file bytes already decoded into { _tag: "ToolFile", mimeType, encoding, data, '
    "byteLength }. To display or forward it, pass the result's data straight to emit(result.data). Do not "
    "rebuild the envelope or read upstream fields like size."
)
NDJSON_DESCRIPTION = (
    "Parsed NDJSON stream: one array item per line. The stream may be truncated (`x-executor-stream: "
    "truncated` response header); a body that is not valid NDJSON is returned as the raw string instead."
)
TOOL_FILE_SCHEMA: JsonObject = {
    "type": "object",
    "properties": {
        "_tag": {"type": "string", "enum": ["ToolFile"]},
        "name": {"type": "string"},
        "mimeType": {"type": "string"},
        "encoding": {"type": "string", "enum": ["base64"]},
        "data": {"type": "string", "description": "Base64-encoded file bytes.", "contentEncoding": "base64"},
        "byteLength": {"type": "integer", "description": "Raw file size in bytes before base64 encoding."},
    },
    "required": ["_tag", "mimeType", "encoding", "data", "byteLength"],
    "additionalProperties": False,
}


@attrs.frozen
class CompiledSpec:
    """Everything a spec gives: the catalog, the metadata the preview and the identity defaults read, and the
    auth methods derived from its security declarations."""

    catalog: CompiledCatalog
    title: str | None = None
    version: str | None = None
    description: str | None = None
    servers: tuple[JsonObject, ...] = ()  # `{url, description?, variables?}`, the document's own
    tags: tuple[str, ...] = ()
    security_schemes: tuple[JsonObject, ...] = ()
    auth_strategies: tuple[JsonObject, ...] = ()
    header_presets: tuple[JsonObject, ...] = ()
    oauth2_presets: tuple[JsonObject, ...] = ()
    auth_methods: tuple[AuthMethod, ...] = ()

    @property
    def server_urls(self) -> tuple[str, ...]:
        return tuple(server["url"] for server in self.servers)


def compile_spec(
    source: bytes | str, *, max_bytes: int = DEFAULT_MAX_SPEC_BYTES, max_operations: int | None = None
) -> CompiledSpec:
    """Source text → `CompiledSpec`, or `SpecRefused` with a one-line reason. CPU-bound: the server runs it in a
    child process (`isolated.py`)."""
    return compile_document(parse(source, max_bytes=max_bytes), max_operations=max_operations)


def compile_document(document: Document, *, max_operations: int | None = None) -> CompiledSpec:
    """`max_operations` refuses a document with more operations, before any is compiled."""
    if max_operations is not None and (count := _operation_count(document)) > max_operations:
        raise SpecRefused(
            f"The document has {count} operations; an integration holds at most {max_operations} "
            "(--integration-max-operations)"
        )
    schemas = _Schemas(document)
    raw_defs = document.components.get("schemas")
    defs = {name: schemas.top(schema) for name, schema in raw_defs.items()} if isinstance(raw_defs, dict) else {}
    document_servers = _servers(document.root.get("servers"))
    operations: list[_Operation] = []
    for path in sorted(document.paths):
        item = document.resolve(document.paths[path])
        if not isinstance(item, dict):
            continue
        for method in METHODS:
            operation = item.get(method)
            if isinstance(operation, dict):
                operations.append(_operation(document, schemas, path, method, item, operation, document_servers))
    planned = naming.plan_tool_paths([operation.naming for operation in operations])
    tools = tuple(operations[name.index].tool(name.tool_path) for name in planned)
    info = document.root.get("info")
    info = info if isinstance(info, dict) else {}
    security = auth.security_schemes(document)
    strategies = auth.auth_strategies(document, security)
    first_url = document_servers[0].url if document_servers else None
    return CompiledSpec(
        catalog=CompiledCatalog(tools=tools, defs=defs),
        title=_text(info.get("title")),
        version=_text(info.get("version")),
        description=_text(info.get("description")),
        servers=_server_infos(document.root.get("servers")),
        tags=tuple(sorted({tag for operation in operations for tag in operation.tags})),
        security_schemes=tuple(security),
        auth_strategies=tuple(strategies),
        header_presets=tuple(auth.header_presets(security, strategies)),
        oauth2_presets=tuple(auth.oauth2_presets(security)),
        auth_methods=auth.derive_methods(document, first_url),
    )


def _operation_count(document: Document) -> int:
    count = 0
    for path in document.paths:
        item = document.resolve(document.paths[path])
        if isinstance(item, dict):
            count += sum(isinstance(item.get(method), dict) for method in METHODS)
    return count


def preview(spec: CompiledSpec, *, operation_count: int | None = None) -> JsonObject:
    """`POST /openapi/preview`'s answer: upstream's summary keys, without the `operations` list (HEAD).
    `operation_count` stands in for the catalog's length when the spec came without it (`isolated.py`)."""
    summary: JsonObject = {}
    for key, value in (("title", spec.title), ("description", spec.description), ("version", spec.version)):
        if value is not None:
            summary[key] = value
    summary.update(
        {
            "servers": list(spec.servers),
            "operationCount": len(spec.catalog.tools) if operation_count is None else operation_count,
            "tags": list(spec.tags),
            "securitySchemes": list(spec.security_schemes),
            "authStrategies": list(spec.auth_strategies),
            "headerPresets": list(spec.header_presets),
            "oauth2Presets": list(spec.oauth2_presets),
        }
    )
    return summary


def encode_compiled(spec: CompiledSpec) -> bytes:
    return dumps(converter.unstructure(spec))


def decode_compiled(raw: bytes) -> CompiledSpec:
    return converter.structure(loads(raw), CompiledSpec)


def integration_name(spec: CompiledSpec | None, explicit: str | None, slug: str) -> str:
    """The explicit name, else the spec's title, else the slug."""
    return explicit or (spec.title if spec is not None and spec.title else None) or slug


def integration_description(spec: CompiledSpec | None, explicit: str | None, slug: str) -> str:
    """The explicit description, else `info.description`, else the title, else the slug."""
    if explicit:
        return explicit
    if spec is not None and spec.description:
        return spec.description
    return integration_name(spec, None, slug)


# -- one operation ---------------------------------------------------------------------------------------


@attrs.frozen
class _Operation:
    naming: naming.OperationNaming
    tags: tuple[str, ...]
    description: str
    input_schema: JsonObject | None
    output_schema: JsonObject | None
    binding: Binding

    def tool(self, name: str) -> ToolDef:
        method = self.binding.method
        writes = method in WRITE_METHODS
        return ToolDef(
            name=name,
            description=self.description,
            input_schema=self.input_schema,
            output_schema=self.output_schema,
            binding=converter.unstructure(self.binding),
            requires_approval=writes,
            approval_description=f"{method.upper()} {self.binding.path_template}" if writes else None,
        )


def _operation(
    document: Document,
    schemas: "_Schemas",
    path: str,
    method: str,
    item: JsonObject,
    operation: JsonObject,
    document_servers: tuple[Server, ...],
) -> _Operation:
    template = _extension(operation, "x-executor-pathTemplate") or path
    explicit = _extension(operation, "x-executor-toolPath")
    tags = tuple(tag for tag in operation.get("tags") or () if isinstance(tag, str) and tag.strip())
    parameters = _parameters(document, schemas, item, operation)
    body = _request_body(document, schemas, operation)
    response, output = _response(document, schemas, operation)
    servers = _servers(operation.get("servers")) or _servers(item.get("servers")) or document_servers
    description = next(
        (text for text in (operation.get("description"), operation.get("summary")) if isinstance(text, str)),
        f"{method.upper()} {template}",
    )
    if response.file is not None:
        description = f"{description}\n\n{FILE_OUTPUT_HINT}"
    return _Operation(
        naming=naming.OperationNaming(
            operation_id=naming.operation_id(method, path, operation.get("operationId")),
            method=method,
            path=template,
            tag=tags[0] if tags else None,
            explicit=explicit if explicit is not None and _TOOL_PATH.match(explicit) else None,
        ),
        tags=tags,
        description=description,
        input_schema=_input_schema(parameters, body, servers),
        output_schema=output,
        binding=Binding(method, template, servers, parameters, body, response),
    )


def _extension(operation: JsonObject, key: str) -> str | None:
    value = operation.get(key)
    return value.strip() if isinstance(value, str) and value.strip() else None


def _parameters(
    document: Document, schemas: "_Schemas", item: JsonObject, operation: JsonObject
) -> tuple[Parameter, ...]:
    merged: dict[str, JsonObject] = {}
    for declared in (item.get("parameters"), operation.get("parameters")):
        for raw in declared if isinstance(declared, list) else ():
            parameter = document.resolve(raw)
            if isinstance(parameter, dict) and isinstance(parameter.get("name"), str):
                merged[f"{parameter.get('in')}:{parameter['name']}"] = parameter
    parameters = []
    for parameter in merged.values():
        location = parameter.get("in")
        if location not in LOCATIONS:
            continue
        schema = parameter.get("schema")
        parameters.append(
            Parameter(
                name=parameter["name"],
                location=location,
                required=location == "path" or parameter.get("required") is True,
                style=_text(parameter.get("style")),
                explode=_flag(parameter.get("explode")),
                allow_reserved=parameter.get("allowReserved") is True,
                schema=schemas.top(schema) if isinstance(schema, dict | bool) else {"type": "string"},
                description=_text(parameter.get("description")),
            )
        )
    return tuple(parameters)


def _request_body(document: Document, schemas: "_Schemas", operation: JsonObject) -> RequestBody | None:
    body = document.resolve(operation.get("requestBody"))
    if not isinstance(body, dict) or not isinstance(body.get("content"), dict):
        return None
    contents = []
    for media_type, media in body["content"].items():
        media = media if isinstance(media, dict) else {}
        schema = media.get("schema")
        contents.append(
            MediaType(
                media_type=media_type,
                schema=schemas.top(schema) if isinstance(schema, dict | bool) else None,
                encoding=_encoding(media.get("encoding")),
            )
        )
    return RequestBody(required=body.get("required") is True, contents=tuple(contents)) if contents else None


def _encoding(raw: Any) -> JsonObject:
    encoding: JsonObject = {}
    for name, value in raw.items() if isinstance(raw, dict) else ():
        if not isinstance(value, dict):
            continue
        kept = {key: value[key] for key in ("contentType", "style") if isinstance(value.get(key), str)}
        kept.update({key: value[key] for key in ("explode", "allowReserved") if isinstance(value.get(key), bool)})
        encoding[name] = kept
    return encoding


def _response(
    document: Document, schemas: "_Schemas", operation: JsonObject
) -> tuple[ResponseShape, JsonObject | None]:
    responses = operation.get("responses")
    if not isinstance(responses, dict):
        return ResponseShape(), None
    codes = sorted(code for code in responses if re.fullmatch(r"2\d\d", code))
    codes += [code for code in responses if code.upper() == "2XX"] + [c for c in responses if c == "default"]
    for code in codes:
        response = document.resolve(responses[code])
        content = response.get("content") if isinstance(response, dict) else None
        if not isinstance(content, dict):
            continue
        chosen = _json_first(content)
        if chosen is None:
            continue
        media_type, media = chosen
        raw_schema = media.get("schema") if isinstance(media, dict) else None
        if not isinstance(raw_schema, dict):
            continue
        file, encoding = _file_hint(document, raw_schema, media_type)
        shape = ResponseShape(media_type=media_type, file=file, byte_encoding=encoding)
        if file is not None:
            return shape, TOOL_FILE_SCHEMA
        schema = schemas.top(raw_schema)
        if _bare(media_type) in NDJSON_MEDIA_TYPES:
            schema = {"type": "array", "items": schema, "description": NDJSON_DESCRIPTION}
        return shape, schema
    return ResponseShape(), None


def _json_first(content: JsonObject) -> tuple[str, Any] | None:
    entries = list(content.items())
    for matches in (
        lambda t: t == "application/json",
        lambda t: "+json" in t.lower(),
        lambda t: "json" in t.lower(),
        lambda _: True,
    ):
        found = next(((t, media) for t, media in entries if matches(t)), None)
        if found is not None:
            return found
    return None


def _file_hint(document: Document, raw_schema: Any, media_type: str) -> tuple[str | None, str]:
    schema = document.resolve(raw_schema)
    if not isinstance(schema, dict):
        return None, "base64"
    is_json = "json" in _bare(media_type)
    if not is_json:
        return ("binary" if _binary_string(schema) else None), "base64"
    properties = schema.get("properties")
    data = document.resolve(properties.get("data")) if isinstance(properties, dict) else None
    if not isinstance(data, dict) or not _binary_string(data):
        return None, "base64"
    described = data.get("description")
    hinted = isinstance(described, str) and _BASE64URL_HINT.search(described)
    return "byteField", "base64url" if hinted else "base64"


def _binary_string(schema: JsonObject) -> bool:
    kind = schema.get("type")
    is_string = kind == "string" or (isinstance(kind, list) and "string" in kind)
    return is_string and schema.get("format") in ("binary", "byte")


def _bare(media_type: str) -> str:
    return media_type.split(";")[0].strip().lower()


def _servers(raw: Any) -> tuple[Server, ...]:
    servers = []
    for server in raw if isinstance(raw, list) else ():
        if not isinstance(server, dict) or not isinstance(server.get("url"), str) or not server["url"]:
            continue
        variables = []
        declared = server.get("variables")
        for name, variable in declared.items() if isinstance(declared, dict) else ():
            if not isinstance(variable, dict) or variable.get("default") is None:
                continue
            enum = [value for value in variable.get("enum") or () if isinstance(value, str)]
            variables.append(
                ServerVariable(
                    name=name,
                    default=_js_string(variable["default"]),
                    enum=tuple(enum) if enum else None,
                    description=_text(variable.get("description")),
                )
            )
        servers.append(Server(server["url"], tuple(variables)))
    return tuple(servers)


def _server_infos(raw: Any) -> tuple[JsonObject, ...]:
    """The document's servers as the preview lists them: `{url, description?, variables?}`."""
    described = (
        [s for s in raw if isinstance(s, dict) and isinstance(s.get("url"), str) and s["url"]]
        if isinstance(raw, list)
        else []
    )
    return tuple(
        _server_info(server, _text(declared.get("description")))
        for server, declared in zip(_servers(described), described, strict=True)
    )


def _server_info(server: Server, description: str | None) -> JsonObject:
    info: JsonObject = {"url": server.url}
    if description is not None:
        info["description"] = description
    if server.variables:
        info["variables"] = {variable.name: _variable_schema(variable, typed=False) for variable in server.variables}
    return info


def _variable_schema(variable: ServerVariable, *, typed: bool) -> JsonObject:
    schema: JsonObject = {"type": "string"} if typed else {}
    schema["default"] = variable.default
    if variable.enum is not None:
        schema["enum"] = list(variable.enum)
    if variable.description is not None:
        schema["description"] = variable.description
    return schema


def _input_schema(
    parameters: tuple[Parameter, ...], body: RequestBody | None, servers: tuple[Server, ...]
) -> JsonObject | None:
    properties: JsonObject = {}
    required: list[str] = []
    alternatives: list[JsonObject] | None = None
    for parameter in parameters:
        properties[parameter.name] = parameter.schema
        if parameter.required:
            required.append(parameter.name)
    server = _server_property(servers)
    if server is not None and "server" not in properties:
        properties["server"] = server
    if body is not None:
        default = body.contents[0]
        types = [_bare(content.media_type) for content in body.contents]
        takes_bytes = OCTET_STREAM in types
        takes_body = any(media_type != OCTET_STREAM for media_type in types)
        if takes_body:
            properties["body"] = default.schema if default.schema is not None else {"type": "object"}
        if takes_bytes:
            properties["bodyBase64"] = {
                "type": "string",
                "contentEncoding": "base64",
                "contentMediaType": OCTET_STREAM,
                "description": "Base64-encoded bytes for application/octet-stream request bodies. When "
                "contentType is omitted, this selects application/octet-stream.",
            }
        if body.required:
            if takes_bytes and takes_body:
                alternatives = [{"required": ["body"]}, {"required": ["bodyBase64"]}]
            else:
                required.append("bodyBase64" if takes_bytes else "body")
        if len(body.contents) > 1:
            properties["contentType"] = {
                "type": "string",
                "enum": [content.media_type for content in body.contents],
                "default": default.media_type,
                "description": "Content-Type for the request body. Declared media types for this operation, "
                "in spec order.",
            }
    if not properties:
        return None
    schema: JsonObject = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    if alternatives is not None:
        schema["anyOf"] = alternatives
    schema["additionalProperties"] = False
    return schema


def _server_property(servers: tuple[Server, ...]) -> JsonObject | None:
    variables: dict[str, ServerVariable] = {}
    for server in servers:
        for variable in server.variables:
            variables.setdefault(variable.name, variable)
    if len(servers) <= 1 and not variables:
        return None
    properties: JsonObject = {}
    if len(servers) > 1:
        properties["url"] = {
            "type": "string",
            "enum": [server.url for server in servers],
            "default": servers[0].url,
            "description": "Which of the spec's servers to send the request to.",
        }
    if variables:
        properties["variables"] = {
            "type": "object",
            "additionalProperties": False,
            "properties": {name: _variable_schema(v, typed=True) for name, v in variables.items()},
            "description": "Values for the server URL `{variables}`; spec defaults apply when omitted.",
        }
    return {
        "type": "object",
        "additionalProperties": False,
        "properties": properties,
        "description": "Optional host selection and server-URL variables for this request.",
    }


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _flag(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _js_string(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return value if isinstance(value, str) else str(value)


# -- schemas ---------------------------------------------------------------------------------------------

_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_ONE = (
    "additionalProperties",
    "items",
    "additionalItems",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
    "unevaluatedProperties",
    "unevaluatedItems",
)
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")


class _Schemas:
    """Normalizes the document's schemas, each distinct one once, and meters what the catalog will hold.

    A normalized schema shares every part that needed no change with the document (nothing is mutated), so
    a spec that reuses one parameter in 500 operations costs one normalization; the meter still counts every
    stored copy, since that is what serialization writes out.
    """

    def __init__(self, document: Document) -> None:
        self.document = document
        self.spent = 0
        self._done: dict[int, tuple[Any, int, int]] = {}  # id(raw) → (normalized, volume, height)
        self._open: set[int] = set()
        self._measured: dict[int, tuple[int, int]] = {}

    def top(self, raw: Any) -> Any:
        """One schema the catalog stores: normalized, and charged in full against the budget."""
        normalized, volume, _ = self._schema(raw, 0)
        self.spent += volume
        if self.spent > MAX_COMPILED_VALUES:
            raise SpecRefused(f"OpenAPI document compiles to more than {MAX_COMPILED_VALUES} schema values")
        return normalized

    def _schema(self, raw: Any, depth: int) -> tuple[Any, int, int]:
        if not isinstance(raw, dict):
            return raw, 1, 0
        key = id(raw)
        done = self._done.get(key)
        if done is None:
            if key in self._open:  # a deep pointer into its own subtree: cut the cycle
                return {}, 1, 1
            self._open.add(key)
            try:
                done = self._build(raw, depth)
            finally:
                self._open.discard(key)
            self._done[key] = done
        if depth + done[2] > MAX_SCHEMA_DEPTH:
            raise SpecRefused(f"OpenAPI schemas nest deeper than {MAX_SCHEMA_DEPTH} levels once $refs are inlined")
        return done

    def _build(self, raw: JsonObject, depth: int) -> tuple[Any, int, int]:
        ref = raw.get("$ref")
        if isinstance(ref, str):
            component = _COMPONENT_SCHEMA.match(ref)
            if component is not None:
                rewritten = {**raw, "$ref": f"#/$defs/{component.group(1)}"}
                return rewritten, len(raw) + 1, 1
            target = self.document.pointer(ref)
            if not isinstance(target, dict | bool):
                return {}, 1, 1
            return self._schema(target, depth)
        changed = False
        out: JsonObject = {}
        volume, height = 1, 0
        for name, value in raw.items():
            if name in _SCHEMA_MAPS and isinstance(value, dict):
                mapped: JsonObject = {}
                for child_name, child in value.items():
                    mapped[child_name], child_volume, child_height = self._schema(child, depth + 2)
                    volume += child_volume
                    height = max(height, child_height + 1)
                normalized: Any = mapped if any(mapped[k] is not value[k] for k in value) else value
                volume += 1
            elif (name in _SCHEMA_LISTS or name == "items") and isinstance(value, list):
                built = [self._schema(child, depth + 2) for child in value]
                listed = [child for child, _, _ in built]
                volume += 1 + sum(v for _, v, _ in built)
                height = max([height] + [h + 1 for _, _, h in built])
                normalized = listed if any(a is not b for a, b in zip(listed, value, strict=True)) else value
            elif name in _SCHEMA_ONE and isinstance(value, dict):
                normalized, child_volume, child_height = self._schema(value, depth + 1)
                volume += child_volume
                height = max(height, child_height)
            else:
                normalized = value
                child_volume, child_height = self._measure(value)
                volume += child_volume
                height = max(height, child_height)
            changed = changed or normalized is not value
            out[name] = normalized
        return (out if changed else raw), volume, height + 1

    def _measure(self, value: Any) -> tuple[int, int]:
        """How many values a stored copy of a non-schema value holds, and how deep it nests."""
        if not isinstance(value, dict | list):
            return 1, 0
        known = self._measured.get(id(value))
        if known is None:
            children = value.values() if isinstance(value, dict) else value
            sizes = [self._measure(child) for child in children]
            known = 1 + sum(s for s, _ in sizes), 1 + max((h for _, h in sizes), default=0)
            self._measured[id(value)] = known
        return known
