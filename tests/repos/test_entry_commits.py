"""``Graveler.commit_entries``: one commit of given entries on a branch head (the Spark writer's op).

Model-based: for any committed tree, staged changes and entries, append gives the head's tree plus
the entries, overwrite also removes the prefix's other keys, the staged changes stay staged and the
branch moves by exactly one commit. Plus the head CAS, refusals and the journal's settle."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakefs_core.errors import BadInputError, ConflictError, ReadOnlyError
from lakefs_core.format.records import ValueRecord, make_entry
from lakefs_core.kv.memory import MemoryKVStore
from lakefs_core.repos.graveler import Graveler
from lakefs_core.repos.journal import Intent, new_batch_id
from lakefs_core.repos.objects import Objects
from lakefs_core.repos.stores import StoreRegistry
from tests.repos.support import mem_namespace, new_graveler, unique
from tests.support.profiles import examples

KEYS = st.sampled_from([f"{d}/{f}" for d in ("a", "ab", "b") for f in ("x", "y", "z")])
WHEN = datetime(2026, 1, 1, tzinfo=UTC)


def record(key: str, version: int) -> ValueRecord:
    identity, data = make_entry(f"data/gx/{key.replace('/', '_')}{version}", version, f"{version:032x}",
                                last_modified=WHEN)  # fmt: skip
    return ValueRecord(key.encode(), identity, data)


async def tree(g: Graveler, repo: str, ref: str) -> dict[str, bytes]:
    return {r.key.decode(): r.identity async for r in g.list_entries(repo, ref)}


@settings(
    max_examples=examples(0.25), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    committed=st.sets(KEYS, max_size=6),
    staged=st.sets(KEYS, max_size=3),
    written=st.sets(KEYS, max_size=4),
    overwrite=st.booleans(),
)
def test_commit_entries_model(
    committed: set[str], staged: set[str], written: set[str], overwrite: bool
) -> None:
    async def run() -> None:
        g = new_graveler(MemoryKVStore(), StoreRegistry())
        objects = Objects(g)
        repo = unique()
        await g.create_repository(repo, mem_namespace(), hard_delete_journal=False)
        for key in sorted(committed):
            await objects.upload(repo, "main", key, b"c")
        if committed:
            await g.commit(repo, "main", committer="t", message="base")
        for key in sorted(staged):
            await objects.upload(repo, "main", key, b"s")
        head = (await g.branch(repo, "main")).commit_id
        before_head = await tree(g, repo, head)
        before_staged = await tree(g, repo, "main")
        prefix = "a"  # "a/..." and "ab/...": a prefix is a byte prefix, not a directory
        entries = [record(k, 7) for k in sorted(written) if not overwrite or k.startswith(prefix)]
        made = await g.commit_entries(
            repo, "main", entries, committer="t", message="job",
            replace_prefix=prefix.encode() if overwrite else None,
        )  # fmt: skip
        expected = {k: v for k, v in before_head.items() if not (overwrite and k.startswith(prefix))}
        expected |= {r.key.decode(): r.identity for r in entries}
        assert await tree(g, repo, made.id) == expected
        assert made.parents == (head,) and (await g.branch(repo, "main")).commit_id == made.id
        # the staged changes are still staged, over the new commit
        assert await tree(g, repo, "main") == expected | {k: before_staged[k] for k in staged}
        await g.stores.close()

    asyncio.run(run())


async def test_expected_head_refusals_and_the_journal(g: Graveler, repo: str, objects: Objects) -> None:
    head = (await g.branch(repo, "main")).commit_id
    await objects.upload(repo, "main", "other", b"o")
    await g.commit(repo, "main", committer="t", message="moves")
    with pytest.raises(ConflictError, match="moved from"):
        await g.commit_entries(repo, "main", [record("k", 1)], committer="t", message="m", expected_head=head)
    with pytest.raises(BadInputError, match="given twice"):
        await g.commit_entries(repo, "main", [record("k", 1), record("k", 2)], committer="t", message="m")
    with pytest.raises(BadInputError, match="under its prefix"):
        await g.commit_entries(
            repo, "main", [record("k", 1)], committer="t", message="m", replace_prefix=b"p/"
        )
    await g.set_read_only(repo, True)
    with pytest.raises(ReadOnlyError):
        await g.commit_entries(repo, "main", [record("k", 1)], committer="t", message="m")
    await g.set_read_only(repo, False)

    # journal on: a batch's open record is settled by the commit; a fenced batch refuses it
    await g.set_hard_delete_journal(repo, True)
    journal = await g.journal(repo)
    intent = Intent("data/gx/k1", "main", b"k", g.clock().timestamp(), batch=new_batch_id())
    await journal.record_intents([intent])
    made = await g.commit_entries(
        repo, "main", [record("k", 1)], committer="t", message="m",
        batches=[(intent.batch or "", intent.t)], job_token="spark-job1",
    )  # fmt: skip
    assert await journal.settled_at(intent.batch or "") is not None
    fenced = Intent("data/gx/k2", "main", b"k2", g.clock().timestamp(), batch=new_batch_id())
    (recorded,) = await journal.record_intents([fenced])
    await journal.claim(await journal.effective(recorded))  # the reconciler fences the batch
    with pytest.raises(ConflictError, match="claimed by the hard-delete reconciler"):
        await g.commit_entries(
            repo, "main", [record("k2", 1)], committer="t", message="m",
            batches=[(fenced.batch or "", fenced.t)], job_token="spark-job2",
        )  # fmt: skip
    assert (await g.branch(repo, "main")).commit_id == made.id
