"""The test JVMs' options and their class-data sharing archive (docs/development.md, issue 33).

Every JVM the suite starts (each pytest process's Spark session, ``spark-submit``, ``lakefs-gc --master
local[N]``) is started by spark-submit's launcher, which adds ``SPARK_SUBMIT_OPTS`` to the driver's
java command line. :func:`apply` sets it, unless the operator set it (even empty: then it is theirs;
the value a parent pytest process set, which pytest-xdist's workers inherit, is not an operator's):

- :data:`BASE_OPTS`: C1 only and the serial collector (the jobs last seconds: C2's compilations and
  the parallel collector's threads were CPU spent for nothing), and the JVM's own warnings on stderr
  (by default on stdout, where a ``lakefs-gc`` whose output a test parses as JSON would print them).
  Test-only: production JVMs run long jobs, for which C2 and a parallel collector pay.
- ``-XX:SharedArchiveFile=ARCHIVE`` once the archive exists (``LAKEFS_TEST_SPARK_CDS``, default
  ``.venv/spark-cds.jsa``; ``off``: none, and none is built). A JVM maps Spark's ~15,000 classes
  parsed and verified from it instead of loading them from the jars.

The archive is a dynamic CDS archive that one ``spark-submit`` of a small job (an RDD sum, a DataFrame
aggregation written to and read from Parquet) dumps at exit (``-XX:ArchiveClassesAtExit``).
``make spark-cds`` builds it (:func:`main`); outside CI a pytest run whose selection has ``spark``
tests starts the same build, detached (it finishes even after the run), when the archive is missing
(:func:`start_build`, called when collection ends; under CI, ``CI`` set, the ``.venv`` is new each run
and the build, ~36-42 s of CPU, saved no more than it cost within one run): the JVMs started before it
is there run without it, the later ones with it (:func:`apply` runs before every test and in the session
fixtures). Only one build runs: it holds an ``flock`` on ``ARCHIVE.lock`` (a second one, e.g. the other
pytest-xdist worker's, exits at once). The JVM writes ``ARCHIVE.tmp``, renamed only after the JVM exited
0: a JVM never maps a partial file (a truncated archive crashes the JVM with SIGBUS). A stale archive
(another venv's jars, another JDK) costs time only: the JVM warns on stderr and runs without it. The
build's output goes to ``ARCHIVE.log``.
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest

ROOT = Path(__file__).resolve().parents[2]
ENV = "LAKEFS_TEST_SPARK_CDS"
BASE_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xlog:disable -Xlog:all=warning:stderr"


def operator_opts(value: str | None) -> str | None:
    """The operator's ``SPARK_SUBMIT_OPTS``: None when unset or set by a parent pytest process's
    :func:`apply` (pytest-xdist's workers inherit the controller's environment)."""
    return None if value is None or value.startswith(BASE_OPTS) else value


OPERATOR_OPTS = operator_opts(os.environ.get("SPARK_SUBMIT_OPTS"))  # at import, before apply() sets it
BUILD_TIMEOUT = 300.0  # seconds; the build takes ~36 s of CPU, under a minute on 2 loaded cores
JOB = """
import sys
from pyspark.sql import SparkSession
s = SparkSession.builder.getOrCreate()
assert s.sparkContext.parallelize(range(100), 2).map(lambda x: x * 2).sum() == 9900
df = s.range(100).selectExpr("id", "id % 3 AS k").groupBy("k").count()
df.write.mode("overwrite").parquet(sys.argv[1])
assert s.read.parquet(sys.argv[1]).count() == 3
s.stop()
"""


def archive_path() -> Path | None:
    """Where the archive is (or would be built); None when ``LAKEFS_TEST_SPARK_CDS=off``."""
    raw = os.environ.get(ENV)
    if raw == "off":
        return None
    return Path(raw) if raw else ROOT / ".venv" / "spark-cds.jsa"


def jvm_options() -> str:
    """:data:`BASE_OPTS`, plus the archive when it exists."""
    archive = archive_path()
    if archive is None or not archive.is_file():
        return BASE_OPTS
    return f"{BASE_OPTS} -XX:SharedArchiveFile={archive}"


def apply() -> None:
    """Set ``SPARK_SUBMIT_OPTS`` for the JVMs started from now on (an operator's value is kept)."""
    if OPERATOR_OPTS is None:
        os.environ["SPARK_SUBMIT_OPTS"] = jvm_options()


def _spark_submit() -> Path:
    return Path(sys.executable).parent / "spark-submit"


def start_build(items: Iterable[pytest.Item]) -> bool:
    """Start building the archive, detached (it outlives this process if need be; its JVM is bounded
    by :data:`BUILD_TIMEOUT`), when a test of ``items`` is marked ``spark``, the archive is missing,
    this process may set the JVMs' options, and this is not CI. True when started."""
    from tests.support.env import IN_CI

    archive = archive_path()
    if IN_CI or OPERATOR_OPTS is not None or archive is None or archive.is_file():
        return False  # CI's fresh .venv: a build costs more than it saves within one run
    if not any(item.get_closest_marker("spark") for item in items):
        return False
    if importlib.util.find_spec("pyspark") is None or shutil.which("java") is None:
        return False
    if not _spark_submit().is_file():
        return False
    archive.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{archive}.log", "wb") as log:
        cmd = [sys.executable, "-m", "tests.support.spark_jvm", "--if-free", "--detach", str(archive)]
        opts = {"stdin": subprocess.DEVNULL, "stdout": log, "stderr": subprocess.STDOUT}
        return subprocess.run(cmd, cwd=ROOT, start_new_session=True, check=False, **opts).returncode == 0


def build(archive: Path, *, if_free: bool) -> int:
    """Dump the archive to ``archive`` (see the module docs); 0 on success or when ``if_free`` and
    another build holds the lock or the archive exists."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{archive}.lock", "wb") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | (fcntl.LOCK_NB if if_free else 0))
        except BlockingIOError:
            return 0  # another process is building it
        if if_free and archive.is_file():
            return 0
        partial = Path(f"{archive}.tmp")
        partial.unlink(missing_ok=True)
        try:
            return _dump(archive, partial)
        finally:
            partial.unlink(missing_ok=True)


def _dump(archive: Path, partial: Path) -> int:
    with tempfile.TemporaryDirectory(prefix="spark-cds-") as tmp:
        job = Path(tmp) / "job.py"
        job.write_text(JOB)
        env = {
            **os.environ,
            "SPARK_SUBMIT_OPTS": f"{BASE_OPTS} -XX:ArchiveClassesAtExit={partial}",
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
        }
        cmd = [str(_spark_submit()), "--master", "local[2]", "--conf", "spark.ui.enabled=false"]
        rc = subprocess.run(
            [*cmd, str(job), str(Path(tmp) / "out")], env=env, timeout=BUILD_TIMEOUT, check=False
        ).returncode
    if rc != 0 or not partial.is_file():
        print(f"the JVM exited {rc} and wrote {'an' if partial.is_file() else 'no'} archive", file=sys.stderr)
        return 1
    partial.replace(archive)  # the JVM exited 0: the file is whole
    print(f"wrote {archive} ({archive.stat().st_size >> 20} MiB)")
    return 0


def main(argv: list[str]) -> int:
    """``python -m tests.support.spark_jvm [--if-free] [--detach] [ARCHIVE]`` (``make spark-cds``;
    ``--detach``: build in a forked child, return at once)."""
    if_free = "--if-free" in argv
    if "--detach" in argv and os.fork() > 0:
        return 0
    rest = [a for a in argv if a not in ("--if-free", "--detach")]
    archive = Path(rest[0]) if rest else archive_path()
    if archive is None:
        print(f"{ENV}=off: no archive", file=sys.stderr)
        return 2
    return build(archive, if_free=if_free)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
