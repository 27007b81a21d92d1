"""The PostgreSQL backend of the control plane: one module per domain implementing `storage/interfaces.py`, the
trio adapter for psycopg (`database.py`) and the versioned schema (`migrations.py`).

For several instances on one database: every shared record lives here, so any instance can serve what another
wrote; what one instance caches it learns to drop when another changes the record.
"""
