"""A GraphQL integration's JSON, the same at the HTTP API and the sandbox's `executor.graphql.*` tools."""

from executor_mcp.codec import JsonObject
from executor_mcp.integrations.openapi.auth import describe_methods
from executor_mcp.integrations.wire import display_url
from executor_mcp.records.integrations import IntegrationRecord
from executor_mcp.storage.records import Owner as Principal


def endpoint_for(record: IntegrationRecord, principal: Principal) -> str:
    """The endpoint as the caller may see it: whole for an admin, without a query (a token may ride there)
    for a member."""
    endpoint = str(record.config.get("endpoint", ""))
    return endpoint if principal.org_admin else display_url(endpoint)


def summary(record: IntegrationRecord, principal: Principal) -> JsonObject:
    """`GET /api/graphql/integrations/<slug>` and `executor.graphql.getIntegration`: where the schema comes
    from is `introspection` (`snapshot`, or each `connection` introspecting with its own credential)."""
    return {
        "slug": record.slug,
        "name": record.name,
        "description": record.description,
        "kind": record.kind,
        "endpoint": endpoint_for(record, principal),
        "introspection": record.config.get("introspection"),
        "canRemove": True,
        "canRefresh": record.can_refresh,
        "authMethods": describe_methods(record.auth_methods),
    }
