"""``moto_server`` handling one request at a time: ``python -P moto_serialized.py -H HOST -p PORT``.

moto's threaded server checks a DynamoDB ``ConditionExpression`` (or an S3 ``If-None-Match``) and
then writes, with no lock between the two: two racing compare-and-swaps from the same expected value
can both succeed there, which DynamoDB and S3 never allow (seen: a CAS counter test ending at 79 of
80 increments under load). Serializing the request handling restores AWS's per-item atomicity, so
the contract tests test our drivers, not moto's races. Connections are still accepted by many
threads (idle keep-alive connections block nothing); only the handling of a request holds the lock.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

from moto.moto_server import werkzeug_app

_LOCK = threading.Lock()
_handle = werkzeug_app.DomainDispatcherApplication.__call__


def _serialized(
    self: werkzeug_app.DomainDispatcherApplication,
    environ: dict[str, Any],
    start_response: Callable[..., Any],
) -> Iterable[bytes]:
    with _LOCK:
        return _handle(self, environ, start_response)  # type: ignore[no-any-return]


werkzeug_app.DomainDispatcherApplication.__call__ = _serialized  # type: ignore[method-assign]

if __name__ == "__main__":
    from moto.server import main

    main(sys.argv[1:])
