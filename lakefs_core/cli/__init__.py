"""The ``lakefs-core`` command line.

Commands follow lakectl's shapes (URIs are ``lakefs://repo/ref/path``):

- ``repo create|create-bare|list|delete``, ``branch create|list|delete|reset|revert``,
  ``branch-protect add|list|delete``, ``cherry-pick``, ``annotate``,
  ``doctor``, ``config`` (:mod:`.doctor`),
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

# Each command's module is imported only when the command runs (lakefs_core.service.cli.CLIGroup);
# the group's --help shows the summaries (tests/cli/test_startup_imports.py checks each is its
# command's short help).
_LAZY = {
    "annotate": (
        "refs_cmds:annotate_cmd",
        "Show the last commit that changed each object under a path (lakectl's annotate).",
    ),
    "auth": ("auth_cmd:auth", "Manage lakeFS users, groups, policies and credentials in the KV store."),
    "branch": ("branch:branch", "Create, list, delete, reset and revert branches."),
    "branch-protect": ("protect_cmd:branch_protect", "Add, list and delete branch protection rules."),
    "check-config": (
        "config_cmd:check_config_cmd",
        "Report every configuration problem, or print the effective configuration (secrets masked).",
    ),
    "cherry-pick": (
        "refs_cmds:cherry_pick_cmd",
        "Apply the change of a commit to a branch in a new commit (lakeFS's cherry-pick).",
    ),
    "commit": ("refs_cmds:commit_cmd", "Commit the uncommitted changes of a branch."),
    "config": (
        "doctor:config_cmd",
        "Write the configuration file (asking on a terminal, as lakectl config), or --show it.",
    ),
    "doctor": (
        "doctor:doctor_cmd",
        "Check the configuration, the KV store, the object stores and the credentials, one line each.",
    ),
    "diff": ("refs_cmds:diff_cmd", "With one ref (a branch): its uncommitted changes."),
    "fs": ("fs:fs", "Upload, read, list and delete objects."),
    "import": (
        "import_cmd:import_cmd",
        "Import the objects under --from as entries under --to's path, in one commit.",
    ),
    "log": ("refs_cmds:log_cmd", "Show the first-parent history of a ref, newest first."),
    "merge": ("refs_cmds:merge_cmd", "Merge a source ref into a destination branch."),
    "repo": ("repo:repo", "Create, list and delete repositories."),
    "show": ("refs_cmds:show", "Show details of an object in the repository graph."),
    "sst": ("sst:sst", "Inspect and write graveler (RocksDB-compatible) table files."),
    "tag": ("refs_cmds:tag", "Create, list and delete tags."),
}
_COMMANDS = {name: f"lakefs_core.cli.{target}" for name, (target, _) in _LAZY.items()}
_SUMMARIES = {name: summary for name, (_, summary) in _LAZY.items()}


@project_group("lakefs-core", _COMMANDS, _SUMMARIES)
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


cli.uri_completer = "lakefs_core.cli.complete:complete_uri"


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
