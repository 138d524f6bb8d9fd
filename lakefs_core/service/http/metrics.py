"""What every daemon's Prometheus registry shares.

:class:`RegionRegistry` adds ``region`` (the exporting daemon's region) to every sample that lacks
it, so metrics declared elsewhere (the HTTP app's request metrics, ``build_info``) carry it too and
one Prometheus can scrape every region's daemons.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric

__all__ = ["RegionRegistry"]


class RegionRegistry(CollectorRegistry):
    """A registry that adds ``region`` to every sample that lacks it (metrics declared elsewhere)."""

    def __init__(self, region: str) -> None:
        super().__init__()
        self.region = region

    def collect(self) -> Iterator[Metric]:
        for metric in super().collect():
            if all("region" in s.labels for s in metric.samples):
                yield metric
                continue
            out = Metric(metric.name, metric.documentation, metric.type, metric.unit)
            out.samples = [
                s if "region" in s.labels else s._replace(labels={"region": self.region, **s.labels})
                for s in metric.samples
            ]
            yield out
