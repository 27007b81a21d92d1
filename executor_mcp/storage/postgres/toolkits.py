"""Toolkits (`interfaces.ToolkitStore`) in PostgreSQL: records of an org and of its accounts (`owned.py`), each
toolkit one row holding its rules and connection patterns."""

from collections.abc import Callable
from typing import TypeVar

from executor_mcp.storage.interfaces import Exported
from executor_mcp.storage.postgres.database import Database
from executor_mcp.storage.postgres.owned import PgOwnedRecords, owned_table
from executor_mcp.storage.records import ToolkitRecord

T = TypeVar("T")

TABLES: tuple[str, ...] = (owned_table("toolkits"),)


class PgToolkits:
    def __init__(self, database: Database) -> None:
        self._toolkits = PgOwnedRecords(database, "toolkits", ToolkitRecord, "toolkit")

    async def toolkits(self, org_id: str, account_id: str | None) -> list[ToolkitRecord]:
        return await self._toolkits.visible(org_id, account_id)

    async def edit_toolkits(
        self,
        org_id: str,
        account_id: str | None,
        edit: Callable[[list[ToolkitRecord]], tuple[list[ToolkitRecord], list[ToolkitRecord], T]],
    ) -> T:
        return await self._toolkits.edit(org_id, account_id, edit)

    async def export_records(self) -> Exported:
        return await self._toolkits.export_records()

    async def import_records(self, records: Exported) -> None:
        await self._toolkits.import_records(records)
