"""The ``lakefs-core`` command line.

Commands follow lakectl's shapes (URIs are ``lakefs://repo/ref/path``):

- ``repo create|list|delete``, ``branch create|list|delete|reset|revert``,
  ``fs upload|cat|stat|rm|ls``, ``commit``, ``log``, ``diff``, ``merge``, ``tag create|list|delete``,
  ``show commit`` (see :mod:`.repo`, :mod:`.branch`, :mod:`.fs`, :mod:`.refs_cmds`);
- ``sst inspect|write-range`` (see :mod:`.sst`);
- ``check-config``: every configuration problem at once, or the configuration (:mod:`.config_cmd`);
- ``auth setup|users|groups|policies|credentials``: lakeFS's users, groups, policies and access
  keys in the KV store (:mod:`.auth_cmd`).

Global options: ``--json`` (one JSON document on stdout; every repository command also takes
``--json`` itself) and ``--config PATH`` (env ``LAKEFS_CORE_CONFIG``; see :mod:`.context` for the keys
and the ``LAKEFS_CORE__...`` overrides).

Every project error becomes a one-line message on stderr and the error class's distinct exit code
(see :mod:`lakefs_core.errors`); usage errors exit with 64 (:func:`lakefs_core.service.cli.run`, the
kit every command line of the project shares).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import click

from lakefs_core.cli.state import CONFIG_ENV, AppState
from lakefs_core.service import collector
from lakefs_core.service.cli import project_group, run

# Each command's module is imported only when the command runs (lakefs_core.service.cli.CLIGroup).
_COMMANDS = {
    "check-config": "lakefs_core.cli.config_cmd:check_config_cmd",
    "sst": "lakefs_core.cli.sst:sst",
    "repo": "lakefs_core.cli.repo:repo",
    "branch": "lakefs_core.cli.branch:branch",
    "fs": "lakefs_core.cli.fs:fs",
    "commit": "lakefs_core.cli.refs_cmds:commit_cmd",
    "log": "lakefs_core.cli.refs_cmds:log_cmd",
    "diff": "lakefs_core.cli.refs_cmds:diff_cmd",
    "merge": "lakefs_core.cli.refs_cmds:merge_cmd",
    "tag": "lakefs_core.cli.refs_cmds:tag",
    "show": "lakefs_core.cli.refs_cmds:show",
    "import": "lakefs_core.cli.import_cmd:import_cmd",
    "auth": "lakefs_core.cli.auth_cmd:auth",
}


@project_group("lakefs-core", _COMMANDS)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of text.")
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar=CONFIG_ENV,
    default=None,
    help=f"YAML configuration file (env {CONFIG_ENV}; default <user config dir>/lakefs-core/config.yaml).",
)
@click.pass_context
def cli(ctx: click.Context, as_json: bool, config_path: Path | None) -> None:
    """lakeFS-compatible versioned data on object stores."""
    ctx.obj = AppState(json=as_json, config_path=config_path)


def main(argv: Sequence[str] | None = None) -> int:
    """``lakefs-core`` run in this process (tests, an embedding program): the collector untouched."""
    return run(cli, argv, "lakefs-core")


def process_main() -> int:
    """The ``lakefs-core`` process (console script, ``python -m lakefs_core.cli``): :func:`main`
    in a command process, whose start-up runs without cyclic collections (see :mod:`.collector`)."""
    collector.command_process()
    return main()


if __name__ == "__main__":
    sys.exit(process_main())
