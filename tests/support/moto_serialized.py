"""``moto_server`` handling one request at a time: ``python -P moto_serialized.py -H HOST -p PORT``.

moto's threaded server checks a DynamoDB ``ConditionExpression`` (or an S3 ``If-None-Match``) and
then writes, with no lock between the two: two racing compare-and-swaps from the same expected value
can both succeed there, which DynamoDB and S3 never allow (seen: a CAS counter test ending at 79 of
80 increments under load). Serializing the request handling restores AWS's per-item atomicity, so
the contract tests test our drivers, not moto's races. Connections are still accepted by many
threads (idle keep-alive connections block nothing); only the handling of a request holds the lock.

moto's ``TransactWriteItems`` saves a deep copy of the whole table, once per action, to roll back a
cancelled transaction: O(actions x items in the table) per call (100 puts took 7.5 s with 1,000
items in the table, 59 s with 5,000), which a KV table of a few thousand staged entries cannot
afford. Here the items the transaction names are saved instead (before it runs, which is when they
must be restored to: requests are handled one at a time) and put back when it fails.

``POST /_lakefs-test/seed-objects`` (:data:`SEED_PATH`, JSON ``{"bucket", "keys", "body"}``: the
body base64, or null for each key's own bytes) stores objects in an existing bucket through moto's
own S3 backend (``put_object``, what its PUT handler calls): test set-up for thousands of small
objects (:mod:`tests.support.moto_seed`), ~0.1 ms of moto's CPU per object instead of the ~6.5 ms
of parsing and answering a PUT. The code under test still lists, reads and deletes them over S3.

Per request, moto's dispatcher asked whether the request's host named one of moto's modules by
listing moto's package directory (``os.listdir`` and an ``isdir`` per entry, ~170 of them), and
werkzeug logged an access line to the server's log: ~9% of moto's CPU on small DynamoDB and S3
requests. The module list is read once here, and werkzeug logs warnings and errors only (a
request's failure still reaches the log).
"""

from __future__ import annotations

import base64
import copy
import json
import logging
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

import moto.dynamodb.models as dynamo_models
import moto.dynamodb.models.table as dynamo_table
from moto import backends
from moto.moto_server import werkzeug_app

_LOCK = threading.Lock()
_handle = werkzeug_app.DomainDispatcherApplication.__call__
SEED_PATH = "/_lakefs-test/seed-objects"


def _seed(environ: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Store the request's objects (see the module docstring); (HTTP status, JSON answer)."""
    from moto.s3.models import s3_backends

    request = json.loads(environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0)))
    bucket, keys, body = request["bucket"], request["keys"], request.get("body")
    data = None if body is None else base64.b64decode(body)
    # The bucket was created over S3, by whichever account moto mapped the client's key to.
    backends = [b["aws"] for _, b in s3_backends.items() if bucket in b["aws"].buckets]
    if len(backends) != 1:
        return "404 Not Found", {"error": f"bucket {bucket!r} is in {len(backends)} accounts, not 1"}
    for key in keys:
        backends[0].put_object(bucket, key, key.encode() if data is None else data)
    return "200 OK", {"seeded": len(keys)}


def _serialized(
    self: werkzeug_app.DomainDispatcherApplication,
    environ: dict[str, Any],
    start_response: Callable[..., Any],
) -> Iterable[bytes]:
    with _LOCK:
        if environ.get("PATH_INFO") == SEED_PATH and environ.get("REQUEST_METHOD") == "POST":
            status, answer = _seed(environ)
            start_response(status, [("Content-Type", "application/json")])
            return [json.dumps(answer).encode()]
        return _handle(self, environ, start_response)  # type: ignore[no-any-return]


werkzeug_app.DomainDispatcherApplication.__call__ = _serialized  # type: ignore[method-assign]

_MODULES = tuple(backends.list_of_moto_modules())  # moto's package does not change while it runs
backends.list_of_moto_modules = lambda: _MODULES  # type: ignore[assignment]
logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no access line per request


class _TablesAsThey:
    """``copy`` for moto's DynamoDB models during a transaction: a table is "copied" as itself (its
    rollback is done item by item by :func:`_transact_write_items`), anything else deep-copied."""

    @staticmethod
    def deepcopy(value: Any, memo: Any = None) -> Any:
        return value if isinstance(value, dynamo_table.Table) else copy.deepcopy(value, memo)


def _transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
    saved: list[tuple[Any, Any, Any, Any]] = []
    try:
        for action in transact_items:
            ((kind, op),) = action.items()
            table = self.get_table(op["TableName"])
            hash_key, range_key = self.get_keys_value(table, op["Item"] if kind == "Put" else op["Key"])
            saved.append((table, hash_key, range_key, copy.deepcopy(table.get_item(hash_key, range_key))))
    except Exception:
        return _transact(self, transact_items)  # malformed: moto's own checks answer
    dynamo_models.copy = _TablesAsThey  # type: ignore[assignment]
    try:
        return _transact(self, transact_items)
    except BaseException:
        for table, hash_key, range_key, item in reversed(saved):
            if item is None:
                table.delete_item(hash_key, range_key)
            elif range_key is None:
                table.items[hash_key] = item
            else:
                table.items[hash_key][range_key] = item
        raise
    finally:
        dynamo_models.copy = copy


_transact = dynamo_models.DynamoDBBackend.transact_write_items
dynamo_models.DynamoDBBackend.transact_write_items = _transact_write_items  # type: ignore[method-assign]

if __name__ == "__main__":
    from moto.server import main

    main(sys.argv[1:])
