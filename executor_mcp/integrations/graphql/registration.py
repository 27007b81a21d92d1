"""An add request → a `kinds.Registration` for a GraphQL endpoint. Sans-I/O (the SDL build is CPU work: the
kind runs it in a worker thread, at the caller's turn of the compiler).

`{endpoint, slug?, name?, description?, introspectionJson?, sdl?, headers?, queryParams?,
authenticationTemplate?}` (upstream §3.1, plus `sdl`: for an endpoint with introspection off). With a
snapshot or an SDL document the integration's source is that schema, compiled once; without either every
connection introspects the endpoint with its own credential (`introspection: "connection"` in the config),
and refreshing a connection introspects it again.
"""

import urllib.parse
from typing import Any

from executor_mcp.codec import JsonObject
from executor_mcp.integrations.graphql.introspection import sdl_source, snapshot_source
from executor_mcp.integrations.kinds import Registration
from executor_mcp.records.integration_errors import InvalidInput
from executor_mcp.records.integrations import DISCOVERED_PER_CONNECTION, AuthMethod

FIELDS = frozenset(
    {
        "endpoint",
        "slug",
        "name",
        "description",
        "introspectionJson",
        "sdl",
        "headers",
        "queryParams",
        "authenticationTemplate",
    }
)
CONFIGURE_FIELDS = frozenset({"endpoint", "headers", "queryParams", "authenticationTemplate", "mode"})
# `config["introspection"]`: where the schema comes from.
SNAPSHOT = "snapshot"
PER_CONNECTION = "connection"


def host_of(endpoint: str) -> str:
    return urllib.parse.urlsplit(endpoint).hostname or "graphql"


def registration(
    values: JsonObject,
    *,
    endpoint: str,
    static: JsonObject,
    auth_methods: tuple[AuthMethod, ...],
    name: str | None,
    description: str | None,
    max_source_bytes: int,
) -> Registration:
    """`values` is the request (its fields known); `endpoint`, `static` (headers and query parameters),
    `auth_methods`, `name` and `description` are those fields as the service already checked them."""
    snapshot: Any = values.get("introspectionJson")
    sdl: Any = values.get("sdl")
    if snapshot is not None and sdl is not None:
        raise InvalidInput("Give introspectionJson or sdl, not both")
    if sdl is not None:
        if not isinstance(sdl, str) or not sdl.strip():
            raise InvalidInput("sdl must be the schema's SDL text")
        source = sdl_source(sdl, max_source_bytes)
    elif snapshot is not None:
        if not isinstance(snapshot, dict | str):
            raise InvalidInput("introspectionJson must be an introspection result (an object or its JSON text)")
        source = snapshot_source(snapshot, max_source_bytes)
    else:
        source = DISCOVERED_PER_CONNECTION
    slug = values.get("slug")
    if slug is not None and not isinstance(slug, str):
        raise InvalidInput("slug must be a string")
    host = host_of(endpoint)
    introspected = source == DISCOVERED_PER_CONNECTION
    return Registration(
        slug=slug,
        slug_hint=name or host,
        name=name or slug or host,
        description=description or f"GraphQL API at {host}",
        config={**static, "endpoint": endpoint, "introspection": PER_CONNECTION if introspected else SNAPSHOT},
        auth_methods=auth_methods,
        source=source,
        can_refresh=introspected,
    )
