"""Property tests: apply-changes, diff and three-way merge over real range files equal dict models."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakefs_core.committed.apply import apply_changes
from lakefs_core.committed.diff import diff
from lakefs_core.committed.merge import merge
from lakefs_core.committed.metarange import MetaRange
from lakefs_core.committed.model import Change, DiffType, MergeStrategy, ValueRecord
from lakefs_core.committed.tables import TableStore
from lakefs_core.errors import BadInputError, MergeConflictError, NoChangesError
from lakefs_core.format.splitter import SplitPolicy
from tests.committed.support import memory_tables
from tests.support.profiles import examples

T = TypeVar("T")
Model = dict[bytes, bytes]

# Small ranges so that a few dozen keys span many ranges and every boundary case is exercised.
SMALL = SplitPolicy(range_raggedness_entries=3)

keys_st = st.binary(min_size=1, max_size=3).map(lambda b: b"k/" + b)
values_st = st.sampled_from([b"v1", b"v2", b"v3", b"v4"])
model_st = st.dictionaries(keys_st, values_st, max_size=40)
changes_st = st.dictionaries(keys_st, st.one_of(st.none(), values_st), max_size=25)


def run(coro_fn: Callable[[], Awaitable[T]]) -> T:
    async def main() -> T:
        return await coro_fn()

    return asyncio.run(main())


def record(key: bytes, value: bytes) -> ValueRecord:
    return ValueRecord(key, hashlib.sha256(value).digest(), value)


async def build(tables: TableStore, model: Model, policy: SplitPolicy = SMALL) -> MetaRange:
    empty = await MetaRange.load(tables, "")
    changes = [Change(k, record(k, model[k])) for k in sorted(model)]
    result = await apply_changes(tables, empty, changes, policy=policy, allow_empty=True)
    return await MetaRange.load(tables, result.metarange_id)


async def contents(mr: MetaRange) -> Model:
    out: Model = {}
    async for rec in mr:
        assert rec.identity == hashlib.sha256(rec.data).digest()
        out[rec.key] = rec.data
    return out


def apply_model(base: Model, changes: dict[bytes, bytes | None]) -> Model:
    out = dict(base)
    for k, v in changes.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out


FAST = settings(max_examples=examples(0.6), deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(base=model_st, changes=changes_st)
def test_apply_equals_model(base: Model, changes: dict[bytes, bytes | None]) -> None:
    async def body() -> None:
        tables = memory_tables()
        base_mr = await build(tables, base)
        expected = apply_model(base, changes)
        stream = [Change(k, None if v is None else record(k, v)) for k, v in sorted(changes.items())]
        if expected == base:
            with pytest.raises(NoChangesError):
                await apply_changes(tables, base_mr, stream, policy=SMALL)
            return
        result = await apply_changes(tables, base_mr, stream, policy=SMALL)
        new = await MetaRange.load(tables, result.metarange_id)
        assert await contents(new) == expected
        assert len(new) == len(expected)
        for k in list(expected)[:10]:
            got = await new.get(k)
            assert got is not None and got.data == expected[k]
        for k in changes:
            if k not in expected:
                assert await new.get(k) is None
        # Ranges partition the key space in order, and their counts add up.
        spans = [(r.min_key, r.max_key) for r in new.ranges]
        assert all(a[1] < b[0] for a, b in itertools.pairwise(spans))
        assert sum(r.count for r in new.ranges) == len(expected)

    run(body)


@FAST
@given(left=model_st, changes=changes_st)
def test_diff_equals_model(left: Model, changes: dict[bytes, bytes | None]) -> None:
    right = apply_model(left, changes)

    async def body() -> None:
        tables = memory_tables()
        lmr, rmr = await build(tables, left), await build(tables, right)
        got = [(d.type, d.key) async for d in diff(lmr, rmr)]
        expected = []
        for k in sorted(set(left) | set(right)):
            if k not in right:
                expected.append((DiffType.REMOVED, k))
            elif k not in left:
                expected.append((DiffType.ADDED, k))
            elif left[k] != right[k]:
                expected.append((DiffType.CHANGED, k))
        assert got == expected

    run(body)


def model_merge(base: Model, src: Model, dst: Model, strategy: MergeStrategy) -> tuple[Model, list[bytes]]:
    out: Model = {}
    conflicts = []
    for k in sorted(set(base) | set(src) | set(dst)):
        b, s, d = base.get(k), src.get(k), dst.get(k)
        if s == d:
            v = s
        elif s == b:
            v = d
        elif d == b:
            v = s
        else:
            conflicts.append(k)
            v = s if strategy is MergeStrategy.SOURCE_WINS else d
        if v is not None:
            out[k] = v
    return out, conflicts


@FAST
@given(
    base=model_st,
    src_changes=changes_st,
    dst_changes=changes_st,
    strategy=st.sampled_from(list(MergeStrategy)),
)
def test_merge_equals_model(
    base: Model,
    src_changes: dict[bytes, bytes | None],
    dst_changes: dict[bytes, bytes | None],
    strategy: MergeStrategy,
) -> None:
    src, dst = apply_model(base, src_changes), apply_model(base, dst_changes)
    expected, conflicts = model_merge(base, src, dst, strategy)

    async def body() -> None:
        tables = memory_tables()
        bmr, smr, dmr = await build(tables, base), await build(tables, src), await build(tables, dst)
        if smr.id in (dmr.id, bmr.id):
            with pytest.raises(NoChangesError):
                await merge(tables, bmr, smr, dmr, strategy, policy=SMALL)
            assert expected == dst
            return
        if conflicts and strategy is MergeStrategy.NONE:
            with pytest.raises(MergeConflictError) as info:
                await merge(tables, bmr, smr, dmr, strategy, policy=SMALL)
            assert info.value.keys == conflicts
            return
        try:
            result = await merge(tables, bmr, smr, dmr, strategy, policy=SMALL)
        except NoChangesError:
            assert expected == dst  # everything the source did was already there, or lost to dest-wins
            return
        merged = await MetaRange.load(tables, result.metarange_id)
        assert await contents(merged) == expected
        if bmr.id == dmr.id:
            assert result.fast_forward and result.metarange_id == smr.id

    run(body)


async def test_unsorted_changes_are_refused() -> None:
    tables = memory_tables()
    empty = await MetaRange.load(tables, "")
    changes = [Change(b"b", record(b"b", b"1")), Change(b"a", record(b"a", b"1"))]
    with pytest.raises(BadInputError, match="ascending"):
        await apply_changes(tables, empty, changes)


async def test_allow_empty_commit_keeps_metarange() -> None:
    tables = memory_tables()
    base = await build(tables, {b"a": b"1", b"b": b"2"})
    result = await apply_changes(tables, base, [Change(b"zz", None)], policy=SMALL, allow_empty=True)
    assert result.effective_changes == 0
    assert result.metarange_id == base.id
