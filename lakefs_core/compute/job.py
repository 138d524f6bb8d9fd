"""Run one named GC job: ``python -m lakefs_core.compute.job NAME --args FILE --result FILE``.

The same entry runs under ``spark-submit`` (through the shipped script, see
:func:`lakefs_core.compute.entry_script`), where the master and every Spark setting come from the
``spark-submit`` command line; started with ``python -m`` it creates a local session
(``--master``, default ``local[*]``). ``--executor lite`` runs the job in-process without PySpark.

- ``--args FILE``: a JSON object, the job's arguments (checked by the job; never credentials).
- ``--result FILE``: written create-only with the job's JSON result when it succeeds (an existing file
  is refused before anything runs, so a stale result is never mistaken for this run's).
- On a project error the message is printed on ONE line to stderr, ``FILE.error.json`` records
  ``{"type", "message", "exit_code"}`` for the daemon (:mod:`lakefs_core.compute.child`), and the process
  exits with the error class's exit code (:mod:`lakefs_core.errors`); usage errors exit with 64.
  PySpark missing in Spark mode is a :class:`~lakefs_core.errors.StartupError` (exit 16).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from lakefs_core.compute.executor import Executor, LiteExecutor
from lakefs_core.errors import BadInputError, LakeFSError, PreconditionFailedError

PROG = "lakefs-gc-job"
USAGE_EXIT = 64
MAX_ARGS_BYTES = 16 << 20
log = logging.getLogger("lakefs_core.compute.job")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(USAGE_EXIT, f"{self.prog}: {message}\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="Run one named lakefs-gc job (locally or under spark-submit).")
    p.add_argument("job", help="the job's name (e.g. count-objects)")
    p.add_argument("--args", dest="args_file", type=Path, required=True, help="JSON arguments file")
    p.add_argument("--result", dest="result_file", type=Path, required=True, help="JSON result (created)")
    p.add_argument("--executor", choices=("spark", "lite"), default="spark")
    p.add_argument("--master", default=None, help="Spark master without spark-submit (default local[*])")
    p.add_argument("--workers", type=int, default=2, help="lite executor threads")
    return p


def read_args(path: Path) -> dict[str, Any]:
    """The job arguments: a JSON object of at most 16 MiB."""
    try:
        with path.open("rb") as f:
            data = f.read(MAX_ARGS_BYTES + 1)
    except OSError as e:
        raise BadInputError(f"cannot read {path}: {e.strerror or e}", field="args") from e
    if len(data) > MAX_ARGS_BYTES:
        raise BadInputError(f"{path} is larger than {MAX_ARGS_BYTES} bytes", field="args")
    try:
        parsed = json.loads(data)
    except ValueError as e:
        raise BadInputError(f"{path} is not JSON: {e}", field="args") from e
    if not isinstance(parsed, dict):
        raise BadInputError(f"{path} must hold a JSON object", field="args")
    return parsed


def write_create_only(path: Path, document: Mapping[str, Any]) -> None:
    """Write ``document`` as JSON to a new file ``path``, atomically (temp file + hard link)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("w", encoding="utf-8") as f:
            json.dump(document, f, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.link(tmp, path)
    except FileExistsError as e:
        raise PreconditionFailedError(f"{path} already exists") from e
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def error_file(result: Path) -> Path:
    return result.with_name(result.name + ".error.json")


def _executor(ns: argparse.Namespace) -> Executor:
    if ns.executor == "lite":
        return LiteExecutor(workers=ns.workers)
    from lakefs_core.compute.executor import SparkExecutor
    from lakefs_core.compute.session import require_pyspark

    require_pyspark()
    return SparkExecutor(master=ns.master)


def run_job(ns: argparse.Namespace) -> dict[str, Any]:
    from lakefs_core.compute.jobs import get_job

    fn = get_job(ns.job)
    args = read_args(ns.args_file)
    if ns.result_file.exists():
        raise PreconditionFailedError(f"{ns.result_file} already exists")
    executor = _executor(ns)
    try:
        result = fn(executor, args)
    finally:
        executor.close()
        if ns.executor == "spark":
            from lakefs_core.compute.session import stop_spark_session

            stop_spark_session()
    write_create_only(ns.result_file, result)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    ns = _parser().parse_args(list(argv) if argv is not None else None)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        run_job(ns)
    except LakeFSError as e:
        message = " ".join(str(e).split())
        print(f"{PROG} {ns.job}: {message}", file=sys.stderr)
        report = {"type": type(e).__name__, "message": message, "exit_code": e.exit_code}
        # The exit code and the stderr line already carry the failure; the report file only adds
        # the class for the daemon, so a report that cannot be written does not change the outcome.
        with contextlib.suppress(LakeFSError, OSError):
            write_create_only(error_file(ns.result_file), report)
        return e.exit_code
    log.info("job %s done: %s", ns.job, ns.result_file)
    return 0


if __name__ == "__main__":
    sys.exit(main())
