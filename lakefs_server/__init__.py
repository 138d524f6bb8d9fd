"""lakefs-server: lakeFS's S3 gateway (and, in ``lakefs_server.rest``, lakeFS's REST API) as a daemon
on the shared platform (:mod:`lakefs_core.service`).

- :mod:`.config`: ``ServerConfig`` (typed YAML plus ``LAKEFS_SERVER__...`` overrides);
- :mod:`.context`: ``ServerContext``, what a request handler of either API works with (the core,
  the auth store, the configuration, the metrics);
- :mod:`.router`: the S3 listener's application: an AWS-signed request, or one whose Host is under a
  configured ``domain_names`` entry, is S3; ``/api/v1/...`` is the REST API mounted by
  :mod:`.api_mount` (a lakeFS-style JSON 404 until ``lakefs_server.rest`` exists); anything else is S3;
- :mod:`.gateway`: the S3 operations;
- :mod:`.service`: the daemon (both listeners, the expired-multipart sweep as its ``step()``);
- :mod:`.cli`: ``lakefs-server run --config FILE`` and ``check-config``.
"""
