"""The zygote's entry for ``lakefs-core`` (:class:`tests.support.zygote.Zygote`'s target): the
console script's :func:`~lakefs_core.cli.process_main`, which reads ``sys.argv`` (the child's)."""

from __future__ import annotations

from lakefs_core.cli import process_main


def main(argv: list[str]) -> int:
    del argv  # sys.argv, set by the zygote, is the same command line
    return process_main()
