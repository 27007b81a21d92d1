"""Introspection: the query we send, its answer read into the schema form we store, and SDL read into the same.

Every schema source (a connection's introspection answer, a pasted `introspectionJson` snapshot, an SDL file)
ends as one bounded, normalized introspection document: `{"__schema": {queryType, mutationType, types}}` with
only what tools are made of (kinds, names, descriptions, fields and their arguments, input fields, enum
values; nothing deprecated). It is valid introspection itself, so a stored source can be pasted back as a
snapshot, and the same schema always hashes the same.

The schema comes from an upstream we do not trust: its size is bounded by the response cap or the source
cap, and here in types, members, name lengths and type-reference depth, before anything is built from it.
"""

import json
import re
from collections.abc import Iterable
from typing import Any

import graphql

from executor_mcp.codec import JsonObject, dumps
from executor_mcp.outbound.model import OutboundResponse
from executor_mcp.records.integration_errors import IntegrationError

USER_AGENT = "executor-graphql"
# Type references are followed this many `ofType` levels down (upstream's depth), enough for `[[T!]!]!`.
TYPE_REF_DEPTH = 7
MAX_TYPES = 20_000
MAX_MEMBERS_PER_TYPE = 5_000  # fields, input fields or enum values of one type
MAX_ARGUMENTS = 256  # of one field
MAX_MEMBERS = 1_000_000  # of the whole schema, counting every field, argument, input field and enum value
MAX_NAME_LENGTH = 256
MAX_DESCRIPTION_LENGTH = 4_000
MAX_DEFAULT_VALUE_LENGTH = 4_000
MAX_SDL_TOKENS = 5_000_000
MESSAGE_LIMIT = 500  # of an upstream message quoted in an introspection failure
NAME = re.compile(r"^[_A-Za-z][_0-9A-Za-z]*$")
KINDS = frozenset({"SCALAR", "OBJECT", "INTERFACE", "UNION", "ENUM", "INPUT_OBJECT", "LIST", "NON_NULL"})
WRAPPERS = frozenset({"LIST", "NON_NULL"})
_BEARER = re.compile(r"(?i)\b(bearer|basic|token)\s+[A-Za-z0-9._~+/=-]{4,}")
_WHITESPACE = re.compile(r"\s+")


def _type_ref(depth: int) -> str:
    return "kind name" if depth == 0 else f"kind name ofType {{ {_type_ref(depth - 1)} }}"


INTROSPECTION_QUERY = (
    "query IntrospectionQuery { __schema { queryType { name } mutationType { name } types { ...FullType } } } "
    "fragment FullType on __Type { kind name description "
    "fields(includeDeprecated: false) { name description args { ...InputValue } type { ...TypeRef } } "
    "inputFields { ...InputValue } enumValues(includeDeprecated: false) { name description } } "
    "fragment InputValue on __InputValue { name description type { ...TypeRef } defaultValue } "
    f"fragment TypeRef on __Type {{ {_type_ref(TYPE_REF_DEPTH)} }}"
)


class SchemaRefused(IntegrationError):
    """A schema source that cannot become tools: not JSON, not introspection, not SDL, or past a bound."""

    tag = "GraphqlSchemaError"
    code = "graphql_schema_invalid"


# -- the stored form ----------------------------------------------------------------------------------------


class _Budget:
    def __init__(self) -> None:
        self.members = 0

    def spend(self, count: int) -> None:
        self.members += count
        if self.members > MAX_MEMBERS:
            raise SchemaRefused(f"GraphQL schema has more than {MAX_MEMBERS} fields, arguments and values")


def _name(raw: Any, where: str) -> str:
    if not isinstance(raw, str) or len(raw) > MAX_NAME_LENGTH or not NAME.fullmatch(raw):
        raise SchemaRefused(f"GraphQL schema has an invalid name in {where}")
    return raw


def _description(raw: Any) -> str | None:
    return raw[:MAX_DESCRIPTION_LENGTH] if isinstance(raw, str) and raw.strip() else None


def _list(raw: Any, limit: int, where: str) -> list[Any]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise SchemaRefused(f"GraphQL schema: {where} must be a list")
    if len(raw) > limit:
        raise SchemaRefused(f"GraphQL schema: {where} has more than {limit} entries")
    return raw


def type_ref(raw: Any, where: str, depth: int = 0) -> JsonObject:
    """A type reference, checked: wrappers hold an `ofType`, named types a name, at most `TYPE_REF_DEPTH`
    wrappers deep. Iterative, so a hostile nesting cannot exhaust the stack."""
    chain: list[str] = []
    node = raw
    while True:
        if not isinstance(node, dict) or node.get("kind") not in KINDS:
            raise SchemaRefused(f"GraphQL schema has an invalid type reference in {where}")
        kind = node["kind"]
        if kind not in WRAPPERS:
            named: JsonObject = {"kind": kind, "name": _name(node.get("name"), where)}
            break
        chain.append(kind)
        if len(chain) > TYPE_REF_DEPTH:
            raise SchemaRefused(f"GraphQL schema nests a type reference deeper than {TYPE_REF_DEPTH} in {where}")
        node = node.get("ofType")
    result = named
    for kind in reversed(chain):
        result = {"kind": kind, "name": None, "ofType": result}
    return result


def _unique(members: list[JsonObject]) -> list[JsonObject]:
    """Members by name, the first of each (a hostile schema may list one twice)."""
    seen: dict[str, JsonObject] = {}
    for member in members:
        seen.setdefault(member["name"], member)
    return list(seen.values())


def _input_value(raw: Any, where: str) -> JsonObject:
    if not isinstance(raw, dict):
        raise SchemaRefused(f"GraphQL schema has an invalid argument in {where}")
    name = _name(raw.get("name"), where)
    value: JsonObject = {
        "name": name,
        "description": _description(raw.get("description")),
        "type": type_ref(raw.get("type"), f"{where}.{name}"),
        "defaultValue": None,
    }
    default = raw.get("defaultValue")
    if isinstance(default, str):
        value["defaultValue"] = default[:MAX_DEFAULT_VALUE_LENGTH]
    return value


def _deprecated(raw: JsonObject) -> bool:
    return raw.get("isDeprecated") is True


def _type(raw: Any, budget: _Budget) -> JsonObject | None:
    if not isinstance(raw, dict) or raw.get("kind") not in KINDS - WRAPPERS:
        raise SchemaRefused("GraphQL schema has a type that is not a named type")
    name = _name(raw.get("name"), "a type name")
    if name.startswith("__"):
        return None  # the introspection types themselves: never a tool's argument or result
    kind = raw["kind"]
    shown: JsonObject = {"kind": kind, "name": name, "description": _description(raw.get("description"))}
    if kind in ("OBJECT", "INTERFACE"):
        fields = []
        for field in _list(raw.get("fields"), MAX_MEMBERS_PER_TYPE, f"{name}.fields"):
            if not isinstance(field, dict):
                raise SchemaRefused(f"GraphQL schema has an invalid field in {name}")
            if _deprecated(field):
                continue
            field_name = _name(field.get("name"), f"{name}.fields")
            where = f"{name}.{field_name}"
            arguments = [
                _input_value(argument, where)
                for argument in _list(field.get("args"), MAX_ARGUMENTS, f"{where}.args")
                if not (isinstance(argument, dict) and _deprecated(argument))
            ]
            budget.spend(1 + len(arguments))
            fields.append(
                {
                    "name": field_name,
                    "description": _description(field.get("description")),
                    "args": _unique(arguments),
                    "type": type_ref(field.get("type"), where),
                }
            )
        shown["fields"] = _unique(fields)
    elif kind == "INPUT_OBJECT":
        values = _list(raw.get("inputFields"), MAX_MEMBERS_PER_TYPE, f"{name}.inputFields")
        budget.spend(len(values))
        shown["inputFields"] = _unique(
            [_input_value(value, name) for value in values if not (isinstance(value, dict) and _deprecated(value))]
        )
    elif kind == "ENUM":
        values = _list(raw.get("enumValues"), MAX_MEMBERS_PER_TYPE, f"{name}.enumValues")
        budget.spend(len(values))
        shown["enumValues"] = _unique(
            [
                {
                    "name": _name(value.get("name"), f"{name}.enumValues"),
                    "description": _description(value.get("description")),
                }
                for value in values
                if isinstance(value, dict) and not _deprecated(value)
            ]
        )
    return shown


def _root(raw: Any, where: str) -> JsonObject | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise SchemaRefused(f"GraphQL schema: {where} must be an object")
    return {"name": _name(raw.get("name"), where)}


def normalize(schema: Any) -> JsonObject:
    """A `__schema` object, checked and cut down to the stored form (see the module docstring)."""
    if not isinstance(schema, dict):
        raise SchemaRefused("Introspection response missing __schema")
    budget = _Budget()
    types = _unique(
        [shown for raw in _list(schema.get("types"), MAX_TYPES, "types") if (shown := _type(raw, budget)) is not None]
    )
    return {
        "__schema": {
            "queryType": _root(schema.get("queryType"), "queryType"),
            "mutationType": _root(schema.get("mutationType"), "mutationType"),
            "types": types,
        }
    }


def _json(raw: bytes | str, max_bytes: int) -> Any:
    if len(raw) > max_bytes:
        raise SchemaRefused(f"GraphQL schema is larger than {max_bytes} bytes")
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        raise SchemaRefused("GraphQL introspection JSON is not valid JSON") from None


def snapshot_source(raw: Any, max_bytes: int) -> bytes:
    """A pasted introspection result (`{data: {__schema}}`, `{__schema}`, as an object or its JSON text) in
    the stored form."""
    value = _json(raw.encode() if isinstance(raw, str) else raw, max_bytes) if isinstance(raw, str | bytes) else raw
    if isinstance(value, dict) and isinstance(value.get("data"), dict):
        value = value["data"]
    if not isinstance(value, dict) or "__schema" not in value:
        raise SchemaRefused("introspectionJson must be an introspection result holding __schema")
    return dumps(normalize(value["__schema"]))


def sdl_source(sdl: str, max_bytes: int) -> bytes:
    """An SDL document, built into a schema by the reference implementation and introspected, in the stored
    form. Any defect of the document (syntax, an unknown type, a bound) is a `SchemaRefused`."""
    if len(sdl.encode()) > max_bytes:
        raise SchemaRefused(f"GraphQL SDL is larger than {max_bytes} bytes")
    try:
        document = graphql.parse(sdl, no_location=True, max_tokens=MAX_SDL_TOKENS)
        schema = graphql.build_ast_schema(document)
        introspected = graphql.introspection_from_schema(schema)
    except graphql.GraphQLError as error:
        raise SchemaRefused(f"GraphQL SDL is not a valid schema: {error.message[:MESSAGE_LIMIT]}") from None
    except (TypeError, ValueError) as error:  # how graphql-core reports an unknown or misused type
        raise SchemaRefused(f"GraphQL SDL is not a valid schema: {str(error)[:MESSAGE_LIMIT]}") from None
    except RecursionError:
        raise SchemaRefused("GraphQL SDL nests too deeply") from None
    return dumps(normalize(introspected["__schema"]))


# -- what an upstream said, made safe -----------------------------------------------------------------------


def redact(text: str, secrets: Iterable[str | None]) -> str:
    """An upstream message made safe to store and show: the connection's own values and anything that reads
    like a credential replaced, whitespace collapsed, cut to `MESSAGE_LIMIT`."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "[redacted]")
    text = _BEARER.sub(lambda match: f"{match.group(1)} [redacted]", text)
    return _WHITESPACE.sub(" ", text).strip()[:MESSAGE_LIMIT]


def _loads(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return None


def _upstream_message(body: bytes, parsed: Any) -> str:
    if isinstance(parsed, dict):
        for candidate in (parsed.get("message"), parsed.get("error")):
            if isinstance(candidate, str):
                return candidate
            if isinstance(candidate, dict) and isinstance(candidate.get("message"), str):
                return candidate["message"]
        errors = parsed.get("errors")
        if isinstance(errors, list) and errors and isinstance(errors[0], dict):
            message = errors[0].get("message")
            if isinstance(message, str):
                return message
    return body[: MESSAGE_LIMIT * 4].decode("utf-8", errors="replace")


def error_messages(errors: list[Any]) -> list[str]:
    return [
        error["message"] if isinstance(error, dict) and isinstance(error.get("message"), str) else "unknown error"
        for error in errors
    ]


def read_answer(answer: OutboundResponse, secrets: Iterable[str | None]) -> bytes:
    """An introspection answer in the stored form; `SchemaRefused` with upstream's messages
    (`Introspection failed with status <n>: …`, `Introspection returned <k> error(s): …`,
    `Introspection response missing __schema`), which never hold the connection's values."""
    parsed = _loads(answer.body)
    if not 200 <= answer.status < 300:
        message = redact(_upstream_message(answer.body, parsed), secrets)
        raise SchemaRefused(f"Introspection failed with status {answer.status}: {message}")
    errors = parsed.get("errors") if isinstance(parsed, dict) else None
    if isinstance(errors, list) and errors:
        listed = redact("; ".join(error_messages(errors[:20])), secrets)
        raise SchemaRefused(f"Introspection returned {len(errors)} error(s): {listed}")
    data = parsed.get("data") if isinstance(parsed, dict) else None
    schema = data.get("__schema") if isinstance(data, dict) else None
    if not isinstance(schema, dict):
        raise SchemaRefused("Introspection response missing __schema")
    return dumps(normalize(schema))
