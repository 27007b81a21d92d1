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

Syntax errors are worded as JavaScript engines usually word them (`Unexpected token '='`, `Unexpected
end of input`) at a position in the agent's text. QuickJS reports where its parser stopped in the
wrapped program, which may be the wrapper itself: code that ends early (`return 1 +`) stops at the
wrapper's closing brace, and a stray closing brace in the code closes the wrapper's function. So the
agent's own tokens decide: a closing bracket with nothing open is the unexpected token; a stop inside
the wrapper is the end of the agent's input.
"""

import re
from collections.abc import Iterator

import attrs
import tree_sitter_typescript
from tree_sitter import Language, Node, Parser, Point

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
    body: str = ""  # the agent's text that runs, as sent (before stripping)

    def agent_line(self, program_line: int) -> int | None:
        """The agent's line for a program line, or None for the wrapper's own lines."""
        line = program_line - self.first_line + 1
        return line + self.fence_lines if 1 <= line <= self.lines else None

    def agent_column(self, program_line: int, column: int) -> int:
        """QuickJS counts columns in UTF-8 bytes; the agent reads characters. Blanking keeps byte offsets."""
        return self._character_column((program_line - self.first_line, column - 1))

    def syntax_error(self, detail: str, program_line: int | None, column: int | None) -> str:
        """QuickJS's parse error (`detail`, stopped at a program position) as the agent should read it."""
        root = Parser(_LANGUAGE).parse(self.body.encode()).root_node
        stopped: Point | None = None  # as tree-sitter counts: 0-based row of the body, byte column
        if program_line is not None and column is not None and self.agent_line(program_line) is not None:
            stopped = Point(program_line - self.first_line, column - 1)
        stray = _stray_closer(root)
        if stray is not None and (stopped is None or tuple(stray.start_point) <= tuple(stopped)):
            return self._at(f"Unexpected token '{_text(stray)}'", stray.start_point)
        if stopped is None or _in_unstripped_type_up_to_the_end(root, stopped):
            return self._at("Unexpected end of input", _end(root))
        token = _token_at(root, stopped)
        if _IN_EXPRESSION.fullmatch(detail):
            words = f"Unexpected token '{token}'" if token else "Unexpected end of input"
        elif detail.lower().startswith("unexpected"):
            words = _capitalized(detail)
        elif "expect" in detail:  # `variable name expected`, `expecting ';'`: this token is not that
            words = f"Unexpected token '{token}', {detail}" if token else f"Unexpected end of input, {detail}"
        else:
            words = _capitalized(detail)  # a rule past the grammar: a redefinition, an octal literal...
        return self._at(words, stopped)

    def _at(self, words: str, point: Point) -> str:
        return f"SyntaxError: {words} ({point[0] + 1 + self.fence_lines}:{self._character_column(point)})"

    def _character_column(self, point: tuple[int, int]) -> int:
        row, byte_column = point
        lines = self.body.split("\n")
        line = lines[row] if 0 <= row < len(lines) else ""
        return len(line.encode()[: max(byte_column, 0)].decode(errors="replace")) + 1


_IN_EXPRESSION = re.compile(r"unexpected token in expression: '.*'", re.DOTALL)
_CLOSING = {"{": "}", "(": ")", "[": "]", "${": "}"}
_CLOSERS = frozenset(_CLOSING.values())
_TOKEN = re.compile(rb"[\w$\x80-\xff]+|\S")
_TOKEN_SHOWN = 40


def _capitalized(text: str) -> str:
    return text[:1].upper() + text[1:]


def _leaves(root: Node) -> Iterator[Node]:
    stack = [root]
    while stack:
        node = stack.pop()
        if node.child_count == 0:
            yield node
        else:
            stack.extend(reversed(node.children))


def _text(node: Node) -> str:
    """A node's source (a tree parsed from bytes always keeps it; an edited one would not)."""
    return (node.text or b"").decode(errors="replace")


def _stray_closer(root: Node) -> Node | None:
    """The first closing bracket that does not close what the agent opened last (or closes the wrapper)."""
    open_brackets: list[str] = []
    for leaf in _leaves(root):
        if leaf.is_missing:
            continue
        if leaf.type in _CLOSING:
            open_brackets.append(_CLOSING[leaf.type])
        elif leaf.type in _CLOSERS and (not open_brackets or open_brackets.pop() != leaf.type):
            return leaf
    return None


def _token_at(root: Node, point: Point) -> str | None:
    """The agent's token that starts at a point, or None at the end of the input."""
    leaf = root.descendant_for_point_range(point, point)
    if leaf is not None and leaf.child_count == 0 and tuple(leaf.start_point) == tuple(point) and leaf.text:
        token = leaf.text
    else:
        lines = (root.text or b"").split(b"\n")
        line = lines[point[0]] if point[0] < len(lines) else b""
        match = _TOKEN.match(line, point[1])
        if match is None:
            return None
        token = match.group()
    text = token.decode(errors="replace")
    return text if len(text) <= _TOKEN_SHOWN else text[:_TOKEN_SHOWN] + "..."


def _in_unstripped_type_up_to_the_end(root: Node, point: Point) -> bool:
    """Whether QuickJS stopped at TypeScript left in place because its statement runs unfinished to the end.

    Types inside a syntax error are not stripped (see `_strip_types`), so `const a: number = 1 +` stops
    QuickJS at the `:`; the agent's real problem is that the code ends early.
    """
    node: Node | None = root.descendant_for_point_range(point, point)
    in_type = False
    while node is not None:
        in_type = in_type or node.type in _TYPE_NODES
        if node.type == "ERROR":
            return in_type and node.end_byte >= len((root.text or b"").rstrip())
        node = node.parent
    return False


def _end(root: Node) -> Point:
    """Just past the agent's last non-blank byte."""
    kept = (root.text or b"").rstrip()
    return Point(kept.count(b"\n"), len(kept) - (kept.rfind(b"\n") + 1))


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
        program=program,
        first_line=CODE_LINE_OFFSET + 2,
        fence_lines=fence_lines,
        lines=body.count("\n") + 1,
        body=body,
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
        _text(pattern)
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
        return "", f"return await {_text(name)}();"
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
