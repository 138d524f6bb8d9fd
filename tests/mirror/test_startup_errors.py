"""Start-up mistakes, Ctrl-C and ``--log-format json`` of the real ``lakefs-mirror run`` process.

Each mistake is one line on stderr naming the config key and a documented exit code (9: a bad
configuration value; 16: the environment refuses the start-up), never a traceback.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lakefs_core.errors import BadInputError, StartupError
from tests.support.timing import scaled

CMD = [sys.executable, "-m", "lakefs_mirror", "run"]


def write_config(tmp: Path, **override: str) -> Path:
    values = {
        "kv_url": f"sqlite:///{tmp}/kv.sqlite3",
        "mirrors_db_url": f"sqlite:///{tmp}/mirrors.sqlite3",
        "listen": "127.0.0.1:0",
        "state_dir": f"{tmp}/state",
        "poll_interval_seconds": "1",
        **override,
    }
    path = tmp / "mirror.yaml"
    path.write_text(
        f"""
region: region-a
regions:
  region-a:
    kv_url: {values["kv_url"]}
    local_roots: [{tmp}/objects]
mirrors_db_url: {values["mirrors_db_url"]}
listen: {values["listen"]}
access_keys:
  - access_key_id: AKIATESTSTARTUP
    secret_access_key: test-secret
poll_interval_seconds: {values["poll_interval_seconds"]}
state_dir: {values["state_dir"]}
"""
    )
    return path


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("LAKEFS_MIRROR")}


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def mistakes(tmp: Path, port: int) -> dict[str, tuple[dict[str, str], int, str]]:
    (tmp / "a-file").write_text("")
    return {
        "bad value": ({"poll_interval_seconds": "-5"}, BadInputError.exit_code, "poll_interval_seconds"),
        "port in use": ({"listen": f"127.0.0.1:{port}"}, StartupError.exit_code, "listen"),
        "state dir under a file": ({"state_dir": f"{tmp}/a-file/state"}, StartupError.exit_code, "state_dir"),
        "mirrors db dir missing": (
            {"mirrors_db_url": f"sqlite:///{tmp}/missing/m.sqlite3"},
            StartupError.exit_code,
            "mirrors_db_url",
        ),
        "kv dir missing": (
            {"kv_url": f"sqlite:///{tmp}/missing/kv.sqlite3"},
            StartupError.exit_code,
            "regions.region-a.kv_url",
        ),
    }


@pytest.mark.parametrize(
    "mistake",
    ["bad value", "port in use", "state dir under a file", "mirrors db dir missing", "kv dir missing"],
)
def test_start_up_mistake_is_one_line_and_a_documented_code(
    tmp_path: Path, busy_port: int, mistake: str
) -> None:
    override, code, key = mistakes(tmp_path, busy_port)[mistake]
    config = write_config(tmp_path, **override)
    cmd = [*CMD, "--config", str(config)]
    done = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=scaled(60), env=env())
    assert (done.returncode, done.stdout) == (code, ""), done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"lakefs-mirror: {key}: "), done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "missing").exists()  # nothing was created at the mistyped path


def test_ctrl_c_during_start_up_prints_no_traceback(tmp_path: Path) -> None:
    fifo = tmp_path / "config.fifo"
    os.mkfifo(fifo)  # the daemon blocks reading its config: a start-up that has not finished
    # An ignored SIGINT survives exec. The test process may have it ignored (a shell's background
    # job does; a pytest-xdist worker was seen so): start the daemon as a terminal would.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        proc = subprocess.Popen([*CMD, "--config", str(fifo)], stderr=subprocess.PIPE, text=True, env=env())
    finally:
        signal.signal(signal.SIGINT, previous)
    deadline = time.monotonic() + scaled(60)  # the daemon's imports: seconds of CPU, a share of a loaded core
    writer = -1
    while writer < 0:
        assert time.monotonic() < deadline and proc.poll() is None
        try:
            writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO until the daemon opened it
        except OSError:
            time.sleep(0.02)
    try:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=scaled(30))
    finally:
        os.close(writer)
        if proc.poll() is None:  # never leave the daemon behind for a later test to trip over
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130 and err.strip() == "lakefs-mirror: aborted", err


def test_ctrl_c_while_running_and_json_logs(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    cmd = [*CMD, "--config", str(config), "--log-format", "json"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env())
    assert proc.stderr is not None
    head = [proc.stderr.readline(), proc.stderr.readline()]  # API listening; loop running
    proc.send_signal(signal.SIGINT)  # now a graceful stop
    _, rest = proc.communicate(timeout=scaled(30))
    assert proc.returncode == 0 and "Traceback" not in rest, rest
    records = [json.loads(line) for line in [*head, *rest.splitlines()]]
    assert "running" in records[1]["message"]
    assert {"time", "level", "logger", "message"} <= records[0].keys()
    assert records[0]["logger"] == "lakefs_mirror.service" and "API listening" in records[0]["message"]
    assert any("stop requested" in r["message"] for r in records)


def test_json_formatter_carries_mirror_context() -> None:
    import logging

    from lakefs_core.service.logfmt import JsonFormatter

    record = logging.LogRecord(
        "lakefs_mirror.engine", logging.INFO, __file__, 1, "promoted %s", ("c1",), None
    )
    record.__dict__.update(mirror="m1", repository="repo", branch="main")
    entry = json.loads(JsonFormatter().format(record))
    assert entry["message"] == "promoted c1" and entry["level"] == "INFO"
    assert (entry["mirror"], entry["repository"], entry["branch"]) == ("m1", "repo", "main")


def test_systemd_unit_is_notify_with_watchdog_and_no_restart_on_config_errors() -> None:
    unit = (Path(__file__).parents[2] / "deploy" / "systemd" / "lakefs-mirror.service").read_text()
    lines = {line.strip() for line in unit.splitlines() if not line.startswith("#")}
    assert {"Type=notify", "NotifyAccess=main"} <= lines
    assert any(line.startswith("WatchdogSec=") for line in lines)
    prevent = next(line for line in lines if line.startswith("RestartPreventExitStatus="))
    assert str(BadInputError.exit_code) in prevent.split("=", 1)[1].split()


CHECK = [sys.executable, "-m", "lakefs_mirror", "check-config"]


def test_run_names_every_missing_sqlite_directory_at_once(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        kv_url=f"sqlite:///{tmp_path}/missing-kv/kv.sqlite3",
        mirrors_db_url=f"sqlite:///{tmp_path}/missing-db/m.sqlite3",
    )
    done = subprocess.run(
        [*CMD, "--config", str(config)],
        check=False,
        capture_output=True,
        text=True,
        timeout=scaled(60),
        env=env(),
    )
    assert done.returncode == StartupError.exit_code, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("lakefs-mirror: regions.region-a.kv_url: "), done.stderr
    assert "; mirrors_db_url: " in lines[0] and f"{tmp_path}/missing-db" in lines[0]
    assert not (tmp_path / "missing-kv").exists() and not (tmp_path / "missing-db").exists()


def test_check_config_lists_every_problem_with_its_key(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    config = write_config(
        tmp_path,
        poll_interval_seconds="-5",
        listen="nowhere",
        kv_url=f"sqlite:///{tmp_path}/missing/kv.sqlite3",
        state_dir=f"{tmp_path}/a-file/state",
    )
    done = subprocess.run(
        [*CHECK, "--config", str(config)],
        check=False,
        capture_output=True,
        text=True,
        timeout=scaled(60),
        env=env(),
    )
    # A bad value wins the exit code (9: systemd must not restart), but every problem is listed.
    assert (done.returncode, done.stdout) == (BadInputError.exit_code, ""), done.stderr
    lines = done.stderr.splitlines()
    assert lines[0] == f"lakefs-mirror: 4 configuration problem(s) in {config}:", done.stderr
    keys = sorted(line.strip().split(": ", 1)[0] for line in lines[1:])
    assert keys == ["listen", "poll_interval_seconds", "regions.region-a.kv_url", "state_dir"], done.stderr
    assert f"{tmp_path}/missing" in done.stderr  # paths are shown; secrets are not
    assert "test-secret" not in done.stderr and "Traceback" not in done.stderr


def test_check_config_start_up_problems_alone_exit_16(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        kv_url=f"sqlite:///{tmp_path}/missing-kv/kv.sqlite3",
        mirrors_db_url=f"sqlite:///{tmp_path}/missing-db/m.sqlite3",
    )
    done = subprocess.run(
        [*CHECK, "--config", str(config)],
        check=False,
        capture_output=True,
        text=True,
        timeout=scaled(60),
        env=env(),
    )
    assert done.returncode == StartupError.exit_code, done.stderr
    keys = sorted(line.strip().split(": ", 1)[0] for line in done.stderr.splitlines()[1:])
    assert keys == ["mirrors_db_url", "regions.region-a.kv_url"]


def test_check_config_prints_a_valid_configuration_with_paths_and_masked_secrets(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    done = subprocess.run(
        [*CHECK, "--config", str(config)],
        check=False,
        capture_output=True,
        text=True,
        timeout=scaled(60),
        env=env(),
    )
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["regions"]["region-a"]["kv_url"] == f"sqlite:///{tmp_path}/kv.sqlite3"
    assert shown["mirrors_db_url"] == f"sqlite+aiosqlite:///{tmp_path}/mirrors.sqlite3"
    assert shown["access_keys"][0] == {"access_key_id": "AKIATESTSTARTUP", "secret_access_key": "***"}
    assert shown["state_dir"] == f"{tmp_path}/state" and shown["pass_timeout_seconds"] == 900.0
    assert "test-secret" not in done.stdout
    assert not (tmp_path / "state").exists()  # checking creates nothing
