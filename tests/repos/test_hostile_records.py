"""Ref records read from KV are hostile (a mirror copies commit records written in another region):
an out-of-range timestamp is one CorruptDataError showing the raw value, never a ValueError."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from lakefs_core.errors import CorruptDataError
from lakefs_core.format.proto import graveler_pb2
from lakefs_core.refs.model import Commit, Repository


@pytest.mark.parametrize(("seconds", "nanos"), [(10**15, 0), (-(10**13), 0), (1, -5), (1, 2_000_000_000)])
def test_commit_with_out_of_range_creation_date_is_corrupt(seconds: int, nanos: int) -> None:
    msg = graveler_pb2.CommitData(id="c" * 64, committer="x", message="m", meta_range_id="")
    msg.creation_date.seconds = seconds
    msg.creation_date.nanos = nanos
    with pytest.raises(CorruptDataError, match=f"seconds={seconds}, nanos={nanos}") as info:
        Commit.from_bytes(msg.SerializeToString(), "repo/commits/ccc")
    assert info.value.file == "repo/commits/ccc"


def test_repository_with_out_of_range_creation_date_is_corrupt() -> None:
    msg = graveler_pb2.RepositoryData(id="repo", storage_namespace="local:///x", default_branch_id="main")
    msg.creation_date.seconds = 10**15
    with pytest.raises(CorruptDataError, match="RepositoryData creation_date out of range"):
        Repository.from_bytes(msg.SerializeToString(), "repos/repo")


def test_valid_creation_date_still_decodes() -> None:
    msg = graveler_pb2.CommitData(id="c" * 64, committer="x", message="m", meta_range_id="")
    msg.creation_date.seconds = 1_700_000_000
    assert Commit.from_bytes(msg.SerializeToString(), "k").creation_date.timestamp() == 1_700_000_000


async def test_table_block_bound_is_a_setting_of_both_daemon_and_cli() -> None:
    from lakefs_core.cli.context import open_session
    from lakefs_core.coreconfig import CoreConfig
    from lakefs_core.format.sstable.footer import DEFAULT_MAX_BLOCK_BYTES
    from lakefs_mirror.config import MirrorConfig

    assert CoreConfig().table_max_block_bytes == DEFAULT_MAX_BLOCK_BYTES
    assert MirrorConfig.model_fields["table_max_block_bytes"].default == DEFAULT_MAX_BLOCK_BYTES
    config = CoreConfig(kv_url=SecretStr("memory://"), table_max_block_bytes=3 << 20)
    async with open_session(config) as session:
        assert session.graveler.stores.table_cache.max_block_bytes == 3 << 20


async def test_refs_of_many_reads_what_the_single_reads_read_and_leaves_out_the_unreadable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The batched branch and tag read (the mirror's fingerprints) equals list_branches/list_tags per
    repository; a missing or misnamed repository, or one with a corrupt branch record, is left out
    (its own read says why), never an exception for the whole batch."""
    from lakefs_core.kv.memory import MemoryKVStore
    from lakefs_core.refs import kvkeys
    from lakefs_core.repos.graveler import Graveler
    from lakefs_core.repos.stores import StoreRegistry

    g = Graveler(MemoryKVStore(), StoreRegistry())
    for name in ("aaa", "bbb", "broken"):
        await g.create_repository(name, f"mem://refs-many/{name}")
    await g.create_branch("aaa", "dev", "main")
    await g.create_tag("aaa", "v1", "main")
    broken = await g.repository("broken")
    await g.kv.set(broken.partition, kvkeys.branch_key("zz"), b"\xff not a protobuf")
    got = await g.refs_of_many(["bbb", "aaa", "nobody", "Bad/Name", "broken", "aaa"], tags=True)
    assert sorted(got) == ["aaa", "bbb"]
    for name in ("aaa", "bbb"):
        assert list(got[name].branches) == [x async for x in g.list_branches(name)]
        assert list(got[name].tags) == [x async for x in g.list_tags(name)]
    assert [t.id for t in got["aaa"].tags] == ["v1"]
    assert (await g.refs_of_many(["aaa"], tags=False))["aaa"].tags == ()
    from lakefs_core.refs import store

    monkeypatch.setattr(store, "REFS_BATCH", 2)  # batches of two repositories: the same answer
    assert await g.refs_of_many(["bbb", "aaa", "nobody", "Bad/Name", "broken", "aaa"], tags=True) == got
