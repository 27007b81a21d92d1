"""The address grammar of integration tools, and how names become identifiers (upstream-integrations §1.1).

    tools.<integration>.<owner>.<connection>.<tool>

The first four segments hold no dot; the tool name is everything after the fourth dot, so it may hold
dots (`orders.getOrder`). Slugs are validated here (upstream does not, and a dotted slug makes every
address of its integration unparseable). A new slug starts with a letter or `_`, so `tools.<slug>` is plain
JavaScript; `-` stays allowed (upstream's tests use dashed slugs, reached as `tools["my-api"]`).
"""

import re

import attrs

OWNERS = ("org", "user")
# What an address may name: older data dirs hold slugs that start with a digit, still found and removable.
SLUG = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
NEW_SLUG = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
MAX_CONNECTION_NAME = 64
_WORDS = re.compile(r"[a-z0-9]+")


@attrs.frozen
class ToolAddress:
    integration: str
    owner: str
    connection: str
    tool: str

    @property
    def connection_address(self) -> str:
        return f"tools.{self.integration}.{self.owner}.{self.connection}"

    @property
    def tool_id(self) -> str:
        """The id policies match and sandbox paths use: the address without `tools.`."""
        return f"{self.integration}.{self.owner}.{self.connection}.{self.tool}"


def parse_tool_address(path: str) -> ToolAddress | None:
    """A sandbox path (`github.org.main.repos.get`, with or without `tools.`) as an address, or None when it
    is not one (a static tool id such as `executor.coreTools.connections.list` is not)."""
    parts = path.removeprefix("tools.").split(".", 3)
    if len(parts) != 4 or not all(parts):
        return None
    integration, owner, connection, tool = parts
    if owner not in OWNERS:
        return None
    return ToolAddress(integration, owner, connection, tool)


def connection_address(integration: str, owner: str, connection: str) -> str:
    return f"tools.{integration}.{owner}.{connection}"


def connection_identifier(name: str) -> str:
    """A connection name as upstream normalizes it: lowercased `[a-z0-9]+` words, camelCased, prefixed with
    `connection` when it would not start a JavaScript identifier (`"My Main Key"` → `myMainKey`)."""
    words = _WORDS.findall(name.lower())
    if not words:
        return "connection"
    text = words[0] + "".join(word[:1].upper() + word[1:] for word in words[1:])
    if not (text[0].isalpha() or text[0] in "_$"):
        text = "connection" + text[:1].upper() + text[1:]
    return text


def valid_slug(slug: object) -> bool:
    return isinstance(slug, str) and SLUG.fullmatch(slug) is not None


def slug_problem(slug: object) -> str | None:
    """Why `slug` cannot name a new integration, or None: a slug starting with a digit makes `tools.<slug>` a
    syntax error in the sandbox."""
    if isinstance(slug, str) and NEW_SLUG.fullmatch(slug):
        return None
    shown = repr(slug[:80]) if isinstance(slug, str) else type(slug).__name__
    return f"Invalid slug {shown}: start with a letter or '_', then up to 63 letters, digits, '_' or '-'"


def default_slug(text: str, kind: str) -> str:
    """The slug made from a name, a title or a host: its lowercase words joined by `_`, prefixed with the kind
    (`openapi`, `graphql`, `mcp`) when it would start with a digit (`127.0.0.1` → `graphql_127_0_0_1`), so
    that it is a JavaScript identifier; "" when `text` has no word."""
    slug = "_".join(_WORDS.findall(text.lower()))
    if slug and not slug[0].isalpha():
        slug = f"{kind}_{slug}"
    return slug[:64].rstrip("_")
