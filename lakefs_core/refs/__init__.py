"""Refs over a ``KVStore``: repositories, branches, commits, tags and staging (spec sections 6-7)."""
