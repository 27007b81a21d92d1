"""What the server reads of an HTTP request's headers, whichever server parsed them. No I/O.

The Quart routes hold werkzeug's `Headers` (not a `Mapping`: it iterates pairs) and `/mcp` holds
`asgi.RequestHeaders`; the checks below them (authentication, the browser guard, the console's origin rules)
only look headers up by name, so they take this instead of either.
"""

from typing import Protocol, overload


class HeaderLookup(Protocol):
    """Headers by case-insensitive name; a repeated header reads as its first value."""

    @overload
    def get(self, key: str, /) -> str | None: ...

    @overload
    def get(self, key: str, default: str, /) -> str: ...

    def __contains__(self, key: str, /) -> bool: ...
