"""Catalog records for the tests of the catalog store, whichever backend."""

import attrs

from executor_mcp.records.integrations import AuthMethod, ConnectionRecord, IntegrationRecord, Placement


def integration(org: str = "acme", slug: str = "github", source_hash: str = "h1", **changes) -> IntegrationRecord:
    record = IntegrationRecord(
        org_id=org,
        slug=slug,
        kind="openapi",
        name=slug.title(),
        description=f"The {slug} API",
        source_hash=source_hash,
        config={"baseUrl": "https://api.example"},
        auth_methods=(AuthMethod(slug="apikey-0", kind="apikey", placements=(Placement("header", "x-key"),)),),
        created_at=1.0,
        updated_at=1.0,
    )
    return attrs.evolve(record, **changes)


def connection(
    org: str = "acme", owner: str = "org", account: str = "", slug: str = "github", name: str = "main"
) -> ConnectionRecord:
    return ConnectionRecord(
        org_id=org,
        owner=owner,
        account_id=account,
        integration=slug,
        name=name,
        template="apikey-0",
        provider="encrypted",
        item_ids={"token": f"connection:{owner}:{slug}:{name}:token"},
        created_at=1.0,
        updated_at=1.0,
    )


def names(records: list[ConnectionRecord]) -> list[tuple[str, str, str, str]]:
    return [(record.integration, record.owner, record.account_id, record.name) for record in records]
