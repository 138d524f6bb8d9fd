"""The ``lakefs-mirror`` command line.

- ``lakefs-mirror run --config FILE [--once] [--log-format text|json] [--pass-timeout S]``: run
  this region's daemon (HTTP API + mirroring passes) until SIGTERM/SIGINT (a second signal cancels
  the pass in flight); ``--once`` runs one pass and exits 0 if it succeeded. Configuration: the YAML
  file plus ``LAKEFS_MIRROR__...`` environment overrides (see ``deploy/mirror-local.yaml``). Under
  systemd ``Type=notify`` it sends READY=1 once the API is bound and the loop runs, WATCHDOG=1
  while the loop is live (a pass running longer than ``pass_timeout_seconds``, or ``--pass-timeout``
  when given, is hung), STOPPING=1.
- ``lakefs-mirror check-config --config FILE``: report EVERY problem at once, one per line on
  stderr, each naming its key path (schema problems, exit 9; and what would stop the start-up: a
  SQLite directory missing, ``state_dir`` not creatable, exit 16 when nothing else is wrong); a
  valid configuration is printed as JSON with secrets masked (URLs keep all but their password) and
  paths shown.

Exit codes: 0 success; 1 a ``--once`` pass failed; 9 a configuration error (bad value, unknown key:
every problem listed; systemd must not restart); 16 a start-up error naming the key (``listen`` port in use,
``state_dir`` not creatable, a SQLite ``mirrors_db_url`` or ``regions.<name>.kv_url`` whose
directory does not exist); 64 usage; 130 Ctrl-C during start-up (``aborted``). Each is one line on
stderr, never a traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from lakefs_core.service.cli import project_group, run

# The commands load on dispatch (lakefs_core.service.cli.CLIGroup): --help and --version stay fast.
_COMMANDS = {
    "run": "lakefs_mirror.commands:run_cmd",
    "check-config": "lakefs_mirror.commands:check_config_cmd",
}
_SUMMARIES = {
    "run": "Run this region's mirroring daemon.",
    "check-config": (
        "Report every problem of a configuration (file plus environment), or print it, secrets masked."
    ),
}


@project_group("lakefs-mirror", _COMMANDS, _SUMMARIES)
def cli() -> None:
    """Transactional cross-region mirroring daemon for lakeFS-compatible repositories."""


def main(argv: Sequence[str] | None = None) -> int:
    # Ctrl-C during start-up reaches click as KeyboardInterrupt -> "aborted", 130
    # (lakefs_core.service.cli.run);
    # once the loop runs, SIGINT is a graceful stop (exit 0).
    return run(cli, argv, "lakefs-mirror")


if __name__ == "__main__":
    sys.exit(main())
