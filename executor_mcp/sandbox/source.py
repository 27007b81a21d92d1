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
_MODIFIERS = frozenset({"readonly", "override_modifier", "declare"})
_FUNCTIONS = frozenset({"arrow_function", "function_expression", "function", "generator_function"})


@attrs.frozen
class Prepared:
    """The script to evaluate, and how to map its line numbers back onto the agent's code."""

    program: str
    first_line: int  # the program line holding the agent's first line
    fence_lines: int  # lines of the agent's text above the part that runs

    def agent_line(self, program_line: int) -> int | None:
        line = program_line - self.first_line + 1
        return line + self.fence_lines if line >= 1 else None


def prepare(code: str) -> Prepared:
    body, fence_lines = _unfence(code)
    raw = body.encode()
    tree = Parser(_LANGUAGE).parse(raw)
    blanked = bytearray(raw)
    _strip_types(tree.root_node, blanked)
    head, tail = _recover(tree.root_node, blanked)
    stripped = blanked.decode(errors="replace")
    program = CODE_PREFIX + head + "\n" + stripped + "\n" + tail + CODE_SUFFIX
    return Prepared(program=program, first_line=CODE_LINE_OFFSET + 2, fence_lines=fence_lines)


def _unfence(code: str) -> tuple[str, int]:
    match = _FENCE.search(code)
    if match is None:
        return code, 0
    return match.group(1), code.count("\n", 0, match.start(1))


def _blank(buffer: bytearray, start: int, end: int) -> None:
    for index in range(start, end):
        if buffer[index] not in (0x0A, 0x0D):
            buffer[index] = 0x20


def _strip_types(node: Node, buffer: bytearray) -> None:
    if node.type == "ERROR":
        return  # the engine reports the real syntax error; guessing inside it could change meaning
    if node.type in _TYPE_NODES:
        _blank(buffer, node.start_byte, node.end_byte)
        return
    keyword = _TYPE_TAILS.get(node.type)
    markers = _MARKER_PARENTS.get(node.type, "")
    for child in node.children:
        if keyword is not None and child.type == keyword:
            _blank(buffer, child.start_byte, node.end_byte)
            break
        if (child.type in markers and not child.is_named) or child.type in _MODIFIERS:
            _blank(buffer, child.start_byte, child.end_byte)
            continue
        _strip_types(child, buffer)


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
