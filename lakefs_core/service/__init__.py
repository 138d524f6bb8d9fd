"""The daemon platform: what every long-running process of the project is built from.

- :mod:`.daemon`: :class:`~.daemon.DaemonLoop` (cadence, backoff, two-stage shutdown, liveness) and
  the start-up heap freeze;
- :mod:`.systemd`: ``Type=notify`` readiness, watchdog and stopping notifications;
- :mod:`.logfmt`: text or JSON-lines logging;
- :mod:`.lease`: leases in the KV store (one active worker per name), and :mod:`.sql_lease` in a SQL
  database (its own module: a KV lease's users never import SQLAlchemy);
- :mod:`.http`: the HTTP API platform (app builder, auth, metrics, health, OpenAPI, hostile bodies);
- :mod:`.deleter` and :mod:`.limiter`: the bulk deleter with its AIMD rate limiter, shared by GC's
  sweep, the hard-delete reconciler and the mirror's application of GC sweeps.

The platform sits above the core's repositories and wiring (it may open a core) and below the
daemons and CLIs; it never imports ``lakefs_gc`` or ``lakefs_mirror``.
"""
