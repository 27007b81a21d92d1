"""The connections of each organization: a credential bound to one integration, owned by the org (changed by
its admins) or by one account (its own). Who may make which, how a request is validated before anything is
written, where a pasted value is stored, and which provider items a connection may reference.

Making a connection to a kind whose tools each connection discovers lists its tools at once (a failed
listing leaves it standing, with why noted on it).
"""

import re
import time
from collections.abc import Callable
from typing import Any

import attrs

from executor_mcp.codec import JsonObject
from executor_mcp.integrations.access import account_of, find_integration, org_of, require_admin
from executor_mcp.integrations.addresses import OWNERS, connection_identifier
from executor_mcp.integrations.catalogs import Catalogs
from executor_mcp.integrations.connection_secrets import credential_values
from executor_mcp.integrations.discovery import Discoveries
from executor_mcp.integrations.kinds import Kinds
from executor_mcp.integrations.validation import (
    MAX_DESCRIPTION_LENGTH,
    MAX_NAME_LENGTH,
    check_known,
    object_of,
    optional_text,
    text,
)
from executor_mcp.integrations.views import ToolEntry, Views
from executor_mcp.records.integration_errors import (
    ConnectionNotFound,
    DiscoveryFailed,
    IntegrationNotFound,
    InvalidConnectionInput,
    InvalidInput,
    NotAdmin,
)
from executor_mcp.records.integrations import NO_AUTH, ConnectionRecord, IntegrationRecord
from executor_mcp.secrets.providers import ENV, FILE, SecretItem, SecretPartition, SecretProviders, pasted_item_id
from executor_mcp.storage.interfaces import CatalogStore, connection_key
from executor_mcp.storage.records import Owner as Principal

# What one owner (the org, or one account) may hold: far above any real catalog, far below what fills a disk.
MAX_CONNECTIONS_PER_ACCOUNT = 1024
MAX_CONNECTIONS_PER_INTEGRATION = 32
# Tools at an owner's connections (the org's, or one account's): a caller's catalog holds at most twice this.
MAX_TOOLS_PER_OWNER = 50_000
MAX_SECRET_VALUE_LENGTH = 16 * 1024
# Secrets the operator put beside the server (environment variables, files): not any one member's to bind.
OPERATOR_PROVIDERS = frozenset({ENV, FILE})
_PRINTABLE_ASCII = re.compile(r"[\x20-\x7e]+")


class Connections:
    """A caller's connections: the credentials they hold go to the secret providers, never into a record, and a
    connection whose kind lists tools at run time is discovered as it is saved, so its first use finds them."""

    def __init__(
        self,
        catalog: CatalogStore,
        secrets: SecretProviders,
        kinds: Kinds,
        catalogs: Catalogs,
        views: Views,
        discoveries: Discoveries,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._catalog = catalog
        self._secrets = secrets
        self._kinds = kinds
        self._catalogs = catalogs
        self._views = views
        self._discoveries = discoveries
        self._clock = clock

    async def visible(
        self, principal: Principal, integration: str | None = None, owner: str | None = None
    ) -> list[ConnectionRecord]:
        """The connections the caller sees (the org's and its own), of one integration or owner if asked."""
        org = principal.org_id
        if not org:
            return []
        if owner is not None and owner not in OWNERS:
            raise InvalidInput('owner must be "org" or "user"')
        return await self._catalog.connections(org, principal.account_id, integration=integration, owner=owner)

    async def get(self, principal: Principal, owner: str, integration: str, name: str) -> ConnectionRecord:
        org = principal.org_id
        record = None
        if org and owner in OWNERS:
            record = await self._catalog.get_connection(org, owner, account_of(owner, principal), integration, name)
        if record is None:
            raise ConnectionNotFound(f"Connection not found: tools.{integration}.{owner}.{name}")
        return record

    async def create(self, principal: Principal, body: Any, *, pasted: bool) -> ConnectionRecord:
        """Create or replace (upsert) a connection (see `check_connection_request`). Re-creating replaces the
        credential and keeps the description unless a new one is given."""
        values = object_of(body)
        owner, name, template, inputs = check_connection_request(principal, values, pasted=pasted)
        integration = await find_integration(self._catalog, principal, text(values.get("integration"), "integration"))
        check_template(integration, template)
        org, account = integration.org_id, account_of(owner, principal)
        existing = await self._catalog.get_connection(org, owner, account, integration.slug, name)
        if existing is None:
            await self._check_room(principal, owner, integration)
        provider: str | None = None
        item_ids: dict[str, str] = {}
        if inputs.pasted:
            provider = self._secrets.default_writable.key
            item_ids = {variable: pasted_item_id(owner, integration.slug, name, variable) for variable in inputs.pasted}
        elif inputs.references:
            providers = {reference[0] for reference in inputs.references.values()}
            if len(providers) > 1:
                raise InvalidConnectionInput("A connection's inputs must all come from one provider")
            provider = providers.pop()
            self._secrets.provider(provider)
            if provider in OPERATOR_PROVIDERS and not principal.org_admin:
                raise NotAdmin(f'Only an organization admin can use the server\'s "{provider}" secrets')
            item_ids = {variable: item for variable, (_, item) in inputs.references.items()}
        now = self._clock()
        record = ConnectionRecord(
            org_id=org,
            owner=owner,
            account_id=account,
            integration=integration.slug,
            name=name,
            template=template,
            provider=provider,
            item_ids=item_ids,
            created_at=existing.created_at if existing else now,
            updated_at=now,
            identity_label=optional_text(values, "identityLabel", MAX_NAME_LENGTH)
            or (existing.identity_label if existing else None),
            description=optional_text(values, "description", MAX_DESCRIPTION_LENGTH)
            or (existing.description if existing else None),
        )
        if inputs.pasted:
            await self._secrets.store_values(SecretPartition(org, account), item_ids, inputs.pasted)
        if not await self._catalog.put_connection(record):
            raise IntegrationNotFound(f"Integration not found: {integration.slug}", slug=integration.slug)
        if existing is not None:
            await self._secrets.forget(existing, replaced_by=record)
        if self._kinds.of(integration).discovers(integration):
            # A failed listing leaves the connection standing without tools (upstream's incomplete listing):
            # why is noted on it and answered (`sync_error`, the JSON's `lastHealth`), and it is listed again
            # on refresh or after `DISCOVERY_RETRY`.
            try:
                record = await self._discoveries.discover(integration, record)
            except DiscoveryFailed as failure:
                record = attrs.evolve(record, sync_error=failure.message)
        return record

    async def _check_room(self, principal: Principal, owner: str, integration: IntegrationRecord) -> None:
        """One more connection keeps its owner within bounds: every caller's catalog holds the org's tools and
        its own, so each owner's share is bounded, and no member can make everyone's catalog huge."""
        mine = await self._catalog.connections(integration.org_id, principal.account_id, owner=owner)
        if len(mine) >= MAX_CONNECTIONS_PER_ACCOUNT:
            raise InvalidConnectionInput(f"At most {MAX_CONNECTIONS_PER_ACCOUNT} connections per owner")
        if (
            sum(1 for connection in mine if connection.integration == integration.slug)
            >= MAX_CONNECTIONS_PER_INTEGRATION
        ):
            raise InvalidConnectionInput(
                f"At most {MAX_CONNECTIONS_PER_INTEGRATION} connections per owner to one integration"
            )
        view = await self._views.view(principal)
        owned = sum(1 for entry in view.entries if entry.connection.owner == owner)
        compiled = await self._catalogs.catalog(integration)
        adding = len(compiled.tools) if compiled is not None else 0
        if owned + adding > MAX_TOOLS_PER_OWNER:
            raise InvalidConnectionInput(
                f"At most {MAX_TOOLS_PER_OWNER} tools per owner: this connection would add {adding} to {owned}"
            )

    async def patch(self, principal: Principal, owner: str, integration: str, name: str, body: Any) -> ConnectionRecord:
        values = object_of(body)
        check_known(values, {"description", "identityLabel"})
        record = await self.get(principal, owner, integration, name)
        if owner == "org":
            require_admin(principal)
        changes: dict[str, Any] = {"updated_at": self._clock()}
        if "description" in values:
            changes["description"] = optional_text(values, "description", MAX_DESCRIPTION_LENGTH)
        if "identityLabel" in values:
            changes["identity_label"] = optional_text(values, "identityLabel", MAX_NAME_LENGTH)
        updated = attrs.evolve(record, **changes)
        if not await self._catalog.put_connection(updated):
            raise ConnectionNotFound(f"Connection not found: tools.{integration}.{owner}.{name}")
        return updated

    async def remove(self, principal: Principal, owner: str, integration: str, name: str) -> None:
        record = await self.get(principal, owner, integration, name)
        if owner == "org":
            require_admin(principal)
        removed = await self._catalog.remove_connection(
            record.org_id, record.owner, record.account_id, record.integration, record.name
        )
        if removed is None:
            raise ConnectionNotFound(f"Connection not found: tools.{integration}.{owner}.{name}")
        await self._secrets.forget(removed)

    async def tools(self, principal: Principal, owner: str, integration: str, name: str) -> list[ToolEntry]:
        """A connection's tools, listed again first where the connection discovers them (OpenAPI tools are
        derived from the stored document, so nothing is rebuilt); `DiscoveryFailed` when that listing fails."""
        record = await self.get(principal, owner, integration, name)
        integration_record = await find_integration(self._catalog, principal, integration)
        if self._kinds.of(integration_record).discovers(integration_record):
            record = await self._discoveries.discover(integration_record, record)
        view = await self._views.view(principal)
        return [entry for entry in view.entries if connection_key(entry.connection) == connection_key(record)]

    async def credentials(self, integration: IntegrationRecord, connection: ConnectionRecord) -> dict[str, str | None]:
        """The connection's values for its template's inputs; None where the provider holds none."""
        return await credential_values(self._secrets, integration, connection)

    # -- secret providers ----------------------------------------------------------------------------

    async def providers(self, principal: Principal) -> list[str]:
        """The provider keys a connection may reference, the default store for pasted values first."""
        return self._secrets.keys()

    async def provider_items(self, principal: Principal, key: str) -> list[SecretItem]:
        """The items of provider `key` the caller may reference: the org's and the caller's own, as ids and
        names (a value never leaves its provider). The operator's `env` and `file` secrets are listed to org
        admins only, who alone may reference them."""
        org = org_of(principal)
        if key in OPERATOR_PROVIDERS:
            require_admin(principal)
        partitions = [SecretPartition(org, "")]
        if principal.account_id:
            partitions.append(SecretPartition(org, principal.account_id))
        listed: dict[str, SecretItem] = {}
        for partition in partitions:
            for item in await self._secrets.items(key, partition):
                listed.setdefault(item.id, item)
        return list(listed.values())


def check_template(integration: IntegrationRecord, template: str) -> None:
    """A new connection names one of the integration's templates: a typo would otherwise be saved and every call
    go out without a credential, failing as `connection_rejected` with advice to re-authenticate."""
    if template not in integration.templates:
        raise InvalidConnectionInput(
            f'unknown template "{template}" for integration "{integration.slug}"; '
            f"valid templates: {', '.join(integration.templates)}"
        )


@attrs.frozen
class CredentialInputs:
    """A connection request's one credential origin: values pasted into it, or items of one provider."""

    pasted: dict[str, str]
    references: dict[str, tuple[str, str]]  # variable → (provider, item id)


def check_connection_request(
    principal: Principal, values: JsonObject, *, pasted: bool
) -> tuple[str, str, str, CredentialInputs]:
    """What can be checked of a connection request without storage: its fields, who may create it, and its
    one credential origin. `pasted` allows `value`/`values` (the HTTP API and the CLI); the sandbox's callers
    may only reference provider items (`from`, `inputs`) or use `none`."""
    allowed = {"owner", "name", "integration", "template", "identityLabel", "description", "from", "inputs"}
    if pasted:
        allowed |= {"value", "values"}
    check_known(values, allowed)
    owner = values.get("owner")
    if owner not in OWNERS:
        raise InvalidConnectionInput('owner must be "org" or "user"')
    if owner == "org":
        require_admin(principal)
    elif not principal.account_id:
        raise InvalidConnectionInput(
            "Cannot create a personal connection: this context has no user subject. Create it with owner "
            '"org", or connect as a signed-in user.'
        )
    org_of(principal)
    raw_name = values.get("name")
    if not isinstance(raw_name, str) or not raw_name.strip() or len(raw_name) > MAX_NAME_LENGTH:
        raise InvalidConnectionInput("name must be a non-empty string")
    template = values.get("template")
    if not isinstance(template, str) or not template or len(template) > MAX_NAME_LENGTH:
        raise InvalidConnectionInput("template must be a non-empty string")
    text(values.get("integration"), "integration")
    return owner, connection_identifier(raw_name), template, _credential_inputs(values, template, pasted)


def _credential_inputs(values: JsonObject, template: str, pasted: bool) -> CredentialInputs:
    """The one credential origin of a connection request, as upstream validates it."""
    origins = [key for key in ("value", "values", "from", "inputs") if values.get(key) is not None]
    if template == NO_AUTH:
        # An empty pasted `values` carries nothing (forms and clients send the field whatever the template);
        # an empty `inputs` stays refused, as upstream's no-auth test requires.
        origins = [key for key in origins if not (key == "values" and values[key] == {})]
        if origins:
            raise InvalidConnectionInput('A no-auth connection (template "none") takes no provider credential origin')
        return CredentialInputs({}, {})
    if len(origins) != 1:
        raise InvalidConnectionInput(
            "Expected exactly one credential origin" if pasted else "Expected exactly one provider credential origin"
        )
    origin = origins[0]
    raw = values[origin]
    if origin == "value":
        return CredentialInputs({"token": _secret(raw, "value")}, {})
    if origin == "values":
        if not isinstance(raw, dict) or not raw:
            raise InvalidConnectionInput("A connection must supply at least one credential input.")
        return CredentialInputs({_variable(name): _secret(value, f"values.{name}") for name, value in raw.items()}, {})
    if origin == "from":
        return CredentialInputs({}, {"token": _reference(raw, "from")})
    if not isinstance(raw, dict):
        raise InvalidConnectionInput("inputs must be an object of {variable: {from: {provider, id}}}")
    if not raw:
        raise InvalidConnectionInput("Expected at least one provider credential input")
    pasted_values: dict[str, str] = {}
    references: dict[str, tuple[str, str]] = {}
    for name, item in raw.items():
        variable = _variable(name)
        if isinstance(item, dict) and "from" in item and len(item) == 1:
            references[variable] = _reference(item["from"], f"inputs.{name}.from")
        elif pasted and isinstance(item, dict) and "value" in item and len(item) == 1:
            pasted_values[variable] = _secret(item["value"], f"inputs.{name}.value")
        else:
            raise InvalidConnectionInput(f"inputs.{name} must be {{from: {{provider, id}}}}")
    if pasted_values and references:
        raise InvalidConnectionInput("A connection cannot mix pasted values and provider references")
    return CredentialInputs(pasted_values, references)


def _reference(raw: Any, field: str) -> tuple[str, str]:
    if (
        not isinstance(raw, dict)
        or set(raw) != {"provider", "id"}
        or not isinstance(raw["provider"], str)
        or not isinstance(raw["id"], str)
        or not raw["id"]
        or len(raw["id"]) > MAX_NAME_LENGTH
    ):
        raise InvalidConnectionInput(f"{field} must be {{provider, id}}")
    return raw["provider"], raw["id"]


def _secret(raw: Any, field: str) -> str:
    # The message names the field, never the value.
    if not isinstance(raw, str) or not raw:
        raise InvalidConnectionInput(f"{field} must be a non-empty string")
    if len(raw) > MAX_SECRET_VALUE_LENGTH:
        raise InvalidConnectionInput(f"{field} must be at most {MAX_SECRET_VALUE_LENGTH} characters")
    if not _PRINTABLE_ASCII.fullmatch(raw):
        # It goes into a header or a query string: a line break would split the request, and a byte no
        # header can carry would fail every call instead of this one request.
        raise InvalidConnectionInput(f"{field} must be printable ASCII, as API keys and tokens are")
    return raw


def _variable(name: Any) -> str:
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,63}", name):
        raise InvalidConnectionInput("credential input names must be identifiers")
    return name
