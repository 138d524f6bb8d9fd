"""Versioned repositories over a ``KVStore`` and block stores: the API behind ``lakefs-core``.

:class:`~lakefs_core.repos.graveler.Graveler` is the entry point: repositories, branches, tags,
staged writes, commits, log, diff, merge, revert, reset. :mod:`.objects` adds object bytes
(upload, read, stat, delete, list with delimiters) on top.
"""
