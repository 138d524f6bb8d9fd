"""The contract suites of the core's seams, shipped so that a third-party driver runs them.

- :mod:`.kv`: the :class:`~lakefs_core.kv.base.KVStore` contract (fixture ``kv_driver``; its tests
  are defined in :mod:`.kv_scans` and :mod:`.kv_batches`, and gathered by :mod:`.kv`);
- :mod:`.block`: the :class:`~lakefs_core.block.base.BlockStore` contract (fixtures ``store`` and,
  for a store with S3's multipart ETags or file-path keys, ``block_traits``);
- :mod:`.lease`: the lease contract (fixture ``backend``; :func:`.lease.kv_backend` makes one from a
  KV store).

A driver's test module imports a suite with ``from lakefs_core.testing.kv import *`` (pytest then
collects its tests there) and defines the fixture it asks for; each suite's docstring shows the
module. This is how the project's own drivers are tested (``tests/kv/test_contract.py``,
``tests/block/test_contract.py``, ``tests/service/test_lease.py``), as dulwich ships its object-store
tests. The suites need pytest and pytest-asyncio with ``asyncio_mode = "auto"`` (the ``dev`` extra);
importing this package imports neither, and nothing in the library imports the suites.
"""
