"""From what an agent sends to the script the engine runs: fence extraction, TypeScript stripping and
code recovery, keeping every line and column of the agent's code where it was.

TypeScript is stripped by blanking: a tree-sitter parse finds the type-only syntax (annotations,
interfaces, type aliases, generics, `as`/`satisfies`, non-null `!`, ...) and those bytes become spaces,
newlines kept. Nothing moves, so an error the engine reports at line L, column C is at line L, column
C of what the agent sent (after the fence, whose offset is added back). Decorators and `enum` are not
supported (as upstream); they reach the engine and fail there as syntax errors.

Recovery follows upstream: a fenced block's content is used; a lone function expression or arrow is
invoked; a lone function declaration is called; `export default` is unwrapped; anything else is the
body of an async function, so top-level `await` and `return` work.
"""

import re

import attrs
import tree_sitter_typescript
from tree_sitter import Language, Node, Parser

from executor_mcp.sandbox.prelude import CODE_LINE_OFFSET, CODE_PREFIX, CODE_SUFFIX

_LANGUAGE = Language(tree_sitter_typescript.language_typescript())
_FENCE = re.compile(r"```[^\n`]*\n(.*?)```", re.DOTALL)

# Nodes that are type syntax through and through.
_TYPE_NODES = frozenset(
    {
        "type_annotation",
        "type_parameters",
        "type_arguments",
        "interface_declaration",
        "type_alias_declaration",
        "ambient_declaration",
        "implements_clause",
        "accessibility_modifier",
        "function_signature",
        "method_signature",
        "abstract_method_signature",
        "index_signature",
        "type_predicate_annotation",
        "asserts_annotation",
        "opting_type_annotation",
        "omitting_type_annotation",
        "adding_type_annotation",
    }
)
# Nodes whose tail, from this keyword on, is a type: `x as T`, `x satisfies T`.
_TYPE_TAILS = {"as_expression": "as", "satisfies_expression": "satisfies"}
# Single tokens that only exist in TypeScript where they appear: `x!`, `b?: T`, `x!: T`, `readonly`.
_MARKER_PARENTS = {
    "non_null_expression": "!",
    "optional_parameter": "?",
    "public_field_definition": "?!",
    "variable_declarator": "!",
}
_MODIFIERS = frozenset({"readonly", "override_modifier", "declare", "abstract"})
_PARAMETER_PROPERTY_MARKS = frozenset({"accessibility_modifier", "readonly", "override_modifier"})
_FUNCTIONS = frozenset({"arrow_function", "function_expression", "function", "generator_function"})


@attrs.frozen
class Prepared:
    """The script to evaluate, and how to map its line numbers back onto the agent's code."""

    program: str
    first_line: int  # the program line holding the agent's first line
    fence_lines: int  # lines of the agent's text above the part that runs
    lines: int  # how many lines of the agent's text run

    def agent_line(self, program_line: int) -> int | None:
        """The agent's line for a program line, or None for the wrapper's own lines."""
        line = program_line - self.first_line + 1
        return line + self.fence_lines if 1 <= line <= self.lines else None


def prepare(code: str) -> Prepared:
    body, fence_lines = _unfence(code)
    raw = body.encode()
    tree = Parser(_LANGUAGE).parse(raw)
    blanked = bytearray(raw)
    insertions: list[tuple[int, bytes]] = []
    _strip_types(tree.root_node, blanked, insertions)
    head, tail = _recover(tree.root_node, blanked)
    for offset, text in sorted(insertions, reverse=True):
        blanked[offset:offset] = text
    stripped = blanked.decode(errors="replace")
    program = CODE_PREFIX + head + "\n" + stripped + "\n" + tail + CODE_SUFFIX
    return Prepared(
        program=program, first_line=CODE_LINE_OFFSET + 2, fence_lines=fence_lines, lines=body.count("\n") + 1
    )


def _unfence(code: str) -> tuple[str, int]:
    match = _FENCE.search(code)
    if match is None:
        return code, 0
    return match.group(1), code.count("\n", 0, match.start(1))


def _blank(buffer: bytearray, start: int, end: int) -> None:
    for index in range(start, end):
        if buffer[index] not in (0x0A, 0x0D):
            buffer[index] = 0x20


def _strip_types(node: Node, buffer: bytearray, insertions: list[tuple[int, bytes]]) -> None:
    """Blank type syntax in place; `insertions` collects the little code TypeScript implies."""
    if node.type == "ERROR":
        return  # the engine reports the real syntax error; guessing inside it could change meaning
    if node.type in _TYPE_NODES:
        _blank(buffer, node.start_byte, node.end_byte)
        return
    if node.type == "method_definition":
        _assign_parameter_properties(node, insertions)
    if node.type == "formal_parameters":
        _drop_this_parameter(node, buffer)
    keyword = _TYPE_TAILS.get(node.type)
    markers = _MARKER_PARENTS.get(node.type, "")
    for child in node.children:
        if keyword is not None and child.type == keyword:
            _blank(buffer, child.start_byte, node.end_byte)
            break
        if (not child.is_named and child.type in markers) or child.type in _MODIFIERS:
            _blank(buffer, child.start_byte, child.end_byte)
            continue
        _strip_types(child, buffer, insertions)


def _assign_parameter_properties(method: Node, insertions: list[tuple[int, bytes]]) -> None:
    """`constructor(private x: T)` means `this.x = x` on entry (after `super(...)` when there is one)."""
    name, parameters, body = (method.child_by_field_name(f) for f in ("name", "parameters", "body"))
    if name is None or name.text != b"constructor" or parameters is None or body is None:
        return
    names = [
        pattern.text.decode()
        for parameter in parameters.named_children
        if any(child.type in _PARAMETER_PROPERTY_MARKS for child in parameter.children)
        and (pattern := parameter.child_by_field_name("pattern")) is not None
        and pattern.type == "identifier"
    ]
    if not names:
        return
    statements = [child for child in body.named_children if child.type != "comment"]
    first = statements[0] if statements else None
    calls_super = (
        first is not None
        and first.type == "expression_statement"
        and first.named_children
        and first.named_children[0].type == "call_expression"
        and (callee := first.named_children[0].child_by_field_name("function")) is not None
        and callee.type == "super"
    )
    offset = first.end_byte if calls_super and first is not None else body.start_byte + 1
    insertions.append((offset, "".join(f" this.{n} = {n};" for n in names).encode()))


def _drop_this_parameter(parameters: Node, buffer: bytearray) -> None:
    """`function f(this: T, a)`: the `this` parameter is a type, not a parameter."""
    named = parameters.named_children
    first = named[0] if named else None
    if first is not None and first.type == "required_parameter" and first.named_children[:1]:
        if first.named_children[0].type != "this":
            return
        _blank(buffer, first.start_byte, named[1].start_byte if len(named) > 1 else first.end_byte)


def _statements(root: Node) -> list[Node]:
    return [child for child in root.named_children if child.type != "comment"]


def _recover(root: Node, buffer: bytearray) -> tuple[str, str]:
    """What to put around the code so its value is the execution's result (text before, text after).

    The text before goes on the wrapper's line and ends inside an open parenthesis or statement, so no
    line of the agent's code moves.
    """
    statements = _statements(root)
    if len(statements) != 1 or root.has_error:
        return "", ""
    only = statements[0]
    if only.type == "expression_statement" and _is_function(only.named_children[0]):
        return "return await (", ")();"
    if only.type == "function_declaration" and (name := only.child_by_field_name("name")) is not None:
        return "", f"return await {name.text.decode()}();"
    if only.type == "export_statement" and any(child.type == "default" for child in only.children):
        value = only.child_by_field_name("value") or only.child_by_field_name("declaration")
        if value is None:
            return "", ""
        keywords = buffer[only.start_byte : value.start_byte]
        if _is_function(value) or value.type == "function_declaration":
            buffer[only.start_byte : value.start_byte] = _fit(b"return await (", len(keywords))
            return "", ")();"
        buffer[only.start_byte : value.start_byte] = _fit(b"return ", len(keywords))
    return "", ""


def _is_function(node: Node) -> bool:
    while node.type == "parenthesized_expression" and node.named_children:
        node = node.named_children[0]
    return node.type in _FUNCTIONS


def _fit(replacement: bytes, width: int) -> bytes:
    """`replacement` padded to `width` bytes, or the minimal form when the original was shorter."""
    return replacement.ljust(width) if len(replacement) <= width else replacement
