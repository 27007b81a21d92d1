"""Tool policies (`interfaces.PolicyStore`) in PostgreSQL: records of an org and of its accounts (`owned.py`)."""

from collections.abc import Callable
from typing import TypeVar

from executor_mcp.storage.interfaces import Exported
from executor_mcp.storage.postgres.database import Database
from executor_mcp.storage.postgres.owned import PgOwnedRecords, owned_table
from executor_mcp.storage.records import PolicyRecord

T = TypeVar("T")

TABLES: tuple[str, ...] = (owned_table("policies"),)


class PgPolicies:
    def __init__(self, database: Database) -> None:
        self._rules = PgOwnedRecords(database, "policies", PolicyRecord, "rule")

    async def policies(self, org_id: str, account_id: str | None) -> list[PolicyRecord]:
        return await self._rules.visible(org_id, account_id)

    async def edit_policies(
        self,
        org_id: str,
        account_id: str | None,
        edit: Callable[[list[PolicyRecord]], tuple[list[PolicyRecord], list[PolicyRecord], T]],
    ) -> T:
        return await self._rules.edit(org_id, account_id, edit)

    async def export_records(self) -> Exported:
        return await self._rules.export_records()

    async def import_records(self, records: Exported) -> None:
        await self._rules.import_records(records)
