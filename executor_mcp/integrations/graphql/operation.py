"""A call's arguments → the GraphQL operation and its variables (upstream-integrations §5). Sans-I/O.

`query Order($id: ID!) { order(id: $id) { id status } }`: the operation is named after the field, declares
a variable for each argument the call passed (one left out is left out, so GraphQL's default applies), and
selects the default selection set unless `select` replaces it.

`select` is agent text spliced into our document, so it is held to being one selection set's body: it must
lex and nest within bounds, parse on its own as the inside of `{ … }` up to the end of input (so it cannot
close our braces, add a second operation or define a fragment), and the whole document must then parse as
exactly the one operation we built. Anything else is `graphql_invalid_selection`, before anything is sent
and before an approval is asked.
"""

import json
from collections.abc import Mapping
from typing import Any

import attrs
import graphql
from graphql.language import Lexer, Source, TokenKind
from graphql.language.parser import Parser

from executor_mcp.records.integration_errors import ArgumentsRefused

EXTRAS = ("select", "variables")
INVALID_SELECTION = "`select` is not a valid GraphQL selection set"
MAX_SELECT_LENGTH = 16 * 1024
MAX_SELECT_TOKENS = 4_000
MAX_SELECT_DEPTH = 24  # of `{`, `(` and `[` together: far past any real selection, far below the stack
MAX_DOCUMENT_TOKENS = 20_000
_OPENERS = frozenset({TokenKind.BRACE_L, TokenKind.PAREN_L, TokenKind.BRACKET_L})
_CLOSERS = frozenset({TokenKind.BRACE_R, TokenKind.PAREN_R, TokenKind.BRACKET_R})


@attrs.frozen
class Argument:
    name: str
    type: str  # as GraphQL writes it: `ID!`, `[OrderStatus!]`


@attrs.frozen
class Binding:
    """What a GraphQL tool's calls are made from; nothing above the kind reads it."""

    operation: str  # "query" | "mutation"
    field: str
    arguments: tuple[Argument, ...]
    selection: str | None  # the default selection set's body; None when the field returns a scalar or enum
    extras: tuple[str, ...] = EXTRAS  # the extra properties the tool takes (an argument may take the name)


class SelectionRefused(ArgumentsRefused):
    code = "graphql_invalid_selection"

    def __init__(self) -> None:
        super().__init__(INVALID_SELECTION)


@attrs.frozen
class Operation:
    query: str
    operation_name: str
    variables: dict[str, Any]

    def payload(self) -> dict[str, Any]:
        return {"query": self.query, "variables": self.variables, "operationName": self.operation_name}


def operation_name(field: str) -> str:
    return field[:1].upper() + field[1:]


def accepted(binding: Binding) -> list[str]:
    return [*(argument.name for argument in binding.arguments), *binding.extras]


def _values(binding: Binding, args: Any) -> Mapping[str, Any]:
    if args is None:
        return {}
    if not isinstance(args, dict):
        raise ArgumentsRefused("Tool arguments must be an object of the operation's arguments.")
    names = accepted(binding)
    unknown = [name for name in args if name not in set(names)]
    if unknown:
        label = "Unknown argument" if len(unknown) == 1 else "Unknown arguments"
        listed = ", ".join(json.dumps(name, ensure_ascii=False) for name in unknown[:20])
        tail = f"This operation accepts: {', '.join(names)}." if names else "This operation accepts no arguments."
        raise ArgumentsRefused(f"{label} {listed}. {tail}")
    return args


def check_selection(select: Any) -> str:
    """`select` as one selection set's body, or `SelectionRefused` (see the module docstring)."""
    if not isinstance(select, str) or not select.strip() or len(select) > MAX_SELECT_LENGTH:
        raise SelectionRefused
    # A newline on each side: a `#` comment in `select` ends with its line, never swallowing our `}`.
    text = "{\n" + select + "\n}"
    try:
        lexer = Lexer(Source(text))
        depth = tokens = 0
        token = lexer.advance()
        while token.kind is not TokenKind.EOF:
            tokens += 1
            if token.kind in _OPENERS:
                depth += 1
            elif token.kind in _CLOSERS:
                depth -= 1
            if tokens > MAX_SELECT_TOKENS or depth > MAX_SELECT_DEPTH or depth < 0:
                raise SelectionRefused
            token = lexer.advance()
        parser = Parser(Source(text), no_location=True, max_tokens=MAX_SELECT_TOKENS, allow_empty_selection_sets=False)
        parser.expect_token(TokenKind.SOF)
        parser.parse_selection_set()
        parser.expect_token(TokenKind.EOF)
    except (graphql.GraphQLError, RecursionError):
        raise SelectionRefused from None
    return select


def _one_operation(document: str, binding: Binding) -> None:
    """The built document is exactly one operation of our kind, selecting exactly our field, unaliased."""
    try:
        parsed = graphql.parse(document, no_location=True, max_tokens=MAX_DOCUMENT_TOKENS)
    except (graphql.GraphQLError, RecursionError):
        raise SelectionRefused from None
    definitions = parsed.definitions
    if len(definitions) != 1 or not isinstance(definitions[0], graphql.OperationDefinitionNode):
        raise SelectionRefused
    operation = definitions[0]
    selections = operation.selection_set.selections
    if (
        operation.operation.value != binding.operation
        or len(selections) != 1
        or not isinstance(selections[0], graphql.FieldNode)
        or selections[0].name.value != binding.field
        or selections[0].alias is not None
    ):
        raise SelectionRefused


def check_arguments(binding: Binding, args: Any) -> None:
    """Raise `ArgumentsRefused` (or `SelectionRefused`) when these arguments cannot make an operation."""
    build_operation(binding, args)


def build_operation(binding: Binding, args: Any) -> Operation:
    values = _values(binding, args)
    selection = binding.selection
    if "select" in binding.extras and values.get("select") is not None:
        if binding.selection is None:  # a scalar or enum has no selection set to replace
            raise SelectionRefused
        selection = "\n" + check_selection(values["select"]) + "\n"
    extra = values.get("variables") if "variables" in binding.extras else None
    if extra is not None and not isinstance(extra, dict):
        raise ArgumentsRefused("variables must be an object of GraphQL variable values.")
    present = [argument for argument in binding.arguments if argument.name in values]
    name = operation_name(binding.field)
    declared = f"({', '.join(f'${a.name}: {a.type}' for a in present)})" if present else ""
    passed = f"({', '.join(f'{a.name}: ${a.name}' for a in present)})" if present else ""
    selected = f" {{ {selection} }}" if selection is not None else ""
    query = f"{binding.operation} {name}{declared} {{ {binding.field}{passed}{selected} }}"
    _one_operation(query, binding)
    variables = {**(extra or {}), **{argument.name: values[argument.name] for argument in present}}
    return Operation(query=query, operation_name=name, variables=variables)
