"""JSON Schema to TypeScript type text, for `tools.describe.tool`. Covers the shapes tools declare."""

from typing import Any

from executor_mcp.codec import JsonObject

_PRIMITIVES = {"string": "string", "number": "number", "integer": "number", "boolean": "boolean", "null": "null"}


def schema_to_typescript(schema: Any) -> str:
    if not isinstance(schema, dict):
        return "unknown"
    if "enum" in schema and isinstance(schema["enum"], list):
        return " | ".join(_literal(value) for value in schema["enum"]) or "never"
    for union in ("anyOf", "oneOf"):
        if isinstance(schema.get(union), list):
            return " | ".join(schema_to_typescript(member) for member in schema[union]) or "unknown"
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join(schema_to_typescript({**schema, "type": member}) for member in kind)
    if kind == "array":
        return f"Array<{schema_to_typescript(schema.get('items'))}>"
    if kind == "object" or "properties" in schema:
        properties = schema.get("properties") or {}
        required = set(schema.get("required") or ())
        fields = [
            f"{name}{'' if name in required else '?'}: {schema_to_typescript(value)}"
            for name, value in properties.items()
        ]
        return "{ " + "; ".join(fields) + " }" if fields else "Record<string, unknown>"
    return _PRIMITIVES.get(kind, "unknown") if isinstance(kind, str) else "unknown"


def describe_output(data_schema: JsonObject) -> str:
    """A tool's result type: upstream's `{ok, data}` envelope around its data."""
    data = schema_to_typescript(data_schema)
    return f"{{ ok: true; data: {data}; http?: ToolHttpMeta }} | {{ ok: false; error: ToolError }}"


def _literal(value: Any) -> str:
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
