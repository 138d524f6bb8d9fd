"""PySpark data sources over repositories: ``format("lakefs")`` and ``format("lakefs-changes")``.

::

    from lakefs_core.spark import register
    register(spark)
    spark.read.format("lakefs").load("lakefs://repo/main~3/events/")
    df.write.format("lakefs").mode("append").option("message", "daily load").save("lakefs://repo/etl/events/")
    spark.readStream.format("lakefs-changes").load("lakefs://repo/main")
    snapshot(spark, "lakefs://repo/main/events/")   # the same read; its plan shows the commit id
    with project_errors():                           # Spark's exception -> the project's typed error
        df.collect()

The compute layer's sibling (no jar, no Hadoop file system: PySpark 4.0+'s Python Data Source API).
Configured like the ``lakefs-core`` CLI (option ``config``, else ``$LAKEFS_CORE_CONFIG``, else the
user's file; ``LAKEFS_CORE__*`` overrides in each process's environment): the plan carries the file's
path, never credentials.

- :mod:`.options`: the options and the core each process opens;
- :mod:`.read`: the snapshot's plan (ref -> commit id once, files from its ranges, packing,
  partition columns) and the tasks' pyarrow readers;
- :mod:`.write`: tasks store files at fresh, journalled addresses; the driver makes one commit
  (:meth:`~lakefs_core.repos.graveler.Graveler.commit_entries`);
- :mod:`.changes`: the first-parent change feed;
- :mod:`.errors`: the project's errors through Spark (one line in the workers, recovered on the
  driver from Spark's exception text);
- :mod:`.source`: the PySpark classes (the only module importing PySpark) and :func:`snapshot`.

Importing this package does not import PySpark; :func:`register` does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakefs_core.spark.errors import project_error, project_errors

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

__all__ = ["CHANGES_NAME", "SOURCE_NAME", "project_error", "project_errors", "register", "snapshot"]

SOURCE_NAME = "lakefs"
CHANGES_NAME = "lakefs-changes"


def register(spark: SparkSession) -> None:
    """Register ``lakefs`` and ``lakefs-changes`` with ``spark`` (idempotent)."""
    from lakefs_core.compute.session import require_pyspark

    require_pyspark()
    from lakefs_core.spark.source import LakeFSChangesDataSource, LakeFSDataSource

    spark.dataSource.register(LakeFSDataSource)
    spark.dataSource.register(LakeFSChangesDataSource)


def snapshot(
    spark: SparkSession, uri: str, schema: StructType | str | None = None, **options: object
) -> DataFrame:
    """``spark.read.format("lakefs")...load(uri)`` whose plan names the commit it reads
    (``BatchScan lakefs@<commit id>``): :func:`lakefs_core.spark.source.snapshot`."""
    from lakefs_core.compute.session import require_pyspark

    require_pyspark()
    from lakefs_core.spark import source

    return source.snapshot(spark, uri, schema, **options)
