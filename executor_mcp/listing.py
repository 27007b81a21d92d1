"""How admin commands print a listing, the same for every one: text for people, `--json` for scripts."""

import json
import sys
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def print_listing(
    records: Sequence[T], as_json: bool, empty: str, line: Callable[[T], str], row: Callable[[T], object]
) -> None:
    """`--json` prints one JSON list of `row`s (`[]` for none); text prints a `line` a record, and for none says
    `empty` on stderr, so that standard output stays what scripts split on."""
    if as_json:
        print(json.dumps([row(record) for record in records], indent=2))
        return
    if not records:
        print(empty, file=sys.stderr)
    for record in records:
        print(line(record))
