"""Purge guards (lakefs_core/repos/purge.py) that the broader tests in test_purge.py do not pin: an audit
record is create-only (a second record under the same audit id changes nothing, the first keeps its
reason, actor, state and addresses); a finished record re-applied deletes nothing; a delete failing
with an OS error (not "missing") stops the purge with the record still "deleting" and the object
kept; the long-list marker scan finds a purged address that is the largest key asked about."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakefs_core.kv.memory import MemoryKVStore
from lakefs_core.repos.graveler import Graveler, StorageNamespace, StoreRegistry
from lakefs_core.repos.objects import Objects


@pytest.fixture
async def repo(tmp_path: Path) -> tuple[Graveler, Objects, str]:
    """``rp1`` with one committed ``secret.csv``; returns its relative address."""
    g = Graveler(MemoryKVStore(), StoreRegistry())
    o = Objects(g)
    await g.create_repository("rp1", f"local://{tmp_path / 'ns'}")
    address = (await o.upload("rp1", "main", "secret.csv", b"ssn")).physical_address
    await o.upload("rp1", "main", "other.csv", b"keep me")
    await g.commit("rp1", "main", committer="t", message="one")
    return g, o, address


async def _purge(g: Graveler) -> str:
    done = await g.purge_path(
        "rp1", "main", "secret.csv", all_history=False, reason="GDPR", actor="dpo", yes=True
    )
    assert done.audit_id and done.deleted == 1
    return done.audit_id


async def test_a_second_record_under_the_same_audit_id_changes_nothing(
    repo: tuple[Graveler, Objects, str],
) -> None:
    g, _, address = repo
    audit_id = await _purge(g)
    original = await g.purge_record("rp1", audit_id)
    forged = original.model_copy(
        update={
            "reason": "someone else's",
            "actor": "mallory",
            "state": "deleting",
            "deleted": 0,
            "addresses": [address, "data/gother/object"],
        }
    )
    again = await g.record_purge("rp1", forged)  # the stored record answers; no error
    assert again == original
    stored = await g.purge_record("rp1", audit_id)
    assert stored == original
    assert (stored.reason, stored.actor, stored.state, stored.addresses, stored.deleted) == (
        "GDPR",
        "dpo",
        "done",
        [address],
        1,
    )
    assert await g.purged_addresses("rp1", ["data/gother/object"]) == {}  # no marker for it either


async def test_a_finished_record_reapplied_deletes_nothing(
    repo: tuple[Graveler, Objects, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    g, _, _ = repo
    audit_id = await _purge(g)
    finished = await g.purge_record("rp1", audit_id)
    store = await g.namespace_store(StorageNamespace.parse((await g.repository("rp1")).storage_namespace))
    deletes: list[str] = []
    real = store.delete

    async def counting(key: str) -> None:
        deletes.append(key)
        await real(key)

    monkeypatch.setattr(store, "delete", counting)
    again = await g.record_purge("rp1", finished)
    assert deletes == []
    assert again.deleted == finished.deleted == 1 and again.state == "done"
    assert (await g.purge_record("rp1", audit_id)) == finished


async def test_a_delete_failing_with_an_os_error_stops_the_purge(
    repo: tuple[Graveler, Objects, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only "already missing" counts as deleted: a permission error is no proof the object is gone."""
    g, o, address = repo
    store = await g.namespace_store(StorageNamespace.parse((await g.repository("rp1")).storage_namespace))

    async def refused(key: str) -> None:
        raise PermissionError(13, "Permission denied", key)

    monkeypatch.setattr(store, "delete", refused)
    with pytest.raises(PermissionError):
        await g.purge_path("rp1", "main", "secret.csv", all_history=False, reason="r", actor="a", yes=True)
    (record,) = await g.list_purges("rp1")
    assert record.state == "deleting" and record.deleted == 0
    assert (tmp_path / "ns" / address).read_bytes() == b"ssn"
    assert await o.read_all("rp1", "main", "other.csv") == b"keep me"


async def test_the_marker_scan_finds_a_purge_of_the_largest_key(repo: tuple[Graveler, Objects, str]) -> None:
    """More addresses than the point-read limit are merged with one scan up to the largest key asked
    about, inclusive: a purge of exactly that address is found."""
    g, _, address = repo
    audit_id = await _purge(g)
    others = [f"data/-{i:03}/object" for i in range(100)]  # "-" sorts before any id character
    assert all(a < address for a in others)  # the purged address sorts last
    assert await g.purged_addresses("rp1", [*others, address]) == {address: audit_id}
    assert await g.purged_addresses("rp1", [address, *others]) == {address: audit_id}
