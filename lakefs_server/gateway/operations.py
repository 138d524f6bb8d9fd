"""Imports every operation module, so each registers itself in :data:`.handler.OPERATIONS`."""

from lakefs_server.gateway import objects

__all__ = ["objects"]
