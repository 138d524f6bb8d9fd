"""Prometheus metrics of the REST API, declared once per registry (the server's, beside the S3
gateway's ``lakefs_server_s3_*``): ``lakefs_server_rest_requests_total{operation,status}`` and
``lakefs_server_rest_request_duration_seconds{operation}``. ``operation`` is the handler's name
(one per lakeFS operation served, a fixed set), ``status`` the HTTP status answered."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

__all__ = ["RestMetrics"]

PREFIX = "lakefs_server_rest"


class RestMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            f"{PREFIX}_requests", "REST API requests by operation and status.", ["operation", "status"],
            registry=registry,
        )  # fmt: skip
        self.latency = Histogram(
            f"{PREFIX}_request_duration_seconds",
            "REST API request latency by operation (until the answer's headers, or the error).",
            ["operation"],
            registry=registry,
        )
