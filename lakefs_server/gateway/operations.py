"""Imports every operation module, so each registers itself in :data:`.handler.OPERATIONS`."""

from lakefs_server.gateway import buckets, copy, listing, multipart, objects

__all__ = ["buckets", "copy", "listing", "multipart", "objects"]
