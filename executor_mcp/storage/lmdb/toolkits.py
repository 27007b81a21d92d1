"""Toolkits (`interfaces.ToolkitStore`) in LMDB: records of an org and of its accounts (`owned.py`), each
toolkit one record holding its rules and connection patterns."""

from collections.abc import Callable
from typing import TypeVar

from executor_mcp.storage.environment import Environment
from executor_mcp.storage.interfaces import Exported
from executor_mcp.storage.lmdb.owned import OwnedRecords
from executor_mcp.storage.records import ToolkitRecord

T = TypeVar("T")


class LmdbToolkits:
    def __init__(self, env: Environment) -> None:
        self._toolkits = OwnedRecords(env, b"toolkits-by-owner", ToolkitRecord, "toolkit")

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
