"""Mirrors need separate storage namespaces: the check a mirror's creation runs in its transaction.

:func:`refuse_overlapping_namespace` refuses a namespace equal to, inside or enclosing another
mirror's (local ones at their real paths), with :class:`FieldConflictError` on
``storage_namespace``. It is only sound inside :meth:`lakefs_mirror.db.MirrorsDB.create_mirror`'s
transaction, after the insert: SQLite serialises writers, and on PostgreSQL creations first take the
transaction-scoped advisory lock :data:`CREATE_LOCK_KEY`, so of concurrent creations on overlapping
namespaces exactly one commits.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from lakefs_core.errors import BadInputError, ConflictError
from lakefs_core.realpaths import real_locations
from lakefs_core.repos.graveler import StorageNamespace
from lakefs_mirror.db_schema import mirrors_table


class FieldConflictError(ConflictError):
    """A unique constraint refused a write; ``field`` names the input that collided."""

    def __init__(self, message: str, *, field: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}")


# pg_advisory_xact_lock key serialising mirror creations ("LFMIRROR" as a 64-bit integer).
CREATE_LOCK_KEY = 0x4C464D4952524F52


async def refuse_overlapping_namespace(conn: AsyncConnection, mirror_id: str, namespace: str) -> None:
    """Raise (rolling the insert back) if another mirror's namespace equals, encloses or lies inside
    ``namespace``. Local namespaces are compared at their REAL paths (:mod:`lakefs_core.realpaths`:
    a symlink or ``..`` spelling of another mirror's directory overlaps it); a stored namespace
    whose real path cannot be known counts as overlapping. Namespaces that do not parse (rows
    written by other tools) overlap nothing."""
    rows = (
        await conn.execute(
            select(
                mirrors_table.c.id,
                mirrors_table.c.name,
                mirrors_table.c.region,
                mirrors_table.c.storage_namespace,
            ).where(mirrors_table.c.id != mirror_id)
        )
    ).all()
    resolved = await real_locations([namespace, *(r[3] for r in rows)])
    if isinstance(resolved[0], StorageNamespace):
        mine = resolved[0]
    else:
        try:
            mine = StorageNamespace.parse(namespace)
        except BadInputError:
            return
    for (other_id, name, region, other_ns), real in zip(rows, resolved[1:], strict=True):
        try:
            other = StorageNamespace.parse(other_ns)
        except BadInputError:
            continue
        unknown = isinstance(real, BadInputError)
        if unknown or mine.overlaps(real if isinstance(real, StorageNamespace) else other):
            how = "may overlap (its real path is unknown)" if unknown else "overlaps"
            raise FieldConflictError(
                f"storage namespace {mine.uri} {how} {other.uri}, the namespace of mirror {other_id} "
                f"({region}/{name}); mirrors need separate namespaces",
                field="storage_namespace",
            )
