"""How admin commands print what they show, the same for every one: a table (or a record's fields) for people,
`--json` for scripts.

Every `--json` document follows one rule: camelCase field names and times as integer epoch milliseconds, the
HTTP API's conventions. Where the HTTP API answers the same thing (policies, integrations, connections, tools,
audit records), the row is the API's own; the records it does not list (organizations, API keys, every account's
sessions) are shaped by the same rule.
"""

import json
import sys
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")
Column = tuple[str, Callable[[T], object]]
GAP = "  "


def milliseconds(at: float | None) -> int | None:
    """A stored time (epoch seconds, a float) as the JSON shapes give times."""
    return None if at is None else int(at * 1000)


def _cell(value: object) -> str:
    """One line, whatever a value holds (a description may hold newlines or tabs, which would break the table)."""
    return " ".join(str("-" if value is None or value == "" else value).split())


def print_listing(
    records: Sequence[T], as_json: bool, empty: str, columns: Sequence[Column[T]], row: Callable[[T], object]
) -> None:
    """`--json` prints one JSON list of `row`s (`[]` for none). Text prints a header and one line a record, the
    columns separated by tabs (so `cut -f` and scripts that split on tabs keep working; no cell holds a tab); for
    none it says `empty` on stderr and prints nothing, so standard output has no line without a record (and no
    header alone) for a script that splits it."""
    if as_json:
        print(json.dumps([row(record) for record in records], indent=2))
        return
    if not records:
        print(empty, file=sys.stderr)
        return
    table = [[title for title, _ in columns]] + [[_cell(cell(record)) for _, cell in columns] for record in records]
    for line in table:
        print("\t".join(line))


def print_fields(fields: Sequence[tuple[str, object]]) -> None:
    """One record as `name  value` lines, the values aligned (what a `show` command prints without `--json`)."""
    width = max(len(name) for name, _ in fields)
    for name, value in fields:
        print(f"{name.ljust(width)}{GAP}{_cell(value)}".rstrip())
