"""The shipped BlockStore contract (:mod:`lakefs_core.testing.block`), run once per driver of ours:
memory, local directory, S3 (moto_server); the ``store`` fixture is tests/block/conftest.py's."""

from __future__ import annotations

import pytest

from lakefs_core.block import BlockStore, LocalBlockStore, S3BlockStore
from lakefs_core.testing.block import *  # noqa: F403 (the contract's tests and fixtures)
from lakefs_core.testing.block import BlockTraits


def traits_of(store: BlockStore) -> BlockTraits:
    """Our drivers' traits: S3's multipart ETags, the local store's path keys."""
    return BlockTraits(
        multipart_etags=isinstance(store, S3BlockStore), keys_are_paths=isinstance(store, LocalBlockStore)
    )


@pytest.fixture
def block_traits(store: BlockStore) -> BlockTraits:
    return traits_of(store)
