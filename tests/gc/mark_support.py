"""A repository built by the real core for the mark and sweep tests, and an independent oracle.

Timeline (Graveler clock ``T0`` = real now - 40 days; object bytes are written at real time, so the
mark runs with ``now`` = real now + 2 days and ``min_age`` 24 h: every object is old enough except
those the builder makes young on purpose):

- day 0 init; day 1 c1 on main: a1, a2, a3 (tag ``v1`` -> c1)
- day 2 c2 on main: a1 overwritten (a1 v2), a2 deleted
- day 3 branch ``gone`` from main: g1, commit, branch deleted (an expired dangling leaf)
- day 4 branch ``dev`` from main: d1, commit (dev head: a1 v2, a3, d1)
- day 5 c3 on main: a1 overwritten (a1 v3), ``full`` staged as a FULL address inside the namespace
  (the object written behind the core), ``ext`` a FULL address outside it
- staged, uncommitted on main: s1, s2 (written twice: its first address is garbage)
- branch ``tmp``: t1 staged, then the branch reset (discarded: t1 is garbage)
- ``young``: an unreferenced object whose mtime is pushed past the cutoff (never a candidate)
- a slice of a future hour holding an unreferenced object with an old mtime (the slice is skipped)
- root objects ``legacy-obj`` (garbage) and ``dummy`` (never touched)

Rules: default 7 days. Active commits (tags pinned): c3 (main head), dev's head, c1 (tag).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from lakefs_core.block.base import BlockStore, ObjectInfo
from lakefs_core.format.records import ADDRESS_FULL, ValueRecord, make_entry
from lakefs_core.keys import new_object_id, new_slice_id
from lakefs_core.namespace import StorageNamespace
from lakefs_core.repos.graveler import Graveler
from lakefs_core.repos.objects import Objects
from lakefs_gc.rules import GCRules, save_rules

REAL_NOW = datetime.now(UTC)
T0 = REAL_NOW - timedelta(days=40)
MARK_NOW = REAL_NOW + timedelta(days=2)
MIN_AGE = timedelta(hours=24)
CUTOFF = MARK_NOW - MIN_AGE


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def day(self, n: float) -> None:
        self.now = T0 + timedelta(days=n)


@dataclass
class Built:
    repo: str
    ns: StorageNamespace
    addr: dict[str, str] = field(default_factory=dict)  # logical name -> relative address
    commits: dict[str, str] = field(default_factory=dict)


async def _upload(objects: Objects, b: Built, branch: str, path: str, name: str) -> None:
    stat = await objects.upload(b.repo, branch, path, f"body of {name}".encode())
    b.addr[name] = stat.physical_address


async def _commit(g: Graveler, b: Built, branch: str, name: str) -> None:
    b.commits[name] = (await g.commit(b.repo, branch, committer="t", message=name)).id


async def build_repo(
    g: Graveler, clock: Clock, repo: str, namespace: str, *, local_root: str | None
) -> Built:
    """Build the repository described in the module docstring."""
    objects = Objects(g)
    await g.create_repository(repo, namespace)
    ns = StorageNamespace(namespace)
    b = Built(repo, ns)
    store = await g.namespace_store(ns)
    await save_rules(store, ns, GCRules.of(7))
    clock.day(1)
    for name in ("a1", "a2", "a3"):
        await _upload(objects, b, "main", name, name)
    await _commit(g, b, "main", "c1")
    await g.create_tag(repo, "v1", b.commits["c1"])
    clock.day(2)
    await _upload(objects, b, "main", "a1", "a1v2")
    await objects.delete(repo, "main", "a2")
    await _commit(g, b, "main", "c2")
    clock.day(3)
    await g.create_branch(repo, "gone", "main")
    await _upload(objects, b, "gone", "g1", "g1")
    await _commit(g, b, "gone", "g")
    await g.delete_branch(repo, "gone")
    clock.day(4)
    await g.create_branch(repo, "dev", "main")
    await _upload(objects, b, "dev", "d1", "d1")
    await _commit(g, b, "dev", "d")
    clock.day(5)
    await _upload(objects, b, "main", "a1", "a1v3")
    await _stage_full(g, store, b, "full")
    await g.set_entry(repo, "main", _full_record(b"ext", "local:///elsewhere/outside-object"))
    await _commit(g, b, "main", "c3")
    clock.day(6)
    await _upload(objects, b, "main", "s1", "s1")
    await _upload(objects, b, "main", "s2", "s2old")
    await _upload(objects, b, "main", "s2", "s2")
    await g.create_branch(repo, "tmp", "main")
    await _upload(objects, b, "tmp", "t1", "t1")
    await g.reset_branch(repo, "tmp")
    await _behind_the_core(store, b, local_root)
    return b


def _full_record(key: bytes, address: str) -> ValueRecord:
    identity, data = make_entry(address, 1, "0" * 32, last_modified=T0, address_type=ADDRESS_FULL)
    return ValueRecord(key, identity, data)


async def _stage_full(g: Graveler, store: BlockStore, b: Built, name: str) -> None:
    relative = b.ns.relative_address(new_slice_id(), new_object_id())
    await store.put(b.ns.key(relative), b"written behind the core")
    b.addr[name] = relative
    await g.set_entry(b.repo, "main", _full_record(name.encode(), b.ns.full_address(relative)))


async def _behind_the_core(store: BlockStore, b: Built, local_root: str | None) -> None:
    """Objects no entry references: young, in a future slice, at the root."""
    ns = b.ns
    young = ns.relative_address(new_slice_id(), new_object_id())
    future = ns.relative_address(new_slice_id(REAL_NOW + timedelta(days=3)), new_object_id())
    for name, relative in (("young", young), ("future", future), ("legacy", "legacy-obj")):
        await store.put(ns.key(relative), name.encode())
        b.addr[name] = relative
    await store.put(ns.key("dummy"), b"")
    if local_root is not None:  # mtimes are only settable on a local namespace
        set_mtime(local_root, young, CUTOFF + timedelta(hours=1))
        set_mtime(local_root, future, REAL_NOW - timedelta(days=1))


def set_mtime(root: str, relative: str, when: datetime) -> None:
    os.utime(os.path.join(root, relative), (when.timestamp(), when.timestamp()))


# -- the oracle -----------------------------------------------------------------------------------


async def live_addresses(g: Graveler, b: Built, commit_names: Iterable[str]) -> set[str]:
    """Addresses referenced by the given commits and by every branch's staging (through the public
    listing API, not the mark's range reader), normalised to namespace-relative form."""
    objects = Objects(g)
    refs = [b.commits[n] for n in commit_names] + [br.id async for br in g.list_branches(b.repo)]
    out: set[str] = set()
    for ref in refs:
        after = ""
        while True:
            page = await objects.list(b.repo, ref, after=after, amount=1000)
            for stat in page.objects:
                relative = b.ns.relative_of(stat.physical_address, 2 if stat.address_type == "FULL" else 1)
                if relative is not None:
                    out.add(relative)
            if not page.has_more:
                break
            after = page.next_after
    return out


async def stored_objects(store: BlockStore, ns: StorageNamespace) -> dict[str, datetime]:
    """Every object of the namespace outside ``_lakefs/`` (relative path -> mtime).

    ``_lakefs/`` is never listed (its GC run files outgrow the data in the model test, which
    asks after every step): the namespace's top level is listed with a delimiter, then each of its
    other directories in full."""
    prefix = f"{ns.prefix}/" if ns.prefix else ""
    out: dict[str, datetime] = {}

    def add(item: ObjectInfo) -> None:
        if item.last_modified is not None:
            out[item.key[len(prefix) :]] = item.last_modified

    below: list[str] = []
    async for item in store.list(prefix, delimiter="/"):
        if isinstance(item, ObjectInfo):
            add(item)
        elif item.prefix != f"{prefix}_lakefs/":
            below.append(item.prefix)
    for directory in below:
        async for item in store.list(directory):
            if isinstance(item, ObjectInfo):
                add(item)
    return out


def oracle_garbage(stored: dict[str, datetime], live: set[str], b: Built) -> set[str]:
    """Objects older than the cutoff, not in a future slice, not ``dummy``, not live."""
    future_slice = b.addr["future"].split("/")[1]
    return {
        rel
        for rel, mtime in stored.items()
        if mtime < CUTOFF and rel != "dummy" and rel not in live and f"/{future_slice}/" not in f"/{rel}"
    }


@dataclass
class Env:
    """A repository built by :func:`build_repo` on a memory KV and a local namespace (fixture ``env``)."""

    g: Graveler
    clock: Clock
    built: Built
    root: Path
