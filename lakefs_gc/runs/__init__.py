"""GC runs as files in a namespace and as the daemon tracks them.

- :mod:`.layout`: where a run keeps its files (every key from :mod:`lakefs_core.keys`);
- :mod:`.parts`: text part files (listing, reading, writing);
- :mod:`.record`: a run's record in the KV, binding the SHA-256 of its files (what the sweep trusts);
- :mod:`.reports`: ``run.json``, ``summary.json``, ``commits.csv``: hostile files parsed strictly;
- :mod:`.runs`: run requests, the executor seam and the registry of a repository's runs.
"""
