"""The only module that maps refs and staging ids to KV partitions and keys (spec section 6).

| what | partition | key |
|---|---|---|
| repository | ``graveler`` | ``repos/<repo>`` |
| branch | ``<repo>-<instance_uid>`` | ``branches/<branch>`` |
| commit | ``<repo>-<instance_uid>`` | ``commits/<commit id>`` |
| tag | ``<repo>-<instance_uid>`` | ``tags/<tag>`` |
| staged entry | ``<staging token>`` | raw object key |
| token awaiting async drop | ``cleanup-tokens`` | ``<staging token>`` |
| storage namespace claim (ours) | ``lakefs-open-namespaces`` | canonical namespace |

Staging tokens are ``<repo>-<branch>:<uuid4>``.

The namespace claims are this project's addition, not lakeFS records (lakeFS ignores the partition;
its name cannot be a repository partition, whose suffix is a hex instance uid). The key is the
namespace's canonical form (:attr:`lakefs_core.keys.StorageNamespace.canonical`: ``s3://b/a/`` with one
trailing ``/``), so every namespace nested in ``N`` sorts in the key range starting at ``N``'s key and
a prefix scan finds them; the value (:mod:`lakefs_core.refs.store`) names the owning repository.
"""

from __future__ import annotations

import uuid

GRAVELER_PARTITION = b"graveler"
CLEANUP_PARTITION = b"cleanup-tokens"
REPOS_PREFIX = b"repos/"
BRANCHES_PREFIX = b"branches/"
COMMITS_PREFIX = b"commits/"
TAGS_PREFIX = b"tags/"
NAMESPACES_PARTITION = b"lakefs-open-namespaces"


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


def new_staging_token(repo: str, branch: str) -> str:
    return f"{repo}-{branch}:{uuid.uuid4()}"


def staging_partition(token: str) -> bytes:
    return token.encode()


def cleanup_key(token: str) -> bytes:
    return token.encode()


def namespace_claim_key(canonical: str) -> bytes:
    """The claim key of a namespace, given its canonical form (``s3://b/a/``)."""
    return canonical.encode()


def name_after(prefix: bytes, key: bytes) -> str:
    """The id part of a prefixed key (``branches/main`` -> ``main``)."""
    return key[len(prefix) :].decode()
