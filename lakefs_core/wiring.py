"""Opening the core of one region from its :class:`~lakefs_core.settings.CoreSettings`: the one place
the KV store, the block stores, the table cache, the :class:`~lakefs_core.repos.graveler.Graveler`
facade and :class:`~lakefs_core.repos.objects.Objects` are assembled.

Used by the ``lakefs-core`` CLI (its session), by ``lakefs-mirror`` (once per region) and by the next
daemons, so a configuration key means the same thing everywhere::

    async with await open_core(settings) as core:
        await core.graveler.commit(...)

Contract:

- ``kv_url`` unset means ``default_kv_url`` (the CLI's embedded SQLite database, whose directory
  the SQL opener creates); without a default it is a :class:`~lakefs_core.errors.BadInputError`
  naming the key. An explicitly configured SQLite URL whose directory does not exist is a
  :class:`~lakefs_core.errors.StartupError` naming the key (exit 16): a typo in a path must not
  silently create a fresh, empty database somewhere.
- S3 settings (credentials of a ``profile`` source included) are resolved before anything opens.
- ``table_cache`` lets several cores of one process (the mirror's regions) share one RAM cache; by
  default one is built from the settings (with the on-disk cache when ``cache_dir`` is set).
- :meth:`Core.aclose` closes the block stores, then the KV store; it is idempotent. If opening fails
  half-way, whatever was opened is closed before the error propagates.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING

from lakefs_core.defaults import CoreOptions
from lakefs_core.errors import BadInputError, StartupError

if TYPE_CHECKING:
    from lakefs_core.committed.tables import TableCache
    from lakefs_core.kv.base import KVStore
    from lakefs_core.repos.graveler import Graveler
    from lakefs_core.repos.objects import Objects
    from lakefs_core.settings import CoreSettings


@dataclass
class Core:
    """One region's opened core. Close it with :meth:`aclose` (or use it as an async context)."""

    settings: CoreOptions
    kv: KVStore
    graveler: Graveler
    objects: Objects
    _closed: bool = field(default=False, repr=False)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await self.graveler.stores.close()
        finally:
            await self.kv.close()

    async def __aenter__(self) -> Core:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


def kv_url_of(settings: CoreOptions, *, default_kv_url: str | None = None, kv_key: str = "kv_url") -> str:
    """The KV URL to open (see the module docstring); raises without ever showing the URL."""
    if settings.kv_url:
        from lakefs_core.settings import sqlite_dir_problem

        url = settings.kv_url
        problem = sqlite_dir_problem(url)
        if problem is not None:
            raise StartupError(problem, key=kv_key)
        return url
    if default_kv_url is None:
        raise BadInputError("must be set (a KV store URL)", field=kv_key)
    return default_kv_url


def build_table_cache(settings: CoreSettings | CoreOptions) -> TableCache:
    from lakefs_core.committed.tables import DiskCache, TableCache

    disk = DiskCache(settings.cache_dir, settings.cache_max_bytes) if settings.cache_dir is not None else None
    return TableCache(
        ram_bytes=settings.table_cache_bytes, disk=disk, max_block_bytes=settings.table_max_block_bytes
    )


async def open_core(
    config: CoreSettings | CoreOptions,
    *,
    default_kv_url: str | None = None,
    table_cache: TableCache | None = None,
    kv_key: str = "kv_url",
    s3_key: str = "s3",
) -> Core:
    """Open the KV store, a store registry, the Graveler facade and Objects (see the module).

    ``kv_key`` / ``s3_key`` are the key paths of the KV URL and the S3 section in the caller's
    configuration file, so errors name them as the user wrote them.
    """
    from lakefs_core.kv import open_kv
    from lakefs_core.repos.graveler import Graveler, GravelerSettings, StoreRegistry
    from lakefs_core.repos.objects import Objects

    settings = config if isinstance(config, CoreOptions) else config.options(s3_key)
    url = kv_url_of(settings, default_kv_url=default_kv_url, kv_key=kv_key)
    s3 = settings.s3
    cache = table_cache if table_cache is not None else build_table_cache(settings)
    kv = await open_kv(url)
    try:
        stores = StoreRegistry(
            s3=s3, table_cache=cache, local_tmp_grace_seconds=settings.temp_sweep_grace_seconds
        )
        graveler = Graveler(
            kv,
            stores,
            GravelerSettings(
                commit_attempts=settings.commit_attempts,
                write_attempts=settings.commit_attempts,
                cleanup_grace_seconds=settings.cleanup_grace_seconds,
                hard_delete_journal=settings.hard_delete_journal,
                import_heartbeat_seconds=settings.import_heartbeat_seconds,
                import_stale_seconds=settings.import_stale_seconds,
                listing_cache_children=settings.listing_cache_children,
            ),
        )
        return Core(settings, kv, graveler, Objects(graveler))
    except BaseException:
        await kv.close()
        raise
