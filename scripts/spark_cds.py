"""Build the test JVMs' class-data sharing archive: ``python scripts/spark_cds.py [ARCHIVE]``.

Every Spark JVM the suite starts loads and verifies the same ~10k classes of Spark's jars. A dynamic
CDS archive (JDK 13+) holds them parsed and verified; a JVM started with
``-XX:SharedArchiveFile=ARCHIVE`` maps it instead (tests/conftest.py adds the flag when the archive
exists: ``LAKEFS_TEST_SPARK_CDS``, default ``.venv/spark-cds.jsa``). Measured on the 2 loaded cores,
a ``spark-submit --master local[2]`` of a small job: 16.9-17.3 s CPU without, 12.1-12.4 s with;
tests/gc/test_mark_spark.py (a session and a ``spark-submit``) 52.9 s against 39.2 s. Building it
costs one run with ``-XX:ArchiveClassesAtExit`` (72 s CPU), so it pays off after some 15 JVM starts:
on a machine that keeps its ``.venv``, not in one fresh CI run. It is valid for this venv's jars and
this JDK only (the JVM checks both and runs without it, warning, on a mismatch).

The run here exercises an RDD job and a DataFrame query with a Parquet write, so the SQL engine's
classes are archived too; it writes a temporary file and renames it, so a reader never maps half.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / ".venv" / "spark-cds.jsa"
JVM_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"  # the options tests/conftest.py gives the JVMs
JOB = """
from pyspark.sql import SparkSession
s = SparkSession.builder.getOrCreate()
assert s.sparkContext.parallelize(range(100), 2).map(lambda x: x * 2).sum() == 9900
df = s.range(100).selectExpr("id", "id % 3 AS k").groupBy("k").count()
df.write.mode("overwrite").parquet(__import__("sys").argv[1])
assert s.read.parquet(__import__("sys").argv[1]).count() == 3
s.stop()
"""


def main(argv: list[str]) -> int:
    archive = Path(argv[0]) if argv else DEFAULT
    spark_submit = Path(sys.executable).parent / "spark-submit"
    with tempfile.TemporaryDirectory(prefix="spark-cds-") as tmp:
        job, partial = Path(tmp) / "job.py", Path(f"{archive}.{os.getpid()}.tmp")
        job.write_text(JOB)
        env = {
            **os.environ,
            "SPARK_SUBMIT_OPTS": f"{JVM_OPTS} -XX:ArchiveClassesAtExit={partial}",
            "PYSPARK_PYTHON": sys.executable,
            "PATH": f"{spark_submit.parent}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        cmd = [str(spark_submit), "--master", "local[2]", "--conf", "spark.ui.enabled=false"]
        subprocess.run([*cmd, str(job), str(Path(tmp) / "out")], env=env, check=True)
        if not partial.is_file():
            print(f"the JVM wrote no archive at {partial}", file=sys.stderr)
            return 1
        partial.replace(archive)
    print(f"wrote {archive} ({archive.stat().st_size >> 20} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
