"""The cache of committed directory listings (lakefs_core/repos/listing.py): every page it serves is
the cursor walk's page, it is used only where staging adds nothing, and it stays bounded."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakefs_core.format.records import ValueRecord
from lakefs_core.kv.memory import MemoryKVStore
from lakefs_core.refs.model import Branch
from lakefs_core.refs.staging import RecordCursor
from lakefs_core.repos import reading
from lakefs_core.repos.context import Resolved
from lakefs_core.repos.graveler import Graveler
from lakefs_core.repos.listing import ListingCache
from lakefs_core.repos.objects import ListPage, Objects
from lakefs_core.settings import CoreSettings
from lakefs_core.wiring import open_core
from tests.repos.support import mem_namespace, record, small_ranges_repo, unique
from tests.support.profiles import examples
from tests.support.timing import scaled

Page = tuple[list[str], list[str], bool, str]


def _plain(page: ListPage) -> Page:
    return [o.path for o in page.objects], page.common_prefixes, page.has_more, page.next_after


async def _both(
    g: Graveler, repo: str, ref: str, *, prefix: str, delimiter: str, after: str, amount: int
) -> tuple[Page, Page]:
    """(the page served with the context's cache, the page the walk gives: no directory cached)."""
    objects, ctx = Objects(g), g.context
    cached = await objects.list(repo, ref, prefix=prefix, delimiter=delimiter, after=after, amount=amount)
    kept, ctx.listings = ctx.listings, ListingCache(max_children=0)  # every directory "too big"
    try:
        walked = await objects.list(repo, ref, prefix=prefix, delimiter=delimiter, after=after, amount=amount)
    finally:
        ctx.listings = kept
    return _plain(cached), _plain(walked)


_ALPHABET = "ab/é"  # é: two bytes in UTF-8
_keys = st.text(_ALPHABET, min_size=1, max_size=4)


@settings(max_examples=examples(1), deadline=None)
@given(
    tree=st.tuples(st.sets(_keys, max_size=30), st.sets(_keys, max_size=6), st.sets(_keys, max_size=6)),
    prefix=st.sampled_from(["", "a", "a/", "é", "b/", "aé"]),
    delimiter=st.sampled_from(["", "/", "b", "é", "/a"]),
    amount=st.integers(1, 7),
    data=st.data(),
)
def test_cached_pages_are_the_walks_pages(
    tree: tuple[set[str], set[str], set[str]],
    prefix: str,
    delimiter: str,
    amount: int,
    data: st.DataObject,
) -> None:
    """For random trees, prefixes, delimiters (multi-byte, multi-character, none), afters (common
    prefixes, keys, strings inside a common prefix), amounts and cache bounds: every page, and every
    page of a full pagination, is the walk's, on the commit, then after staged adds and tombstones, then after
    the commit of those (a new metarange)."""
    committed, staged, deleted = tree  # committed, then staged over it, then deleted (tombstones)

    # afters near the keys: a key, a key cut short (often a common prefix or inside one), a key
    # cut short and extended (inside a common prefix, before or after keys under it), anything
    near = st.builds(
        lambda key, cut, tail: key[:cut] + tail,
        st.sampled_from(sorted(committed | staged | {prefix or "a"})),
        st.integers(0, 4),
        st.sampled_from(["", "a", "/", "\x00", "é"]),
    )
    afters = data.draw(st.lists(st.one_of(near, st.text(_ALPHABET, max_size=5)), min_size=1, max_size=5))
    # small bounds: entries that grow over several walks, fill up, and evict one another
    total, most, batch = data.draw(st.tuples(st.integers(2, 40), st.integers(1, 12), st.integers(1, 4)))

    async def check(g: Graveler, repo: str, ref: str) -> None:
        async def same(after: str) -> Page:
            cached, walked = await _both(
                g, repo, ref, prefix=prefix, delimiter=delimiter, after=after, amount=amount
            )
            assert cached == walked, (ref, after)
            return cached

        for after in afters:
            await same(after)
        after = ""
        for _ in range(100):  # the whole listing, page by page
            cached = await same(after)
            if not cached[2]:
                break
            after = cached[3]

    async def run() -> None:
        kv = MemoryKVStore()
        g, repo = await small_ranges_repo(kv)
        g.context.listings = ListingCache(total_children=total, max_children=most, min_walk=batch)
        if committed:
            await g.set_entries(repo, "main", [record(k) for k in sorted(committed)])
        first = await g.commit(repo, "main", committer="t", message="m", allow_empty=True)
        await check(g, repo, "main")
        if staged:
            await g.set_entries(repo, "main", [record(k, "staged") for k in sorted(staged)])
        if deleted:
            await g.delete_entries(repo, "main", [k.encode() for k in sorted(deleted)])
        await check(g, repo, "main")
        await check(g, repo, first.id)  # a commit id: never staged
        second = await g.commit(repo, "main", committer="t", message="m", allow_empty=True)
        await g.create_tag(repo, "t1", second.id)
        await check(g, repo, "main")
        await check(g, repo, "t1")
        cache = g.context.listings
        assert len(cache) <= cache.used <= total
        await kv.close()

    asyncio.run(run())


async def _tree(g: Graveler, repo: str, *keys: str) -> None:
    await g.set_entries(repo, "main", [record(k) for k in keys])
    await g.commit(repo, "main", committer="t", message="m")


async def _listed(objects: Objects, repo: str, ref: str = "main", **kw: str) -> tuple[list[str], list[str]]:
    page = await objects.list(repo, ref, delimiter="/", **kw)
    return [o.path for o in page.objects], page.common_prefixes


async def test_staged_changes_are_seen_at_once(g: Graveler, objects: Objects, repo: str) -> None:
    """A cached directory is never served over staging that changes it: a tombstone deleting the
    last key under a common prefix removes the prefix at once, a staged key appears at once, and a
    commit serves the new tree."""
    await _tree(g, repo, "d/a/1", "d/b/1", "d/c", "e")
    assert await _listed(objects, repo, prefix="d/") == (["d/c"], ["d/a/", "d/b/"])
    assert g.context.listings.walks == 1 and len(g.context.listings) == 1
    assert await _listed(objects, repo, prefix="d/") == (["d/c"], ["d/a/", "d/b/"])
    assert g.context.listings.walks == 1  # served from the cache

    await g.delete_entries(repo, "main", [b"d/b/1"])
    assert await _listed(objects, repo, prefix="d/") == (["d/c"], ["d/a/"])
    await g.set_entries(repo, "main", [record("d/ab")])
    assert await _listed(objects, repo, prefix="d/") == (["d/ab", "d/c"], ["d/a/"])
    # staging outside the listing's range does not keep it from the cache
    assert await _listed(objects, repo) == (["e"], ["d/"])

    head = await g.commit(repo, "main", committer="t", message="m")
    assert await _listed(objects, repo, prefix="d/") == (["d/ab", "d/c"], ["d/a/"])
    before = g.context.listings.walks
    assert await _listed(objects, repo, head.id, prefix="d/") == (["d/ab", "d/c"], ["d/a/"])
    assert g.context.listings.walks == before  # the branch's listing built the commit's entry


@pytest.mark.parametrize("min_walk", [1, 100])
async def test_an_after_inside_a_common_prefix(
    g: Graveler, objects: Objects, repo: str, min_walk: int
) -> None:
    """An ``after`` under a common prefix but not one (a key, or anything a client sends): the
    prefix is listed again when a key under it follows ``after``, as the walk does."""
    await _tree(g, repo, "a/b", "a/c", "b")
    g.context.listings = ListingCache(min_walk=min_walk)
    await _listed(objects, repo)  # the directory's entry, known whole
    assert await _listed(objects, repo, after="a/a") == (["b"], ["a/"])
    assert await _listed(objects, repo, after="a/b") == (["b"], ["a/"])
    assert await _listed(objects, repo, after="a/c") == (["b"], [])
    assert await _listed(objects, repo, after="a/") == (["b"], [])  # a common prefix: past it


async def test_staging_below_the_page_start_does_not_matter(g: Graveler, objects: Objects, repo: str) -> None:
    await _tree(g, repo, "a", "b", "c", "d")
    await g.delete_entries(repo, "main", [b"a"])
    walks = g.context.listings.walks
    page = await objects.list(repo, "main", after="b", amount=1)
    assert ([o.path for o in page.objects], page.has_more, page.next_after) == (["c"], True, "c")
    assert g.context.listings.walks == walks + 1  # [b\0, end) has no staging: from the cache


async def test_sealed_tokens_are_staging_too(g: Graveler, repo: str) -> None:
    """A branch being committed has sealed tokens: a record in one of them in range counts."""
    ctx = g.context
    await _tree(g, repo, "k")
    repository = await ctx.repository(repo)
    resolved = await ctx.resolve(repository, "main")
    assert resolved.branch is not None
    sealed = Resolved(resolved.commit, Branch("main", resolved.commit.id, "live-tok", ("sealed-tok",)))
    assert await reading.staged_in_range(ctx, sealed, b"a", b"z", None) == (False, [])
    await ctx.staging.set("sealed-tok", record("m"))
    assert (await reading.staged_in_range(ctx, sealed, b"a", b"z", None))[0]
    assert not (await reading.staged_in_range(ctx, sealed, b"n", b"z", None))[0]
    assert not (await reading.staged_in_range(ctx, Resolved(resolved.commit), b"", None, None))[0]


async def test_an_entry_holds_at_most_max_children(g: Graveler, objects: Objects, repo: str) -> None:
    """A directory's first ``max_children`` children are kept and served; pages past them walk."""
    await _tree(g, repo, *[f"big/{i:02}" for i in range(12)], "small/1")
    g.context.listings = cache = ListingCache(total_children=20, max_children=10, min_walk=1)
    for _ in range(2):
        page = await objects.list(repo, "main", prefix="big/", amount=5, after="big/03")
        assert [o.path for o in page.objects] == [f"big/{i:02}" for i in range(4, 9)]
        assert page.has_more and page.next_after == "big/08"
    # the first listing walked twice (up to its after, then its page), the second none
    assert cache.walks == 2 and cache.used == 1 + 9
    walked = await objects.list(repo, "main", prefix="big/", amount=5, after="big/08")
    assert [o.path for o in walked.objects] == ["big/09", "big/10", "big/11"] and not walked.has_more
    assert cache.walks == 3 and cache.used == 1 + 10  # full at big/09: the page was walked, not kept
    assert await _listed(objects, repo, prefix="small/") == (["small/1"], [])
    assert len(cache) == 2


async def test_an_entry_grows_page_by_page(g: Graveler, objects: Objects, repo: str) -> None:
    """A directory listed page by page walks each page's children once, on from where the last
    walk ended (not the whole directory at the first page); a second pagination walks nothing."""
    await _tree(g, repo, *[f"d/{i:02}" for i in range(10)], *[f"d/s{i}/x" for i in range(3)])
    g.context.listings = cache = ListingCache(min_walk=1)
    for rounds, walks in ((1, 5), (2, 5)):
        after, listed = "", []
        while True:
            page = await objects.list(repo, "main", prefix="d/", delimiter="/", amount=3, after=after)
            listed += [o.path for o in page.objects] + page.common_prefixes
            if not page.has_more:
                break
            after = page.next_after
        assert listed == [f"d/{i:02}" for i in range(10)] + [f"d/s{i}/" for i in range(3)], rounds
        assert cache.walks == walks and cache.used == 1 + 13  # 13 children: pages of 3, five walks


async def test_the_cache_is_bounded_by_children_least_recently_used_first(
    g: Graveler, objects: Objects, repo: str
) -> None:
    await _tree(g, repo, *[f"d{d}/{i}" for d in range(4) for i in range(4)])
    g.context.listings = cache = ListingCache(total_children=10, max_children=5)
    for d in (0, 1, 0, 2):  # d0 used again after d1: d1 is the least recently used when d2 comes
        assert await _listed(objects, repo, prefix=f"d{d}/") == ([f"d{d}/{i}" for i in range(4)], [])
    assert cache.walks == 3 and len(cache) == 2 and cache.used == 10  # 4 children and 1, twice
    await _listed(objects, repo, prefix="d0/")
    assert cache.walks == 3  # kept
    await _listed(objects, repo, prefix="d1/")
    assert cache.walks == 4  # evicted, walked again


async def test_an_entry_evicted_while_it_is_walked_is_not_counted(
    g: Graveler, objects: Objects, repo: str
) -> None:
    """A listing whose directory is evicted while it walks still answers; what it walked is not
    counted against the bound (it is no entry's any more)."""
    await _tree(g, repo, *[f"d{d}/{i}" for d in range(3) for i in range(4)])
    g.context.listings = cache = ListingCache(total_children=10, max_children=5)
    ctx, opened, release = g.context, asyncio.Event(), asyncio.Event()
    key = ((await g.get_commit(repo, "main")).metarange_id, b"d0/", b"")
    repository = await ctx.repository(repo)
    commit_only = Resolved((await ctx.resolve(repository, "main")).commit)

    async def slow_open(first: bytes) -> RecordCursor:
        opened.set()
        await release.wait()
        return await reading.entry_cursor(ctx, repository, commit_only, prefix=b"d0/", start=first)

    walker = asyncio.create_task(cache.page(key, b"", 1000, slow_open))
    await opened.wait()
    for d in (1, 2):  # 1 + 4 children each: d0's empty entry, the least recently used, goes
        assert await _listed(objects, repo, prefix=f"d{d}/") == ([f"d{d}/{i}" for i in range(4)], [])
    assert (len(cache), cache.used) == (2, 10)
    release.set()
    page = await asyncio.wait_for(walker, scaled(10))
    assert page is not None and [o.path for o in page.objects] == [f"d0/{i}" for i in range(4)]
    assert (len(cache), cache.used) == (2, 10)


@pytest.mark.parametrize("waiters", [1, 4])
async def test_concurrent_first_listings_walk_once(
    g: Graveler, objects: Objects, repo: str, waiters: int
) -> None:
    """Listings of a directory that arrive while its entry is being walked wait for that walk, and
    every one gets the same, complete children from it."""
    await _tree(g, repo, *[f"d{i:02}/x" for i in range(50)])
    ctx, opened, release = g.context, asyncio.Event(), asyncio.Event()
    key = ((await g.get_commit(repo, "main")).metarange_id, b"", b"/")
    repository = await ctx.repository(repo)
    commit_only = Resolved((await ctx.resolve(repository, "main")).commit)

    async def slow_open(first: bytes) -> RecordCursor:  # the first walk's cursor, once let through
        opened.set()
        await release.wait()
        return await reading.entry_cursor(ctx, repository, commit_only, start=first)

    walker = asyncio.create_task(ctx.listings.page(key, b"", 1000, slow_open))
    await opened.wait()
    listings = [asyncio.create_task(objects.list(repo, "main", delimiter="/")) for _ in range(waiters)]
    deadline = asyncio.get_running_loop().time() + scaled(10)
    for _ in range(1_000_000):  # until every listing waits on the walk (or the deadline)
        if ctx.listings.waits == waiters or asyncio.get_running_loop().time() > deadline:
            break
        await asyncio.sleep(0.001)
    assert ctx.listings.waits == waiters  # none walked on its own
    release.set()
    first = await walker
    assert first is not None and len(first.common_prefixes) == 50
    pages = await asyncio.wait_for(asyncio.gather(*listings), scaled(10))
    assert all(p == first for p in pages)
    assert ctx.listings.walks == 1


@pytest.mark.parametrize("children", [0, 7])
async def test_the_core_setting_bounds_the_cache(children: int) -> None:
    """``listing_cache_children`` reaches the context's cache; 0 turns it off (listings walk)."""
    settings = CoreSettings.model_validate({"kv_url": "memory://", "listing_cache_children": children})
    async with await open_core(settings) as core:
        g, repo = core.graveler, unique()
        await g.create_repository(repo, mem_namespace())
        await _tree(g, repo, *[f"d{i}/x" for i in range(5)])
        for _ in range(2):
            assert (await _listed(core.objects, repo))[1] == [f"d{i}/" for i in range(5)]
        assert g.context.listings.total_children == children
        assert (g.context.listings.walks, len(g.context.listings)) == ((0, 0) if children == 0 else (1, 1))


@pytest.mark.parametrize("failure", ["error", "cancel"])
async def test_a_failed_walk_keeps_nothing_and_its_waiters_walk(
    g: Graveler, objects: Objects, repo: str, failure: str
) -> None:
    """A walk that fails (the store) or is cancelled (the client left) after some children adds
    none of them; a listing that waited on it walks itself, and the entry holds each child once."""
    await _tree(g, repo, "d1/x", "d2/y", "d3/z")
    ctx, opened, release = g.context, asyncio.Event(), asyncio.Event()
    key = ((await g.get_commit(repo, "main")).metarange_id, b"", b"/")
    repository = await ctx.repository(repo)
    commit_only = Resolved((await ctx.resolve(repository, "main")).commit)

    class Failing:  # the committed cursor, stalling at its second record, then failing
        def __init__(self, inner: RecordCursor) -> None:
            self.inner, self.reads = inner, 0

        async def next(self) -> ValueRecord | None:
            self.reads += 1
            if self.reads == 2:
                opened.set()
                await release.wait()
                raise OSError("the store is down")
            return await self.inner.next()

        def seek_ge(self, key: bytes) -> None:
            self.inner.seek_ge(key)

    async def failing(first: bytes) -> RecordCursor:
        return Failing(await reading.entry_cursor(ctx, repository, commit_only, start=first))

    walker = asyncio.create_task(ctx.listings.page(key, b"", 1000, failing))
    await opened.wait()
    waiter = asyncio.create_task(objects.list(repo, "main", delimiter="/"))
    for _ in range(1000):
        if ctx.listings.waits:
            break
        await asyncio.sleep(0.001)
    assert ctx.listings.waits == 1
    if failure == "cancel":
        walker.cancel()
    else:
        release.set()
    with pytest.raises(asyncio.CancelledError if failure == "cancel" else OSError):
        await walker
    page = await asyncio.wait_for(waiter, scaled(10))
    assert page.common_prefixes == ["d1/", "d2/", "d3/"]
    assert ctx.listings.walks == 1 and ctx.listings.used == 1 + 3
    assert await _listed(objects, repo) == ([], ["d1/", "d2/", "d3/"])
    assert ctx.listings.walks == 1
