"""Objects: upload, read (ranges), stat, delete, list with delimiter and pagination."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakefs_core.block.base import ObjectInfo
from lakefs_core.errors import BadInputError, NotFoundError
from lakefs_core.format.records import ValueRecord
from lakefs_core.kv.memory import MemoryKVStore
from lakefs_core.namespace import StorageNamespace
from lakefs_core.refs.staging import FIRST_PAGE, StagedCursor
from lakefs_core.repos import reading
from lakefs_core.repos.graveler import Graveler
from lakefs_core.repos.objects import ListPage, Objects, ObjectStat, new_entry, prefix_successor
from tests.repos.support import record, small_ranges_repo
from tests.support.profiles import examples


async def put(objects: Objects, repo: str, *paths: str, branch: str = "main") -> None:
    for path in paths:
        await objects.upload(repo, branch, path, path.encode())


async def list_all(
    objects: Objects, repo: str, ref: str, *, prefix: str = "", delimiter: str = "", amount: int = 1000
) -> tuple[list[ListPage], list[str], list[str]]:
    """Every page until has_more is False: (pages, object paths, common prefixes)."""
    pages: list[ListPage] = []
    after = ""
    while True:
        page = await objects.list(repo, ref, prefix=prefix, delimiter=delimiter, after=after, amount=amount)
        pages.append(page)
        assert len(page.objects) + len(page.common_prefixes) <= amount
        if not page.has_more:
            break
        assert page.next_after
        after = page.next_after
        assert len(pages) < 1000
    paths = [o.path for p in pages for o in p.objects]
    prefixes = [c for p in pages for c in p.common_prefixes]
    return pages, paths, prefixes


async def test_upload_stat_read(g: Graveler, objects: Objects, repo: str) -> None:
    body = b"hello, versioned world"
    stat = await objects.upload(
        repo, "main", "dir/file.txt", body, content_type="text/plain", metadata={"owner": "me"}
    )
    assert stat.path == "dir/file.txt"
    assert stat.size == len(body)
    assert stat.etag == hashlib.md5(body).hexdigest()
    assert stat.content_type == "text/plain"
    assert stat.metadata == {"owner": "me"}
    assert stat.address_type == "RELATIVE"
    assert stat.physical_address.startswith("data/")
    assert stat.last_modified is not None
    assert await objects.stat(repo, "main", "dir/file.txt") == stat
    assert await objects.read_all(repo, "main", "dir/file.txt") == body
    # The bytes live at <namespace>/<relative address>.
    r = await g.repository(repo)
    ns = StorageNamespace.parse(r.storage_namespace)
    store = await g.stores.namespace_store(ns)
    assert await store.get(ns.key(stat.physical_address)) == body


async def test_upload_streamed_body(objects: Objects, repo: str) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for i in range(5):
            yield bytes([65 + i]) * 1000

    stat = await objects.upload(repo, "main", "big", chunks())
    assert stat.size == 5000
    data = await objects.read_all(repo, "main", "big")
    assert data == b"A" * 1000 + b"B" * 1000 + b"C" * 1000 + b"D" * 1000 + b"E" * 1000


async def test_read_ranges(objects: Objects, repo: str) -> None:
    body = bytes(range(256)) * 4
    await objects.upload(repo, "main", "bin", body)

    async def read(start: int, length: int | None) -> bytes:
        return b"".join([c async for c in objects.read(repo, "main", "bin", start=start, length=length)])

    assert await read(0, None) == body
    assert await read(10, 5) == body[10:15]
    assert await read(1000, None) == body[1000:]
    assert await read(1020, 100) == body[1020:]
    assert await read(0, 0) == b""


async def test_each_upload_gets_a_fresh_address(objects: Objects, repo: str) -> None:
    a = await objects.upload(repo, "main", "same", b"one")
    b = await objects.upload(repo, "main", "same", b"two")
    assert a.physical_address != b.physical_address
    assert await objects.read_all(repo, "main", "same") == b"two"


async def test_upload_refusals(g: Graveler, objects: Objects, repo: str) -> None:
    with pytest.raises(NotFoundError):
        await objects.upload(repo, "nope", "a", b"x")
    for bad in ("", "/abs"):
        with pytest.raises(BadInputError):
            await objects.upload(repo, "main", bad, b"x")
    # A lone surrogate (a file name the OS could not decode) names no UTF-8 key: refused by field,
    # never a UnicodeEncodeError.
    with pytest.raises(BadInputError, match=r"path: 'a\\xffb' is not valid UTF-8"):
        await objects.upload(repo, "main", "a\udcffb", b"x")
    with pytest.raises(BadInputError, match=r"path: .* is not valid UTF-8"):
        await objects.stat(repo, "main", "a\udcffb")
    for field in ("prefix", "delimiter", "after"):
        with pytest.raises(BadInputError, match=rf"{field}: .* is not valid UTF-8"):
            await objects.list(repo, "main", **{field: "\ud800"})
    # Nothing was written for the refused uploads.
    r = await g.repository(repo)
    ns = StorageNamespace.parse(r.storage_namespace)
    store = await g.stores.namespace_store(ns)
    listed = [item async for item in store.list(ns.data_prefix())]
    assert listed == []


async def test_committed_objects_readable_by_commit_and_tag(g: Graveler, objects: Objects, repo: str) -> None:
    await objects.upload(repo, "main", "a", b"first")
    c1 = await g.commit(repo, "main", committer="t", message="one")
    await objects.upload(repo, "main", "a", b"second")
    await g.create_tag(repo, "v1", c1.id)
    assert await objects.read_all(repo, "main", "a") == b"second"
    assert await objects.read_all(repo, "main@", "a") == b"first"
    assert await objects.read_all(repo, c1.id, "a") == b"first"
    assert await objects.read_all(repo, "v1", "a") == b"first"


async def test_delete(g: Graveler, objects: Objects, repo: str) -> None:
    await put(objects, repo, "a", "b")
    await g.commit(repo, "main", committer="t", message="m")
    await objects.delete(repo, "main", "a")
    with pytest.raises(NotFoundError):
        await objects.stat(repo, "main", "a")
    with pytest.raises(NotFoundError):
        await objects.read_all(repo, "main", "a")
    assert (await objects.stat(repo, "main@", "a")).path == "a"
    with pytest.raises(NotFoundError):
        await objects.delete(repo, "main", "a")
    with pytest.raises(NotFoundError):
        await objects.delete(repo, "main", "missing")
    _, paths, _ = await list_all(objects, repo, "main")
    assert paths == ["b"]
    await g.commit(repo, "main", committer="t", message="delete a")
    _, paths, _ = await list_all(objects, repo, "main@")
    assert paths == ["b"]


async def test_read_missing_data_names_the_address(g: Graveler, objects: Objects, repo: str) -> None:
    stat = await objects.upload(repo, "main", "gone", b"x")
    r = await g.repository(repo)
    ns = StorageNamespace.parse(r.storage_namespace)
    await (await g.stores.namespace_store(ns)).delete(ns.key(stat.physical_address))
    with pytest.raises(NotFoundError, match=stat.physical_address):
        await objects.read_all(repo, "main", "gone")


async def test_stat_of_a_staged_record_without_data(g: Graveler, objects: Objects, repo: str) -> None:
    rec = record("meta-only")
    await g.set_entry(repo, "main", rec)
    stat = await objects.stat(repo, "main", "meta-only")
    assert stat.content_type == "application/octet-stream"
    assert stat.size == 1


async def test_list_flat_with_pagination(g: Graveler, objects: Objects, repo: str) -> None:
    paths = sorted(f"k{i:03d}" for i in range(25))
    await put(objects, repo, *paths[:15])
    await g.commit(repo, "main", committer="t", message="m")
    await put(objects, repo, *paths[15:])
    for amount in (1, 3, 5, 7, 25, 26, 1000):
        pages, listed, prefixes = await list_all(objects, repo, "main", amount=amount)
        assert listed == paths, amount
        assert prefixes == []
        assert len(pages) == -(-25 // amount) if amount <= 25 else len(pages) == 1
    page = await objects.list(repo, "main", amount=5, after="k012")
    assert [o.path for o in page.objects] == paths[13:18]
    assert page.has_more and page.next_after == "k017"
    with pytest.raises(BadInputError):
        await objects.list(repo, "main", amount=0)
    with pytest.raises(BadInputError):
        await objects.list(repo, "main", amount=10_001)


async def test_list_with_delimiter(g: Graveler, objects: Objects, repo: str) -> None:
    layout = [
        "a.txt",
        "dir/x",
        "dir/y",
        "dir/sub/z",
        "dir2/q",
        "dir/",  # an object whose key ends with the delimiter
        "e/f/g/h",
        "z",
    ]
    await put(objects, repo, *layout)
    page = await objects.list(repo, "main", delimiter="/")
    assert [o.path for o in page.objects] == ["a.txt", "z"]
    assert page.common_prefixes == ["dir/", "dir2/", "e/"]
    assert not page.has_more
    page = await objects.list(repo, "main", prefix="dir/", delimiter="/")
    assert [o.path for o in page.objects] == ["dir/", "dir/x", "dir/y"]
    assert page.common_prefixes == ["dir/sub/"]
    page = await objects.list(repo, "main", prefix="dir", delimiter="/")
    assert page.objects == [] and page.common_prefixes == ["dir/", "dir2/"]
    page = await objects.list(repo, "main", prefix="e/", delimiter="/")
    assert page.objects == [] and page.common_prefixes == ["e/f/"]
    page = await objects.list(repo, "main", prefix="nothing/", delimiter="/")
    assert page == ListPage([], [], False, "")


async def test_list_delimiter_pagination_with_common_prefix_at_page_boundary(
    g: Graveler, objects: Objects, repo: str
) -> None:
    # Order: a0 a1 | p/ (many keys under it) | b0 ... ; with amount=3 the first page ends on "p/".
    many = [f"p/{i:03d}" for i in range(50)]
    await put(objects, repo, "a0", "a1", *many[:20])
    await g.commit(repo, "main", committer="t", message="m")
    await put(objects, repo, *many[20:], "q0", "q1", "r/1", "r/2", "s")
    page = await objects.list(repo, "main", delimiter="/", amount=3)
    assert [o.path for o in page.objects] == ["a0", "a1"]
    assert page.common_prefixes == ["p/"]
    assert page.has_more and page.next_after == "p/"
    page2 = await objects.list(repo, "main", delimiter="/", amount=3, after=page.next_after)
    assert [o.path for o in page2.objects] == ["q0", "q1"]
    assert page2.common_prefixes == ["r/"]
    assert page2.has_more and page2.next_after == "r/"
    page3 = await objects.list(repo, "main", delimiter="/", amount=3, after=page2.next_after)
    assert [o.path for o in page3.objects] == ["s"] and page3.common_prefixes == []
    assert not page3.has_more
    for amount in (1, 2, 3, 4, 100):
        _, paths, prefixes = await list_all(objects, repo, "main", delimiter="/", amount=amount)
        assert paths == ["a0", "a1", "q0", "q1", "s"], amount
        assert prefixes == ["p/", "r/"], amount
    # Exactly filling a page with a trailing common prefix and nothing after it: no extra page.
    page = await objects.list(repo, "main", prefix="r", delimiter="/", amount=1)
    assert page.common_prefixes == ["r/"] and not page.has_more


async def test_list_delimiter_skips_prefixes_without_reading_them(
    g: Graveler, repo: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(300):
        await g.set_entry(repo, "main", record(f"big/{i:04d}"))
    await g.commit(repo, "main", committer="t", message="m")
    for i in range(300):
        await g.set_entry(repo, "main", record(f"big/{i:04d}x"))
    await g.set_entry(repo, "main", record("tail"))
    yielded = 0
    next_entry = reading.EntryCursor.next
    staged_rows = 0
    staged_read = StagedCursor._read

    async def counting(self: reading.EntryCursor) -> ValueRecord | None:
        """Counts the entries the listing reads (Objects lists through reading.EntryCursor)."""
        nonlocal yielded
        found = await next_entry(self)
        yielded += found is not None
        return found

    async def counting_rows(self: StagedCursor) -> None:
        """Counts the KV rows the staging cursor reads."""
        nonlocal staged_rows
        await staged_read(self)
        staged_rows += len(self._page)

    monkeypatch.setattr(reading.EntryCursor, "next", counting)
    monkeypatch.setattr(StagedCursor, "_read", counting_rows)
    page = await Objects(g).list(repo, "main", delimiter="/")
    assert page.common_prefixes == ["big/"] and [o.path for o in page.objects] == ["tail"]
    assert 0 < yielded <= 3
    # a small first page, then a seek past big/ (not a page of 1,000 of its 300 staged keys)
    assert 0 < staged_rows <= 2 * FIRST_PAGE


async def test_list_on_a_branch_with_tombstones_across_pages(
    g: Graveler, objects: Objects, repo: str
) -> None:
    await put(objects, repo, *[f"k{i}" for i in range(10)])
    await g.commit(repo, "main", committer="t", message="m")
    for i in range(0, 10, 2):
        await objects.delete(repo, "main", f"k{i}")
    _, paths, _ = await list_all(objects, repo, "main", amount=2)
    assert paths == [f"k{i}" for i in range(1, 10, 2)]


def test_prefix_successor() -> None:
    assert prefix_successor(b"a/") == b"a0"
    assert prefix_successor(b"a\xff") == b"b"
    assert prefix_successor(b"\xff\xff") is None


_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
_ZONES = [UTC, timezone(timedelta(hours=14)), timezone(-timedelta(hours=9, minutes=30))]


@st.composite
def _uploads(draw: st.DrawFn) -> tuple[str, ObjectInfo, dict[str, str] | None, datetime]:
    path = draw(st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=30))
    size = draw(st.integers(0, 2**62))
    content_type = draw(st.one_of(st.none(), _text))
    info = ObjectInfo(key="ns/data/x", size=size, etag=draw(_text), content_type=content_type)
    metadata = draw(st.one_of(st.none(), st.dictionaries(_text, _text, max_size=4)))
    # Days inside the range keep the instant within years 1-9999 in UTC for any offset used here.
    naive = draw(st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)))
    return path, info, metadata, naive.replace(tzinfo=draw(st.sampled_from(_ZONES)))


@settings(max_examples=examples(3), deadline=None)
@given(_uploads())
def test_the_stat_of_a_new_entry_is_what_decoding_it_gives(
    upload: tuple[str, ObjectInfo, dict[str, str] | None, datetime],
) -> None:
    """Uploads build the returned ObjectStat from the fields instead of decoding the entry they just
    encoded: it must be exactly the decoded one, down to the timestamp's zone."""
    path, info, metadata, when = upload
    record, stat = new_entry(path.encode(), "data/gabc/def", info, metadata, when)
    decoded = ObjectStat.from_record(record)
    assert stat == decoded
    assert stat.last_modified is not None and decoded.last_modified is not None
    assert stat.last_modified.tzinfo == decoded.last_modified.tzinfo == UTC
    assert stat.last_modified.isoformat() == decoded.last_modified.isoformat()


_list_keys = st.text("ab/", min_size=1, max_size=3)


@settings(max_examples=examples(0.5), deadline=None)
@given(
    keys=st.tuples(
        st.sets(_list_keys, max_size=30), st.sets(_list_keys, max_size=30), st.sets(_list_keys, max_size=8)
    ),
    prefix=st.sampled_from(["", "a", "a/", "b/", "/"]),
    delimiter=st.sampled_from(["", "/", "b"]),
    amount=st.integers(1, 7),
)
def test_listing_pages_agree_with_a_model(
    keys: tuple[set[str], set[str], set[str]], prefix: str, delimiter: str, amount: int
) -> None:
    """Committed, staged and deleted keys over one another, every prefix, delimiter and page size:
    the pages of ``Objects.list`` (seeking cursors over the staging token and the commit) are the
    model's listing, cut into pages."""
    committed, staged, deleted = keys
    visible = sorted((committed | staged) - deleted)
    expected: list[tuple[str, bool]] = []  # (path or common prefix, is a common prefix), in order
    for key in visible:
        if not key.startswith(prefix):
            continue
        cut = key.find(delimiter, len(prefix)) if delimiter else -1
        item = (key, False) if cut < 0 else (key[: cut + len(delimiter)], True)
        if not expected or expected[-1] != item:
            expected.append(item)

    async def run() -> list[tuple[str, bool]]:
        kv = MemoryKVStore()
        g, repo = await small_ranges_repo(kv)
        if committed:
            await g.set_entries(repo, "main", [record(k) for k in sorted(committed)])
            await g.commit(repo, "main", committer="t", message="m")
        if staged:
            await g.set_entries(repo, "main", [record(k, "staged") for k in sorted(staged)])
        if deleted:
            await g.delete_entries(repo, "main", [k.encode() for k in sorted(deleted)])
        listed: list[tuple[str, bool]] = []
        after = ""
        while True:
            page = await Objects(g).list(
                repo, "main", prefix=prefix, delimiter=delimiter, after=after, amount=amount
            )
            assert len(page.objects) + len(page.common_prefixes) <= amount
            items = [(o.path, False) for o in page.objects] + [(p, True) for p in page.common_prefixes]
            listed.extend(sorted(items))
            if not page.has_more:
                await kv.close()
                return listed
            after = page.next_after

    assert asyncio.run(run()) == expected
