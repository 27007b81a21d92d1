"""PostgreSQL: (being written)."""

from executor_mcp.storage.postgres.database import Database

TABLES: tuple[str, ...] = ()


class PgSigningKeys:
    def __init__(self, database: Database) -> None:
        self._database = database


class PgSignIns:
    def __init__(self, database: Database) -> None:
        self._database = database


class PgDataDirFacts:
    def __init__(self, database: Database) -> None:
        self._database = database
