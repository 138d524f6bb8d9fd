"""The mark phase of a retention GC run (gc.md §3a): what may be deleted, computed on an executor.

- :mod:`.mark`: the mark itself (:func:`~.mark.run_mark`; :func:`~.mark.mark_job` for spark-submit);
- :mod:`.active`: the commits retention keeps (rules, branch heads, pins, tags);
- :mod:`.slices` and :mod:`.listing`: the deletion candidates, listed slice by slice on the executors;
- :mod:`.committed`: the committed live addresses (distinct ranges of the active metaranges);
- :mod:`.uncommitted`: the staged live addresses;
- :mod:`.parquet`: the lakeFS-shaped ``deleted/`` report;
- :mod:`.count_objects`: the ``count-objects`` smoke-test job (the mark's listing path alone).
"""
