"""lakeFS's S3 gateway: bucket = repository, first key segment = ref, the rest the object's path.

- :mod:`.errors`: S3 XML errors with lakeFS's codes, and the mapping of the core's exceptions;
- :mod:`.target`: what a request addresses (repository, ref, path) from its Host and RAW path;
- :mod:`.xml`: the XML bodies S3 answers and reads;
- :mod:`.handler`: authentication, authorisation and dispatch to the operations;
- :mod:`.objects`, :mod:`.listing`, :mod:`.multipart`, :mod:`.buckets`: the operations.
"""
