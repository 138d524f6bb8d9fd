"""Entry identities, table ids and commit ids against independently hand-built SHA-256 inputs."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakefs_core.errors import BadInputError
from lakefs_core.format.ids import TableIdHasher, commit_id, entry_identity, table_id, unix_seconds
from tests.support.profiles import examples


def i64(n: int) -> bytes:
    return b"\x02\x08" + (n & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "big")


def s(x: str | bytes) -> bytes:
    raw = x.encode() if isinstance(x, str) else x
    return b"\x01" + i64(len(raw)) + raw


def test_entry_identity_hand_built() -> None:
    expected = hashlib.sha256(
        i64(11) + s("etag1") + b"\x04" + i64(2) + s("a") + s("1") + s("b") + s("2") + s("text/plain")
    ).digest()
    assert entry_identity(11, "etag1", {"b": "2", "a": "1"}, "text/plain") == expected


def test_entry_identity_omits_empty_content_type() -> None:
    expected = hashlib.sha256(i64(0) + s("") + b"\x04" + i64(0)).digest()
    assert entry_identity(0, "", {}, "") == expected
    assert entry_identity(0, "") == expected
    assert len(expected) == 32


@settings(max_examples=examples(3), deadline=None)
@given(
    size=st.integers(0, 2**64),
    etag=st.text(max_size=40) | st.sampled_from(["\ud800", "", "é"]),
    content_type=st.sampled_from(["", "application/octet-stream", "text/\ud800"]) | st.text(max_size=20),
)
def test_plain_entry_identity_is_the_hand_built_hash(size: int, etag: str, content_type: str) -> None:
    """Entries without metadata take a one-piece hash; it must be the same hash (and the same
    refusal: sizes beyond int64, strings that are not UTF-8) as the general encoding."""
    try:
        expected = hashlib.sha256(
            i64(size) + s(etag) + b"\x04" + i64(0) + (s(content_type) if content_type else b"")
        ).digest()
        ok = size < 2**63
    except UnicodeEncodeError:
        ok = False
    if ok:
        assert entry_identity(size, etag, None, content_type) == expected
        assert entry_identity(size, etag, {}, content_type) == expected
    else:
        with pytest.raises(BadInputError):
            entry_identity(size, etag, None, content_type)


def test_entry_identity_rejects_negative_size() -> None:
    with pytest.raises(BadInputError) as e:
        entry_identity(-1, "x")
    assert e.value.field == "size"


def test_table_id_hand_built() -> None:
    records = [(b"k1", b"value-1"), (b"key-two", b"")]
    manual = hashlib.sha256(
        b"2k1|7value-1|" + b"7key-two|0|" + b"\x04" + i64(1) + s("type") + s("ranges")
    ).hexdigest()
    assert table_id(records, {"type": "ranges"}) == manual
    assert table_id(records, {"type": b"ranges"}) == manual

    h = TableIdHasher()
    for k, v in records:
        h.add(k, v)
    assert h.count == 2
    assert h.finish({"type": "ranges"}) == manual


def test_table_id_empty() -> None:
    assert table_id([], {}) == hashlib.sha256(b"\x04" + i64(0)).hexdigest()


def test_table_id_refuses_derived_props_and_reuse() -> None:
    with pytest.raises(BadInputError):
        table_id([(b"a", b"b")], {"type": "ranges", "count": "1"})
    h = TableIdHasher()
    h.finish({"type": "ranges"})
    with pytest.raises(BadInputError):
        h.add(b"k", b"v")
    with pytest.raises(BadInputError):
        h.finish({"type": "ranges"})


def test_commit_id_hand_built() -> None:
    parents = ["p" * 64, "0123abcd"]
    created = datetime(2021, 8, 5, 11, 39, 44, 900000, tzinfo=UTC)
    seconds = 1628163584
    parents_identity = hashlib.sha256(b"\x03" + i64(2) + s(parents[0]) + s(parents[1])).digest()
    manual = hashlib.sha256(
        s("commit:v1")
        + s("alice")
        + s("add files")
        + s("a83af763ba098c15369d9d6d723731eb9ce18b8dfac4f88c6f1287e772393d0e")
        + i64(seconds)
        + b"\x04"
        + i64(2)
        + s(".lakefs.merge.strategy")
        + s("dest-wins")
        + s("k")
        + s("v")
        + b"\x05"
        + b"\x00"
        + i64(32)
        + parents_identity
    ).hexdigest()

    def make(creation_date: datetime | int, parent_ids: list[str]) -> str:
        return commit_id(
            committer="alice",
            message="add files",
            metarange_id="a83af763ba098c15369d9d6d723731eb9ce18b8dfac4f88c6f1287e772393d0e",
            creation_date=creation_date,
            metadata={"k": "v", ".lakefs.merge.strategy": "dest-wins"},
            parents=parent_ids,
        )

    assert make(created, parents) == manual
    assert make(seconds, parents) == manual
    # The same instant in another zone is the same commit.
    assert make(created.astimezone(timezone(timedelta(hours=2))), parents) == manual
    # Parent order matters.
    assert make(seconds, list(reversed(parents))) != manual


def test_first_commit_id() -> None:
    manual = hashlib.sha256(
        s("commit:v1")
        + s("admin")
        + s("Repository created")
        + s("")
        + i64(1700000000)
        + b"\x04"
        + i64(0)
        + b"\x05\x00"
        + i64(32)
        + hashlib.sha256(b"\x03" + i64(0)).digest()
    ).hexdigest()
    got = commit_id(
        committer="admin", message="Repository created", metarange_id="", creation_date=1700000000
    )
    assert got == manual


def test_commit_id_rejects_string_parents() -> None:
    with pytest.raises(BadInputError):
        commit_id(committer="a", message="m", metarange_id="", creation_date=0, parents="abc")


def test_unix_seconds() -> None:
    assert unix_seconds(0) == 0
    assert unix_seconds(datetime(1970, 1, 1, 0, 0, 1, 999999, tzinfo=UTC)) == 1
    # Floors before the epoch, like Go's time.Time.Unix.
    assert unix_seconds(datetime(1969, 12, 31, 23, 59, 59, 500000, tzinfo=UTC)) == -1
    with pytest.raises(BadInputError):
        unix_seconds(datetime(2020, 1, 1))
    with pytest.raises(BadInputError):
        unix_seconds(True)
