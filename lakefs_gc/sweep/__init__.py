"""The sweep phase of a retention GC run (gc.md §3b): delete what a successful mark found.

- :mod:`.sweep`: :func:`~.sweep.run_sweep`, resumable from its checkpoint, through the platform's
  bulk deleter (:mod:`lakefs_core.service.deleter`);
- :mod:`.verify`: the run's files checked against its KV record before anything is used;
- :mod:`.reverify`: every candidate is checked again against the live set right before its delete.
"""
