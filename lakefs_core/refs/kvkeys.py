"""The only module that maps refs and staging ids to KV partitions and keys (spec section 6).

| what | partition | key |
|---|---|---|
| repository | ``graveler`` | ``repos/<repo>`` |
| branch | ``<repo>-<instance_uid>`` | ``branches/<branch>`` |
| commit | ``<repo>-<instance_uid>`` | ``commits/<commit id>`` |
| tag | ``<repo>-<instance_uid>`` | ``tags/<tag>`` |
| staged entry | ``<staging token>`` | raw object key |
| token awaiting async drop | ``cleanup-tokens`` | ``<staging token>`` |

Staging tokens are ``<repo>-<branch>:<uuid4>``.
"""

from __future__ import annotations

import uuid

GRAVELER_PARTITION = b"graveler"
CLEANUP_PARTITION = b"cleanup-tokens"
REPOS_PREFIX = b"repos/"
BRANCHES_PREFIX = b"branches/"
COMMITS_PREFIX = b"commits/"
TAGS_PREFIX = b"tags/"


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


def name_after(prefix: bytes, key: bytes) -> str:
    """The id part of a prefixed key (``branches/main`` -> ``main``)."""
    return key[len(prefix) :].decode()
