"""Where the MCP endpoints are: the default one, `/mcp`, and each toolkit's, `/mcp/toolkits/<slug>`. A session is
bound to the endpoint (its resource) it was opened at; a request at another endpoint cannot use it."""

MCP_PATH = "/mcp"
TOOLKITS_PATH = MCP_PATH + "/toolkits/"


def resource_for(slug: str) -> str:
    """The resource of a toolkit's endpoint (its path)."""
    return TOOLKITS_PATH + slug


def slug_of(resource: str) -> str | None:
    """The toolkit a resource names, or None for the default endpoint."""
    return resource.removeprefix(TOOLKITS_PATH) if resource.startswith(TOOLKITS_PATH) else None
