"""Which mirrors an idle pass can skip: the cost of a pass is O(changed mirrors), not O(all).

A mirror is *settled* after a pass in which it met no error and every mirrored branch and tag
ended with its mirror head equal to its source head (caught up). Its fingerprint is recorded then:
the mirror record's ``version`` and ``resync_requested_at`` and the source's heads of its wanted
branches (and tags, when mirrored). On the next pass the engine reads the fingerprints again, which
is what discovers changes: for all mirrors of one source region at once, one batched read of their
source repository records and one batched scan of their ``branches/`` (and ``tags/``) key ranges
(:func:`lakefs_core.kv.ranges.scan_ranges`; lakeFS keeps each repository's branches in its own
partition, so no single prefix spans them), nothing written. When it is unchanged, nothing can have
changed for the mirror (the destination repository is read-only to everyone but this daemon), so the pass
skips it: no destination reads, no status write, no validation.

Every ``full_pass_seconds`` a full pass visits every mirror anyway: it applies completed source GC
sweeps and purges (:mod:`lakefs_mirror.gc_apply`, which do not move any head) and re-reads the
destination, so nothing depends on the fingerprint alone for longer than that.

Request cost of the discovery per pass with M mirrors from one source region: PostgreSQL, one
statement for the M repository records + one per page of 4,096 branch and tag records (b + t of
them): 1 + ceil((b + t + 1) / 4,096), i.e. 2 statements at 1,000 mirrors of one branch each (each
one an index range scan per repository, LATERAL); SQLite the same pages, each one hop to its thread. On
DynamoDB a Query reads one partition, so: ceil(M / 100) BatchGetItem for the records + M Queries for
the branches (+ M for the tags), 16 in flight: ~1,010 requests per pass at 1,000 mirrors (~2,010
with tags), each Query under 4 KB (1 RCU, consistent reads), in ~1,000/16 round trips of wall time.
"""

from __future__ import annotations

import fnmatch
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from lakefs_core.repos.graveler import Graveler, RepoRefs
from lakefs_mirror.db import MirrorRecord

Fingerprint = tuple[object, ...]


def fingerprint_of(refs: RepoRefs, mirror: MirrorRecord) -> Fingerprint:
    """What must be unchanged for a settled mirror to need nothing (see the module docstring)."""
    patterns = mirror.branch_filter
    branches = tuple(
        sorted(
            (b.id, b.commit_id) for b in refs.branches if any(fnmatch.fnmatchcase(b.id, p) for p in patterns)
        )
    )
    tags = tuple(sorted((t.id, t.commit_id) for t in refs.tags)) if mirror.mirror_tags else ()
    return (mirror.version, mirror.resync_requested_at, mirror.mode, branches, tags)


async def fingerprints(src: Graveler, mirrors: Sequence[MirrorRecord]) -> dict[str, Fingerprint]:
    """The fingerprints of ``mirrors`` (all of one source region), mirror id -> fingerprint, from
    two batched reads of ``src`` (:meth:`~lakefs_core.repos.graveler.Graveler.refs_of_many`). A mirror
    whose source repository cannot be read is left out: the pass visits it and reports why."""
    refs = await src.refs_of_many([m.source_repo for m in mirrors], tags=any(m.mirror_tags for m in mirrors))
    return {m.id: fingerprint_of(refs[m.source_repo], m) for m in mirrors if m.source_repo in refs}


@dataclass
class QuietMirrors:
    """The settled mirrors' fingerprints and when the last full pass ran."""

    full_pass_seconds: float
    clock: Callable[[], float] = time.monotonic
    _settled: dict[str, Fingerprint] = field(default_factory=dict)
    _last_full: float | None = None

    def start_pass(self) -> bool:
        """Whether this pass is a full one (every mirror visited): ``full_pass_seconds`` after the
        END of the last full pass (a full pass longer than that must not make every pass full)."""
        return self._last_full is None or self.clock() - self._last_full >= self.full_pass_seconds

    def finish_pass(self, full: bool) -> None:
        if full:
            self._last_full = self.clock()

    def unchanged(self, mirror_id: str, fp: Fingerprint) -> bool:
        return self._settled.get(mirror_id) == fp

    def settle(self, mirror_id: str, fp: Fingerprint | None) -> None:
        """Record a settled mirror's fingerprint; None: it is not settled (visit it next pass)."""
        if fp is None:
            self._settled.pop(mirror_id, None)
        else:
            self._settled[mirror_id] = fp

    def forget_except(self, ids: set[str]) -> None:
        for mirror_id in set(self._settled) - ids:
            del self._settled[mirror_id]
