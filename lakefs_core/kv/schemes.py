"""The URL schemes of the SQL KV stores, shared by :func:`lakefs_core.kv.open_kv`, the PostgreSQL KV
store (:mod:`lakefs_core.kv.sql`) and the SQLAlchemy engines (:mod:`lakefs_core.sqlengine`)."""

# lakefs_core.sqlite_files.SQLITE_SCHEMES (a test checks they agree), not imported from there: that
# would load sqlite3 into every process that opens a PostgreSQL or DynamoDB store (~6 ms)
_SQLITE_SCHEMES = frozenset({"sqlite", "sqlite+aiosqlite"})
# every PostgreSQL URL scheme accepted, by open_kv, the PostgreSQL KV store and the SQLAlchemy engines
PG_SCHEMES = frozenset({"postgresql", "postgres", "postgresql+asyncpg", "postgres+asyncpg"})
