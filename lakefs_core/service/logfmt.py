"""Log output formats shared by every daemon (``--log-format text|json``).

- ``text``: ``TIME LEVEL LOGGER: MESSAGE`` (the historical format).
- ``json``: one JSON object per line with ``time`` (UTC, ISO 8601), ``level``, ``logger`` and
  ``message``; plus ``mirror``, ``repository`` and ``branch`` when the record carries them (passed
  with ``logger.info(..., extra={"mirror": ...})``), and ``exception`` with the formatted traceback
  when one is attached. Values that are not JSON types are rendered with ``str``.

:func:`configure_logging` installs the chosen format on the root logger (stderr), replacing the
handlers a previous call installed.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Final

LOG_FORMATS: Final = ("text", "json")
CONTEXT_FIELDS: Final = ("mirror", "repository", "branch")
TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in CONTEXT_FIELDS:
            value = record.__dict__.get(name)
            if value is not None:
                entry[name] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


def make_formatter(log_format: str) -> logging.Formatter:
    if log_format == "json":
        return JsonFormatter()
    if log_format == "text":
        return logging.Formatter(TEXT_FORMAT)
    raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, not {log_format!r}")


def configure_logging(level: str | int, log_format: str = "text") -> None:
    """Send the root logger's records at ``level`` and above to stderr in ``log_format``."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(make_formatter(log_format))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
