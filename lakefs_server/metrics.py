"""Prometheus metrics of lakefs-server, declared once per registry.

Names start with ``lakefs_server_``; every series carries ``region`` (the gateway's configured
region, :class:`~lakefs_core.service.http.metrics.RegionRegistry`). Labels are low-cardinality:
``operation`` is an :class:`~lakefs_core.auth.s3perms.S3Operation` name (or ``Unknown``), ``status``
an HTTP status code. The admin listener's own request metrics are ``lakefs_server_api_*`` (the
platform's).

- ``s3_requests_total{operation,status}``, ``s3_request_duration_seconds{operation}``;
- ``s3_bytes_received_total``, ``s3_bytes_sent_total`` (object bytes);
- ``s3_auth_failures_total{code}`` (``code``: the S3 error code answered);
- ``multipart_uploads_aborted_total`` (the expired-multipart sweep), ``consecutive_errors`` (the loop).
"""

from __future__ import annotations

from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from lakefs_core.service.http.metrics import RegionRegistry

__all__ = ["PREFIX", "ServerMetrics"]

PREFIX = "lakefs_server"


class ServerMetrics:
    def __init__(self, region: str) -> None:
        self.registry = RegionRegistry(region)
        r = self.registry
        self.requests = Counter(
            f"{PREFIX}_s3_requests",
            "S3 requests by operation and status.",
            ["operation", "status"],
            registry=r,
        )
        self.latency = Histogram(
            f"{PREFIX}_s3_request_duration_seconds",
            "S3 request latency by operation (until the answer's headers).",
            ["operation"],
            registry=r,
        )
        self.received = Counter(f"{PREFIX}_s3_bytes_received", "Object bytes received.", registry=r)
        self.sent = Counter(f"{PREFIX}_s3_bytes_sent", "Object bytes sent.", registry=r)
        self.auth_failures = Counter(
            f"{PREFIX}_s3_auth_failures", "Requests refused authentication, by S3 code.", ["code"], registry=r
        )
        self.aborted = Counter(
            f"{PREFIX}_multipart_uploads_aborted",
            "Expired multipart uploads aborted by the sweep.",
            registry=r,
        )
        self.consecutive_errors = Gauge(
            f"{PREFIX}_consecutive_errors", "Sweep passes failed in a row.", registry=r
        )
        # the labelled children, looked up once per label set (``labels`` costs microseconds a call)
        self._counted: dict[tuple[str, int], Any] = {}
        self._timed: dict[str, Any] = {}

    def observe_request(self, operation: str, status: int, seconds: float) -> None:
        """Count one S3 request and its latency."""
        counted = self._counted.get((operation, status))
        if counted is None:
            counted = self._counted[(operation, status)] = self.requests.labels(operation, str(status))
        timed = self._timed.get(operation)
        if timed is None:
            timed = self._timed[operation] = self.latency.labels(operation)
        counted.inc()
        timed.observe(seconds)
