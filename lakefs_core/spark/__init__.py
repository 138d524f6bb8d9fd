"""PySpark data sources over repositories: ``format("lakefs")`` and ``format("lakefs-changes")``.

::

    from lakefs_core.spark import register
    register(spark)
    spark.read.format("lakefs").load("lakefs://repo/main~3/events/")
    df.write.format("lakefs").mode("append").option("message", "daily load").save("lakefs://repo/etl/events/")
    spark.readStream.format("lakefs-changes").load("lakefs://repo/main")

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
- :mod:`.source`: the PySpark classes (the only module importing PySpark).

Importing this package does not import PySpark; :func:`register` does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["CHANGES_NAME", "SOURCE_NAME", "register"]

SOURCE_NAME = "lakefs"
CHANGES_NAME = "lakefs-changes"


def register(spark: SparkSession) -> None:
    """Register ``lakefs`` and ``lakefs-changes`` with ``spark`` (idempotent)."""
    from lakefs_core.compute.session import require_pyspark

    require_pyspark()
    from lakefs_core.spark.source import LakeFSChangesDataSource, LakeFSDataSource

    spark.dataSource.register(LakeFSDataSource)
    spark.dataSource.register(LakeFSChangesDataSource)
