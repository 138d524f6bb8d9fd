"""Which mirrors an idle pass can skip: the cost of a pass is O(changed mirrors), not O(all).

A mirror is *settled* after a pass in which it met no error and every mirrored branch and tag
ended with its mirror head equal to its source head (caught up). Its fingerprint is recorded then:
the mirror record's ``version`` and ``resync_requested_at`` and the source's heads of its wanted
branches (and tags, when mirrored). On the next pass the engine reads the fingerprint again, which
is what discovers changes: per mirror, one KV read of the source repository record, one KV scan of
its branch records (and one of its tags), no write. When it is unchanged, nothing can have changed
for the mirror (the destination repository is read-only to everyone but this daemon), so the pass
skips it: no destination reads, no status write, no validation.

Every ``full_pass_seconds`` a full pass visits every mirror anyway: it applies completed source GC
sweeps and purges (:mod:`lakefs_mirror.gc_apply`, which do not move any head) and re-reads the
destination, so nothing depends on the fingerprint alone for longer than that.

Request cost of the discovery per pass with M settled mirrors of b wanted branches and t tags:
M repository reads + M branch scans (+ M tag scans). On DynamoDB a scan of a repository's branch
records is one Query of its partition (one page up to 1 MB), so ~2-3 requests per mirror, ~2,000-
3,000 read requests per pass at 1,000 mirrors (eventually consistent reads: 0.5 RCU per 4 KB);
on PostgreSQL the same number of single-index SELECTs over the pool.
"""

from __future__ import annotations

import fnmatch
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from lakefs_core.repos.graveler import Graveler
from lakefs_mirror.db import MirrorRecord

Fingerprint = tuple[object, ...]


async def fingerprint(src: Graveler, mirror: MirrorRecord) -> Fingerprint:
    """What must be unchanged for a settled mirror to need nothing (see the module docstring)."""
    branches = tuple(
        sorted(
            [
                (b.id, b.commit_id)
                async for b in src.list_branches(mirror.source_repo)
                if any(fnmatch.fnmatchcase(b.id, p) for p in mirror.branch_filter)
            ]
        )
    )
    tags: tuple[tuple[str, str], ...] = ()
    if mirror.mirror_tags:
        tags = tuple(sorted([(t.id, t.commit_id) async for t in src.list_tags(mirror.source_repo)]))
    return (mirror.version, mirror.resync_requested_at, mirror.mode, branches, tags)


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
