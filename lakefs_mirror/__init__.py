"""lakefs_mirror: the per-region transactional mirroring daemon."""
