"""The retention walk (lakefs_gc.mark.active) against an independent oracle and a port of lakeFS's loop.

The oracle below is written from gc.md §1 and the module's documented deviations only; it shares no
code with lakefs_gc.mark.active (no memo, no SQLite, its own main-parent rule and its own starting points).
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakefs_core.errors import BadInputError, CorruptDataError
from lakefs_core.refs.model import Commit, CommitNode
from lakefs_gc.mark.active import compute_active
from lakefs_gc.rules import GCRules
from tests.support.profiles import examples

NOW = datetime(2026, 3, 1, 12, tzinfo=UTC)
NOW_US = int((NOW - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds()) * 1_000_000
DAY = 86_400_000_000


def cid(i: int) -> str:
    return hashlib.sha256(f"commit-{i}".encode()).hexdigest()


def mrid(i: int) -> str:
    return hashlib.sha256(f"metarange-{i}".encode()).hexdigest()


@dataclass
class History:
    """Commits by number: ``parents[i]`` (as stored), ``version[i]``, ``age_h[i]`` hours before NOW."""

    parents: dict[int, tuple[int, ...]] = field(default_factory=dict)
    version: dict[int, int] = field(default_factory=dict)
    age_h: dict[int, int] = field(default_factory=dict)
    branches: dict[str, int] = field(default_factory=dict)
    tags: dict[str, int] = field(default_factory=dict)
    pins: set[int] = field(default_factory=set)

    def add(self, i: int, parents: tuple[int, ...], age_h: int, version: int = 1) -> None:
        self.parents[i], self.age_h[i], self.version[i] = parents, age_h, version

    def commit(self, i: int) -> Commit:
        return Commit(
            id=cid(i),
            committer="c",
            message=f"m{i}",
            creation_date=NOW - timedelta(hours=self.age_h[i]),
            metarange_id=mrid(i),
            parents=tuple(cid(p) for p in self.parents[i]),
            version=self.version[i],
        )

    def nodes(self, order: Iterable[int] | None = None) -> list[CommitNode]:
        return [self.commit(i).node() for i in (order if order is not None else sorted(self.parents))]


async def stream(nodes: list[CommitNode]) -> AsyncIterator[CommitNode]:
    for n in nodes:
        yield n


async def run(
    h: History,
    rules: GCRules | None,
    *,
    tags_policy: str = "pin",
    order: Iterable[int] | None = None,
    workdir: Path | None = None,
) -> tuple[set[int], set[int], list[tuple[str, str]], set[str]]:
    by_id = {cid(i): i for i in h.parents}
    result = await compute_active(
        stream(h.nodes(order)),
        branches={b: cid(c) for b, c in h.branches.items()},
        tags={t: cid(c) for t, c in h.tags.items()},
        pins=[cid(c) for c in h.pins],
        rules=rules,
        now=NOW,
        tags_policy=tags_policy,  # type: ignore[arg-type]
        workdir=workdir,
    )
    async with result:
        active = [row async for row in result.active()]
        expired = [row async for row in result.expired()]
        metaranges = {m async for m in result.metaranges()}
        assert result.num_commits == len(h.parents)
        assert result.num_active == len(active)
    assert [a for a, _ in active] == sorted(a for a, _ in active)
    for commit_id, metarange in active + expired:
        assert metarange == mrid(by_id[commit_id])
    return {by_id[a] for a, _ in active}, {by_id[e] for e, _ in expired}, active, metaranges


# -- the oracle (spec text) -----------------------------------------------------------------------


def oracle(h: History, rules: GCRules | None, tags_policy: str = "pin") -> set[int]:
    everything = set(h.parents)
    if rules is None:
        return everything  # no rules: nothing expires

    def main_parent(i: int) -> int | None:
        ps = h.parents[i]
        if not ps:
            return None
        return ps[-1] if h.version[i] == 0 else ps[0]

    def created(i: int) -> int:
        return NOW_US - h.age_h[i] * 3_600_000_000

    default = rules.default_retention_days
    heads: list[tuple[int, int]] = []
    for name, c in h.branches.items():
        heads.append((c, dict((r.branch_id, r.retention_days) for r in rules.branches).get(name, default)))
    if tags_policy == "pin":
        heads += [(c, default) for c in h.tags.values()]
    heads += [(c, default) for c in h.pins]
    someones_parent = {main_parent(i) for i in everything} - {None}
    head_ids = {c for c, _ in heads}
    leaves = [(c, default) for c in everything if c not in someones_parent and c not in head_ids]

    active: set[int] = set()
    for start, days, is_head in [(c, d, True) for c, d in heads] + [(c, d, False) for c, d in leaves]:
        threshold = NOW_US - days * DAY
        chain = [start]
        while (p := main_parent(chain[-1])) is not None:
            chain.append(p)
        for pos, c in enumerate(chain):
            newer = created(c) > threshold  # within retention (clock-skew deviation: kept)
            child_newer = pos > 0 and created(chain[pos - 1]) > threshold  # "the first older one"
            if (pos == 0 and is_head) or newer or child_newer:
                active.add(c)
    return active


def lakefs_port(h: History, rules: GCRules) -> set[int]:
    """A literal port of lakeFS's GetGarbageCollectionCommits loop, in lakeFS's starting-point order
    (branches and leaves merged by commit id). Tags and pins are not starting points in lakeFS."""

    def main_parent(i: int) -> int | None:
        ps = h.parents[i]
        return None if not ps else (ps[-1] if h.version[i] == 0 else ps[0])

    def created(i: int) -> int:
        return NOW_US - h.age_h[i] * 3_600_000_000

    parents_of = {main_parent(i) for i in h.parents} - {None}
    branch_pts = sorted(((cid(c), b) for b, c in h.branches.items()))
    head_ids = {c for _, c in h.branches.items()}
    leaf_pts = sorted((cid(c), "") for c in h.parents if c not in parents_of and c not in head_ids)
    by_id = {cid(i): i for i in h.parents}
    processed: dict[int, int] = {}
    active: set[int] = set()
    for commit_hex, branch in sorted(branch_pts + leaf_pts):
        c = by_id[commit_hex]
        days = rules.default_retention_days
        node_created, node_parent = created(c), main_parent(c)
        if branch == "":
            node_parent = c  # hypothetical head above the dangling commit
        else:
            days = {r.branch_id: r.retention_days for r in rules.branches}.get(branch, days)
            active.add(c)
        threshold = NOW_US - days * DAY
        if branch:
            processed[c] = threshold
        while node_parent is not None:
            nxt = node_parent
            if nxt in processed and processed[nxt] <= threshold:
                break
            if node_created > threshold:
                active.add(nxt)
            node_created, node_parent = created(nxt), main_parent(nxt)
            processed[nxt] = threshold
    return active


# -- generated histories --------------------------------------------------------------------------


@st.composite
def histories(draw: st.DrawFn, *, skew: bool = True) -> History:
    n = draw(st.integers(1, 40))
    h = History()
    age = draw(st.integers(0, 24 * 12))
    for i in range(n):
        if i == 0:
            parents: tuple[int, ...] = ()
        else:
            first = draw(st.integers(0, i - 1))
            second = draw(st.one_of(st.none(), st.integers(0, i - 1)))
            parents = (first,) if second is None or second == first else (first, second)
        version = draw(st.sampled_from([0, 1, 1]))
        if skew and draw(st.booleans()):
            age_i = draw(st.integers(0, 24 * 12))  # anywhere: children may predate parents
        else:
            age = max(0, age - draw(st.integers(0, 30)))
            age_i = age
        # A child never predates its stored parents when skew is off.
        if not skew and parents:
            age_i = min([age_i, *(h.age_h[p] for p in parents)])
        h.add(i, parents, age_i, version)
    names = draw(st.lists(st.sampled_from(["main", "dev", "b1", "b2", "x_y"]), unique=True, max_size=4))
    for name in names:
        h.branches[name] = draw(st.integers(0, n - 1))
    for t in draw(st.lists(st.sampled_from(["v1", "v2.0", "t"]), unique=True, max_size=2)):
        h.tags[t] = draw(st.integers(0, n - 1))
    h.pins = set(draw(st.lists(st.integers(0, n - 1), max_size=2)))
    return h


@st.composite
def rule_sets(draw: st.DrawFn) -> GCRules | None:
    if draw(st.integers(0, 9)) == 0:
        return None
    branch_days = draw(
        st.dictionaries(st.sampled_from(["main", "dev", "b1", "zz"]), st.integers(0, 12), max_size=3)
    )
    return GCRules.of(draw(st.integers(0, 12)), branch_days)


SETTINGS = settings(max_examples=examples(3), deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(h=histories(), rules=rule_sets(), policy=st.sampled_from(["pin", "ignore"]), data=st.data())
async def test_matches_oracle(h: History, rules: GCRules | None, policy: str, data: st.DataObject) -> None:
    order = data.draw(st.permutations(sorted(h.parents)))
    active, expired, _, metaranges = await run(h, rules, tags_policy=policy, order=order)
    assert active == oracle(h, rules, policy)
    assert expired == set(h.parents) - active
    assert metaranges == {mrid(i) for i in active}


@SETTINGS
@given(h=histories(), rules=rule_sets())
async def test_superset_of_lakefs(h: History, rules: GCRules | None) -> None:
    """Every commit lakeFS keeps is kept (our deviations only retain more)."""
    if rules is None:
        return
    active, *_ = await run(h, rules, tags_policy="ignore")
    assert lakefs_port(h, rules) <= active


@SETTINGS
@given(h=histories(skew=False), rules=rule_sets())
async def test_equals_lakefs_on_a_plain_line(h: History, rules: GCRules | None) -> None:
    """One branch over a single first-parent line without skew: lakeFS's order-dependence and our
    skew deviation cannot apply, so the answers must be equal."""
    if rules is None or not h.branches:
        return
    name, tip = next(iter(h.branches.items()))
    chain = [tip]
    while h.parents[chain[-1]]:
        ps = h.parents[chain[-1]]
        chain.append(ps[-1] if h.version[chain[-1]] == 0 else ps[0])
    line_h = History(branches={name: tip})
    for child, parent in zip(chain, [*chain[1:], None], strict=True):
        line_h.add(child, () if parent is None else (parent,), h.age_h[child])
    active, *_ = await run(line_h, rules, tags_policy="ignore")
    assert active == lakefs_port(line_h, rules)


# -- hand-made cases --------------------------------------------------------------------------------


def line(h: History, ages_h: list[int], start: int = 0, parent: int | None = None) -> list[int]:
    ids = []
    for k, age in enumerate(ages_h):
        i = start + k
        prev = ids[-1] if ids else parent
        h.add(i, () if prev is None else (prev,), age)
        ids.append(i)
    return ids


async def test_threshold_keeps_newer_plus_first_older() -> None:
    h = History()
    # Ages in days (x24 h), oldest first: 10, 8, 6, 4, 2, 0 -> with 5 days: 4, 2, 0 and the 6-day one.
    ids = line(h, [d * 24 for d in (10, 8, 6, 4, 2, 0)])
    h.branches["main"] = ids[-1]
    active, expired, _, _ = await run(h, GCRules.of(5))
    assert active == set(ids[2:])
    assert expired == set(ids[:2])
    # A branch rule overrides the default; a rule for another branch does not.
    assert (await run(h, GCRules.of(5, {"main": 1})))[0] == set(ids[4:])
    assert (await run(h, GCRules.of(5, {"dev": 1})))[0] == set(ids[2:])
    # 0 days: the threshold is "now"; the head (created exactly now) is not after it, so lakeFS's
    # rule keeps the head alone.
    assert (await run(h, GCRules.of(0)))[0] == {ids[-1]}


async def test_no_rules_keeps_everything() -> None:
    h = History()
    line(h, [100 * 24, 50 * 24])
    h.add(9, (), 1000 * 24)  # an unreachable old root
    active, expired, _, _ = await run(h, None)
    assert active == {0, 1, 9} and expired == set()


async def test_head_always_active_and_old_leaf_expires() -> None:
    h = History()
    ids = line(h, [30 * 24, 20 * 24])
    h.branches["main"] = ids[-1]
    h.add(5, (ids[0],), 25 * 24)  # a dangling old commit (its branch was deleted)
    h.add(6, (ids[0],), 1)  # a dangling fresh one: active, and so is its first older ancestor
    active, _, _, _ = await run(h, GCRules.of(7))
    assert active == {ids[1], ids[0], 6}


async def test_order_independence_where_lakefs_is_not() -> None:
    """lakeFS stops at a processed parent before marking it: if the stale branch's head sorts first,
    the fresh branch's first older commit (the state at the threshold) expires. Here it never does."""
    lakefs_kept = []
    for stale, fresh in ((2, 3), (3, 2)):
        h = History()
        h.add(0, (), 40 * 24)
        h.add(1, (0,), 30 * 24)  # the parent of both heads
        h.add(stale, (1,), 20 * 24)
        h.add(fresh, (1,), 1)
        h.branches = {"stale": stale, "fresh": fresh}
        rules = GCRules.of(7)
        assert (await run(h, rules))[0] == {1, 2, 3}
        lakefs_kept.append(1 in lakefs_port(h, rules))
    assert sorted(lakefs_kept) == [False, True]


async def test_v0_commit_follows_last_parent() -> None:
    h = History()
    h.add(0, (), 50 * 24)  # main's old base
    h.add(1, (), 40 * 24)  # the merged-in side line's root
    h.add(2, (1, 0), 30 * 24, version=0)  # v0 merge: source first, the branch's own parent last
    h.add(3, (2,), 1)
    h.branches["main"] = 3
    active, _, _, _ = await run(h, GCRules.of(7))
    # Walk: 3 (head), 2 (first older), then 2's main parent is 0 (last), not 1; 1 is a leaf (old).
    assert active == {3, 2}
    h.version[2] = 1  # as version 1 the main parent is parents[0] = 1; 0 becomes an old leaf
    assert (await run(h, GCRules.of(7)))[0] == {3, 2}
    h.age_h[2] = 2  # 2 is now fresh: its main parent (0 for v0, 1 for v1) becomes active
    assert (await run(h, GCRules.of(7)))[0] == {3, 2, 1}
    h.version[2] = 0
    assert (await run(h, GCRules.of(7)))[0] == {3, 2, 0}


async def test_clock_skew_keeps_fresh_commit_behind_old_child() -> None:
    h = History()
    h.add(0, (), 50 * 24)
    h.add(1, (0,), 1)  # fresh
    h.add(2, (1,), 30 * 24)  # skewed: older than its parent
    h.add(3, (2,), 1)
    h.branches["main"] = 3
    rules = GCRules.of(7)
    active, _, _, _ = await run(h, rules)
    # lakeFS: 3 head, 2 (3 is new), 1 not (2 is old), 0 (1 is new). We also keep 1 (itself new).
    assert lakefs_port(h, rules) == {3, 2, 0}
    assert active == {3, 2, 1, 0}


async def test_tags_pinned_or_ignored_and_pins_always() -> None:
    h = History()
    ids = line(h, [d * 24 for d in (40, 30, 20, 1)])
    h.branches["main"] = ids[-1]
    h.tags["v1"] = ids[0]
    rules = GCRules.of(7)
    assert (await run(h, rules, tags_policy="pin"))[0] == {ids[0], ids[2], ids[3]}
    assert (await run(h, rules, tags_policy="ignore"))[0] == {ids[2], ids[3]}
    h.pins = {ids[1]}
    assert (await run(h, rules, tags_policy="ignore"))[0] == {ids[1], ids[2], ids[3]}


async def test_hostile_inputs(tmp_path: Path) -> None:
    h = History()
    line(h, [48, 24])
    h.branches["main"] = 1
    h.parents[1] = (7,)  # a main parent that is not in the repository
    with pytest.raises(CorruptDataError, match="not in the repository"):
        await run(h, GCRules.of(1), workdir=tmp_path)
    h.parents[1] = (0,)
    h.branches["main"] = 9  # a branch pointing at a commit the scan never listed
    with pytest.raises(CorruptDataError, match="absent from the commit scan"):
        await run(h, GCRules.of(1), workdir=tmp_path)
    h.branches["main"] = 1
    with pytest.raises(CorruptDataError, match="listed twice"):
        await run(h, GCRules.of(1), order=[0, 1, 0], workdir=tmp_path)
    bad = CommitNode("XYZ", (), None, 0, "", 1)
    with pytest.raises(CorruptDataError, match="not 64 lower-case hex"):
        await compute_active(stream([bad]), branches={}, rules=None, now=NOW, workdir=tmp_path)
    bad = CommitNode(cid(1), (), None, 0, "../x", 1)
    with pytest.raises(CorruptDataError, match="metarange id"):
        await compute_active(stream([bad]), branches={}, rules=None, now=NOW, workdir=tmp_path)
    with pytest.raises(BadInputError, match="not a commit id"):
        await compute_active(stream(h.nodes()), branches={"main": "HEAD"}, rules=GCRules.of(1), now=NOW)
    with pytest.raises(BadInputError, match="tags_policy"):
        await compute_active(stream([]), branches={}, rules=None, now=NOW, tags_policy="keep")  # type: ignore[arg-type]
    # Every failure removed its temporary directory.
    assert list(tmp_path.iterdir()) == []  # noqa: ASYNC240


async def test_huge_retention_and_pre_epoch_dates() -> None:
    h = History()
    h.add(0, (), 24 * 365 * 80)  # created in 1946
    h.add(1, (0,), 24 * 365 * 70)
    h.add(2, (1,), 1)
    h.branches["main"] = 2
    assert (await run(h, GCRules.of(2**31 - 1)))[0] == {0, 1, 2}  # no datetime overflow
    assert (await run(h, GCRules.of(365 * 75)))[0] == {1, 2, 0}  # 1 is newer; 0 is the first older
    assert (await run(h, GCRules.of(365 * 60)))[0] == {1, 2}


async def test_empty_repository_and_empty_metarange() -> None:
    result = await compute_active(stream([]), branches={}, rules=GCRules.of(1), now=NOW)
    async with result:
        assert result.num_commits == 0
        assert [x async for x in result.active()] == []
    root = Commit(cid(0), "", "Repository created", NOW, "", {}, (), 1)
    result = await compute_active(
        stream([root.node()]), branches={"main": cid(0)}, rules=GCRules.of(1), now=NOW
    )
    async with result:
        assert [x async for x in result.active()] == [(cid(0), "")]
        assert [m async for m in result.metaranges()] == [""]
