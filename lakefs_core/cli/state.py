"""The global options of ``lakefs-core`` (``ctx.obj``), importable without the configuration schema.

Kept apart from :mod:`.context` and :mod:`lakefs_core.coreconfig` so that the command group itself
(``--version``, ``--help``) does not import pydantic, PyYAML, asyncio and the settings: the
configuration is loaded by the first command that asks for it (:meth:`AppState.config`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from lakefs_core.coreconfig import CoreConfig
    from lakefs_core.defaults import CoreOptions

CONFIG_ENV = "LAKEFS_CORE_CONFIG"


@dataclass
class AppState:
    """Global options of the ``lakefs-core`` group (``ctx.obj``)."""

    json: bool = False
    config_path: Path | None = None
    _config: CoreConfig | None = field(default=None, repr=False)

    def config(self) -> CoreConfig:
        if self._config is None:
            from lakefs_core.coreconfig import load_core_config

            self._config = load_core_config(self.config_path)
        return self._config

    def options(self) -> CoreOptions:
        """What opens the session: on the embedded default (no file, no override) the defaults
        without loading the schema (pydantic, ~0.1 s of start-up), else :meth:`config`'s."""
        from lakefs_core.defaults import DEFAULTS, is_embedded_default

        if self._config is None and is_embedded_default(self.config_path):
            return DEFAULTS
        return self.config().options()


def app_state() -> AppState:
    ctx = click.get_current_context()
    state = ctx.find_object(AppState)
    if state is None:
        state = ctx.ensure_object(AppState)
    return state
