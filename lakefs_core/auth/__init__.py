"""lakeFS's authentication and authorization, as library code (no I/O but the KV store's).

- :mod:`.store`: the auth service on the KV store (lakeFS's ``auth`` partition, records of
  :mod:`.model`): users, groups, policies, credentials, memberships and attachments;
  :mod:`.setup` creates lakeFS's built-in groups and policies and the first admin.
- :mod:`.crypt`: secret access keys encrypted at rest as lakeFS encrypts them; :mod:`.keys`:
  access keys generated as lakeFS generates them.
- :mod:`.policy`: lakeFS's policy language and its evaluation; :mod:`.permissions`: action names,
  ARNs and required-permission trees; :mod:`.s3perms`: what each S3 gateway operation requires.
- :mod:`.signature`, :mod:`.sigv4`, :mod:`.sigv2`, :mod:`.signed`: pure verification of S3 request
  signatures; :mod:`.payload`: incremental verification of request bodies (aws-chunked framing,
  chunk and trailer signatures, checksums).

Layering: this package may use ``errors``, ``format``, ``kv``, ``refs.kvkeys`` and ``offloop``;
it never imports the repository layer (``repos``) or the daemons.
"""
