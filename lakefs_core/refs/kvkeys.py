"""The only module that maps refs and staging ids to KV partitions and keys (spec section 6).

| what | partition | key |
|---|---|---|
| repository | ``graveler`` | ``repos/<repo>`` |
| branch | ``<repo>-<instance_uid>`` | ``branches/<branch>`` |
| commit | ``<repo>-<instance_uid>`` | ``commits/<commit id>`` |
| tag | ``<repo>-<instance_uid>`` | ``tags/<tag>`` |
| repository setting (lakeFS's, e.g. branch protection) | ``<repo>-<instance_uid>`` | ``settings/<name>`` |
| staged entry | ``<staging token>`` | raw object key |
| token awaiting async drop | ``cleanup-tokens`` | ``<staging token>`` |
| storage namespace claim (ours) | ``lakefs-open-namespaces`` | canonical namespace |
| import source (ours) | ``lakefs-open-import-sources`` | ``<canonical source> NUL <repo>`` |
| lease (ours, :mod:`lakefs_core.service.lease`) | ``lakefs-open-leases`` | ``<lease name>`` |
| GC settings of a repository (ours) | ``<repo>-<instance_uid>`` | ``gc-settings`` |
| upload intent (ours, hard-delete journal) | ``<repo>-<instance_uid>`` | ``gc-intents/<address>`` |
| token consumed by a commit (ours) | ``<repo>-<uid>`` | ``gc-consumed/<branch>/<token>/<commit>`` |
| batch upload settled (ours, hard-delete journal) | ``<repo>-<uid>`` | ``gc-settled/<batch id>`` |
| GC run record, pointer (ours) | ``<repo>-<uid>`` | ``gc-runs/<run id>`` |
| GC run record, immutable (ours) | ``<repo>-<uid>`` | ``gc-run-records/<sha-256 of the record>[/<chunk>]`` |
| GC run record no pointer names (ours) | ``<repo>-<uid>`` | ``gc-run-garbage/<sha-256 of the record>`` |
| audit record of a purge (ours) | ``<repo>-<uid>`` | ``purges/<audit id>`` |
| address a purge destroyed (ours) | ``<repo>-<uid>`` | ``purged/<relative address>`` |
| the repository has purges (ours) | ``<repo>-<uid>`` | ``purged`` |
| purge not finished yet (ours) | ``<repo>-<uid>`` | ``purging/<audit id>`` |
| fate of a token marked for cleanup (ours) | ``lakefs-open-gc`` | ``token-fates/<staging token>`` |
| namespace of a deleted repository (ours) | ``lakefs-open-gc`` | ``deleted-repos/<repo>-<instance_uid>`` |
| user (lakeFS auth) | ``auth`` | ``users/<user>`` |
| group | ``auth`` | ``groups/<group>`` |
| policy | ``auth`` | ``policies/<policy>`` |
| credential | ``auth`` | ``uCredentials/<user>/credentials/<access key id>`` |
| group membership | ``auth`` | ``gUsers/<group>/users/<user>`` |
| policy attached to a user | ``auth`` | ``uPolicies/<user>/policies/<policy>`` |
| policy attached to a group | ``auth`` | ``gPolicies/<group>/policies/<policy>`` |
| installation metadata | ``auth`` | ``installation_metadata/<name>`` (``setup_timestamp``, ...) |

Staging tokens are ``<repo>-<branch>:<uuid4>``.

The ``auth`` partition is lakeFS's auth service's (``pkg/auth/model/model.go``), key for key: the
primary records are protobuf messages (:mod:`lakefs_core.auth.model`); memberships and attachments are
``kv.SecondaryIndex`` values naming the primary key (``users/<user>``, ``policies/<policy>``); the
installation metadata values are raw strings (``setup_timestamp`` is RFC 3339). Names are key
segments, so they never hold ``/`` (:func:`auth_segment`).

The namespace claims are this project's addition, not lakeFS records (lakeFS ignores the partition;
its name cannot be a repository partition, whose suffix is a hex instance uid). The key is the
namespace's canonical form (:attr:`lakefs_core.namespace.StorageNamespace.canonical`: ``s3://b/a/`` with one
trailing ``/``), so every namespace nested in ``N`` sorts in the key range starting at ``N``'s key and
a prefix scan finds them; the value (:mod:`lakefs_core.refs.store`) names the owning repository.
An import source record is keyed the same way (its canonical form, then NUL, then the importing
repository): a prefix scan from ``N``'s canonical form finds the sources equal to or inside ``N``, one
from ``A NUL`` the sources equal to an ancestor ``A``. Canonical forms hold no NUL.

The hard-delete journal's records (:mod:`lakefs_core.repos.journal`) live in the repository's own
partition, so they name one instance of a repository (a re-created repository of the same id starts
with none) and go with it when the repository is deleted; lakeFS reads that partition only under the
``branches/``, ``commits/``, ``tags/`` and ``settings/`` prefixes. The ``<repo>`` of the journal's key
names in the GC spec is therefore the partition, not a key segment. Records that must outlive a
repository (its deleted namespace) or that describe tokens (whose partitions are not a repository's)
live in ``lakefs-open-gc``.
"""

from __future__ import annotations

import uuid

from lakefs_core.errors import BadInputError, encode_utf8

GRAVELER_PARTITION = b"graveler"
CLEANUP_PARTITION = b"cleanup-tokens"
REPOS_PREFIX = b"repos/"
BRANCHES_PREFIX = b"branches/"
COMMITS_PREFIX = b"commits/"
TAGS_PREFIX = b"tags/"
SETTINGS_PREFIX = b"settings/"
IMPORTS_PREFIX = b"imports/"
PROTECTION_SETTING = "protected_branches"  # lakeFS's branch.ProtectionSettingKey
NAMESPACES_PARTITION = b"lakefs-open-namespaces"
IMPORT_SOURCES_PARTITION = b"lakefs-open-import-sources"


def repo_key(repo: str) -> bytes:
    return REPOS_PREFIX + repo.encode()


def repo_partition(repo: str, instance_uid: str) -> bytes:
    return f"{repo}-{instance_uid}".encode()


def branch_key(branch: str) -> bytes:
    return BRANCHES_PREFIX + branch.encode()


def commit_key(commit_id: str) -> bytes:
    return COMMITS_PREFIX + commit_id.encode()


def tag_key(tag: str) -> bytes:
    return TAGS_PREFIX + tag.encode()


def settings_key(name: str) -> bytes:
    """``settings/<name>``: a repository-level setting, lakeFS's ``graveler.SettingsPath`` (its
    ``protected_branches``; the REST server's ``branch_protection`` and ``metadata``)."""
    return SETTINGS_PREFIX + _segment(name, "setting")


def import_key(import_id: str) -> bytes:
    """``imports/<id>``: an import's status, lakeFS's ``graveler.ImportsPath``."""
    return IMPORTS_PREFIX + _segment(import_id, "import id")


def new_staging_token(repo: str, branch: str) -> str:
    return f"{repo}-{branch}:{uuid.uuid4()}"


def staging_partition(token: str) -> bytes:
    return token.encode()


def cleanup_key(token: str) -> bytes:
    return token.encode()


def namespace_claim_key(canonical: str) -> bytes:
    """The claim key of a namespace, given its canonical form (``s3://b/a/``)."""
    return canonical.encode()


def import_source_prefix(canonical: str) -> bytes:
    """Where the records of exactly the source ``canonical`` start (one per importing repository)."""
    if "\0" in canonical:
        raise BadInputError("must not contain NUL", field="source")
    return canonical.encode() + b"\0"


def import_source_key(canonical: str, repo: str) -> bytes:
    """The record of ``repo`` having imported objects from the source ``canonical``."""
    return import_source_prefix(canonical) + repo.encode()


def name_after(prefix: bytes, key: bytes) -> str:
    """The id part of a prefixed key (``branches/main`` -> ``main``)."""
    return key[len(prefix) :].decode()


LEASES_PARTITION = b"lakefs-open-leases"


def lease_key(name: str) -> bytes:
    """The key of the lease ``name`` (e.g. ``gc/<repository>``) in :data:`LEASES_PARTITION`."""
    if not name or "\0" in name:
        raise BadInputError("must be a non-empty string without NUL", field="lease")
    return name.encode()


# -- lakefs-server's multipart uploads (ours) --------------------------------------------------------------

MULTIPART_PARTITION = b"lakefs-open-multipart"
MULTIPART_UPLOADS_PREFIX = b"uploads/"
MULTIPART_PARTS_PREFIX = b"parts/"


def multipart_uploads_prefix(repo: str = "") -> bytes:
    """The keys of every open multipart upload (of ``repo`` when given) in :data:`MULTIPART_PARTITION`."""
    return MULTIPART_UPLOADS_PREFIX + (_segment(repo, "repository") + b"/" if repo else b"")


def multipart_upload_key(repo: str, upload_id: str) -> bytes:
    """The record of one open multipart upload: ``uploads/<repo>/<upload>``."""
    return multipart_uploads_prefix(repo) + _segment(upload_id, "uploadId")


def multipart_parts_prefix(upload_id: str) -> bytes:
    """The part records of one upload: ``parts/<upload>/<part:05d>``, in part order."""
    return MULTIPART_PARTS_PREFIX + _segment(upload_id, "uploadId") + b"/"


def multipart_part_key(upload_id: str, part_number: int) -> bytes:
    if not 1 <= part_number <= 10_000:
        raise BadInputError("must be between 1 and 10000", field="partNumber")
    return multipart_parts_prefix(upload_id) + f"{part_number:05d}".encode()


# -- retention GC and the hard-delete journal (ours; see the table above) ---------------------------------

GC_PARTITION = b"lakefs-open-gc"
GC_SETTINGS_KEY = b"gc-settings"
GC_INTENTS_PREFIX = b"gc-intents/"
GC_CONSUMED_PREFIX = b"gc-consumed/"
GC_SETTLED_PREFIX = b"gc-settled/"
TOKEN_FATES_PREFIX = b"token-fates/"
DELETED_REPOS_PREFIX = b"deleted-repos/"
MAX_ADDRESS_LENGTH = 1024


def _segment(value: str, field: str) -> bytes:
    """One ``/``-free, NUL-free, non-empty key segment."""
    if not value or "/" in value or "\0" in value:
        raise BadInputError("must be a non-empty string without '/' or NUL", field=field)
    return value.encode()


def gc_settings_key() -> bytes:
    """The key of a repository's GC settings, in the repository's partition."""
    return GC_SETTINGS_KEY


def gc_intent_key(address: str) -> bytes:
    """``gc-intents/<address>`` in the repository's partition: the journal intent of one upload."""
    if not address or "\0" in address or len(address) > MAX_ADDRESS_LENGTH:
        raise BadInputError(f"must be 1-{MAX_ADDRESS_LENGTH} characters without NUL", field="address")
    return GC_INTENTS_PREFIX + address.encode()


def gc_consumed_prefix(branch: str) -> bytes:
    """``gc-consumed/<branch>/``: scan under it for the commit attempts that consumed the branch's tokens."""
    return GC_CONSUMED_PREFIX + _segment(branch, "branch") + b"/"


def gc_consumed_key(branch: str, token: str, commit_id: str) -> bytes:
    """``gc-consumed/<branch>/<token>/<commit>`` in the repository's partition."""
    return gc_consumed_prefix(branch) + _segment(token, "token") + b"/" + _segment(commit_id, "commit")


def gc_settled_key(batch: str) -> bytes:
    """``gc-settled/<batch>`` in the repository's partition: a batch upload's objects were all stored."""
    return GC_SETTLED_PREFIX + _segment(batch, "batch")


def token_fate_key(token: str) -> bytes:
    """``token-fates/<token>`` in :data:`GC_PARTITION`: why a token was marked for cleanup."""
    return TOKEN_FATES_PREFIX + token.encode()


def deleted_repo_key(repo: str, instance_uid: str) -> bytes:
    """``deleted-repos/<repo>-<instance_uid>`` in :data:`GC_PARTITION`: a deleted repository's namespace."""
    return DELETED_REPOS_PREFIX + _segment(f"{repo}-{instance_uid}", "repository")


PURGES_PREFIX = b"purges/"
PURGED_PREFIX = b"purged/"
PURGING_PREFIX = b"purging/"
# ``purged`` (no slash): the repository has (or is about to have) audited purges. It sorts right
# before the markers, so one scan from it finds it or, in a repository purged before it existed, a
# marker (:mod:`lakefs_core.repos.purge_markers`).
PURGES_ANNOUNCED_KEY = b"purged"


def purge_key(audit_id: str) -> bytes:
    """``purges/<audit id>`` in the repository's partition: the audit record of one purge."""
    return PURGES_PREFIX + _segment(audit_id, "audit_id")


def purged_key(address: str) -> bytes:
    """``purged/<relative address>`` in the repository's partition: the purge that destroyed it."""
    if not address or "\0" in address or len(address) > MAX_ADDRESS_LENGTH:
        raise BadInputError(f"must be 1-{MAX_ADDRESS_LENGTH} characters without NUL", field="address")
    return PURGED_PREFIX + address.encode()


# -- lakeFS's auth service (see the table above) -----------------------------------------------------------

AUTH_PARTITION = b"auth"
AUTH_USERS_PREFIX = b"users/"
AUTH_GROUPS_PREFIX = b"groups/"
AUTH_POLICIES_PREFIX = b"policies/"
AUTH_METADATA_PREFIX = b"installation_metadata/"


def auth_segment(value: str, field: str) -> bytes:
    """One name of an auth key: non-empty, without ``/`` (lakeFS's ``ValidateAuthEntityID``) or NUL,
    valid UTF-8."""
    if not value or "/" in value or "\0" in value:
        raise BadInputError("must be a non-empty string without '/' or NUL", field=field)
    return encode_utf8(value, field)


def auth_user_key(user: str) -> bytes:
    return AUTH_USERS_PREFIX + auth_segment(user, "user")


def auth_group_key(group: str) -> bytes:
    return AUTH_GROUPS_PREFIX + auth_segment(group, "group")


def auth_policy_key(policy: str) -> bytes:
    return AUTH_POLICIES_PREFIX + auth_segment(policy, "policy")


def auth_credentials_prefix(user: str) -> bytes:
    """``uCredentials/<user>/credentials/``: the user's access keys are under it."""
    return b"uCredentials/" + auth_segment(user, "user") + b"/credentials/"


def auth_credential_key(user: str, access_key_id: str) -> bytes:
    return auth_credentials_prefix(user) + auth_segment(access_key_id, "access_key_id")


def auth_group_users_prefix(group: str) -> bytes:
    """``gUsers/<group>/users/``: the group's members are under it."""
    return b"gUsers/" + auth_segment(group, "group") + b"/users/"


def auth_group_user_key(group: str, user: str) -> bytes:
    return auth_group_users_prefix(group) + auth_segment(user, "user")


def auth_user_policies_prefix(user: str) -> bytes:
    """``uPolicies/<user>/policies/``: the policies attached to the user are under it."""
    return b"uPolicies/" + auth_segment(user, "user") + b"/policies/"


def auth_user_policy_key(user: str, policy: str) -> bytes:
    return auth_user_policies_prefix(user) + auth_segment(policy, "policy")


def auth_group_policies_prefix(group: str) -> bytes:
    """``gPolicies/<group>/policies/``: the policies attached to the group are under it."""
    return b"gPolicies/" + auth_segment(group, "group") + b"/policies/"


def auth_group_policy_key(group: str, policy: str) -> bytes:
    return auth_group_policies_prefix(group) + auth_segment(policy, "policy")


def auth_metadata_key(name: str) -> bytes:
    """``installation_metadata/<name>`` (lakeFS's ``MetadataKeyPath``)."""
    return AUTH_METADATA_PREFIX + auth_segment(name, "metadata")


def purging_key(audit_id: str) -> bytes:
    """``purging/<audit id>`` in the repository's partition: a purge not finished yet (written before
    its record, removed after it is settled), so finding unfinished purges reads only these."""
    return PURGING_PREFIX + _segment(audit_id, "audit_id")


GC_RUNS_PREFIX = b"gc-runs/"
GC_RUN_RECORDS_PREFIX = b"gc-run-records/"
GC_RUN_GARBAGE_PREFIX = b"gc-run-garbage/"


def gc_run_key(run_id: str) -> bytes:
    """``gc-runs/<run id>`` in the repository's partition: the pointer to a GC run's current record
    (its value is the record's SHA-256, moved by compare-and-swap only)."""
    return GC_RUNS_PREFIX + _segment(run_id, "run_id")


def gc_run_record_key(digest: str, chunk: int = 0) -> bytes:
    """``gc-run-records/<sha-256>`` in the repository's partition: one immutable GC run record,
    keyed by the SHA-256 of its bytes (written create-only before the pointer names it); a record
    longer than one KV value continues at ``gc-run-records/<sha-256>/<chunk>`` (chunk >= 1)."""
    if chunk < 0:
        raise BadInputError("must be >= 0", field="chunk")
    key = GC_RUN_RECORDS_PREFIX + _digest(digest)
    return key if chunk == 0 else key + b"/%d" % chunk


def gc_run_garbage_key(digest: str) -> bytes:
    """``gc-run-garbage/<sha-256>`` in the repository's partition: the tombstone of a GC run record
    no pointer should name any more (superseded, or its run's records retired), whose chunks are
    deleted once its grace has passed and a re-read shows no pointer names it."""
    return GC_RUN_GARBAGE_PREFIX + _digest(digest)


def _digest(digest: str) -> bytes:
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise BadInputError("must be a SHA-256 in lowercase hex", field="digest")
    return digest.encode()
