"""Audited purge (lakefs_core/repos/purge.py): the objects a path had are destroyed, at one ref or in
all history; every other object stays byte-identical, commit ids and logs are unchanged, the audit
record names who, when, why and what; a read of a purged object fails with PurgedError (exit 17,
HTTP 410) naming the record; dry run by default; a crash between the markers and the deletes is
completed by a re-run. The CLI: tests/cli/test_purge_cli.py."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from lakefs_core.errors import BadInputError, NotFoundError, PurgedError
from lakefs_core.format.records import ValueRecord, make_entry
from lakefs_core.kv.memory import MemoryKVStore
from lakefs_core.repos import purge
from lakefs_core.repos.graveler import Graveler, StorageNamespace, StoreRegistry
from lakefs_core.repos.objects import Objects


@pytest.fixture
async def repo(tmp_path: Path) -> tuple[Graveler, Objects, dict[str, str]]:
    g = Graveler(MemoryKVStore(), StoreRegistry())
    o = Objects(g)
    await g.create_repository("rp1", f"local://{tmp_path / 'ns'}")
    addr = {"v1": (await o.upload("rp1", "main", "secret.csv", b"ssn v1")).physical_address}
    await o.upload("rp1", "main", "other.csv", b"keep me")
    await g.commit("rp1", "main", committer="t", message="one")
    await g.create_tag("rp1", "t1", "main")
    addr["v2"] = (await o.upload("rp1", "main", "secret.csv", b"ssn v2")).physical_address
    await g.commit("rp1", "main", committer="t", message="two")
    await g.create_branch("rp1", "dev", "main")
    addr["v3"] = (await o.upload("rp1", "dev", "secret.csv", b"ssn v3 staged")).physical_address
    return g, o, addr


async def _log(g: Graveler) -> list[str]:
    return [c.id for b in ("main", "dev") async for c in g.log("rp1", b)]


async def test_dry_run_then_purge_at_one_ref(
    repo: tuple[Graveler, Objects, dict[str, str]], tmp_path: Path
) -> None:
    g, o, addr = repo
    dry = await g.purge_path(
        "rp1", "main", "secret.csv", all_history=False, reason="GDPR", actor="dpo", yes=False
    )
    assert dry.dry_run and dry.addresses == [addr["v2"]] and dry.audit_id is None
    assert await o.read_all("rp1", "main", "secret.csv") == b"ssn v2"  # nothing deleted
    log_before = await _log(g)
    done = await g.purge_path(
        "rp1", "main", "secret.csv", all_history=False, reason="GDPR", actor="dpo", yes=True
    )
    assert done.audit_id and done.deleted == 1 and not (tmp_path / "ns" / addr["v2"]).exists()
    with pytest.raises(PurgedError, match=done.audit_id) as e:
        await o.read_all("rp1", "main", "secret.csv")
    assert e.value.audit_id == done.audit_id and e.value.http_status == 410 and e.value.exit_code == 17
    assert await o.read_all("rp1", "t1", "secret.csv") == b"ssn v1"  # another ref's object is untouched
    assert await o.read_all("rp1", "main", "other.csv") == b"keep me"
    assert await _log(g) == log_before  # history and commit ids unchanged
    record = await g.purge_record("rp1", done.audit_id)
    assert (record.reason, record.actor, record.state, record.addresses) == (
        "GDPR",
        "dpo",
        "done",
        [addr["v2"]],
    )
    assert [r.audit_id for r in await g.list_purges("rp1")] == [done.audit_id]


async def test_purge_all_history(repo: tuple[Graveler, Objects, dict[str, str]], tmp_path: Path) -> None:
    g, o, addr = repo
    log_before = await _log(g)
    done = await g.purge_path(
        "rp1", "main", "secret.csv", all_history=True, reason="court order", actor="dpo", yes=True
    )
    assert sorted(done.addresses) == sorted(addr.values()) and done.commits_searched >= 3
    for ref in ("main", "dev", "t1", log_before[-1], log_before[0]):
        if ref == log_before[-1]:  # the initial commit never had the path
            with pytest.raises(NotFoundError):
                await o.read_all("rp1", ref, "secret.csv")
            continue
        with pytest.raises(PurgedError):
            await o.read_all("rp1", ref, "secret.csv")
    for a in addr.values():
        assert not (tmp_path / "ns" / a).exists()
    assert await o.read_all("rp1", "t1", "other.csv") == b"keep me"
    assert await _log(g) == log_before


async def test_a_crashed_purge_is_completed_by_a_rerun(
    repo: tuple[Graveler, Objects, dict[str, str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    g, o, addr = repo
    ns = StorageNamespace.parse((await g.repository("rp1")).storage_namespace)
    store = await g.namespace_store(ns)
    calls = 0
    real = store.delete

    async def crash_after_one(key: str) -> None:
        nonlocal calls
        calls += 1
        if calls > 1:
            raise RuntimeError("killed")
        await real(key)

    monkeypatch.setattr(store, "delete", crash_after_one)
    with pytest.raises(RuntimeError):
        await g.purge_path("rp1", "main", "secret.csv", all_history=True, reason="x", actor="a", yes=True)
    (record,) = await g.list_purges("rp1")
    assert record.state == "deleting"
    with pytest.raises(PurgedError):  # the markers went first: readers already see "purged"
        await o.read_all("rp1", "t1", "secret.csv")
    monkeypatch.setattr(store, "delete", real)
    settled = await g.record_purge("rp1", record)
    assert settled.state == "done" and all(not (tmp_path / "ns" / a).exists() for a in addr.values())


@pytest.mark.parametrize(
    ("ref", "path", "reason", "error"),
    [
        ("main", "secret.csv", "", BadInputError),
        ("main", "secret.csv", "x" * 1025, BadInputError),
        ("main", "secret.csv", "bad\nreason", BadInputError),
        ("main", "", "why", BadInputError),
        ("main", "bad\ud800path", "why", BadInputError),  # a lone surrogate is not UTF-8
        ("main", "x" * 1025, "why", BadInputError),
        ("no-such-branch", "secret.csv", "why", NotFoundError),
    ],
)
async def test_hostile_inputs(
    repo: tuple[Graveler, Objects, dict[str, str]], ref: str, path: str, reason: str, error: type[Exception]
) -> None:
    g, o, _ = repo
    with pytest.raises(error):
        await g.purge_path("rp1", ref, path, all_history=False, reason=reason, actor="a", yes=True)
    assert await o.read_all("rp1", "main", "secret.csv") == b"ssn v2"


async def test_actor_must_be_printable(repo: tuple[Graveler, Objects, dict[str, str]]) -> None:
    g, o, _ = repo
    with pytest.raises(BadInputError, match="actor"):
        await g.purge_path("rp1", "main", "secret.csv", all_history=False, reason="r", actor="a\nb", yes=True)
    assert await o.read_all("rp1", "main", "secret.csv") == b"ssn v2"


async def test_an_entry_pointing_at_metadata_is_never_purged(
    repo: tuple[Graveler, Objects, dict[str, str]], tmp_path: Path
) -> None:
    """A hostile entry whose relative address is ``_lakefs/...`` (or escapes ``data/``): reported,
    never deleted, and a record naming it (a mirror applies its source's records) deletes nothing."""
    g, _, _ = repo
    table = tmp_path / "ns" / "_lakefs" / "some-table"
    table.parent.mkdir(parents=True, exist_ok=True)
    table.write_bytes(b"metadata")
    identity, data = make_entry("_lakefs/some-table", 8, "0" * 32)
    await g.set_entry("rp1", "main", ValueRecord(b"evil.csv", identity, data))
    report = await g.purge_path("rp1", "main", "evil.csv", all_history=False, reason="r", actor="a", yes=True)
    assert report.addresses == [] and report.skipped_not_data == ["_lakefs/some-table"]
    assert report.deleted == 0 and report.audit_id is None
    # an address that escapes its directory fails closed: the purge stops, naming it
    identity, data = make_entry("data/../_lakefs/some-table", 8, "0" * 32)
    await g.set_entry("rp1", "main", ValueRecord(b"dots.csv", identity, data))
    with pytest.raises(BadInputError, match="not a relative address"):
        await g.purge_path("rp1", "main", "dots.csv", all_history=False, reason="r", actor="a", yes=True)
    assert table.read_bytes() == b"metadata"
    # a record that names metadata (a mirror applying a hostile source's record) deletes nothing there
    rec = purge.PurgeRecord(
        audit_id="purge-1",
        repository="rp1",
        ref="main",
        path="evil.csv",
        all_history=False,
        reason="r",
        actor="a",
        created_at=datetime.now(UTC),
        state="deleting",
        addresses=["_lakefs/some-table"],
    )
    assert (await g.record_purge("rp1", rec)).deleted == 0
    assert table.read_bytes() == b"metadata"
    assert purge.is_data_object("data/g1/abc") and purge.is_data_object("legacy-object")
    for bad in ("_lakefs/x", "data/x", "data/../x", "data//x", "a/b", "..", "data/./x"):
        assert not purge.is_data_object(bad), bad


async def test_a_purge_too_big_for_one_record_writes_nothing(
    repo: tuple[Graveler, Objects, dict[str, str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One record stays under DynamoDB's item limit on every driver: a bigger purge is refused before
    any marker is written or object deleted."""
    g, o, addr = repo
    monkeypatch.setattr(purge, "MAX_STORED_RECORD_BYTES", 100)
    with pytest.raises(BadInputError, match="audit record over 100 bytes"):
        await g.purge_path("rp1", "main", "secret.csv", all_history=True, reason="r", actor="a", yes=True)
    assert await g.list_purges("rp1") == []
    assert all((tmp_path / "ns" / a).exists() for a in addr.values())
    assert await o.read_all("rp1", "t1", "secret.csv") == b"ssn v1"


async def test_purged_addresses_costs_one_read_without_purges_and_one_scan_for_long_lists(
    repo: tuple[Graveler, Objects, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mirror asks for every missing object of a pass: no purge ever means one KV read in all, and
    a long list is merged with the markers by one scan, with the same answer as point reads."""
    g, _, addr = repo
    kv = g.kv
    calls = {"get": 0, "scan": 0}
    real_get, real_scan = kv.get, kv.scan

    async def get(partition: bytes, key: bytes) -> bytes:
        calls["get"] += 1
        return await real_get(partition, key)

    def scan(partition: bytes, start: bytes = b"", *, end: bytes | None = None, page_size: int = 1000):  # type: ignore[no-untyped-def]
        calls["scan"] += 1
        return real_scan(partition, start, end=end, page_size=page_size)

    monkeypatch.setattr(kv, "get", get)
    monkeypatch.setattr(kv, "scan", scan)
    others = [f"data/zz{i:04}/object" for i in range(300)] + ["", "bad\0name", "a" * 5000]
    assert await g.purged_addresses("rp1", [addr["v1"], *others]) == {}
    assert calls["scan"] == 1 and calls["get"] <= 2  # the marker probe (+ the repository record)

    done = await g.purge_path(
        "rp1", "main", "secret.csv", all_history=True, reason="GDPR", actor="dpo", yes=True
    )
    expected = {addr[v]: done.audit_id for v in ("v1", "v2", "v3")}  # every branch's, staged too
    assert await g.purged_addresses("rp1", [addr["v1"], addr["v2"], addr["v3"], others[0]]) == expected
    calls.update(get=0, scan=0)
    assert await g.purged_addresses("rp1", [*others, addr["v3"], addr["v2"], addr["v1"]]) == expected
    assert calls["scan"] == 2 and calls["get"] <= 1  # the probe and one merge scan, no point reads
