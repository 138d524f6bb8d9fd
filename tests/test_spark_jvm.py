"""The test JVMs' options and archive (tests/support/spark_jvm.py): the archive is named only once it
exists, an operator's ``SPARK_SUBMIT_OPTS`` is kept, and a build publishes the archive only whole (a
stand-in ``spark-submit`` plays the JVM that dumps it: no JVM starts here)."""

from __future__ import annotations

import fcntl
import os
import stat
from pathlib import Path

import pytest

from tests.support import spark_jvm

# Writes half an archive to the -XX:ArchiveClassesAtExit path, then exits with $FAKE_RC.
FAKE_SUBMIT = """#!/bin/sh
out=$(printf '%s\\n' $SPARK_SUBMIT_OPTS | sed -n 's/^-XX:ArchiveClassesAtExit=//p')
printf 'half' > "$out"
[ "$FAKE_RC" = 0 ] && printf ' and the rest' >> "$out"
exit "$FAKE_RC"
"""


@pytest.fixture
def fake_submit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    script = tmp_path / "spark-submit"
    script.write_text(FAKE_SUBMIT)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(spark_jvm, "_spark_submit", lambda: script)
    return script


def test_the_options_name_the_archive_once_it_exists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = tmp_path / "a.jsa"
    monkeypatch.setenv(spark_jvm.ENV, str(archive))
    assert spark_jvm.jvm_options() == spark_jvm.BASE_OPTS
    archive.write_bytes(b"x")
    assert spark_jvm.jvm_options() == f"{spark_jvm.BASE_OPTS} -XX:SharedArchiveFile={archive}"
    monkeypatch.setenv(spark_jvm.ENV, "off")
    assert spark_jvm.archive_path() is None
    assert spark_jvm.jvm_options() == spark_jvm.BASE_OPTS


def test_apply_keeps_an_operators_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(spark_jvm.ENV, "off")
    monkeypatch.setenv("SPARK_SUBMIT_OPTS", "-Xint")
    monkeypatch.setattr(spark_jvm, "OPERATOR_OPTS", "-Xint")
    spark_jvm.apply()
    assert os.environ["SPARK_SUBMIT_OPTS"] == "-Xint"
    monkeypatch.setattr(spark_jvm, "OPERATOR_OPTS", None)
    spark_jvm.apply()
    assert os.environ["SPARK_SUBMIT_OPTS"] == spark_jvm.BASE_OPTS


def test_a_parent_pytest_processs_options_are_not_an_operators() -> None:
    assert spark_jvm.operator_opts(None) is None
    assert spark_jvm.operator_opts(spark_jvm.BASE_OPTS) is None  # an xdist worker inherits them
    assert spark_jvm.operator_opts(f"{spark_jvm.BASE_OPTS} -XX:SharedArchiveFile=/a.jsa") is None
    assert spark_jvm.operator_opts("") == ""
    assert spark_jvm.operator_opts("-Xint") == "-Xint"


@pytest.mark.parametrize(("rc", "published"), [("0", b"half and the rest"), ("1", None)])
def test_a_build_publishes_the_archive_only_whole(
    rc: str, published: bytes | None, fake_submit: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "a.jsa"
    monkeypatch.setenv("FAKE_RC", rc)
    assert spark_jvm.build(archive, if_free=False) == int(rc)
    assert (archive.read_bytes() if archive.exists() else None) == published
    assert not Path(f"{archive}.tmp").exists()  # a failed run's half-written file is gone too


def test_a_second_build_leaves_the_lock_holders_work_alone(
    fake_submit: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "a.jsa"
    monkeypatch.setenv("FAKE_RC", "0")
    with open(f"{archive}.lock", "wb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert spark_jvm.build(archive, if_free=True) == 0
        assert not archive.exists()
    assert spark_jvm.build(archive, if_free=True) == 0
    assert archive.read_bytes() == b"half and the rest"
    archive.write_bytes(b"kept")  # an archive that exists is not rebuilt by --if-free
    assert spark_jvm.build(archive, if_free=True) == 0
    assert archive.read_bytes() == b"kept"


class _Item:
    def __init__(self, spark: bool) -> None:
        self.spark = spark

    def get_closest_marker(self, name: str) -> object | None:
        return object() if name == "spark" and self.spark else None


def test_no_build_starts_under_ci_or_without_spark_tests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tests.support.env

    monkeypatch.setenv(spark_jvm.ENV, str(tmp_path / "a.jsa"))
    monkeypatch.setattr(spark_jvm, "OPERATOR_OPTS", None)
    monkeypatch.setattr(tests.support.env, "IN_CI", True)
    assert spark_jvm.start_build([_Item(spark=True)]) is False  # type: ignore[list-item]
    monkeypatch.setattr(tests.support.env, "IN_CI", False)
    assert spark_jvm.start_build([_Item(spark=False)]) is False  # type: ignore[list-item]
    assert not list(tmp_path.iterdir())  # nothing started: no log, no lock
