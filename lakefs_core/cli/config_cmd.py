"""``lakefs-core check-config``: every problem of the CLI's configuration at once, or the configuration.

Reads the same file and ``LAKEFS_CORE__...`` overrides as every other command (see
:mod:`lakefs_core.cli.context`). Problems go to stderr, one per line, each naming its key path (values
never repeated): schema problems exit 9; otherwise what would stop the commands (an explicit SQLite
``kv_url`` whose directory does not exist, a ``cache_dir`` that cannot be created) exits 16. A valid
configuration is printed as JSON with secrets masked (URLs keep all but their password) and paths
shown, plus the KV URL actually used (``effective_kv_url``: the embedded default when unset).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import click

from lakefs_core.cli.state import app_state
from lakefs_core.config import Problem, display, inspect_config
from lakefs_core.coreconfig import ENV_PREFIX, CoreConfig, default_kv_url, user_config_file
from lakefs_core.redact import redact_url
from lakefs_core.service.cli import echo_problems
from lakefs_core.settings import path_problems


def environment_problems(data: Mapping[str, Any]) -> list[Problem]:
    """What would stop the commands, from the raw (file plus overrides) data, creating nothing."""
    url = data.get("kv_url")
    # unset: the embedded default, whose directory is created
    urls = [("kv_url", url)] if isinstance(url, str) and url else []
    return path_problems(urls, [("cache_dir", data.get("cache_dir"))])


@click.command("check-config")
def check_config_cmd() -> None:
    """Report every configuration problem, or print the effective configuration (secrets masked)."""
    path = app_state().config_path
    if path is None and user_config_file().is_file():
        path = user_config_file()
    report = inspect_config(
        CoreConfig, path, env=dict(os.environ), env_prefix=ENV_PREFIX, environment_checks=environment_problems
    )
    echo_problems(report, "lakefs-core", path)
    assert isinstance(report.config, CoreConfig)
    shown = display(report.config)
    shown["config_file"] = str(path) if path is not None else None
    shown["effective_kv_url"] = (
        redact_url(report.config.kv_url.get_secret_value()) if report.config.kv_url else default_kv_url()
    )
    click.echo(json.dumps(shown, indent=2, sort_keys=True))
