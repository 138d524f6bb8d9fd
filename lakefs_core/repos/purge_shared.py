"""What else uses the objects a purge would destroy: the collateral its dry run lists.

A purge deletes physical objects, and an object is often named by more than the path and ref the
operator asked about: the same path unchanged in older commits, under tags and other branches, and
(after a lakeFS shallow copy, an import of one source twice, or a hostile entry) under other paths.
:func:`find_shared` answers, for every object the purge would destroy, each ``(address, path)``
that names it outside the purge's own target (:class:`Target`), with the branches whose current
value it is (``staged`` too when that value is uncommitted), the tags and the commits holding it.

How: the commits are the ones the purge's walk already enumerated (:class:`CommitMap`, filled in
the same pass), grouped by metarange; every distinct range of those metaranges and of the branch
heads and tags is read ONCE (consecutive commits share almost all their ranges, so the cost follows
distinct ranges, not commits), in the CPU pool; then every branch's staged entries. An entry
matches when its address, reduced by :meth:`StorageNamespace.relative_of` (the one classifier), is
a target; a substring pre-filter on the raw entry bytes skips the decoding of the others (the
relative form is always a substring of the stored address, so the filter loses nothing).

Bounded: at most :data:`MAX_ENTRIES` range and staged entries are read, :data:`MAX_COMMITS` commit
ids kept, :data:`MAX_USES` rows answered and :data:`MAX_COMMITS_LISTED` commit ids per row (with
the total). Past any limit the answer says so (a note naming the limit) and lists what was found:
a truncated list is never presented as complete. Tables that do not parse fail the search with the
error naming the file (never a shorter list).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from lakefs_core.committed.metarange import MetaRange
from lakefs_core.errors import BadInputError, NotFoundError
from lakefs_core.format.records import decode_entry, decode_range_record
from lakefs_core.format.sstable.reader import TableReader
from lakefs_core.keys import table_name
from lakefs_core.namespace import StorageNamespace
from lakefs_core.offloop import run_cpu
from lakefs_core.refs.model import Branch, CommitNode, Repository
from lakefs_core.repos.context import RepoContext

MAX_ENTRIES = 5_000_000
MAX_COMMITS = 200_000
MAX_USES = 1_000
MAX_COMMITS_LISTED = 20
_MAX_NEEDLES = 64  # more targets than this: every entry is decoded (the filter would cost more)

Hit = tuple[bytes, str]  # (path, relative address of a target)


class SharedUse(BaseModel):
    """One other ``(address, path)`` naming an object the purge would destroy, and where."""

    model_config = ConfigDict(extra="forbid")

    address: str
    path: str
    branches: list[str] = Field(default_factory=list)  # whose current value it is
    staged: list[str] = Field(default_factory=list)  # ... as an uncommitted (staged) value
    tags: list[str] = Field(default_factory=list)
    commits: list[str] = Field(default_factory=list)  # at most MAX_COMMITS_LISTED of them
    commits_total: int = 0


@dataclass
class CommitMap:
    """Commit ids by metarange, as the purge's walk enumerates the commits (bounded)."""

    by_metarange: dict[str, list[str]] = field(default_factory=dict)
    kept: int = 0
    truncated: bool = False

    def add(self, node: CommitNode) -> None:
        if not node.metarange_id:
            return  # the empty tree names nothing
        if self.kept >= MAX_COMMITS:
            self.truncated = True
            return
        self.by_metarange.setdefault(node.metarange_id, []).append(node.id)
        self.kept += 1


@dataclass(frozen=True)
class Target:
    """What the purge itself reads: ``path`` in every commit and branch (``all_history``), or its
    value at ``ref`` (the commit it resolved to, and the branch or tag of that name)."""

    path: bytes
    all_history: bool
    commit: str
    ref: str

    def own(self, path: bytes, kind: str, name: str) -> bool:
        if path != self.path:
            return False
        if self.all_history:
            return True
        return name == (self.commit if kind == "commit" else self.ref)


def _needles(targets: Iterable[str]) -> tuple[bytes, ...] | None:
    wanted = tuple(sorted({t.encode() for t in targets}))
    return wanted if len(wanted) <= _MAX_NEEDLES else None


def _entry_hit(
    path: bytes, data: bytes, targets: frozenset[str], ns: StorageNamespace, name: str
) -> str | None:
    entry = decode_entry(data, file=name)
    try:
        relative = ns.relative_of(entry.address, int(entry.address_type))
    except BadInputError:
        return None  # not a normal address: no purge ever names it (purge refuses such entries)
    return relative if relative in targets else None


def _range_hits(
    reader: TableReader,
    name: str,
    needles: tuple[bytes, ...] | None,
    targets: frozenset[str],
    ns: StorageNamespace,
) -> list[Hit]:
    """``(path, target)`` of every entry of one range naming a target (runs in the CPU pool)."""
    out: list[Hit] = []
    for key, value in reader:
        if needles is not None and not any(n in value for n in needles):
            continue
        record = decode_range_record(key, value, file=name)
        hit = _entry_hit(record.key, record.data, targets, ns, name)
        if hit is not None:
            out.append((record.key, hit))
    return out


class _Search:
    def __init__(self, ctx: RepoContext, repo: Repository, targets: set[str], target: Target) -> None:
        self.ctx, self.repo, self.target = ctx, repo, target
        self.ns = StorageNamespace.parse(repo.storage_namespace)
        self.targets = frozenset(targets)
        self.needles = _needles(targets)
        self.entries = 0
        self.exhausted = False
        self.notes: list[str] = []
        self.uses: dict[tuple[str, bytes], SharedUse] = {}
        self.ranges: dict[str, list[Hit]] = {}

    def spend(self, n: int) -> bool:
        """Whether ``n`` more entries may be read; once refused, nothing more is read."""
        if self.exhausted:
            return False
        if self.entries + n > MAX_ENTRIES:
            self.exhausted = True
            self.notes.append(f"stopped after reading {self.entries} entries (limit {MAX_ENTRIES})")
            return False
        self.entries += n
        return True

    def use(self, relative: str, path: bytes) -> SharedUse | None:
        row = self.uses.get((relative, path))
        if row is None:
            if len(self.uses) >= MAX_USES:
                note = f"more than {MAX_USES} other uses; the first {MAX_USES} are listed"
                if note not in self.notes:
                    self.notes.append(note)
                return None
            row = SharedUse(address=relative, path=path.decode("utf-8", "backslashreplace"))
            self.uses[(relative, path)] = row
        return row

    async def metarange_hits(self, metarange_id: str) -> list[Hit]:
        tables = await self.ctx.namespace_tables(self.ns)
        meta = await MetaRange.load(tables, metarange_id)
        hits: list[Hit] = []
        for info in meta.ranges:
            found = self.ranges.get(info.id)
            if found is None:
                if not self.spend(info.count):
                    continue
                reader = tables.cached(info.id) or await tables.open(info.id)
                found = await run_cpu(
                    _range_hits, reader, table_name(info.id), self.needles, self.targets, self.ns
                )
                self.ranges[info.id] = found
            hits.extend(found)
        return hits

    async def staged(self, branch: Branch, committed_paths: set[bytes]) -> tuple[list[Hit], set[bytes]]:
        """The branch's staged values naming a target, and which committed hit paths staging hides."""
        hits: list[Hit] = []
        hidden: set[bytes] = set()
        name = f"staging of branch {branch.id}"
        async for record in self.ctx.staging.merged((branch.staging_token, *branch.sealed_tokens)):
            if record.key in committed_paths:
                hidden.add(record.key)
            if not self.spend(1):
                break
            if record.is_tombstone or (
                self.needles is not None and not any(n in record.data for n in self.needles)
            ):
                continue
            hit = _entry_hit(record.key, record.data, self.targets, self.ns, name)
            if hit is not None:
                hits.append((record.key, hit))
        return hits, hidden


async def find_shared(
    ctx: RepoContext, repo: Repository, targets: set[str], commits: CommitMap, target: Target
) -> tuple[list[SharedUse], str | None]:
    """The other uses of ``targets`` (see the module), sorted, and a note when the list is partial."""
    if not targets:
        return [], None
    search = _Search(ctx, repo, targets, target)
    if commits.truncated:
        search.notes.append(f"only the first {MAX_COMMITS} commits were searched")
    branches = [b async for b in ctx.refs.list_branches(repo)]
    tags = [t async for t in ctx.refs.list_tags(repo)]
    heads: dict[str, str] = {}  # commit id of a branch head or tag -> its metarange
    for commit_id in {b.commit_id for b in branches} | {t.commit_id for t in tags}:
        try:
            heads[commit_id] = (await ctx.refs.get_commit(repo, commit_id)).metarange_id
        except NotFoundError:
            heads[commit_id] = ""  # a ref naming a missing commit holds nothing readable
    hits: dict[str, list[Hit]] = {}
    for metarange_id in sorted(set(commits.by_metarange) | set(heads.values())):
        hits[metarange_id] = await search.metarange_hits(metarange_id) if metarange_id else []
    for metarange_id, ids in commits.by_metarange.items():
        for path, relative in hits[metarange_id]:
            mine = [c for c in ids if not target.own(path, "commit", c)]
            row = search.use(relative, path) if mine else None
            if row is not None:
                row.commits_total += len(mine)
                room = MAX_COMMITS_LISTED - len(row.commits)
                row.commits.extend(sorted(mine)[: max(room, 0)])
    committed_paths = {path for found in hits.values() for path, _ in found}
    for branch in branches:
        staged, hidden = await search.staged(branch, committed_paths)
        for path, relative in staged:
            if not target.own(path, "branch", branch.id) and (row := search.use(relative, path)):
                row.branches.append(branch.id)
                row.staged.append(branch.id)
        for path, relative in hits[heads[branch.commit_id]]:
            hidden_here = path in hidden or target.own(path, "branch", branch.id)
            if not hidden_here and (row := search.use(relative, path)):
                row.branches.append(branch.id)
    for tag in tags:
        for path, relative in hits[heads[tag.commit_id]]:
            if not target.own(path, "tag", tag.id) and (row := search.use(relative, path)):
                row.tags.append(tag.id)
    rows = sorted(search.uses.values(), key=lambda r: (r.address, r.path))
    for row in rows:
        row.branches.sort()
        row.staged.sort()
        row.tags.sort()
    return rows, "; ".join(search.notes) or None


__all__ = ["CommitMap", "SharedUse", "Target", "find_shared"]
