"""lakefs_gc: retention garbage collection (PySpark) and hard-delete reconciliation daemons."""
