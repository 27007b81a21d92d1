"""JSON Schema → upstream's compact TypeScript, for `tools.describe.tool` (upstream-integrations §3.4).

Upstream runs json-schema-to-typescript and squeezes its output onto one line. This renders the same text
directly: `{ a: T; b?: U; }`, quoted keys that are not identifiers, enums as literal unions, `T[]` with
parenthesized unions, OpenAPI `nullable`, `{}` as `unknown`, and `#/$defs/Name` as a PascalCased name whose
body goes into the definitions, collected transitively (a recursive type is just a name, so cycles end).
Descriptions and comments are dropped.

Schemas come from hostile specs: nesting past `MAX_DEPTH` renders `unknown`, and once a rendering has written
`MAX_TEXT` characters everything left renders `unknown` too.
"""

import json
import math
import re
from typing import Any

from executor_mcp.codec import JsonObject

MAX_DEPTH = 32
MAX_TEXT = 256 * 1024
MAX_DEFINITIONS = 500

TOOL_DEFINITIONS = {
    "ToolError": "{ code: string; message: string; status?: number; details?: unknown; retryable?: boolean }",
    "ToolHttpMeta": "{ status: number; headers: { [k: string]: string; } }",
    "ToolFile": (
        '{ _tag: "ToolFile"; name?: string; mimeType: string; encoding: "base64"; data: string; byteLength: number; }'
    ),
}

_IDENTIFIER = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$]*$")
_DEF_REF = re.compile(r"^#/(?:\$defs|definitions)/([^/]+)$")
_PRIMITIVES = {"string": "string", "number": "number", "integer": "number", "boolean": "boolean", "null": "null"}
_SHAPE_KEYWORDS = ("type", "properties", "items", "$ref", "enum", "const", "allOf", "anyOf", "oneOf")


def describe_output(data: str) -> str:
    """A tool's result type: upstream's `{ok, data}` union around its data's type."""
    return f"{{ ok: true; data: {data}; http?: ToolHttpMeta }} | {{ ok: false; error: ToolError }}"


def render(schema: Any, defs: JsonObject | None = None) -> tuple[str, dict[str, str]]:
    """One schema's type and the definitions it reaches (`Name → body`), in the order first referenced."""
    renderer = _Renderer(defs or {})
    text = renderer.type(schema, 0)
    return text, renderer.definitions()


def describe_types(input_schema: JsonObject | None, output_schema: Any, defs: JsonObject | None = None) -> JsonObject:
    """`inputTypeScript` (absent when the tool takes no input), the wrapped `outputTypeScript` and the
    `typeScriptDefinitions` both reach plus the fixed `ToolError`, `ToolHttpMeta` and `ToolFile`."""
    renderer = _Renderer(defs or {})
    described: JsonObject = {}
    if input_schema is not None and input_schema.get("properties"):
        described["inputTypeScript"] = renderer.type(input_schema, 0)
    data = renderer.type(output_schema, 0) if output_schema is not None else "unknown"
    described["outputTypeScript"] = describe_output(data)
    described["typeScriptDefinitions"] = {**renderer.definitions(), **TOOL_DEFINITIONS}
    return described


def signature(input_schema: JsonObject | None, output_schema: Any, defs: JsonObject | None = None) -> JsonObject:
    """A tool's types as `/api/tools/schema` and the console show them: `describe_types`, but with the output
    unwrapped (the data, not the `{ok, data}` union a sandbox call answers)."""
    described = describe_types(input_schema, output_schema, defs)
    answer: JsonObject = {}
    if "inputTypeScript" in described:
        answer["inputTypeScript"] = described["inputTypeScript"]
    answer["outputTypeScript"] = render(output_schema, defs)[0] if output_schema is not None else "unknown"
    answer["typeScriptDefinitions"] = described["typeScriptDefinitions"]
    return answer


def safe_name(name: str) -> str:
    """A definition name as a PascalCased TypeScript identifier (`foo-bar` → `FooBar`, `simple_user` →
    `SimpleUser`), as json-schema-to-typescript names its declarations."""
    words = [word for word in re.split(r"[^A-Za-z0-9$]+", name) if word]
    joined = "".join(word[:1].upper() + word[1:] for word in words)
    joined = re.sub(r"([0-9$]+)([a-z])", lambda m: m.group(1) + m.group(2).upper(), joined)
    joined = joined.lstrip("0123456789")
    return joined[:1].upper() + joined[1:] if joined else "Definition"


class _Renderer:
    def __init__(self, defs: JsonObject) -> None:
        self.defs = defs
        self.written = 0
        self._names: dict[str, str] = {}  # def name → TypeScript name
        self._taken: set[str] = set(TOOL_DEFINITIONS)
        self._order: list[str] = []

    def definitions(self) -> dict[str, str]:
        bodies: dict[str, str] = {}
        index = 0
        while index < len(self._order):  # grows as bodies reference further definitions
            name = self._order[index]
            index += 1
            bodies[self._names[name]] = self.type(self.defs[name], 0)
        return bodies

    def type(self, schema: Any, depth: int) -> str:
        if self.written > MAX_TEXT or depth > MAX_DEPTH:
            return "unknown"
        text = self._type(schema, depth)
        self.written += len(text)
        return text

    def _type(self, schema: Any, depth: int) -> str:
        if schema is True:
            return "unknown"
        if schema is False:
            return "never"
        if not isinstance(schema, dict):
            return "unknown"
        text = self._base(schema, depth)
        if schema.get("nullable") is True and not _allows_null(schema) and text not in ("unknown", "null"):
            text = f"{text} | null"
        return text

    def _base(self, schema: JsonObject, depth: int) -> str:
        ref = schema.get("$ref")
        if isinstance(ref, str):
            return self._reference(ref)
        if "const" in schema:
            return _literal(schema["const"])
        enum = schema.get("enum")
        if isinstance(enum, list):
            return " | ".join(dict.fromkeys(_literal(value) for value in enum)) or "never"
        parts = []
        if any(key in schema for key in ("type", "properties", "items", "additionalProperties")):
            parts.append(self._typed(schema, depth))
        for combinator, joiner in (("allOf", " & "), ("anyOf", " | "), ("oneOf", " | ")):
            members = schema.get(combinator)
            if not isinstance(members, list):
                continue
            shaped = [member for member in members if _has_shape(member)]
            if not shaped:
                continue
            rendered = [self.type(member, depth + 1) for member in shaped]
            if joiner == " & ":
                rendered = [_group(text, "|") for text in rendered]
            union = joiner.join(dict.fromkeys(rendered))
            parts.append(f"({union})" if len(rendered) > 1 else union)
        if not parts:
            return "unknown"
        if len(parts) == 1:
            return parts[0].removeprefix("(").removesuffix(")") if _wrapped(parts[0]) else parts[0]
        return " & ".join(_group(part, "|") for part in parts)

    def _typed(self, schema: JsonObject, depth: int) -> str:
        kind = schema.get("type")
        if isinstance(kind, list):
            kinds = [k for k in kind if isinstance(k, str)]
            rendered = [self._single(schema, k, depth) for k in kinds]
            return " | ".join(dict.fromkeys(rendered)) or "unknown"
        if isinstance(kind, str):
            return self._single(schema, kind, depth)
        if "items" in schema:
            return self._single(schema, "array", depth)
        return self._single(schema, "object", depth)

    def _single(self, schema: JsonObject, kind: str, depth: int) -> str:
        if kind == "array":
            items = schema.get("items")
            if isinstance(items, list):
                return "[" + ", ".join(self.type(item, depth + 1) for item in items) + "]"
            if items is None:
                return "unknown[]"
            return _group(self.type(items, depth + 1), "|&") + "[]"
        if kind == "object":
            return self._object(schema, depth)
        return _PRIMITIVES.get(kind, "unknown")

    def _object(self, schema: JsonObject, depth: int) -> str:
        properties = schema.get("properties")
        properties = properties if isinstance(properties, dict) else {}
        required = schema.get("required")
        required = {name for name in required if isinstance(name, str)} if isinstance(required, list) else set()
        members = []
        for name, value in properties.items():
            if self.written > MAX_TEXT:
                break
            optional = "" if name in required else "?"
            members.append(f"{_key(name)}{optional}: {self.type(value, depth + 1)}; ")
            self.written += len(name) + 4
        extra = schema.get("additionalProperties")
        if extra is True or (not properties and extra is None):
            members.append("[k: string]: unknown; ")
        elif isinstance(extra, dict):
            members.append(f"[k: string]: {self.type(extra, depth + 1)}; ")
        return "{ " + "".join(members) + "}" if members else "{}"

    def _reference(self, ref: str) -> str:
        match = _DEF_REF.match(ref)
        if match is None:
            return "unknown"
        name = match.group(1).replace("~1", "/").replace("~0", "~")
        if name not in self.defs:
            return "unknown"
        known = self._names.get(name)
        if known is not None:
            return known
        if len(self._order) >= MAX_DEFINITIONS:
            return "unknown"
        base = safe_name(name)
        candidate, suffix = base, 1
        while candidate in self._taken:
            candidate, suffix = f"{base}{suffix}", suffix + 1
        self._taken.add(candidate)
        self._names[name] = candidate
        self._order.append(name)
        return candidate


def _has_shape(member: Any) -> bool:
    """Whether a combinator member says something about the type (not only `required` and the like)."""
    return member is True or member is False or (isinstance(member, dict) and any(k in member for k in _SHAPE_KEYWORDS))


def _allows_null(schema: JsonObject) -> bool:
    kind = schema.get("type")
    enum = schema.get("enum")
    return (
        kind == "null"
        or (isinstance(kind, list) and "null" in kind)
        or (isinstance(enum, list) and None in enum)
        or ("const" in schema and schema["const"] is None)
    )


def _key(name: str) -> str:
    return name if _IDENTIFIER.match(name) else json.dumps(name, ensure_ascii=False)


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return "number"
        return str(int(value)) if value.is_integer() and abs(value) < 1e21 else repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return "unknown"


def _wrapped(text: str) -> bool:
    """Whether `text` is one parenthesized group, `(…)`, as opposed to `(a) | (b)`."""
    if not (text.startswith("(") and text.endswith(")")):
        return False
    return _top_level(text[1:-1], "") is not None


def _group(text: str, operators: str) -> str:
    """`text` parenthesized when an operator in `operators` joins it at its top level."""
    scan = _top_level(text, operators)
    return f"({text})" if scan else text


def _top_level(text: str, operators: str) -> str | None:
    """The operators of `operators` found outside brackets and strings ("" when none); None when brackets do
    not balance."""
    depth, found, quote, escaped = 0, "", False, False
    for char in text:
        if quote:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                quote = False
            continue
        if char == '"':
            quote = True
        elif char in "([{<":
            depth += 1
        elif char in ")]}>":
            depth -= 1
            if depth < 0:
                return None
        elif depth == 0 and char in operators:
            found += char
    return found if depth == 0 else None
