"""PostgreSQL: (being written)."""

from executor_mcp.storage.postgres.database import Database

TABLES: tuple[str, ...] = ()


class PgCatalog:
    def __init__(self, database: Database) -> None:
        self._database = database
