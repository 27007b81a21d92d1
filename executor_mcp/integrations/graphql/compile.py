"""A stored schema → a `CompiledCatalog`: one tool per root field (upstream-integrations §5). Sans-I/O.

- Names `query.<field>` and `mutation.<field>`; the description is the field's, else
  `GraphQL <kind>: <field> -> <ReturnType>`; mutations need approval (`mutation <field>`).
- Each argument is a property, required when NON_NULL without a default (a default makes it optional in
  GraphQL, and an argument left out is left out of the operation, so the default applies). Every
  INPUT_OBJECT and ENUM is a `$defs` entry the arguments `$ref`.
- `select` (and `variables`) are extra properties, unless an argument already has that name: the argument
  wins, since the schema is the API.
- The default selection set (see `default_selection`): the return type's leaves, and one level of its
  object fields' leaves, within `MAX_DEFAULT_FIELDS`.
"""

from typing import Any

from executor_mcp.codec import JsonObject, converter, loads
from executor_mcp.integrations.graphql.introspection import SchemaRefused, normalize
from executor_mcp.integrations.graphql.operation import EXTRAS, Argument, Binding
from executor_mcp.records.integrations import CompiledCatalog, ToolDef

SCALARS: dict[str, str] = {
    "String": "string",
    "ID": "string",
    "Int": "integer",
    "Float": "number",
    "Boolean": "boolean",
}
LEAF_KINDS = frozenset({"SCALAR", "ENUM"})
COMPOSITE_KINDS = frozenset({"OBJECT", "INTERFACE"})
# The default selection set: leaves of the return type, then each object field's own leaves, one level down;
# at most this many field names in all (a nested field and each of its leaves count one each).
MAX_DEFAULT_FIELDS = 64
MAX_NESTED_LEAVES = 16
SELECT_DESCRIPTION = "Optional GraphQL selection set for the `{type}` return type."
VARIABLES_DESCRIPTION = (
    "Extra GraphQL variables sent with the operation (the arguments above are sent as variables too)."
)


def named(ref: JsonObject) -> JsonObject:
    while ref.get("ofType") is not None:
        ref = ref["ofType"]
    return ref


def type_notation(ref: JsonObject) -> str:
    """`[Order!]!`: a type reference as GraphQL writes it (in variable definitions and descriptions)."""
    if ref["kind"] == "NON_NULL":
        return type_notation(ref["ofType"]) + "!"
    if ref["kind"] == "LIST":
        return f"[{type_notation(ref['ofType'])}]"
    return str(ref["name"])


class _Schema:
    def __init__(self, schema: JsonObject) -> None:
        self.types: dict[str, JsonObject] = {shown["name"]: shown for shown in schema["types"]}

    def kind(self, ref: JsonObject) -> str | None:
        found = self.types.get(named(ref)["name"])
        return found["kind"] if found is not None else None

    def input_schema(self, ref: JsonObject) -> JsonObject:
        if ref["kind"] == "NON_NULL":
            return self.input_schema(ref["ofType"])
        if ref["kind"] == "LIST":
            return {"type": "array", "items": self.input_schema(ref["ofType"])}
        name = ref["name"]
        found = self.types.get(name)
        if found is not None and found["kind"] in ("ENUM", "INPUT_OBJECT"):
            return {"$ref": f"#/$defs/{name}"}
        if name in SCALARS:
            return {"type": SCALARS[name]}
        return {"type": "string", "description": f"Custom scalar: {name}"}

    def defs(self) -> JsonObject:
        defs: JsonObject = {}
        for name, shown in self.types.items():
            if shown["kind"] == "ENUM":
                schema: JsonObject = {"type": "string", "enum": [value["name"] for value in shown["enumValues"]]}
            elif shown["kind"] == "INPUT_OBJECT":
                schema = self.object_schema(shown["inputFields"])
            else:
                continue
            if shown.get("description"):
                schema["description"] = shown["description"]
            defs[name] = schema
        return defs

    def object_schema(self, values: list[JsonObject]) -> JsonObject:
        properties: JsonObject = {}
        required = []
        for value in values:
            prop = self.input_schema(value["type"])
            if value.get("description"):
                prop = {**prop, "description": value["description"]}
            properties[value["name"]] = prop
            if value["type"]["kind"] == "NON_NULL" and value.get("defaultValue") is None:
                required.append(value["name"])
        schema: JsonObject = {"type": "object", "properties": properties}
        if required:
            schema["required"] = required
        return schema

    def fields(self, type_name: str) -> list[JsonObject]:
        found = self.types.get(type_name)
        return found.get("fields", []) if found is not None else []

    def leaves(self, type_name: str, limit: int) -> list[str]:
        """The scalar and enum fields of a type that need no argument, in declared order."""
        chosen: list[str] = []
        for field in self.fields(type_name):
            if len(chosen) >= limit:
                break
            if self.kind(field["type"]) in LEAF_KINDS and not _needs_arguments(field):
                chosen.append(field["name"])
        return chosen

    def default_selection(self, ref: JsonObject) -> str | None:
        """What a field returns unless `select` says otherwise: None for a scalar or enum (no selection set);
        `__typename` for a union or a type with nothing else to select; else the type's leaves, then, while
        `MAX_DEFAULT_FIELDS` allows, each object or interface field's own leaves (no deeper, so cycles end and
        the answer stays small)."""
        kind = self.kind(ref)
        if kind in LEAF_KINDS:
            return None
        type_name = named(ref)["name"]
        if kind not in COMPOSITE_KINDS:
            return "__typename"
        leaves = set(self.leaves(type_name, MAX_DEFAULT_FIELDS))
        budget = MAX_DEFAULT_FIELDS - len(leaves)
        nested: dict[str, list[str]] = {}
        for field in self.fields(type_name):
            if budget < 2:
                break
            if self.kind(field["type"]) not in COMPOSITE_KINDS or _needs_arguments(field):
                continue
            inner = self.leaves(named(field["type"])["name"], min(MAX_NESTED_LEAVES, budget - 1))
            if inner:
                nested[field["name"]] = inner
                budget -= 1 + len(inner)
        parts = []
        for field in self.fields(type_name):
            if field["name"] in leaves:
                parts.append(field["name"])
            elif field["name"] in nested:
                parts.append(f"{field['name']} {{ {' '.join(nested[field['name']])} }}")
        return " ".join(parts) or "__typename"


def _needs_arguments(field: JsonObject) -> bool:
    return any(
        argument["type"]["kind"] == "NON_NULL" and argument.get("defaultValue") is None for argument in field["args"]
    )


def _tool(schema: _Schema, operation: str, field: JsonObject) -> ToolDef:
    name = field["name"]
    return_type = named(field["type"])["name"]
    argument_names = {argument["name"] for argument in field["args"]}
    extras = tuple(extra for extra in EXTRAS if extra not in argument_names)
    selection = schema.default_selection(field["type"])
    binding = Binding(
        operation=operation,
        field=name,
        arguments=tuple(Argument(argument["name"], type_notation(argument["type"])) for argument in field["args"]),
        selection=selection,
        extras=extras,
    )
    input_schema = schema.object_schema(field["args"])
    if "select" in extras:
        described = SELECT_DESCRIPTION.format(type=return_type)
        if selection is not None:
            described += f" It replaces the default selection: {selection}"
        input_schema["properties"]["select"] = {"type": "string", "description": described}
    if "variables" in extras:
        input_schema["properties"]["variables"] = {"type": "object", "description": VARIABLES_DESCRIPTION}
    description = field.get("description") or f"GraphQL {operation}: {name} -> {type_notation(field['type'])}"
    mutation = operation == "mutation"
    return ToolDef(
        name=f"{operation}.{name}",
        description=description,
        input_schema=input_schema,
        output_schema=None,
        binding=converter.unstructure(binding),
        requires_approval=mutation,
        approval_description=f"mutation {name}" if mutation else None,
    )


def compile_catalog(source: bytes) -> CompiledCatalog:
    """The tools of a stored schema (`introspection.normalize`'s form; `{}` has none: every connection
    introspects its own). Checked again here, since a stored source is read back from disk."""
    try:
        raw: Any = loads(source)
    except (ValueError, RecursionError):
        raise SchemaRefused("GraphQL schema source is not JSON") from None
    if raw == {}:
        return CompiledCatalog(tools=())
    if not isinstance(raw, dict):
        raise SchemaRefused("Introspection response missing __schema")
    stored = normalize(raw.get("__schema"))["__schema"]
    schema = _Schema(stored)
    tools: list[ToolDef] = []
    for operation, root in (("query", stored["queryType"]), ("mutation", stored["mutationType"])):
        root_type = schema.types.get(root["name"]) if root is not None else None
        if root_type is None or root_type["kind"] != "OBJECT":
            continue
        tools.extend(_tool(schema, operation, field) for field in root_type["fields"])
    return CompiledCatalog(tools=tuple(sorted(tools, key=lambda tool: tool.name)), defs=schema.defs())
