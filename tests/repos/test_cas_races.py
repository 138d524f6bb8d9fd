"""Branch compare-and-swap of import, merge and revert (lakefs_core/repos/importing.py,
lakefs_core/repos/committing.py).

Each operation reads the branch, builds and stores its commit, then swaps the branch pointer only
if the branch record is still the one it read. A wrapper around ``g.refs.put_commit`` makes a
concurrent commit land on the branch right after the operation stored its commit (between its
branch read and its swap): the swap must fail, the operation retry on the new head, and the racer's
commit stay in the history with its file readable.
"""

from __future__ import annotations

from pathlib import Path

from lakefs_core.refs.model import Commit, Repository
from lakefs_core.repos.graveler import Graveler
from lakefs_core.repos.objects import Objects


class RaceOnFirstPutCommit:
    """Wraps ``g.refs.put_commit``: after the first stored commit, a racer uploads ``racer.txt`` to
    ``branch`` and commits it (through the real ``put_commit``)."""

    def __init__(self, g: Graveler, objects: Objects, repo: str, branch: str) -> None:
        self.g, self.objects, self.repo, self.branch = g, objects, repo, branch
        self.real = g.refs.put_commit
        self.racer: Commit | None = None
        self.racing = False
        self.calls = 0
        g.refs.put_commit = self.put_commit  # type: ignore[method-assign]

    async def put_commit(self, repo: Repository, commit: Commit) -> None:
        await self.real(repo, commit)
        if self.racing:
            return
        self.calls += 1
        if self.calls == 1:
            self.racing = True
            try:
                await self.objects.upload(self.repo, self.branch, "racer.txt", b"racer")
                self.racer = await self.g.commit(self.repo, self.branch, committer="racer", message="race")
            finally:
                self.racing = False


async def first_parent_history(g: Graveler, repo: str, ref: str) -> list[str]:
    return [c.id async for c in g.log(repo, ref)]


async def assert_racer_kept(
    g: Graveler, objects: Objects, repo: str, race: RaceOnFirstPutCommit, made: Commit
) -> None:
    assert race.racer is not None
    history = await first_parent_history(g, repo, "main")
    assert history[0] == made.id
    assert race.racer.id in history
    assert made.parents[0] == race.racer.id
    assert await objects.read_all(repo, "main", "racer.txt") == b"racer"
    assert race.calls >= 2  # the operation retried after losing the swap


async def test_import_retries_when_the_branch_moves_before_its_swap(
    g: Graveler, repo: str, objects: Objects, tmp_path: Path
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.csv").write_bytes(b"imported")
    race = RaceOnFirstPutCommit(g, objects, repo, "main")
    result = await g.import_objects(repo, "main", "in/", str(src), committer="importer")
    made = await g.get_commit(repo, "main")
    assert made.id == result.commit_id
    await assert_racer_kept(g, objects, repo, race, made)
    assert await objects.read_all(repo, "main", "in/a.csv") == b"imported"


async def test_merge_retries_when_the_destination_moves_before_its_swap(
    g: Graveler, repo: str, objects: Objects
) -> None:
    await g.create_branch(repo, "dev", "main")
    await objects.upload(repo, "dev", "d.txt", b"from-dev")
    await g.commit(repo, "dev", committer="t", message="dev")
    race = RaceOnFirstPutCommit(g, objects, repo, "main")
    made = await g.merge(repo, "dev", "main", committer="merger")
    await assert_racer_kept(g, objects, repo, race, made)
    assert await objects.read_all(repo, "main", "d.txt") == b"from-dev"


async def test_revert_retries_when_the_branch_moves_before_its_swap(
    g: Graveler, repo: str, objects: Objects
) -> None:
    await objects.upload(repo, "main", "keep.txt", b"keep")
    await g.commit(repo, "main", committer="t", message="keep")
    await objects.upload(repo, "main", "x.txt", b"x")
    target = await g.commit(repo, "main", committer="t", message="x")
    race = RaceOnFirstPutCommit(g, objects, repo, "main")
    made = await g.revert(repo, "main", target.id, committer="reverter")
    await assert_racer_kept(g, objects, repo, race, made)
    page = await objects.list(repo, "main", amount=100)
    assert sorted(s.path for s in page.objects) == ["keep.txt", "racer.txt"]
