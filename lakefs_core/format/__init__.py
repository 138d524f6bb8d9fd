"""The pure format layer: byte-level encodings of lakeFS-compatible files and values.

Everything under ``lakefs_core.format`` takes and returns bytes-like objects and plain values. It does
no I/O (no files, no sockets, no ``os``) and imports no storage SDK, so it can be tested exhaustively
in memory and reused by every driver.
"""
