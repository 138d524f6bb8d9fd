"""A mirror that fails every pass is visible where alerts look, and its series go when it is deleted.

Setup: two "regions" on the embedded default. ``us-east`` holds the source repository ``origin`` (local
directory, SQLite KV); ``eu-west`` is this daemon's region, with a SQLite KV, a local root for the
healthy mirror ``good`` and, for the mirror ``bad``, an S3 store on a moto_server that enforces
authentication (``INITIAL_NO_AUTH_ACTION_COUNT=0``) reached with credentials it does not know: every
request of ``bad`` is refused (403, :class:`~lakefs_core.errors.AccessDeniedError`). The daemon is the
real :class:`~lakefs_mirror.service.MirrorService`, driven one pass at a time, and its metrics are
read from the text exposition ``GET /metrics`` serves.

- ``lakefs_mirror_pass_errors_total{mirror="bad",kind="access_denied"}`` rises and
  ``lakefs_mirror_consecutive_failures{mirror="bad"}`` grows by one per pass; ``good`` stays at 0;
  per-mirror counters exist at 0 before anything happened; every series carries ``region`` and the
  mirror id is on ``lakefs_mirror_info``.
- After ``bad`` is deleted from the mirrors database, the next pass leaves no series of it.
- The series exactly as exported (plus Prometheus's ``job``/``instance``) make the
  ``LakeFSMirrorFailing`` rule of ``deploy/prometheus/`` fire in ``promtool test rules``.
- ``error_cooldown_seconds``: a failing mirror is skipped until its cooldown (with jitter, doubling,
  capped) has passed, and retried after it (:class:`~lakefs_mirror.engine.ErrorCooldown` on its own,
  and in the engine with a controlled monotonic clock).
"""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from lakefs_mirror.config import MirrorConfig
from lakefs_mirror.demo import workload
from lakefs_mirror.engine import ErrorCooldown
from lakefs_mirror.metrics import ERROR_KINDS
from lakefs_mirror.service import MirrorService
from tests.support.env import require_tool
from tests.support.moto import MotoServer
from tests.support.timing import scaled

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "lakefs-mirror-rules.yml"
REGION, SOURCE = "eu-west", "us-east"
Labels = dict[str, str]


@pytest.fixture(scope="module")
def auth_moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    """A moto_server that checks credentials on every request (none of ours is valid there)."""
    server = MotoServer("eu-west-1")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("INITIAL_NO_AUTH_ACTION_COUNT", "0")
        server.start(tmp_path_factory.mktemp("moto-auth"))
    try:
        yield server
    finally:
        server.stop()


def config(root: Path, moto: MotoServer, **extra: Any) -> MirrorConfig:
    regions: dict[str, Any] = {
        SOURCE: {"kv_url": f"sqlite:///{root / SOURCE / 'kv.sqlite3'}", "local_roots": [str(root / SOURCE)]},
        REGION: {
            "kv_url": f"sqlite:///{root / REGION / 'kv.sqlite3'}",
            "local_roots": [str(root / REGION)],
            "s3": {
                "endpoint_url": moto.endpoint,
                "region": moto.region,
                "credentials": {
                    "source": "static",
                    "access_key_id": "AKIAWRONGWRONGWRONG0",
                    "secret_access_key": "not-a-valid-secret-key",
                },
            },
        },
    }
    return MirrorConfig.model_validate(
        {
            "region": REGION,
            "regions": regions,
            "mirrors_db_url": f"sqlite:///{root / 'mirrors.sqlite3'}",
            "listen": "127.0.0.1:0",
            "access_keys": [{"access_key_id": "AKIATEST", "secret_access_key": "test-secret"}],
            "negative_cooldown_seconds": 0,
            "error_cooldown_seconds": 0,
            **extra,
        }
    )


@dataclass
class Daemon:
    service: MirrorService
    ids: dict[str, str]

    def samples(self) -> dict[str, list[tuple[Labels, float]]]:
        """Every sample of the exposition ``GET /metrics`` serves, by series name."""
        text = generate_latest(self.service.metrics.registry).decode()
        out: dict[str, list[tuple[Labels, float]]] = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                out.setdefault(s.name, []).append((dict(s.labels), s.value))
        return out

    def value(self, name: str, **labels: str) -> float | None:
        found = [v for got, v in self.samples().get(name, []) if got == {"region": REGION, **labels}]
        assert len(found) <= 1, found
        return found[0] if found else None


@pytest.fixture
async def daemon(
    tmp_path: Path, auth_moto: MotoServer, request: pytest.FixtureRequest
) -> AsyncIterator[Daemon]:
    # The source: demo-style local "region" (repository origin with one commit on main).
    (tmp_path / SOURCE).mkdir()
    (tmp_path / REGION).mkdir()
    await workload_in(tmp_path)
    extra: dict[str, Any] = getattr(request, "param", {})
    service = await MirrorService.open(config(tmp_path, auth_moto, **extra), serve_api=False)
    try:
        ids = {}
        for name, ns in (("good", f"local://{tmp_path / REGION / 'good'}"), ("bad", "s3://dst-bucket/bad")):
            mirror = await service.db.create_mirror(
                source_repo="origin", source_region=SOURCE, name=name, region=REGION, storage_namespace=ns
            )
            ids[name] = mirror.id
        yield Daemon(service, ids)
    finally:
        await service.close()


async def workload_in(root: Path) -> None:
    """The demo's source workload, with ``us-east`` under ``root`` (what ``workload`` expects)."""
    await workload(root, 0)
    await workload(root, 1)


async def test_failing_mirror_is_counted_and_its_series_go_when_deleted(
    daemon: Daemon, tmp_path: Path
) -> None:
    # Before any pass: the per-region counters exist at 0 and carry the region.
    assert daemon.value("lakefs_mirror_presence_cache_hits_total") == 0
    assert daemon.value("lakefs_mirror_object_store_requests_total", operation="head") == 0
    for n in (1, 2, 3):
        report = await daemon.service.step()
        assert report.active and report.mirrors == 2
        assert daemon.value("lakefs_mirror_consecutive_failures", mirror="bad") == n
        assert daemon.value("lakefs_mirror_consecutive_failures", mirror="good") == 0
        denied = daemon.value("lakefs_mirror_pass_errors_total", mirror="bad", kind="access_denied")
        assert denied is not None and denied >= n, daemon.samples()["lakefs_mirror_pass_errors_total"]
    for kind in ERROR_KINDS:  # exist at 0 from the start for every mirror, so increase() sees errors
        assert daemon.value("lakefs_mirror_pass_errors_total", mirror="good", kind=kind) == 0
    assert daemon.value("lakefs_mirror_copy_bytes_total", mirror="bad") == 0
    # Native mode with nothing replicating: no promotion yet, but the series exists (at 0).
    assert daemon.value("lakefs_mirror_promotions_total", mirror="good", branch="main") == 0
    info = {
        "mirror": "bad",
        "id": daemon.ids["bad"],
        "source_repository": "origin",
        "source_region": SOURCE,
    }
    assert daemon.value("lakefs_mirror_info", **info) == 1
    # Every series, including the HTTP API's, carries the region.
    samples = daemon.samples()
    assert all(labels.get("region") == REGION for series in samples.values() for labels, _ in series)

    # The alert rule fires for the series shape exported here.
    failing = [(labels, v) for labels, v in samples["lakefs_mirror_consecutive_failures"] if v >= 3]
    lease = samples["lakefs_mirror_lease_held"]
    assert [labels["mirror"] for labels, _ in failing] == ["bad"] and lease == [({"region": REGION}, 1.0)]
    promtool_test_failing_alert(tmp_path, failing[0][0], lease[0][0])

    # Deleted: the next pass (of this daemon, standby or active) leaves no series of "bad".
    await daemon.service.db.delete_mirror(daemon.ids["bad"])
    await daemon.service.step()
    left = [(name, labels) for name, series in daemon.samples().items() for labels, _ in series]
    assert not [s for s in left if s[1].get("mirror") == "bad"], left
    assert [s for s in left if s[1].get("mirror") == "good"]


def promtool_test_failing_alert(tmp_path: Path, failures: Labels, lease: Labels) -> None:
    """``promtool test rules``: the exported series (values rising by one a pass) fire the alert."""
    promtool = require_tool("promtool", "prometheus")
    target = {"job": "lakefs-mirror", "instance": "10.0.0.7:8008"}
    region, mirror = failures["region"], failures["mirror"]

    def series(name: str, labels: Labels, values: str) -> dict[str, str]:
        shown = ", ".join(f'{k}="{v}"' for k, v in sorted({**labels, **target}.items()))
        return {"series": f"{name}{{{shown}}}", "values": values}

    test = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    series("lakefs_mirror_consecutive_failures", failures, "1+1x20"),
                    series("lakefs_mirror_lease_held", lease, "1x20"),
                    series("up", {}, "1x20"),
                ],
                "alert_rule_test": [
                    {"eval_time": "2m", "alertname": "LakeFSMirrorFailing", "exp_alerts": []},
                    {
                        "eval_time": "10m",
                        "alertname": "LakeFSMirrorFailing",
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    "severity": "critical",
                                    "region": failures["region"],
                                    "mirror": failures["mirror"],
                                },
                                "exp_annotations": {
                                    "summary": f"Mirror {mirror} in {region} failed 11 passes in a row",
                                    "description": (
                                        f'See lakefs_mirror_pass_errors_total{{region="{region}",'
                                        f'mirror="{mirror}"}} for the kind of error (access_denied usually '
                                        "means the destination's credentials) and the mirror's status for "
                                        "the message."
                                    ),
                                },
                            }
                        ],
                    },
                ],
            }
        ],
    }
    path = tmp_path / "failing.test.yml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    done = subprocess.run(
        [promtool, "test", "rules", str(path)], capture_output=True, timeout=scaled(60), check=False
    )
    assert done.returncode == 0, (done.stdout + done.stderr).decode(errors="replace")


@pytest.mark.parametrize(
    "daemon", [{"error_cooldown_seconds": 60, "error_cooldown_max_seconds": 200}], indirect=True
)
async def test_error_cooldown_skips_a_failing_mirror_until_it_has_passed(daemon: Daemon) -> None:
    engine = daemon.service.engine
    now = [1000.0]
    engine.cooldown.clock = lambda: now[0]

    def errors() -> float:
        return sum(
            v
            for labels, v in daemon.samples()["lakefs_mirror_pass_errors_total"]
            if labels["mirror"] == "bad"
        )

    await daemon.service.step()
    first = errors()
    assert first >= 1
    waits = []
    for _ in range(4):
        await daemon.service.step()  # within the cooldown: "bad" is not tried, "good" is
        assert errors() == first
        # ...but it still counts as failing: the alert must not stop while it waits.
        failing = daemon.value("lakefs_mirror_consecutive_failures", mirror="bad")
        assert failing is not None and failing >= 2
        until = max(u for _, u in engine.cooldown._state.values())
        waits.append(until - now[0])
        now[0] = until + 0.001  # the cooldown has passed: the next pass tries it again
        await daemon.service.step()
        assert errors() > first
        first = errors()
    assert daemon.value("lakefs_mirror_consecutive_failures", mirror="good") == 0
    # Doubling (60 s, 120 s, 200 s cap...) with jitter in [half, full].
    assert 30 <= waits[0] <= 60 and 60 <= waits[1] <= 120 and 100 <= waits[2] <= 200 and waits[3] <= 200


def test_error_cooldown_doubles_with_jitter_up_to_the_cap_and_resets_on_success() -> None:
    now = [0.0]
    rolls = iter([1.0, 1.0, 0.0, 1.0, 1.0, 1.0])
    cooldown = ErrorCooldown(10, 35, clock=lambda: now[0], rng=lambda: next(rolls))
    key = ("m", "branch", "main")
    assert not cooldown.waiting(key)
    assert [cooldown.failed(key) for _ in range(4)] == [10, 20, 17.5, 35]  # 40 capped to 35
    assert cooldown.waiting(key)
    now[0] = 34.9
    assert cooldown.waiting(key)
    now[0] = 35.0
    assert not cooldown.waiting(key)
    cooldown.succeeded(key)
    assert cooldown.failed(key) == 10  # reset by the success
    cooldown.forget("m")
    assert not cooldown.waiting(key)
    assert ErrorCooldown(0, 600).failed(key) == 0  # 0 turns it off
