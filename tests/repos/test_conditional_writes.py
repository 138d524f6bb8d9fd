"""Conditional staging writes (``If-None-Match: *``, ``If-Match``; lakefs_core/repos/staging_writes.py):
the condition is checked on the path's current entry (live token, else sealed tokens, else the
commit) and the record staged in ONE conditional KV step with the branch record and, with the
hard-delete journal, the upload's settle.

Racing uploads of one path through the facade (on the memory KV, whose every operation yields, so
the racers' reads and writes interleave), with the journal off and on: exactly one
``If-None-Match: *`` upload wins and the others stage nothing; of uploads that all expect one ETag
exactly one wins. A commit landing between a writer's check and its write makes the writer check
again, against the committed entry.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from lakefs_core.errors import PreconditionFailedError
from lakefs_core.format.records import ValueRecord
from lakefs_core.kv.memory import MemoryKVStore
from lakefs_core.refs import kvkeys
from lakefs_core.repos.graveler import Graveler
from lakefs_core.repos.objects import Objects, ObjectStat
from lakefs_core.repos.staging_writes import Condition
from tests.repos.support import HookedKV, mem_namespace, new_graveler, unique


def if_none_match(current: ValueRecord | None) -> None:
    if current is not None:
        raise PreconditionFailedError("exists")


def if_match(etag: str) -> Condition:
    def check(current: ValueRecord | None) -> None:
        if current is None or ObjectStat.from_record(current).etag != etag:
            raise PreconditionFailedError("another object")

    return check


async def race(objects: Objects, repo: str, path: str, condition: Condition, n: int) -> list[bytes]:
    """``n`` conditional uploads of ``path`` at once (bodies never uploaded before, so no ETag
    repeats one): the bodies of those that won."""

    async def one(body: bytes) -> bytes | None:
        try:
            await objects.upload(repo, "main", path, body, condition=condition)
        except PreconditionFailedError:
            return None
        return body

    return [
        b
        for b in await asyncio.gather(*(one(b"%s-%d" % (uuid.uuid4().hex.encode(), i)) for i in range(n)))
        if b is not None
    ]


@pytest.mark.parametrize("journal", [False, True], ids=["plain", "journal"])
async def test_racing_conditional_uploads_exactly_one_wins(
    g: Graveler, objects: Objects, journal: bool
) -> None:
    repo = unique()
    await g.create_repository(repo, mem_namespace(), hard_delete_journal=journal)
    for r in range(3):
        won = await race(objects, repo, f"new-{r}", if_none_match, 4)
        assert len(won) == 1
        assert await objects.read_all(repo, "main", f"new-{r}") == won[0]
    etag = (await objects.stat(repo, "main", "new-0")).etag
    won = await race(objects, repo, "new-0", if_match(etag), 4)
    assert len(won) == 1 and await objects.read_all(repo, "main", "new-0") == won[0]
    staged = [
        e async for e in g.kv.scan(kvkeys.staging_partition((await g.branch(repo, "main")).staging_token))
    ]
    assert len(staged) == 3  # one entry per path: a refused upload staged nothing


async def test_the_condition_reads_committed_and_deleted_entries(
    g: Graveler, objects: Objects, repo: str
) -> None:
    await objects.upload(repo, "main", "kept", b"v1")
    await g.commit(repo, "main", committer="t", message="m")
    with pytest.raises(PreconditionFailedError):  # committed, nothing staged
        await objects.upload(repo, "main", "kept", b"v2", condition=if_none_match)
    etag = (await objects.stat(repo, "main", "kept")).etag
    await objects.upload(repo, "main", "kept", b"v2", condition=if_match(etag))  # the committed ETag
    await objects.delete(repo, "main", "kept")  # a tombstone over the committed entry
    with pytest.raises(PreconditionFailedError):
        await objects.upload(repo, "main", "kept", b"v3", condition=if_match(etag))
    await objects.upload(repo, "main", "kept", b"v3", condition=if_none_match)
    assert await objects.read_all(repo, "main", "kept") == b"v3"


async def test_a_commit_between_the_check_and_the_write_makes_the_writer_check_again() -> None:
    """A commit carrying another upload of the path lands right after the writer read the branch:
    the writer's batch expects the branch as read and fails, and its second check sees the
    committed entry."""
    inner = MemoryKVStore()
    kv = HookedKV(inner)
    g = new_graveler(kv)
    objects = Objects(g)
    repo = unique()
    await g.create_repository(repo, mem_namespace())
    raced = False

    async def commit_first(op: str, partition: bytes, key: bytes) -> None:
        nonlocal raced
        if op == "set_many_if" and key == b"path" and not raced:
            raced = True
            await Objects(new_graveler(inner)).upload(repo, "main", "path", b"racer")
            await new_graveler(inner).commit(repo, "main", committer="t", message="racer")

    kv.before.append(commit_first)
    with pytest.raises(PreconditionFailedError):
        await objects.upload(repo, "main", "path", b"mine", condition=if_none_match)
    assert raced and await objects.read_all(repo, "main", "path") == b"racer"
    await inner.close()
