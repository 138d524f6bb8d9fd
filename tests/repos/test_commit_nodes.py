"""Commit.main_parent, Commit.node() and Graveler.commit_nodes: the seams retention GC walks."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from lakefs_core.refs.model import Commit, CommitNode
from lakefs_core.repos.graveler import Graveler
from tests.repos.support import WHEN, record
from tests.support.profiles import examples

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def cid(i: int) -> str:
    return hashlib.sha256(str(i).encode()).hexdigest()


def commit(parents: tuple[str, ...], version: int, when: datetime = WHEN) -> Commit:
    return Commit(cid(99), "c", "m", when, cid(7), {}, parents, version)


def test_main_parent_by_version() -> None:
    assert commit((), 1).main_parent is None
    assert commit((), 0).main_parent is None
    assert commit((cid(1),), 0).main_parent == cid(1)
    assert commit((cid(1),), 1).main_parent == cid(1)
    # lakeFS CommitVersionInitial (0) stored [source, destination]; from version 1, [destination, source].
    assert commit((cid(1), cid(2)), 0).main_parent == cid(2)
    assert commit((cid(1), cid(2)), 1).main_parent == cid(1)
    assert commit((cid(1), cid(2), cid(3)), 0).main_parent == cid(3)


def test_node_fields() -> None:
    c = commit((cid(1), cid(2)), 0)
    assert c.node() == CommitNode(
        id=cid(99),
        parents=(cid(1), cid(2)),
        main_parent=cid(2),
        creation_us=(WHEN - EPOCH) // timedelta(microseconds=1),
        metarange_id=cid(7),
        version=0,
    )


@settings(max_examples=examples(3), deadline=None)
@given(
    when=st.datetimes(
        min_value=datetime(1, 1, 2),
        max_value=datetime(9999, 12, 30),
        timezones=st.just(UTC),
    )
)
def test_creation_us_is_exact(when: datetime) -> None:
    """Microseconds since the epoch like Go's ``UnixMicro``: exact before 1970 and far in the future
    (no float rounding), so the walk compares the same instants lakeFS does."""
    assert commit((), 1, when).node().creation_us == (when - EPOCH) // timedelta(microseconds=1)


async def test_commit_nodes_lists_every_commit(g: Graveler, repo: str) -> None:
    await g.set_entry(repo, "main", record("a"))
    c1 = await g.commit(repo, "main", committer="t", message="one")
    await g.create_branch(repo, "side", "main")
    await g.set_entry(repo, "side", record("b"))
    s1 = await g.commit(repo, "side", committer="t", message="side")
    await g.set_entry(repo, "main", record("c"))
    await g.commit(repo, "main", committer="t", message="two")
    merge = await g.merge(repo, "side", "main", committer="t", message="merge")
    await g.create_branch(repo, "gone", "main")
    await g.set_entry(repo, "gone", record("d"))
    gone = await g.commit(repo, "gone", committer="t", message="gone")
    await g.delete_branch(repo, "gone")

    nodes = [n async for n in g.commit_nodes(repo)]
    ids = [n.id for n in nodes]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)  # KV order, each once
    assert gone.id in ids  # unreachable commits too: they are the walk's dangling leaves
    for n in nodes:
        assert n == (await g.get_commit(repo, n.id)).node()
    by_id = {n.id: n for n in nodes}
    assert by_id[merge.id].parents[1] == s1.id and by_id[merge.id].main_parent == merge.parents[0]
    assert by_id[c1.id].main_parent is not None  # the repository's initial commit
    roots = [n for n in nodes if n.main_parent is None]
    assert len(roots) == 1 and roots[0].metarange_id == ""
    assert len(nodes) == 6
