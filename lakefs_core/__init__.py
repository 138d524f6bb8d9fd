"""lakefs_core: lakeFS-compatible versioned data on object stores (graveler format, refs, staging)."""

__version__ = "0.1.0"
