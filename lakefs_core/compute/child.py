"""The daemon side of a Spark job: a child process in its own process group, killed whole.

:func:`run_spark_job` writes the job's arguments to a private directory, starts

- ``spark-submit --master M ... <entry script> JOB --args F --result R`` (``launcher="spark-submit"``,
  the same command as on a cluster), or
- ``python -m lakefs_core.compute.job JOB ... --executor spark|lite`` (``launcher="python"``),

with ``start_new_session=True``, streams the child's merged stdout/stderr line by line into the logger,
and returns the parsed result file. The child's environment carries ``PYSPARK_PYTHON`` (the running
interpreter unless set) and a per-run token, ``LAKEFS_GC_SPARK_RUN``.

Ending the child (timeout, cancellation of the awaiting task, or a normal exit leaving stragglers):
SIGTERM to the process group, ``kill_grace`` seconds, then SIGKILL. PySpark's Python worker daemon puts
itself in a process group of its own; it inherits the run token, so it and anything else started for
this run is found by the token in ``/proc/<pid>/environ`` (Linux) and signalled too. Only processes
carrying this run's token or in this run's group are ever signalled. The call returns only when they
are gone (zombies awaiting their reaper count as gone).

Failures: a timeout or a child that dies without a report raises
:class:`~lakefs_core.errors.TransientError` (the outcome is unknown: retry later, delete nothing).
A child that reports a project error (``RESULT.error.json``, see :mod:`lakefs_core.compute.job`) raises
the same class with the child's message.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from lakefs_core import errors
from lakefs_core.compute.job import error_file
from lakefs_core.compute.session import check_master
from lakefs_core.errors import BadInputError, LakeFSError, StartupError, TransientError

RUN_TOKEN_ENV = "LAKEFS_GC_SPARK_RUN"
MAX_RESULT_BYTES = 64 << 20
MAX_LOG_LINE = 4000
TAIL_LINES = 5
_GONE_WAIT = 10.0  # seconds to wait for killed processes to disappear
# Error classes a child's report may name; anything else comes back as TransientError.
_REBUILT: Mapping[str, type[LakeFSError]] = {
    cls.__name__: cls
    for cls in (
        errors.NotFoundError,
        errors.ConflictError,
        errors.PreconditionFailedError,
        errors.CorruptDataError,
        errors.BadInputError,
        errors.AccessDeniedError,
        errors.StorageFullError,
        errors.TransientError,
        errors.UnreachableError,
    )
}
log = logging.getLogger("lakefs_core.compute.child")


def spark_submit_path() -> str:
    """``spark-submit`` of the running interpreter's PySpark (the venv's ``bin``, else PATH, else the
    ``bin`` inside the ``pyspark`` package); :class:`StartupError` when there is none."""
    beside = Path(sys.executable).parent / "spark-submit"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("spark-submit")
    if found is not None:
        return found
    spec = importlib.util.find_spec("pyspark")
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        candidate = Path(location) / "bin" / "spark-submit"
        if candidate.is_file():
            return str(candidate)
    from lakefs_core.compute.session import MISSING_PYSPARK

    raise StartupError(f"spark-submit not found ({MISSING_PYSPARK})", key="spark")


def build_command(
    job: str,
    args_file: Path,
    result_file: Path,
    *,
    launcher: Literal["spark-submit", "python"],
    master: str,
    executor: Literal["spark", "lite"],
    conf: Mapping[str, str],
) -> list[str]:
    check_master(master)
    tail = [job, "--args", str(args_file), "--result", str(result_file)]
    if launcher == "python":
        cmd = [sys.executable, "-m", "lakefs_core.compute.job", *tail, "--executor", executor]
        return [*cmd, "--master", master] if executor == "spark" else cmd
    if launcher != "spark-submit" or executor != "spark":
        raise BadInputError("spark-submit runs the spark executor only", field="launcher")
    from lakefs_core.compute import entry_script
    from lakefs_core.compute.session import LOCAL_DEFAULTS

    settings = {
        **LOCAL_DEFAULTS,
        "spark.log.level": "WARN",
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        **conf,
    }
    cmd = [spark_submit_path(), "--master", master]
    for key, value in settings.items():
        cmd += ["--conf", f"{key}={value}"]
    return [*cmd, str(entry_script()), *tail]


# -- processes ----------------------------------------------------------------------------------------


def _die_with_parent() -> None:  # pragma: no cover - runs in the forked child
    """Linux: the child gets SIGKILL when the daemon dies (even by ``kill -9``): an orphaned mark
    would keep a JVM busy and race the next daemon's run. Survives the launcher's ``exec`` of java."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """``(state, process group)`` of ``pid`` from /proc, or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], int(fields[2])


def _carries_token(pid: int, token: str) -> bool:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return f"{RUN_TOKEN_ENV}={token}".encode() in environ.split(b"\0")


def run_processes(pgid: int, token: str) -> list[int]:
    """Live (non-zombie) processes of this run: in its process group or carrying its token."""
    if not Path("/proc/self/stat").exists():  # not Linux: the process group is all we know
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return []
        return [pgid]
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        pid = int(entry)
        stat = _proc_stat(pid)
        if stat is None or stat[0] in ("Z", "X"):
            continue
        if stat[1] == pgid or _carries_token(pid, token):
            out.append(pid)
    return out


def _signal(pgid: int, token: str, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
    for pid in run_processes(pgid, token):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


async def _wait_gone(pgid: int, token: str, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while run_processes(pgid, token):
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.1)
    return True


async def end_run(proc: asyncio.subprocess.Process, token: str, grace: float) -> None:
    """SIGTERM the run's processes, SIGKILL what is left after ``grace`` s; wait until all are gone."""
    pgid = proc.pid  # start_new_session: the leader's pid is the group id
    if proc.returncode is None or run_processes(pgid, token):
        _signal(pgid, token, signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), grace)
        if not await _wait_gone(pgid, token, 0.0 if proc.returncode is None else grace):
            _signal(pgid, token, signal.SIGKILL)
    await proc.wait()
    if not await _wait_gone(pgid, token, _GONE_WAIT):
        _signal(pgid, token, signal.SIGKILL)
        if not await _wait_gone(pgid, token, _GONE_WAIT):
            raise TransientError(f"spark job processes {run_processes(pgid, token)} survived SIGKILL")


async def _pump(stream: asyncio.StreamReader, job: str, logger: logging.Logger, tail: list[str]) -> None:
    while True:
        try:
            raw = await stream.readline()
        except ValueError:  # a line longer than the stream limit: read what is buffered
            raw = await stream.read(1 << 16)
        if not raw:
            return
        line = raw.decode("utf-8", "replace").rstrip()
        if not line:
            continue
        line = line[:MAX_LOG_LINE]
        logger.info("[%s] %s", job, line)
        tail.append(line)
        del tail[:-TAIL_LINES]


# -- results --------------------------------------------------------------------------------------


def _read_json(path: Path, what: str) -> dict[str, Any]:
    with path.open("rb") as f:
        data = f.read(MAX_RESULT_BYTES + 1)
    if len(data) > MAX_RESULT_BYTES:
        raise TransientError(f"the spark job's {what} {path} is larger than {MAX_RESULT_BYTES} bytes")
    try:
        parsed = json.loads(data)
    except ValueError as e:
        raise TransientError(f"the spark job's {what} {path} is not JSON: {e}") from e
    if not isinstance(parsed, dict):
        raise TransientError(f"the spark job's {what} {path} is not a JSON object")
    return parsed


def job_error(job: str, report: Mapping[str, Any]) -> LakeFSError:
    """The error a child reported, as the same class where that class takes a plain message."""
    name, message = report.get("type"), report.get("message")
    text = f"spark job {job}: {message if isinstance(message, str) else 'failed'}"
    if name == "StartupError":
        return StartupError(text, key="spark")
    cls = _REBUILT.get(name) if isinstance(name, str) else None
    return cls(text) if cls is not None else TransientError(text)


def _outcome(job: str, rc: int, result: Path, tail: Sequence[str]) -> dict[str, Any]:
    if rc == 0:
        if not result.is_file():
            raise TransientError(f"spark job {job} exited 0 without writing {result.name}")
        return _read_json(result, "result")
    report = error_file(result)
    if report.is_file():
        raise job_error(job, _read_json(report, "error report"))
    last = " | ".join(tail[-2:]) or "no output"
    raise TransientError(f"spark job {job} exited with {rc} without a report ({last})")


async def run_spark_job(
    job: str,
    args: Mapping[str, Any],
    *,
    master: str = "local[*]",
    timeout: float,  # noqa: ASYNC109 (a kill deadline for the child, reported as TransientError)
    launcher: Literal["spark-submit", "python"] = "spark-submit",
    executor: Literal["spark", "lite"] = "spark",
    conf: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    work_dir: Path | None = None,
    kill_grace: float = 10.0,
    logger: logging.Logger | None = None,
) -> dict[str, Any]:
    """Run the named job in a child process and return its JSON result (see the module docs)."""
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout <= 0:
        raise BadInputError("must be a number of seconds > 0", field="timeout")
    logger = logger or log
    token = uuid.uuid4().hex
    with tempfile.TemporaryDirectory(prefix="lakefs-gc-job-", dir=work_dir) as tmp:
        args_file, result_file = Path(tmp) / "args.json", Path(tmp) / "result.json"
        args_file.write_text(json.dumps(dict(args)), encoding="utf-8")
        cmd = build_command(
            job, args_file, result_file, launcher=launcher, master=master, executor=executor, conf=conf or {}
        )
        child_env = {**os.environ, **(env or {}), RUN_TOKEN_ENV: token}
        child_env.setdefault("PYSPARK_PYTHON", sys.executable)
        child_env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        child_env.pop("PYSPARK_GATEWAY_PORT", None)  # never attach to a JVM of ours
        proc = await asyncio.create_subprocess_exec(
            *cmd,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=child_env,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        logger.info("spark job %s started (pid %d, %s, %s)", job, proc.pid, launcher, master)
        tail: list[str] = []
        assert proc.stdout is not None
        pump = asyncio.create_task(_pump(proc.stdout, job, logger, tail))
        try:
            async with asyncio.timeout(timeout):
                rc = await proc.wait()
                await pump
        except TimeoutError:
            await asyncio.shield(end_run(proc, token, kill_grace))
            raise TransientError(f"spark job {job} timed out after {timeout:g} s and was killed") from None
        except BaseException:  # cancelled (or the logger failed): the run must not outlive us
            await asyncio.shield(end_run(proc, token, kill_grace))
            raise
        finally:
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pump
        await end_run(proc, token, kill_grace)  # stragglers of a finished run (normally none)
        logger.info("spark job %s exited with %d", job, rc)
        return _outcome(job, rc, result_file, tail)
