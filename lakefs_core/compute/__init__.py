"""The compute layer: Spark plumbing for the jobs of the core and of the daemons (import, GC's mark).

The jobs are plain functions over partitions, written against the small :class:`Executor` seam
(:mod:`.executor`):

- :class:`LiteExecutor` runs them in-process, without a JVM (small repositories, most tests);
- :class:`SparkExecutor` runs them as PySpark RDD operations, locally (``local[*]``) or unchanged on
  a cluster through ``spark-submit`` and the shipped entry script (:func:`entry_script`).

Importing this package never imports PySpark: the lite path works without it, and asking for Spark
without it raises :class:`~lakefs_core.errors.StartupError` (:func:`.session.require_pyspark`).

- :mod:`.session`: one shared ``SparkSession`` with local defaults;
- :mod:`.executor`: the seam and both executors;
- :mod:`.partition`: what runs in a partition: :class:`StoreRef` (a namespace plus its S3 endpoint,
  never credentials), :func:`stream_async` (one event loop per partition around the core's block
  stores), the text part writer;
- :mod:`.jobs`: the registry of named jobs (entry points ``lakefs_open.jobs``: each package declares
  its own, so this layer names none of a daemon's modules);
- :mod:`.import_job`: the core's ``core-import`` job;
- :mod:`.job`: ``python -m lakefs_core.compute.job NAME --args F --result F`` (the same entry that
  ``spark-submit`` runs through :func:`entry_script`);
- :mod:`.child`: :func:`run_spark_job`, the daemon side: a job in its own process group, killed whole
  on timeout or cancellation.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from lakefs_core.compute.executor import Dataset, Executor, LiteExecutor, SparkExecutor
from lakefs_core.compute.partition import StoreRef, stream_async

__all__ = [
    "Dataset",
    "Executor",
    "LiteExecutor",
    "SparkExecutor",
    "StoreRef",
    "entry_script",
    "stream_async",
]

ENTRY_SCRIPT = "entry.py"


def entry_script() -> Path:
    """The ``.py`` file to hand to ``spark-submit`` (it runs :func:`lakefs_core.compute.job.main`).

    The package is installed as plain files (a wheel or an editable install, a ``venv-pack`` archive
    on a cluster), so the resource is a real path.
    """
    path = Path(str(resources.files(__name__).joinpath(ENTRY_SCRIPT)))
    if not path.is_file():
        from lakefs_core.errors import StartupError

        raise StartupError(f"the spark-submit entry script {path} is missing", key="spark")
    return path
