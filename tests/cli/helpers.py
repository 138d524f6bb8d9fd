"""Running ``lakefs-core`` as real processes (and in-process) against tmp user directories."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from lakefs_core.cli import main
from tests.support.timing import scaled
from tests.support.zygote import Zygote

REPO = Path(__file__).resolve().parents[2]
PARALLEL = 4  # CLI processes at once (each spends ~0.5 s importing)
#: what a forked ``lakefs-core`` imports before the fork (tests/cli/conftest.py's ``core_zygote``):
#: the embedded store's commands; none of them starts a thread (the zygote checks)
PRELOAD = (
    "lakefs_core.cli.fs",
    "lakefs_core.cli.repo",
    "lakefs_core.cli.branch",
    "lakefs_core.cli.refs_cmds",
    "lakefs_core.cli.auth_cmd",
    "lakefs_core.wiring",
    "lakefs_core.kv.sqlite",
    "lakefs_core.repos.graveler",
    "lakefs_core.repos.committing",
    "lakefs_core.committed.merge",
    "lakefs_core.coreconfig",
)
#: the variables a command reads only while it runs (never while importing), so they may differ
#: between the zygote's start and a forked child's environment: every other one (PYTHON*, locale,
#: LAKEFS_PURE_PYTHON, ...) must be the zygote's, or the command runs as a process of its own.
RUN_TIME_ONLY = frozenset(
    {"HOME", "USER", "XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "PYTEST_CURRENT_TEST"}
)
#: and every variable with these prefixes: ``LAKEFS_CORE*`` (the settings, read when a command
#: loads them) and Spark's, read by PySpark and spark-submit when a job starts (PySpark is not among
#: PRELOAD). A worker's first Spark session sets several (PYSPARK_PYTHON, SPARK_BUFFER_SIZE,
#: SPARK_AUTH_SOCKET_TIMEOUT, SPARK_SUBMIT_OPTS, ...), so a zygote started before it saw none: in a
#: CI run every later command was a process of its own, and test_forked failed.
RUN_TIME_PREFIXES = ("LAKEFS_CORE", "SPARK_", "PYSPARK_")


#: Variables a library imported by the TEST process puts into its ``os.environ`` (polars sets
#: jemalloc's ``_RJEM_MALLOC_CONF`` at import): not a user's, and not the zygote's when it started
#: before the import in the same worker (a forked command would then look unforkable).
IMPORT_SIDE_EFFECTS = frozenset({"_RJEM_MALLOC_CONF"})
_AT_START = frozenset(os.environ)


def user_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a user whose home and XDG dirs live under ``home`` (no lakefs-core vars,
    none a test's imports added: :data:`IMPORT_SIDE_EFFECTS`)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.upper().startswith("LAKEFS_CORE") and (k not in IMPORT_SIDE_EFFECTS or k in _AT_START)
    }
    env.update(
        HOME=str(home),
        XDG_DATA_HOME=str(home / "data"),
        XDG_CONFIG_HOME=str(home / "config"),
        XDG_CACHE_HOME=str(home / "cache"),
        USER="tester",
        PYTHONWARNINGS="always::ResourceWarning",
    )
    env.update(extra)
    return env


@dataclass
class Result:
    args: tuple[str, ...]
    returncode: int
    raw: bytes
    err: str

    @property
    def out(self) -> str:
        return self.raw.decode()

    def json(self) -> Any:
        assert self.returncode == 0, f"{self.args}: exit {self.returncode}: {self.err}"
        return json.loads(self.out)

    def ok(self) -> Result:
        assert self.returncode == 0, f"{self.args}: exit {self.returncode}: {self.err}"
        return self

    def failed(self, code: int, *needles: str) -> str:
        """Assert a one-line error with exit ``code`` mentioning every needle; returns the line."""
        assert self.returncode == code, f"{self.args}: exit {self.returncode} != {code}: {self.err}"
        line = self.err.strip()
        assert "\n" not in line and line.startswith("lakefs-core: "), self.err
        for needle in needles:
            assert needle in line, (needle, line)
        return line


def unforkable(env: Mapping[str, str], zygote: Zygote) -> set[str]:
    """The variables that keep a child forked from ``zygote`` from running as ``env``'s own process
    would: those that differ from the zygote's, but for the ones read at run time only
    (:data:`RUN_TIME_ONLY`, :data:`RUN_TIME_PREFIXES`)."""
    names = set(env) | set(zygote.env)
    return {
        name
        for name in names
        if name not in RUN_TIME_ONLY
        and not name.upper().startswith(RUN_TIME_PREFIXES)
        and env.get(name) != zygote.env.get(name)
    }


def forkable(env: Mapping[str, str], zygote: Zygote) -> bool:
    """Whether a child forked from ``zygote`` runs as ``env``'s own process would."""
    return not unforkable(env, zygote)


@dataclass
class Cli:
    """``python -m lakefs_core.cli`` with a fixed environment and working directory; with a
    ``zygote`` (tests/cli/conftest.py's ``core_zygote``), a child forked from it when
    :func:`forkable` (the same process but for the imports done before the fork)."""

    env: dict[str, str]
    cwd: Path
    timeout: float = scaled(60.0)
    history: list[Result] = field(default_factory=list)
    zygote: Zygote | None = None

    def _run(self, args: Sequence[str], stdin: bytes | None) -> subprocess.CompletedProcess[bytes]:
        if self.zygote is not None and forkable(self.env, self.zygote):
            return self.zygote.run(
                ["lakefs-core", *args], self.env, cwd=str(self.cwd), input=stdin, timeout=self.timeout
            )
        return subprocess.run(
            [sys.executable, "-m", "lakefs_core.cli", *args],
            input=stdin,
            capture_output=True,
            env=self.env,
            cwd=self.cwd,
            timeout=self.timeout,
            check=False,
        )

    def __call__(self, *args: str, stdin: bytes | None = None) -> Result:
        proc = self._run(args, stdin)
        result = Result(tuple(args), proc.returncode, proc.stdout, proc.stderr.decode(errors="replace"))
        assert "Traceback" not in result.err, result.err
        assert "ResourceWarning" not in result.err and "Unclosed" not in result.err, result.err
        self.history.append(result)
        return result

    def many(self, *commands: Sequence[str]) -> list[Result]:
        """Run independent commands concurrently (bounded); results in the order given."""
        with ThreadPoolExecutor(PARALLEL) as pool:
            return list(pool.map(lambda c: self(*c), commands))

    def json(self, *args: str) -> Any:
        return self(*args, "--json").json()


@dataclass
class InProcess:
    """``lakefs_core.cli.main`` called in this process (fast; ResourceWarnings fail the test)."""

    capsys: pytest.CaptureFixture[str]

    def __call__(self, *args: str) -> Result:
        self.capsys.readouterr()
        code = main(list(args))
        captured = self.capsys.readouterr()
        result = Result(tuple(args), code, captured.out.encode(), captured.err)
        assert "Traceback" not in result.err
        return result

    def json(self, *args: str) -> Any:
        return self(*args, "--json").json()


@dataclass
class Mixed:
    """A scenario's sequential commands in-process, its concurrent ones (:meth:`many`) as real
    processes: several processes on one store at once stay real, the rest spend no interpreter start.

    For a run whose every command also runs as a real process elsewhere (the embedded scenario); the
    in-process calls see this process's environment (:func:`set_user_env`) and working directory,
    which must match ``processes``'. A command given ``stdin`` runs as a process too. Output is
    captured as bytes; every result joins ``history``.
    """

    processes: Cli
    capsys: pytest.CaptureFixture[bytes]
    history: list[Result] = field(default_factory=list)

    def __call__(self, *args: str, stdin: bytes | None = None) -> Result:
        if stdin is not None:  # a command reading stdin runs as a process, its input piped in
            result = self.processes(*args, stdin=stdin)
        else:
            self.capsys.readouterr()
            code = main(list(args))
            captured = self.capsys.readouterr()
            result = Result(tuple(args), code, captured.out, captured.err.decode(errors="replace"))
            assert "Traceback" not in result.err, result.err
            assert "ResourceWarning" not in result.err and "Unclosed" not in result.err, result.err
        self.history.append(result)
        return result

    def many(self, *commands: Sequence[str]) -> list[Result]:
        results = self.processes.many(*commands)
        self.history.extend(results)
        return results

    def json(self, *args: str) -> Any:
        return self(*args, "--json").json()


def run_probe(tmp_path: Path, script: str, *args: str, **env: str) -> dict[str, Any]:
    """Run ``script`` in a fresh interpreter with this checkout first on the path, as a user whose
    home is under ``tmp_path`` (``env`` added); the script gets a report file as ``sys.argv[1]``
    (then ``args``) and writes one JSON document there, returned here."""
    report = tmp_path / "probe.json"
    proc = subprocess.run(
        [sys.executable, "-c", script, str(report), *args],
        env=user_env(tmp_path / "home", PYTHONPATH=str(REPO), **env),
        cwd=tmp_path,
        capture_output=True,
        timeout=scaled(120),
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    result: dict[str, Any] = json.loads(report.read_text())
    return result


def set_user_env(monkeypatch: pytest.MonkeyPatch, home: Path, **extra: str) -> None:
    """Make this process look like ``user_env(home, **extra)``."""
    for name in list(os.environ):
        if name.upper().startswith("LAKEFS_CORE"):
            monkeypatch.delenv(name)
    for name, value in user_env(home, **extra).items():
        if os.environ.get(name) != value and name != "PYTHONWARNINGS":
            monkeypatch.setenv(name, value)


def write_tree(root: Path, files: Mapping[str, bytes]) -> Path:
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


def table_files(namespace_dir: Path) -> Iterator[Path]:
    """Range and metarange files of a local namespace (named by their 64-hex id)."""
    for path in sorted((namespace_dir / "_lakefs").iterdir()):
        if len(path.name) == 64 and all(c in "0123456789abcdef" for c in path.name):
            yield path
