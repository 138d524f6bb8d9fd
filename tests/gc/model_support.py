"""An independent oracle for the GC model test (tests/gc/test_gc_model.py).

It never calls :mod:`lakefs_gc`: the retention walk is re-implemented here from gc.md §1 in the
plainest form (a union of full first-parent walks, O(commits x depth)), and the objects of a commit
or a branch are read through the public listing API (:class:`lakefs_core.repos.objects.Objects`).

- :func:`oracle_active`: the active commit ids. Starting points: every branch head (its branch's
  rule, else the default), every tag and every pin (the default), as heads; every commit that is
  nobody's main parent and not a head (an "ancestry leaf", the default). A head is active; a leaf is
  active when created after its threshold. Walking main parents, a parent is active when it or its
  child was created after the threshold. ``rules=None``: every commit is active.
- :class:`Listings`: a cache of commit listings (commits are immutable) plus branch listings
  (committed + staged, read afresh every time).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from lakefs_core.repos.graveler import Graveler, StorageNamespace
from lakefs_core.repos.objects import Objects
from lakefs_gc.rules import GCRules


@dataclass(frozen=True)
class Node:
    id: str
    created: datetime
    main_parent: str | None


def oracle_active(
    nodes: Mapping[str, Node],
    *,
    branches: Mapping[str, str],
    tags: Iterable[str],
    pins: Iterable[str],
    rules: GCRules | None,
    now: datetime,
) -> set[str]:
    """The active commits (see the module docstring)."""
    if rules is None:
        return set(nodes)
    default = now - timedelta(days=rules.default_retention_days)
    starts: list[tuple[str, datetime, bool]] = [
        (cid, now - timedelta(days=rules.retention_days(name)), True) for name, cid in branches.items()
    ]
    starts += [(cid, default, True) for cid in (*tags, *pins)]
    heads = {cid for cid, _, _ in starts}
    has_child = {n.main_parent for n in nodes.values() if n.main_parent is not None}
    starts += [(cid, default, False) for cid in nodes if cid not in has_child and cid not in heads]
    active: set[str] = set()
    for cid, threshold, head in starts:
        x = nodes[cid]
        if head or x.created > threshold:
            active.add(x.id)
        while x.main_parent is not None:
            p = nodes[x.main_parent]
            if x.created > threshold or p.created > threshold:
                active.add(p.id)
            x = p
    return active


async def list_ref(g: Graveler, repo: str, ns: StorageNamespace, ref: str) -> set[str]:
    """Namespace-relative addresses of every object visible at ``ref`` (public listing API)."""
    objects = Objects(g)
    out: set[str] = set()
    after = ""
    while True:
        page = await objects.list(repo, ref, after=after, amount=1000)
        for stat in page.objects:
            relative = ns.relative_of(stat.physical_address, 2 if stat.address_type == "FULL" else 1)
            if relative is not None:
                out.add(relative)
        if not page.has_more:
            return out
        after = page.next_after


class Listings:
    """Commit listings, cached; branch listings, fresh."""

    def __init__(self, g: Graveler, repo: str, ns: StorageNamespace) -> None:
        self.g, self.repo, self.ns = g, repo, ns
        self._commits: dict[str, frozenset[str]] = {}

    async def commit(self, commit_id: str) -> frozenset[str]:
        if commit_id not in self._commits:
            self._commits[commit_id] = frozenset(await list_ref(self.g, self.repo, self.ns, commit_id))
        return self._commits[commit_id]

    async def live(self, active: Iterable[str], branches: Iterable[str]) -> set[str]:
        """Objects of the active commits plus every branch's committed and staged objects."""
        out: set[str] = set()
        for cid in active:
            out |= await self.commit(cid)
        for name in branches:
            out |= await list_ref(self.g, self.repo, self.ns, name)
        return out
