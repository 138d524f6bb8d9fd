"""The local store never follows a symbolic link (issue 32): whatever links are planted in a namespace,
no operation creates, modifies or deletes anything outside its root, and none reads through one.

A link is planted by MOVING a real part of the namespace out of it and linking to it: the outside
tree then holds exactly the files an operation would reach by following the link (the sweep's
deletes followed ``data/evil -> /outside`` on c5cbe05). Placements: ``data/``, a slice, an object,
a dangling link at an object's name, ``_lakefs/`` and a table in it, ``.lakefs-meta/``, a sidecar
directory and a sidecar; the namespace root swapped for a link after the store opened; a root
given as a link. Every operation (put, put_batch on the compiled path, through named temporary
files and in pure Python, streamed put, get, stream, head, exists, delete, delete_batch,
delete_many, list, list_keys, copy, the leftover sweep) runs against each placement, with the
kernel's ``openat2`` and with the per-component walk that replaces it on older kernels. The tree
outside is compared, entry by entry (type, bytes, link target, mtime), before and after.

A link on a key's path is refused with :class:`BadInputError` naming the key (``delete_batch``: a
final failure ``SymlinkRefused``, never a deletion); a link in the metadata tree makes its sidecar
unreadable (the ETag is recomputed from the data) and refuses a write that needs the sidecar. The
hypothesis test plants links at random places of a random tree and checks the same for every key.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import shutil
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakefs_core.block import LocalBlockStore, local_beneath
from lakefs_core.block.base import CommonPrefix, DeleteResult, FailedKey, ObjectInfo, PutItem, SourceFile
from lakefs_core.block.local import META_DIR
from lakefs_core.block.local_keys import SYMLINK_REFUSED
from lakefs_core.block.local_leftovers import sweep_leftovers
from lakefs_core.errors import BadInputError, LakeFSError
from tests.block.test_local_batch import on_path
from tests.support.profiles import examples
from tests.support.timing import scaled

GRACE = 3600.0
OURS = b"the namespace's own bytes"


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def snapshot(tree: Path) -> dict[str, tuple[object, ...]]:
    """Every entry below ``tree`` (``tree`` itself included): type and bytes, or link target, and
    mtime; a directory's mtime changes with any entry made or removed in it."""
    out: dict[str, tuple[object, ...]] = {}
    for path in [tree, *tree.rglob("*")]:
        st = os.lstat(path)
        rel = str(path.relative_to(tree))
        if path.is_symlink():
            out[rel] = ("link", os.readlink(path), st.st_mtime_ns)
        elif path.is_dir():
            out[rel] = ("dir", st.st_mtime_ns)
        else:
            out[rel] = ("file", path.read_bytes(), st.st_mtime_ns, st.st_ino)
    return out


def aged_leftover(directory: Path) -> Path:
    """An aged temporary file (as a writer killed long ago leaves), which a sweep would remove."""
    path = directory / f".lakefs-tmp-{uuid.uuid4().hex}"
    path.write_bytes(b"partial")
    when = time.time() - 2 * GRACE
    os.utime(path, (when, when))
    return path


@pytest.fixture(params=["openat2", "walk"])
def resolver(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run with the kernel's openat2 and with the per-component O_NOFOLLOW walk (older kernels)."""
    if request.param == "openat2" and not local_beneath.openat2_in_use():
        pytest.skip("this kernel has no openat2")
    before = local_beneath.use_openat2(request.param == "openat2")
    try:
        yield request.param
    finally:
        local_beneath.use_openat2(before)


@pytest.fixture(params=["compiled", "compiled-named", "pure"])
def put_path(request: pytest.FixtureRequest) -> Iterator[str]:
    from lakefs_core.block import local_batch

    if request.param.startswith("compiled") and local_batch.LOCALPUT is None:
        pytest.skip("the extension _localput is not built")
    with on_path(request.param):
        yield request.param


def test_this_machine_uses_openat2() -> None:
    """Linux >= 5.6 has it: the suite must exercise it where the kernel does (the walk too, above)."""
    release = tuple(int(p) for p in os.uname().release.split(".")[:2] if p.isdigit())
    if os.uname().sysname != "Linux" or release < (5, 6):
        pytest.skip("no openat2 before Linux 5.6")
    if not local_beneath._kernel_has_openat2():
        pytest.skip("openat2 is refused here (a seccomp filter)")
    assert local_beneath.openat2_in_use()


# -- one placement at a time ------------------------------------------------------------------------

# name: (the link's path in the namespace, the key whose path crosses it, whether the key is refused)
PLACEMENTS = {
    "data": ("data", "data/s/secret.txt", True),
    "slice": ("data/s", "data/s/secret.txt", True),
    "object": ("data/s/secret.txt", "data/s/secret.txt", True),
    "dangling": ("data/s/secret.txt", "data/s/secret.txt", True),
    "tables": ("_lakefs", "_lakefs/range", True),
    "table": ("_lakefs/range", "_lakefs/range", True),
    "meta": (META_DIR, "data/s/secret.txt", False),
    "meta-slice": (f"{META_DIR}/data/s", "data/s/secret.txt", False),
    "sidecar": (f"{META_DIR}/data/s/secret.txt", "data/s/secret.txt", False),
}


class Scene:
    """A namespace ``root`` with a link planted at one placement, its target in ``outside``."""

    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path / "ns"
        self.outside = tmp_path / "outside"
        self.source = tmp_path / "source-file"
        self.source.write_bytes(b"from a source file")
        self.outside.mkdir()

    async def build(self) -> None:
        async with LocalBlockStore(self.root, tmp_grace_seconds=None) as store:
            await store.put("data/s/secret.txt", OURS, content_type="text/csv")  # with a sidecar
            await store.put("data/s/other", b"other", metadata={"m": "1"})
            await store.put("data/t/fine", b"fine")
            await store.put("spare/fine", b"fine")
            await store.put("_lakefs/range", b"range bytes")
            await store.put("_lakefs/dummy", b"")

    def plant(self, where: str, *, dangling: bool = False) -> None:
        """Move ``root/where`` outside and link to it (or, ``dangling``, link to nothing there)."""
        inside = self.root / where
        target = self.outside / where.replace("/", "_")
        if dangling:
            inside.unlink()
            target = self.outside / "nothing-here"
        else:
            shutil.move(inside, target)
            if target.is_dir():
                aged_leftover(target)  # the sweep must not reach it
        inside.symlink_to(target, target_is_directory=target.is_dir())

    async def plant_placement(self, name: str) -> str:
        await self.build()
        where, key, _ = PLACEMENTS[name]
        self.plant(where, dangling=name == "dangling")
        return key


async def keys_listed(store: LocalBlockStore) -> list[str]:
    return [i.key async for i in store.list() if isinstance(i, ObjectInfo)]


async def keys_of(store: LocalBlockStore) -> list[str]:
    return [k.key async for k in store.list_keys()]


async def refused(coro: object, key: str) -> None:
    with pytest.raises(BadInputError, match="symbolic link") as e:
        await coro  # type: ignore[misc]
    assert key in str(e.value)


async def body(data: bytes) -> AsyncIterator[bytes]:
    yield data[:3]
    yield data[3:]


async def run_refused(store: LocalBlockStore, scene: Scene, key: str) -> None:
    """Every operation on ``key`` (whose path crosses the link) is refused; its neighbours work."""
    await refused(store.put(key, b"x"), key)
    await refused(store.put(key, b"x", if_none_match=True), key)
    await refused(store.put(key, b"x", content_type="text/plain"), key)
    await refused(store.put(key, body(b"streamed bytes")), key)
    await refused(store.put_batch([PutItem(key, b"x")], if_none_match=True), key)
    await refused(store.put_batch([PutItem(key, b"x")]), key)
    source = SourceFile(str(scene.source), scene.source.stat().st_size, lambda e: e)
    await refused(store.put_batch([PutItem("spare/ok", b"ok"), PutItem(key, source)], concurrency=1), key)
    await refused(store.get(key), key)
    await refused(store.head(key), key)
    await refused(store.exists(key), key)
    with pytest.raises(BadInputError, match="symbolic link"):
        async for _ in store.stream(key):
            pass
    await refused(store.copy(key, "spare/copy"), key)
    await refused(store.copy("spare/fine", key), key)
    await refused(store.delete(key), key)
    with pytest.raises(LakeFSError, match="symbolic link"):
        await store.delete_many([key])
    result = await store.delete_batch([key, "spare/gone"])
    assert result.deleted == ["spare/gone"] and result.failed == [FailedKey(key, SYMLINK_REFUSED, False)]
    result = await store.delete_batch([key], if_match={key: md5(OURS)})
    assert result.deleted == [] and result.failed == [FailedKey(key, SYMLINK_REFUSED, False)]
    assert key not in await keys_listed(store)
    assert key not in await keys_of(store)
    assert await store.get("spare/fine") == b"fine" and await store.get("spare/ok") == b"ok"


async def run_unreadable_sidecar(store: LocalBlockStore, key: str) -> None:
    """The key's data file is the namespace's own, its sidecar only reachable through the link:
    reads ignore it, writes that need it are refused, bare writes and deletes work."""
    head = await store.head(key)
    assert (head.etag, head.content_type) == (md5(OURS), "application/octet-stream")
    assert await store.get(key) == OURS and await store.exists(key)
    assert key in await keys_listed(store) and key in await keys_of(store)
    await refused(store.put(key, b"typed", content_type="text/plain"), key)
    await refused(store.put(key, body(b"streamed with metadata"), metadata={"m": "2"}), key)
    await refused(store.put_batch([PutItem(key, b"typed", content_type="text/plain")]), key)
    assert (await store.put(key, b"bare")).etag == md5(b"bare")
    assert (await store.put_batch([PutItem(key, b"bare again")]))[0].etag == md5(b"bare again")
    assert (await store.head(key)).etag == md5(b"bare again")
    await store.delete(key)
    assert not await store.exists(key)
    await store.put(key, OURS)
    assert (await store.delete_batch([key])).deleted == [key]
    assert not await store.exists(key)


@pytest.mark.parametrize("placement", list(PLACEMENTS))
async def test_a_planted_link_is_never_followed(
    tmp_path: Path, placement: str, resolver: str, put_path: str
) -> None:
    scene = Scene(tmp_path)
    key = await scene.plant_placement(placement)
    ours = aged_leftover(scene.root / "spare")
    before = snapshot(scene.outside)
    async with LocalBlockStore(scene.root, tmp_grace_seconds=GRACE) as store:
        if PLACEMENTS[placement][2]:
            await run_refused(store, scene, key)
        else:
            await run_unreadable_sidecar(store, key)
        assert await keys_listed(store) == await keys_of(store)
        assert await store.sweep_leftovers() == 1  # the namespace's own leftover only
    assert not ours.exists()
    assert snapshot(scene.outside) == before


@pytest.mark.parametrize("placement", [name for name, (_, _, refused) in PLACEMENTS.items() if refused])
@pytest.mark.parametrize("how", ["delete", "delete_batch", "delete_many"])
async def test_a_delete_through_a_planted_link_leaves_the_outside_file(
    tmp_path: Path, placement: str, how: str, resolver: str
) -> None:
    """The reproduction of issue 32 at the store level: the key's file, reached through the link,
    is outside the namespace and stays; the key is refused (a failure, never a deletion)."""
    scene = Scene(tmp_path)
    key = await scene.plant_placement(placement)
    before = snapshot(scene.outside)
    async with LocalBlockStore(scene.root, tmp_grace_seconds=None) as store:
        outcome: object
        try:
            if how == "delete":
                outcome = await store.delete(key)
            elif how == "delete_many":
                outcome = await store.delete_many([key])
            else:
                outcome = await store.delete_batch([key])
        except LakeFSError as e:
            outcome = e
    assert snapshot(scene.outside) == before
    if how == "delete_batch":
        assert outcome == DeleteResult(failed=[FailedKey(key, SYMLINK_REFUSED, False)])
    else:
        assert isinstance(outcome, LakeFSError) and "symbolic link" in str(outcome)


async def test_the_listing_skips_links_to_files_and_directories(tmp_path: Path, resolver: str) -> None:
    scene = Scene(tmp_path)
    await scene.build()
    (scene.outside / "d").mkdir()
    (scene.outside / "d" / "x").write_bytes(b"x")
    (scene.outside / "f").write_bytes(b"f")
    (scene.root / "data" / "dirlink").symlink_to(scene.outside / "d", target_is_directory=True)
    (scene.root / "data" / "s" / "filelink").symlink_to(scene.outside / "f")
    (scene.root / "data" / "s" / "dangling").symlink_to(scene.outside / "nothing")
    (scene.root / "rootlink").symlink_to(scene.outside, target_is_directory=True)
    expected = [
        "_lakefs/dummy",
        "_lakefs/range",
        "data/s/other",
        "data/s/secret.txt",
        "data/t/fine",
        "spare/fine",
    ]
    async with LocalBlockStore(scene.root) as store:
        assert await keys_listed(store) == expected == await keys_of(store)
        for prefix in ("data/dirlink/", "rootlink/", "data/s/filelink"):
            assert [i async for i in store.list(prefix)] == []
            assert [k async for k in store.list_keys(prefix)] == []
        shown = [i.prefix async for i in store.list("", delimiter="/") if isinstance(i, CommonPrefix)]
        assert shown == ["_lakefs/", "data/", "spare/"]
        shown = [i.prefix async for i in store.list("data/", delimiter="/") if isinstance(i, CommonPrefix)]
        assert shown == ["data/s/", "data/t/"]
    async with LocalBlockStore(scene.root, strict_names=True) as strict:  # an import's source
        assert await keys_listed(strict) == expected  # a link is no file of the tree: not imported


async def test_a_root_swapped_for_a_link_after_opening_is_refused(
    tmp_path: Path, resolver: str, put_path: str
) -> None:
    scene = Scene(tmp_path)
    await scene.build()
    async with LocalBlockStore(scene.root, tmp_grace_seconds=GRACE) as store:
        assert await store.get("data/t/fine") == b"fine"  # opened and used (no write: no sweep yet)
        moved = tmp_path / "ns-moved"
        scene.root.rename(moved)
        shutil.copytree(moved, scene.outside / "ns-copy", symlinks=True)
        aged_leftover(scene.outside / "ns-copy" / "data" / "t")
        scene.root.symlink_to(scene.outside / "ns-copy", target_is_directory=True)
        before, kept = snapshot(scene.outside), snapshot(moved)
        key = "data/s/secret.txt"
        for op in (
            store.get(key),
            store.head(key),
            store.exists(key),
            store.put(key, b"x"),
            store.put("data/new/x", b"x"),
            store.put_batch([PutItem("data/new/y", b"y")]),
            store.put("data/new/z", body(b"streamed")),
            store.delete(key),
            keys_listed(store),
            keys_of(store),
        ):
            with pytest.raises(BadInputError, match="symbolic link"):
                await op
        result = await store.delete_batch([key, "data/t/fine"])
        assert result.deleted == [] and {f.code for f in result.failed} == {SYMLINK_REFUSED}
        assert await store.sweep_leftovers() == 0  # its root is refused: nothing swept
    assert snapshot(scene.outside) == before and snapshot(moved) == kept


async def test_a_root_given_as_a_link_is_resolved_once(tmp_path: Path, resolver: str) -> None:
    """A namespace configured through a link works in the directory the link named when the store
    opened; a later change of the link does not redirect its writes or deletes."""
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    (second / "k").write_bytes(b"second's")
    link = tmp_path / "ns-link"
    link.symlink_to(first, target_is_directory=True)
    async with LocalBlockStore(link, tmp_grace_seconds=None) as store:
        assert store.root == link and store.real_root == first
        await store.put("k", b"first's")
        link.unlink()
        link.symlink_to(second, target_is_directory=True)
        assert await store.get("k") == b"first's"
        await store.delete("k")
        await store.put("j", b"j")
    assert sorted(p.name for p in first.iterdir()) == ["j"]
    assert sorted(p.name for p in second.iterdir()) == ["k"] and (second / "k").read_bytes() == b"second's"


async def test_a_fifo_in_a_keys_place_never_blocks(tmp_path: Path, resolver: str) -> None:
    """Reading a key whose file was replaced by a FIFO (or a sidecar by one) answers at once."""
    root = tmp_path / "ns"
    async with LocalBlockStore(root) as store:
        await store.put("d/fifo", b"x")
        await store.put("d/meta", b"m", content_type="text/csv")
        os.unlink(root / "d" / "fifo")
        os.mkfifo(root / "d" / "fifo")
        os.unlink(root / META_DIR / "d" / "meta")
        os.mkfifo(root / META_DIR / "d" / "meta")
        async with asyncio.timeout(scaled(30)):
            assert not await store.exists("d/fifo")
            with pytest.raises(LakeFSError):
                await store.get("d/fifo")
            assert (await store.head("d/meta")).etag == md5(b"m")  # the FIFO is not a sidecar


# -- links anywhere (hypothesis) ----------------------------------------------------------------------

TREE = {
    "data/a/x": b"x bytes",
    "data/a/y": b"y bytes",
    "data/b/z": b"z bytes",
    "_lakefs/t1": b"table",
    "top": b"top level",
}
TYPED = {"data/a/y", "data/b/z"}  # put with a content type: a sidecar each


def _candidates() -> list[str]:
    """Every path of the built tree: directories, files, sidecar directories and sidecars."""
    out: set[str] = set()
    for key in TREE:
        parts = key.split("/")
        out.update("/".join(parts[: n + 1]) for n in range(len(parts)))
        if key in TYPED:
            meta = [META_DIR, *parts]
            out.update("/".join(meta[: n + 1]) for n in range(len(meta)))
    return sorted(out)


CANDIDATES = _candidates()


def _crosses(key: str, links: list[str]) -> bool:
    return any(key == link or key.startswith(link + "/") for link in links)


@settings(
    max_examples=examples(0.4),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    links=st.lists(st.sampled_from(CANDIDATES), min_size=1, max_size=3, unique=True),
    walk=st.booleans(),
    pure=st.booleans(),
)
def test_links_anywhere_never_lead_outside(tmp_path: Path, links: list[str], walk: bool, pure: bool) -> None:
    # A link below another planted link would be planted outside: keep the outermost ones only.
    links = [a for a in links if not any(a != b and a.startswith(b + "/") for b in links)]
    with contextlib.ExitStack() as stack:
        base = Path(stack.enter_context(__import__("tempfile").TemporaryDirectory(dir=tmp_path)))
        before_walk = local_beneath.use_openat2(not walk)
        stack.callback(local_beneath.use_openat2, before_walk)
        stack.enter_context(on_path("pure" if pure else "compiled"))
        asyncio.run(_links_anywhere(base, links))


async def _links_anywhere(base: Path, links: list[str]) -> None:
    scene = Scene(base)
    async with LocalBlockStore(scene.root, tmp_grace_seconds=None) as store:
        for key, data in TREE.items():
            await store.put(key, data, content_type="text/csv" if key in TYPED else None)
    for link in links:
        scene.plant(link)
    refused_keys = [k for k in TREE if _crosses(k, links)]
    before = snapshot(scene.outside)
    async with LocalBlockStore(scene.root, tmp_grace_seconds=None) as store:
        listed = await keys_of(store)
        assert listed == await keys_listed(store)
        assert sorted(set(TREE) - set(refused_keys)) == listed
        for key, data in TREE.items():
            if key in refused_keys:
                for op in (store.get(key), store.head(key), store.put(key, b"new"), store.delete(key)):
                    with pytest.raises(BadInputError, match="symbolic link"):
                        await op
            else:
                assert await store.get(key) == data
                assert (await store.head(key)).etag == md5(data)
                sidecar_linked = _crosses(f"{META_DIR}/{key}", links)
                try:
                    await store.put(key, data[::-1], metadata={"v": "2"})
                    assert not sidecar_linked
                except BadInputError:
                    assert sidecar_linked
        result = await store.delete_batch(list(TREE))
        assert sorted(result.deleted) == sorted(set(TREE) - set(refused_keys))
        assert sorted(f.key for f in result.failed) == sorted(refused_keys)
        assert {f.code for f in result.failed} <= {SYMLINK_REFUSED}
        assert await store.put_batch([PutItem(k, b"again") for k in result.deleted]) is not None
    sweep_leftovers(scene.root, GRACE)
    assert snapshot(scene.outside) == before
