"""The ``lakefs-mirror`` command line.

- ``lakefs-mirror run --config FILE [--once]``: run this region's daemon (HTTP API + mirroring
  passes) until SIGTERM/SIGINT (a second signal cancels the pass in flight); ``--once`` runs one
  pass and exits 0 if it succeeded. Configuration: the YAML file plus ``LAKEFS_MIRROR__...``
  environment overrides (see ``deploy/mirror-local.yaml``).
- ``lakefs-mirror check-config --config FILE``: validate a configuration and print it with secrets
  masked.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import click

from lakefs_core import __version__
from lakefs_core.cli import run
from lakefs_core.daemon import DaemonLoop
from lakefs_mirror.config import MirrorConfig, load_mirror_config


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="lakefs-mirror")
def cli() -> None:
    """Transactional cross-region mirroring daemon for lakeFS-compatible repositories."""


def _load(config: Path | None) -> MirrorConfig:
    return load_mirror_config(config, dict(os.environ))


async def _run(config: MirrorConfig, once: bool) -> int:
    from lakefs_mirror.service import MirrorService

    service = await MirrorService.open(config)
    try:
        loop = DaemonLoop(
            service.step,
            name=f"lakefs-mirror[{config.region}]",
            interval=config.poll_interval_seconds,
            max_backoff=max(60.0, config.poll_interval_seconds),
            on_result=service.metrics.consecutive_errors.set,
        )
        loop.install_signal_handlers()
        return await loop.run(once=once)
    finally:
        await service.close()


CONFIG_OPTION = click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="LAKEFS_MIRROR_CONFIG",
    help="YAML configuration (LAKEFS_MIRROR__* variables override it).",
)


@cli.command("run")
@CONFIG_OPTION
@click.option("--once", is_flag=True, help="Run one pass and exit (0 if it succeeded).")
def run_cmd(config_path: Path | None, once: bool) -> None:
    """Run this region's mirroring daemon."""
    config = _load(config_path)
    logging.basicConfig(
        level=config.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency; plain asyncio still works
        status = asyncio.run(_run(config, once))
    else:
        status = uvloop.run(_run(config, once))
    raise click.exceptions.Exit(status)


@cli.command("check-config")
@CONFIG_OPTION
def check_config_cmd(config_path: Path | None) -> None:
    """Validate a configuration file (plus environment overrides) and print it, secrets masked."""
    config = _load(config_path)
    click.echo(json.dumps(json.loads(config.model_dump_json()), indent=2, sort_keys=True))


def main(argv: Sequence[str] | None = None) -> int:
    return run(cli, argv, "lakefs-mirror")


if __name__ == "__main__":
    sys.exit(main())
