"""A connection's credential values, read from its secret provider when a call or a discovery needs them (and
never kept: a value stays in its provider between uses)."""

import logging

from executor_mcp.records.integrations import TOKEN, ConnectionRecord, IntegrationRecord
from executor_mcp.secrets.cipher import SecretUnreadable
from executor_mcp.secrets.providers import SecretPartition, SecretProviders

log = logging.getLogger(__name__)


async def credential_values(
    secrets: SecretProviders, integration: IntegrationRecord, connection: ConnectionRecord
) -> dict[str, str | None]:
    """The connection's values for its template's inputs; None where the provider holds none."""
    method = integration.auth_method(connection.template)
    if method is None or connection.provider is None:
        return {}
    partition = SecretPartition.of(connection)
    values: dict[str, str | None] = {}
    # An OAuth method places its access token itself (a bearer header); its refresh token is never sent.
    for variable in (TOKEN,) if method.kind == "oauth2" else method.inputs:
        item = connection.item_ids.get(variable)
        try:
            values[variable] = None if item is None else await secrets.get(connection.provider, partition, item)
        except SecretUnreadable:
            # A value stored under another key (or damaged) is as good as none: the call answers
            # `connection_value_missing`, whose recovery is to store it again.
            log.warning("connection %s: a stored value does not decrypt with this key", connection.address)
            values[variable] = None
    return values
