"""lakeFS's identifier rules for repositories, branches, tags and commit ids (validation only).

Kept apart from :mod:`.model` (which re-exports them) so that parsing a ``lakefs://`` URI, which
every command line does at start-up, imports neither protobuf nor the records.
"""

from __future__ import annotations

import re

from lakefs_core.errors import BadInputError

# lakeFS's identifier rules (pkg/validator, pkg/graveler/validate.go) are Go RE2 patterns: they match
# the whole string and ``\w`` is ASCII there. Python's ``$`` also matches before a trailing newline
# and its ``\w`` is Unicode, so the classes are spelled out and every check is a ``fullmatch``.
_REPO_ID = re.compile(r"[a-z0-9][a-z0-9-]{2,62}")
_BRANCH_ID = re.compile(r"[A-Za-z0-9_][-A-Za-z0-9_]*")
_TAG_ID = re.compile(r"[A-Za-z0-9_][-A-Za-z0-9_.]*")
_COMMIT_ID = re.compile(r"[0-9a-f]{64}")
MAX_REF_NAME = 256


def validate_repo_id(repo: str) -> str:
    if not isinstance(repo, str) or not _REPO_ID.fullmatch(repo):
        raise BadInputError(
            f"invalid repository id {repo!r}: 3-63 characters of a-z, 0-9 and '-', "
            "starting with a letter or digit",
            field="repository",
        )
    return repo


def validate_branch_id(branch: str) -> str:
    """lakeFS's branch rule, plus: not a full commit id (a ref resolves to a commit id first, so such
    a branch could never be read by its name)."""
    if not isinstance(branch, str) or not _BRANCH_ID.fullmatch(branch) or len(branch) > MAX_REF_NAME:
        raise BadInputError(f"invalid branch id {branch!r}: letters, digits, '_' and '-'", field="branch")
    if is_commit_id(branch):
        raise BadInputError(f"invalid branch id {branch!r}: looks like a commit id", field="branch")
    return branch


def validate_tag_id(tag: str) -> str:
    """Letters, digits, ``_``, ``-`` and ``.``; like lakeFS (git's ref rules) not ending with ``.`` or
    ``.lock``, without ``..``; and not a full commit id."""
    if (
        not isinstance(tag, str)
        or not _TAG_ID.fullmatch(tag)
        or len(tag) > MAX_REF_NAME
        or tag.endswith((".", ".lock"))
        or ".." in tag
    ):
        raise BadInputError(f"invalid tag id {tag!r}", field="tag")
    if is_commit_id(tag):
        raise BadInputError(f"invalid tag id {tag!r}: looks like a commit id", field="tag")
    return tag


def is_commit_id(ref: str) -> bool:
    """A full commit id: 64 lower-case hex digits (abbreviated ids are not resolved)."""
    return isinstance(ref, str) and _COMMIT_ID.fullmatch(ref) is not None
