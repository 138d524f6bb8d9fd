"""The local store's batched small puts: the compiled path (``block/_localput``) against the
pure-Python one, on real files in the test's tmp dir.

Every test runs on each path (``path`` fixture: compiled through unnamed files, compiled through
named temporary files, pure) and checks what a caller sees: the results, the files, the typed
errors, no temporary file left behind. The model test generates batches with objects already in
the way (the same key, a directory, an object where a prefix should be) and sources that changed
or vanished since they were listed, and compares the paths' outcomes and trees. Which names a put
makes in the directory is watched with inotify (Linux).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import hashlib
import os
import struct
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakefs_core.block import LocalBlockStore, local_batch, local_beneath
from lakefs_core.block import local as local_module
from lakefs_core.block.base import ObjectInfo, PutItem, SourceFile
from lakefs_core.block.local import BARE_MAX_BYTES, META_DIR, TMP_PREFIX
from lakefs_core.errors import (
    BadInputError,
    ConflictError,
    LakeFSError,
    NotFoundError,
    PreconditionFailedError,
)
from tests.support.profiles import examples

needs_extension = pytest.mark.skipif(
    local_batch.LOCALPUT is None, reason="the extension _localput is not built"
)


class SourceError(LakeFSError):
    """What the test's ``describe`` turns a source's OSError into."""


def describe(e: OSError) -> Exception:
    if isinstance(e, FileNotFoundError):
        return NotFoundError(f"no such source: {e.filename}")
    return SourceError(f"cannot read the source: {e.strerror}")


def source(path: Path, size: int | None = None) -> SourceFile:
    return SourceFile(str(path), path.stat().st_size if size is None else size, describe)


@contextlib.contextmanager
def on_path(path: str) -> Iterator[None]:
    """Run the local store on the compiled path (``"compiled"``: create-only puts through unnamed
    files, which this machine's filesystems have; ``"compiled-named"``: through named temporary
    files, as on a system without them) or on the pure-Python one (``"pure"``)."""
    saved, saved_put = local_module.LOCALPUT, local_module.put_compiled
    if path == "pure":
        local_module.LOCALPUT = None
    if path == "compiled-named":

        def named(*args: Any, **kwargs: Any) -> Any:
            return saved_put(*args, **{**kwargs, "unnamed": False})

        local_module.put_compiled = named
    try:
        yield
    finally:
        local_module.LOCALPUT, local_module.put_compiled = saved, saved_put


@pytest.fixture(params=["compiled", "compiled-named", "pure"])
def path(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param.startswith("compiled") and local_batch.LOCALPUT is None:
        pytest.skip("the extension _localput is not built")
    with on_path(request.param):
        yield request.param


@pytest.fixture
async def store(local_root: Path, path: str) -> AsyncIterator[LocalBlockStore]:
    async with LocalBlockStore(local_root) as s:
        yield s


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def leftovers(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob(f"{TMP_PREFIX}*"))


def same_info(a: ObjectInfo, b: ObjectInfo) -> bool:
    return (a.key, a.size, a.etag, a.content_type, dict(a.metadata)) == (
        b.key,
        b.size,
        b.etag,
        b.content_type,
        dict(b.metadata),
    )


# -- both paths, one batch ---------------------------------------------------------------------------


async def test_a_mixed_batch(store: LocalBlockStore, local_root: Path, tmp_path: Path) -> None:
    """Bytes and source files, bare and not (metadata, content type, over BARE_MAX_BYTES), in new
    nested directories: every result right, every file in place, nothing left behind."""
    src = tmp_path / "src"
    src.mkdir()
    bodies = {f"s{i}": bytes([i]) * (i * 37) for i in range(10)}
    for name, data in bodies.items():
        (src / name).write_bytes(data)
    big = b"B" * (BARE_MAX_BYTES + 1)
    items = [PutItem(f"a/b{i % 3}/s{i}", source(src / f"s{i}")) for i in range(10)]
    items += [
        PutItem("a/bytes", b"plain bytes"),
        PutItem("a/empty", b""),
        PutItem("c/typed", b"<p/>", content_type="text/html"),
        PutItem("c/meta", b"m", metadata={"owner": "x"}),
        PutItem("c/big", big),
        PutItem("c/bare-max", b"E" * BARE_MAX_BYTES),
    ]
    infos = await store.put_batch(items, if_none_match=True, concurrency=3)
    expected = [bodies[f"s{i}"] for i in range(10)] + [
        b"plain bytes",
        b"",
        b"<p/>",
        b"m",
        big,
        b"E" * BARE_MAX_BYTES,
    ]
    assert [i.key for i in infos] == [item.key for item in items]
    for item, info, data in zip(items, infos, expected, strict=True):
        assert (info.size, info.etag) == (len(data), md5(data))
        assert (local_root / item.key).read_bytes() == data
        assert same_info(await store.head(item.key), info)
        assert info.last_modified is not None
    assert infos[12].content_type == "text/html" and infos[13].metadata == {"owner": "x"}
    assert sorted(p.name for p in (local_root / META_DIR / "c").iterdir()) == ["big", "meta", "typed"]
    assert leftovers(local_root) == []


async def test_create_only_refuses_an_existing_key(store: LocalBlockStore, local_root: Path) -> None:
    await store.put("k/taken", b"first")
    with pytest.raises(PreconditionFailedError):
        await store.put_batch([PutItem("k/free", b"a"), PutItem("k/taken", b"second")], if_none_match=True)
    assert (local_root / "k/taken").read_bytes() == b"first"
    assert leftovers(local_root) == []


async def test_overwrite_drops_an_earlier_sidecar(store: LocalBlockStore, local_root: Path) -> None:
    """A bare overwrite of a key written with metadata: the old sidecar must not describe it."""
    await store.put("k", b"old", content_type="text/plain", metadata={"m": "1"})
    assert (local_root / META_DIR / "k").is_file()
    [info] = await store.put_batch([PutItem("k", b"new!")])
    assert not (local_root / META_DIR / "k").exists()
    head = await store.head("k")
    assert same_info(head, info) and (head.content_type, head.metadata) == ("application/octet-stream", {})


@pytest.mark.parametrize(
    ("existing", "key", "error"),
    [
        ("dir/below", "dir", ConflictError),  # keys below this key exist
        ("obj", "obj/below", ConflictError),  # a prefix of this key is an object
    ],
)
@pytest.mark.parametrize("create_only", [True, False])
async def test_layout_conflicts(
    store: LocalBlockStore,
    local_root: Path,
    *,
    existing: str,
    key: str,
    error: type[Exception],
    create_only: bool,
) -> None:
    await store.put(existing, b"x")
    with pytest.raises(error):
        await store.put_batch([PutItem(key, b"y")], if_none_match=create_only)
    assert leftovers(local_root) == []


@pytest.mark.parametrize(
    ("content", "listed"),
    [(b"abc", 3), (b"grown since it was listed", 3), (b"ab", 3), (b"", 2), (b"x" * 100, 0)],
)
async def test_a_source_is_copied_as_it_is_now(
    store: LocalBlockStore, local_root: Path, tmp_path: Path, content: bytes, listed: int
) -> None:
    f = tmp_path / "f"
    f.write_bytes(content)
    [info] = await store.put_batch([PutItem("k", source(f, listed))], if_none_match=True)
    assert (local_root / "k").read_bytes() == content
    assert (info.size, info.etag) == (len(content), md5(content))
    assert leftovers(local_root) == []


async def test_a_missing_source_raises_the_callers_error(
    store: LocalBlockStore, local_root: Path, tmp_path: Path
) -> None:
    with pytest.raises(NotFoundError, match="no such source"):
        await store.put_batch([PutItem("k", SourceFile(str(tmp_path / "gone"), 3, describe))])
    assert not (local_root / "k").exists() and leftovers(local_root) == []


@pytest.mark.parametrize("kind", ["directory", "fifo", "device"])
async def test_a_source_that_is_not_a_regular_file_now(
    store: LocalBlockStore, local_root: Path, tmp_path: Path, kind: str
) -> None:
    """Listed as a file, something else when read: a FIFO would block the reader forever and a
    device (/dev/zero) never end. Refused at once with the caller's error, nothing written."""
    src = tmp_path / "swapped"
    if kind == "directory":
        src.mkdir()
    elif kind == "fifo":
        os.mkfifo(src)
    else:
        src.symlink_to("/dev/zero")
    with pytest.raises(SourceError, match="not a regular file"):
        await asyncio.wait_for(store.put_batch([PutItem("k", SourceFile(str(src), 3, describe))]), 30)
    assert not (local_root / "k").exists() and leftovers(local_root) == []


async def test_a_source_that_grew_past_the_limit_is_refused(
    store: LocalBlockStore, local_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lakefs_core.block import base

    monkeypatch.setattr(base.read_small_file, "__defaults__", (1000,))  # the limit, for this test
    f = tmp_path / "f"
    f.write_bytes(b"x" * 1001)
    with pytest.raises(SourceError, match="over 1000 bytes now"):
        await store.put_batch([PutItem("k", SourceFile(str(f), 10, describe))])
    f.write_bytes(b"x" * 1000)  # at the limit: read whole
    [info] = await store.put_batch([PutItem("k", SourceFile(str(f), 10, describe))])
    assert info.size == 1000 and leftovers(local_root) == []


def chattr(flag: str, path: Path) -> bool:
    return subprocess.run(["chattr", flag, str(path)], capture_output=True, check=False).returncode == 0


async def test_an_unwritable_directory(store: LocalBlockStore, local_root: Path) -> None:
    """Creating the temporary file fails (an immutable directory: root too is refused): the same
    typed error on both paths, and the directory is as it was."""
    d = local_root / "frozen"
    d.mkdir()
    if not chattr("+i", d):
        pytest.skip("chattr +i is not available here")
    try:
        with pytest.raises(LakeFSError) as caught:
            await store.put_batch([PutItem("frozen/k", b"x")], if_none_match=True)
        assert "frozen/k" in str(caught.value)
        assert list(d.iterdir()) == []
    finally:
        assert chattr("-i", d)


@pytest.mark.parametrize(
    ("path", "size", "field"),
    [
        ("", 1, "body.path"),
        ("a\0b", 1, "body.path"),
        (b"/bytes", 1, "body.path"),
        ("/f", -1, "body.size"),
        ("/f", 1.0, "body.size"),
        ("/f", True, "body.size"),
    ],
)
def test_a_source_file_is_checked_when_made(path: object, size: object, field: str) -> None:
    """A NUL would cut the path short in C (another file); a wrong size would size a buffer."""
    with pytest.raises(BadInputError) as caught:
        SourceFile(path, size, describe)  # type: ignore[arg-type]
    assert caught.value.field == field


# -- the compiled path itself --------------------------------------------------------------------------


@needs_extension
async def test_eligible_objects_never_call_their_loader(
    local_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bare source files and bytes go through the extension; only the rest is loaded in Python."""
    loaded: list[str] = []
    real = local_module.load_body

    def spy(body: object) -> bytes:
        loaded.append(body.path if isinstance(body, SourceFile) else repr(body)[:20])
        return real(body)  # type: ignore[arg-type]

    monkeypatch.setattr(local_module, "load_body", spy)
    (tmp_path / "f").write_bytes(b"small")
    items = [
        PutItem("new/dir/a", source(tmp_path / "f")),  # a directory to make: the extension gives up
        PutItem("new/dir/b", source(tmp_path / "f")),
        PutItem("new/dir/c", b"bytes"),
        PutItem("new/dir/typed", b"t", content_type="text/plain"),
    ]
    async with LocalBlockStore(local_root) as store:
        await store.put_batch(items, concurrency=1)
    # a hop hands a, b and c to the extension; each falls back (new/dir does not exist yet)
    assert len(loaded) == 4
    loaded.clear()
    async with LocalBlockStore(local_root) as store:
        await store.put_batch([PutItem(f"new/dir/{k}", source(tmp_path / "f")) for k in "xyz"], concurrency=1)
    assert loaded == []  # the directory exists now: all three were written in C


IN_CREATE = 0x100
_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (then the name)


@contextlib.contextmanager
def created_names(directory: Path) -> Iterator[list[str]]:
    """The names made in ``directory`` while the block runs (inotify's IN_CREATE: a file created
    or linked there), in order."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    if fd < 0:
        pytest.skip("no inotify here")
    names: list[str] = []
    try:
        if libc.inotify_add_watch(fd, os.fsencode(directory), IN_CREATE) < 0:
            pytest.skip("cannot watch the directory")
        yield names
        buf = b""
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(fd, 1 << 16):
                buf += chunk
        while buf:
            _, mask, _, size = _EVENT.unpack_from(buf)
            name = buf[_EVENT.size : _EVENT.size + size].rstrip(b"\0").decode()
            if mask & IN_CREATE:
                names.append(name)
            buf = buf[_EVENT.size + size :]
    finally:
        os.close(fd)


@needs_extension
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="O_TMPFILE and inotify are Linux's")
@pytest.mark.parametrize("path", ["compiled", "compiled-named"])
async def test_create_only_puts_make_one_name_per_object(path: str, local_root: Path, tmp_path: Path) -> None:
    """Through unnamed files a create-only put makes only its object's name in the directory (no
    temporary name made and removed), and the files are the same as through named ones: content,
    permissions. Puts that may overwrite still go through a temporary name (``rename``)."""
    (tmp_path / "f").write_bytes(b"from a file")
    keys = [f"slice/o{i:02d}" for i in range(20)]
    with on_path(path):
        async with LocalBlockStore(local_root) as store:
            await store.put("slice/first", b"makes the directory")
            with created_names(local_root / "slice") as names:
                infos = await store.put_batch(
                    [PutItem(k, source(tmp_path / "f") if i % 2 else b"bytes") for i, k in enumerate(keys)],
                    if_none_match=True,
                    concurrency=4,
                )
            assert [i.key for i in infos] == keys
            temporary = [n for n in names if n.startswith(TMP_PREFIX)]
            assert sorted(n for n in names if not n.startswith(TMP_PREFIX)) == [k[6:] for k in keys]
            assert (temporary == []) is (path == "compiled"), names
            with created_names(local_root / "slice") as names:
                await store.put_batch([PutItem("slice/over", b"x")], if_none_match=False)
            # its temporary name is made, then renamed into place (a move, not a create)
            assert len(names) == 1 and names[0].startswith(TMP_PREFIX), names
    for i, k in enumerate(keys):
        assert (local_root / k).read_bytes() == (b"from a file" if i % 2 else b"bytes")
    modes = {(local_root / k).stat().st_mode for k in keys}
    assert modes == {(local_root / "slice" / "first").stat().st_mode}
    assert leftovers(local_root) == []


@needs_extension
def test_a_failure_after_the_object_is_in_place_raises(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """UNLINK_FAILED (the create-only link succeeded, removing the temporary name did not) is an
    error, as on the pure path; FALLBACK hands the object back."""
    from lakefs_core.block._common import check_put_batch

    class Fake:
        @staticmethod
        def put_files(*args: object) -> tuple[list[tuple[object, ...]], bool]:
            return [
                (local_batch.FALLBACK, 2, None, 0, 0, 0, 0, 0),
                (local_batch.UNLINK_FAILED, 13, b"x", 1, 2, 1, 3, 0),
            ], True

    monkeypatch.setattr(local_batch, "LOCALPUT", Fake)
    items = check_put_batch([PutItem("a", b"x"), PutItem("b", b"x")], 1)
    parts = [[item.key] for item in items]
    dirs = local_beneath.Dirs(local_beneath.Root(str(tmp_path)))

    def where(key: str) -> str:
        return f"local://{key}"

    with pytest.raises(LakeFSError, match="local://b"):
        local_batch.put_compiled(items, [0, 1], parts, dirs, where, exclusive=True, unnamed=True)
    monkeypatch.setattr(
        Fake,
        "put_files",
        staticmethod(lambda *a: ([(local_batch.FALLBACK, 2, None, 0, 0, 0, 0, 0)], False)),
    )
    assert local_batch.put_compiled(items, [0], parts, dirs, where, exclusive=True, unnamed=True) == (
        [],
        [0],
        False,
    )
    dirs.close()


def test_extension_is_in_use_in_ci() -> None:
    if os.environ.get("CI") != "true":
        pytest.skip("only CI requires the extension (it builds it with `make venv`)")
    assert os.environ.get("LAKEFS_PURE_PYTHON") != "1"
    assert local_batch.LOCALPUT is not None, "CI must build lakefs_core/block/_localput.pyx (see setup.py)"


# -- model: the two paths agree ------------------------------------------------------------------------

KEYS = ["a", "b", "d/a", "d/b", "d/e/f", "a/x"]  # "a" and "a/x" (and "d/e/f" after "d/e") collide

item_st = st.tuples(
    st.sampled_from(KEYS),
    st.sampled_from(["bytes", "source", "grown", "gone", "typed"]),
    st.integers(0, 40),
)


def _prefix_free(batch: list[tuple[str, str, int]]) -> bool:
    keys = [k for k, _, _ in batch]
    return not any(a != b and b.startswith(a + "/") for a in keys for b in keys)


# One object per key and no key below another in a batch: each object's outcome then depends on
# what was there before the batch only, never on the order the batch's objects are written in.
batch_st = st.lists(item_st, min_size=1, max_size=8, unique_by=lambda t: t[0]).filter(_prefix_free)
before_st = st.lists(st.tuples(st.sampled_from([*KEYS, "d/e"]), st.booleans()), max_size=3)


def outcome(
    base: Path,
    path: str,
    before: list[tuple[str, bool]],
    batch: list[tuple[str, str, int]],
    create_only: bool,
) -> tuple[object, ...]:
    """In a fresh root below ``base``, on the ``path`` given: put ``before`` one by one (skipping
    what conflicts), then ``batch``. What a caller sees."""
    root, srcdir = base / "root", base / "src"
    srcdir.mkdir(parents=True)
    root.mkdir()

    async def run() -> tuple[object, dict[str, tuple[object, ...]]]:
        async with LocalBlockStore(root) as store:
            for key, with_meta in before:
                with contextlib.suppress(LakeFSError):
                    await store.put(key, key.encode(), **({"metadata": {"m": "1"}} if with_meta else {}))
            items = []
            for n, (key, kind, size) in enumerate(batch):
                data = bytes([65 + n]) * size
                f = srcdir / f"{n}"
                f.write_bytes(data + (b"+" if kind == "grown" else b""))
                if kind == "gone":
                    f.unlink()
                body = data if kind in ("bytes", "typed") else SourceFile(str(f), size, describe)
                items.append(PutItem(key, body, content_type="text/plain" if kind == "typed" else None))
            try:
                infos = await store.put_batch(items, if_none_match=create_only, concurrency=2)
                result: object = [(i.key, i.size, i.etag, i.content_type, dict(i.metadata)) for i in infos]
            except LakeFSError as e:
                result = type(e).__name__
            heads = {}
            for key in KEYS:
                with contextlib.suppress(LakeFSError):
                    h = await store.head(key)
                    heads[key] = (h.size, h.etag, h.content_type, dict(h.metadata))
        return result, heads

    with on_path(path):
        result, heads = asyncio.run(run())
    # sidecars too: a stale one is ignored by head, but must not be left to match a reused inode
    sidecars = sorted(str(p.relative_to(root)) for p in (root / META_DIR).rglob("*") if p.is_file())
    return result, (heads, [s for s in sidecars if not s.startswith(f"{META_DIR}/.")]), leftovers(root)


@needs_extension
@settings(
    max_examples=examples(0.6),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(before=before_st, batch=batch_st, create_only=st.booleans())
def test_the_paths_agree(
    tmp_path: Path, before: list[tuple[str, bool]], batch: list[tuple[str, str, int]], create_only: bool
) -> None:
    """The compiled path (through unnamed files and through named ones) and the pure path give the
    same results and leave the same objects, or all fail. Which object's error a failed batch
    raises is not defined (objects are written concurrently, the first failure raises), so a
    failure must be one that some object of the batch raises when put alone (pure path); a failed
    batch may have written some of its objects (the contract), so then the objects are not
    compared. No path leaves a temporary file."""
    import tempfile

    with tempfile.TemporaryDirectory(dir=tmp_path) as d:
        base = Path(d)
        compiled = outcome(base / "compiled", "compiled", before, batch, create_only)
        named = outcome(base / "named", "compiled-named", before, batch, create_only)
        pure = outcome(base / "pure", "pure", before, batch, create_only)
        assert compiled[2] == named[2] == pure[2] == []
        results = (compiled[0], named[0], pure[0])
        if any(isinstance(r, str) for r in results):
            alone = [
                outcome(base / f"alone{n}", "pure", before, [item], create_only)[0]
                for n, item in enumerate(batch)
            ]
            errors = {r for r in alone if isinstance(r, str)}
            assert all(isinstance(r, str) for r in results), results
            assert set(results) <= errors, (results, alone)
        else:
            assert compiled[:2] == named[:2] == pure[:2]


@settings(max_examples=examples(0.5), deadline=None)
@given(st.lists(st.lists(st.integers(0, 40), max_size=30), max_size=6))
def test_a_hops_etags_are_remembered_as_one_by_one(hops: list[list[int]]) -> None:
    """``EtagCache.remember_keys`` (a hop's ETags under one lock) leaves the cache as
    ``remember_key`` per object does, eviction of the least recently used included (the cache
    shrunk to 16 entries, so that hops overflow it)."""
    from lakefs_core.block import local_meta

    batched, single = local_meta.EtagCache(), local_meta.EtagCache()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(local_meta, "_ETAG_CACHE_SIZE", 16)
        for n, hop in enumerate(hops):
            pairs = [((1, inode, 3, 4), f"etag-{n}-{inode}") for inode in hop]
            batched.remember_keys(pairs)
            for key, etag in pairs:
                single.remember_key(key, etag)
            assert list(batched._etags.items()) == list(single._etags.items())
