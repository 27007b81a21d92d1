"""Who may read and change an organization's integrations and connections: one rule, asked by every entry
point and by the pages that disable what it would refuse; and the lookup every change starts from."""

from executor_mcp.integrations.addresses import valid_slug
from executor_mcp.records.integration_errors import IntegrationError, IntegrationNotFound, InvalidInput, NotAdmin
from executor_mcp.records.integrations import IntegrationRecord
from executor_mcp.storage.interfaces import CatalogStore
from executor_mcp.storage.records import Owner as Principal


def org_of(principal: Principal) -> str:
    if not principal.org_id:
        raise InvalidInput("Integrations need an organization: this bearer has none")
    return principal.org_id


def require_admin(principal: Principal) -> None:
    org_of(principal)
    if not principal.org_admin:
        raise NotAdmin("Only an organization admin can add, change or remove org integrations and connections")


def admin_refusal(principal: Principal) -> IntegrationError | None:
    """What a change of the org's integrations or connections would raise for `principal`, or None: so a
    page can disable what the API would refuse, by the same rule."""
    try:
        require_admin(principal)
    except IntegrationError as refused:
        return refused
    return None


def account_of(owner: str, principal: Principal) -> str:
    """The account a connection of `owner` belongs to: the caller's for a personal one, none for the org's."""
    return principal.account_id if owner == "user" else ""


async def find_integration(catalog: CatalogStore, principal: Principal, slug: str) -> IntegrationRecord:
    """The caller's org's integration `slug`; `IntegrationNotFound` for none (or a slug no integration can have)."""
    record = await catalog.get_integration(org_of(principal), slug) if valid_slug(slug) else None
    if record is None:
        raise IntegrationNotFound(f"Integration not found: {slug}", slug=slug)
    return record
