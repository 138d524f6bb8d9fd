"""Where a GC run keeps its files: every key comes from :mod:`lakefs_core.keys` (``gc_path``,
``gc_commits_path``); this module only names the parts of one run.

Under ``<ns>/_lakefs/retention/gc/unified/<run>/`` (lakeFS's layout plus ours)::

    run.json              claim: cutoff, rules, pins, mode (create-only, first)
    uncommitted/part-*    staged live addresses (ours; lakeFS keeps them under gc/uncommitted/<run>/)
    metaranges/part-*     distinct metarange ids of the active commits
    ranges.txt/part-*     distinct range ids read (re-verification skips them)
    deleted.text/part-*   the addresses to delete, relative to the namespace
    deleted/              the same as Parquet, column ``address`` (lakeFS's shape), when written
    summary.json          the mark's commit point (create-only, last)
    sweep/checkpoint.json sweep progress (overwritten), sweep/failed.text keys that failed
    sweep.json            the sweep's outcome (create-only, last)

and ``<ns>/_lakefs/retention/gc/commits/run_id=<run>/commits.csv`` (lakeFS's).
"""

from __future__ import annotations

from dataclasses import dataclass

from lakefs_core.repos.graveler import StorageNamespace


@dataclass(frozen=True)
class RunLayout:
    ns: StorageNamespace
    run_id: str

    def _key(self, *parts: str) -> str:
        return self.ns.gc_path(self.run_id, *parts)

    @property
    def manifest(self) -> str:
        return self._key("run.json")

    @property
    def summary(self) -> str:
        return self._key("summary.json")

    @property
    def uncommitted(self) -> str:
        return self._key("uncommitted")

    @property
    def metaranges(self) -> str:
        return self._key("metaranges")

    @property
    def ranges(self) -> str:
        return self._key("ranges.txt")

    @property
    def deleted_text(self) -> str:
        return self._key("deleted.text")

    @property
    def deleted_parquet(self) -> str:
        return self._key("deleted")

    @property
    def checkpoint(self) -> str:
        return self._key("sweep", "checkpoint.json")

    @property
    def failed(self) -> str:
        return self._key("sweep", "failed.text")

    @property
    def sweep_report(self) -> str:
        return self._key("sweep.json")

    @property
    def commits_csv(self) -> str:
        return self.ns.gc_commits_path(self.run_id)
