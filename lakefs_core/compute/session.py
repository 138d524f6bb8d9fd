"""The Spark session of a GC job: one per process, local defaults, PySpark imported only here.

- :func:`require_pyspark` imports PySpark or raises :class:`~lakefs_core.errors.StartupError` with a
  one-line message naming the remedy (the ``spark`` extra, or the lite executor);
- :func:`spark_session` returns the process's session, creating it on first use (``getOrCreate``:
  a test run shares ONE session, a JVM start costs 5-6 s). ``PYSPARK_PYTHON`` and
  ``PYSPARK_DRIVER_PYTHON`` default to the running interpreter so the workers import the same
  project. ``master=None`` keeps the master that ``spark-submit`` chose (it starts the driver with
  ``PYSPARK_GATEWAY_PORT`` set) and means ``local[*]`` otherwise.
- Defaults for local runs: no UI, no console progress bar, few shuffle partitions, a bounded driver
  memory, log level WARN. ``conf`` overrides any of them. Under ``spark-submit`` the defaults are not
  applied: the command line's ``--conf`` values configure the cluster.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from types import ModuleType
from typing import TYPE_CHECKING

from lakefs_core.errors import BadInputError, StartupError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"
DEFAULT_APP_NAME = "lakefs-gc"
LOCAL_DEFAULTS: Mapping[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.driver.memory": "1g",
    # The JVM half of a local run is small; the Python workers do the work.
    "spark.python.worker.reuse": "true",
}
# local[*], yarn, spark://host:7077, k8s://https://host:443: printable ASCII, no spaces.
MASTER_PATTERN = r"^[!-~]{1,512}$"
_MASTER = re.compile(MASTER_PATTERN)
MISSING_PYSPARK = (
    "PySpark is not installed: install the 'spark' extra (pip install 'lakefs-open[spark]') "
    "or use the lite executor"
)


def require_pyspark() -> ModuleType:
    """Import and return the ``pyspark`` module, or raise :class:`StartupError` (key ``spark``)."""
    try:
        import pyspark
    except ImportError as e:
        raise StartupError(MISSING_PYSPARK, key="spark") from e
    return pyspark


def check_master(master: str) -> str:
    """``master`` if it can name a Spark master, else :class:`BadInputError` (field ``master``)
    before any JVM or ``spark-submit`` sees it."""
    if not isinstance(master, str) or not _MASTER.fullmatch(master):
        raise BadInputError(
            "must be a Spark master URL: up to 512 printable ASCII characters without spaces "
            "(local[*], yarn, spark://host:7077)",
            field="master",
        )
    return master


def under_spark_submit() -> bool:
    """True in a driver started by ``spark-submit`` (the JVM is already up and configured)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def spark_session(
    master: str | None = DEFAULT_MASTER,
    app_name: str = DEFAULT_APP_NAME,
    conf: Mapping[str, str] | None = None,
    *,
    log_level: str = "WARN",
) -> SparkSession:
    """The process's ``SparkSession`` (created on first call, shared afterwards)."""
    if master is not None:
        check_master(master)
    require_pyspark()
    from pyspark.sql import SparkSession

    # Workers must run the interpreter that has the project installed (a venv, or ./env on a cluster).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master is None and not under_spark_submit():
        master = DEFAULT_MASTER
    if master is not None and not under_spark_submit():
        builder = builder.master(master)
    # Under spark-submit the operator's command line configures the cluster: the local defaults
    # would override its --conf values (builder options win over the JVM's properties).
    settings = {} if under_spark_submit() else dict(LOCAL_DEFAULTS)
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    try:
        session = builder.getOrCreate()
    except Exception as e:  # the JVM did not start: no java, bad conf, no memory
        raise StartupError(f"cannot start Spark ({master or 'spark-submit'}): {e}", key="spark") from e
    session.sparkContext.setLogLevel(log_level)
    return session


def stop_spark_session() -> None:
    """Stop the process's session if one is active (its JVM exits)."""
    if "pyspark" not in sys.modules:
        return
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    if session is not None:
        session.stop()
