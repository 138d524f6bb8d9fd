"""Branch protection rules: lakeFS's repository setting ``protected_branches``, read, written and enforced.

Storage is lakeFS's, byte for byte (``pkg/graveler/settings`` and ``pkg/graveler/branch``): the
``BranchProtectionRules`` protobuf message, marshalled bare (no envelope), under
``settings/protected_branches`` in the repository's partition (:func:`lakefs_core.refs.kvkeys.settings_key`).
Each rule maps a branch-name pattern to the actions it blocks (``STAGING_WRITE``, ``COMMIT``); lakeFS
and ``lakefs-core branch-protect add`` block both.

The version of the rules is lakeFS's checksum (its ETag): the hex SHA-256 of the stored bytes, ``""``
when nothing is stored. :func:`set_rules` writes only if the stored rules still have the checksum the
caller read (``if_match``; ``""``: only if none are stored; ``None``: unconditionally), as a
compare-and-swap on the KV value, so two concurrent editors cannot lose each other's rule.

Patterns are lakeFS's globs (``gobwas/glob`` without separators), matched in bounded time by
:mod:`.branchglob`.

Enforcement (:func:`check`) is what lakeFS's Graveler does, operation for operation: staged writes
(upload, delete, update-metadata, a presigned staging address, resetting uncommitted changes) are
refused on a branch whose rules block ``STAGING_WRITE`` ("cannot write to protected branch"); a
commit on one blocking ``COMMIT`` ("cannot commit to protected branch"), a commit of given entries
(the Spark data source's write) included; a hard reset of the branch to another commit on
either ("protected branch" when ``COMMIT`` is blocked). Merges, reverts, cherry-picks and imports
into a protected branch are allowed, as in lakeFS: merging is how changes reach a protected branch.

Writers read the rules through a per-process cache (:class:`ProtectionCache`, entries younger than
``GravelerSettings.protection_cache_seconds``, 3 s as lakeFS's settings cache): a rule added by another
process takes effect within that delay; one set through this process at once.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING

from google.protobuf.message import DecodeError

from lakefs_core.errors import (
    BadInputError,
    CorruptDataError,
    NotFoundError,
    PreconditionFailedError,
    ProtectedBranchError,
)
from lakefs_core.format.proto import graveler_pb2
from lakefs_core.kv.base import Expect
from lakefs_core.refs import kvkeys
from lakefs_core.repos.branchglob import Compiled, compile_glob, glob_matches

if TYPE_CHECKING:
    from lakefs_core.refs.model import Repository
    from lakefs_core.repos.context import RepoContext

__all__ = [
    "Action",
    "ProtectionCache",
    "Rules",
    "check",
    "get_rules",
    "matches",
    "set_rules",
]

MAX_PATTERN_LENGTH = 256
MAX_RULES = 1000


class Action(IntEnum):
    """lakeFS's ``BranchProtectionBlockedAction`` (the enum values are the wire values)."""

    STAGING_WRITE = 0
    COMMIT = 1


# lakeFS's messages (pkg/graveler/errors.go), the start of every refusal's text.
MESSAGES = {
    Action.STAGING_WRITE: "cannot write to protected branch",
    Action.COMMIT: "cannot commit to protected branch",
}
_WIRE = {Action.STAGING_WRITE: graveler_pb2.STAGING_WRITE, Action.COMMIT: graveler_pb2.COMMIT}
RESET_MESSAGE = "protected branch"  # ResetHard on a branch whose rules block commits


@dataclass(frozen=True)
class Rules:
    """Pattern -> blocked actions, in pattern order (lakeFS keeps a map; the order is ours, for output)."""

    rules: Mapping[str, frozenset[Action]]
    # (branch, action) -> blocking pattern: a writer matches each branch once per rules read.
    _memo: dict[tuple[str, Action], str | None] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )

    @classmethod
    def of(cls, patterns: Iterable[str]) -> Rules:
        """Rules blocking both actions for each of ``patterns`` (what lakeFS's API and CLI write)."""
        both = frozenset(Action)
        return cls({p: both for p in patterns})

    def to_bytes(self) -> bytes:
        msg = graveler_pb2.BranchProtectionRules()
        for pattern in sorted(self.rules):
            blocked = sorted(self.rules[pattern])
            msg.branch_pattern_to_blocked_actions[pattern].value.extend(_WIRE[a] for a in blocked)
        return msg.SerializeToString(deterministic=True)

    @classmethod
    def from_bytes(cls, raw: bytes, where: str) -> Rules:
        msg = graveler_pb2.BranchProtectionRules()
        try:
            msg.ParseFromString(raw)
        except DecodeError as e:
            raise CorruptDataError(f"branch protection rules at {where}: not a protobuf message") from e
        rules: dict[str, frozenset[Action]] = {}
        for pattern in sorted(msg.branch_pattern_to_blocked_actions):
            values = msg.branch_pattern_to_blocked_actions[pattern].value
            # An action this version does not know blocks nothing here (lakeFS compares by value).
            rules[pattern] = frozenset(Action(v) for v in values if v in Action._value2member_map_)
        return cls(rules)

    def blocking(self, branch: str, action: Action) -> str | None:
        """The first pattern (in sorted order) matching ``branch`` that blocks ``action``, if any."""
        if (branch, action) in self._memo:
            return self._memo[(branch, action)]
        found = next(
            (p for p, actions in sorted(self.rules.items()) if action in actions and matches(p, branch)),
            None,
        )
        if len(self._memo) > 10_000:  # bounded: branch names come from requests
            self._memo.clear()
        self._memo[(branch, action)] = found
        return found


def checksum(raw: bytes | None) -> str:
    """lakeFS's version of a setting: hex SHA-256 of its bytes, ``""`` for none (or empty bytes)."""
    return hashlib.sha256(raw).hexdigest() if raw else ""


def validate_pattern(pattern: str) -> None:
    if not pattern or len(pattern) > MAX_PATTERN_LENGTH or any(c in pattern for c in "\0\n\r"):
        raise BadInputError(
            f"must be 1-{MAX_PATTERN_LENGTH} characters without NUL or line breaks", field="pattern"
        )
    _compile(pattern)


_COMPILED: dict[str, Compiled] = {}


def matches(pattern: str, branch: str) -> bool:
    """Whether ``branch`` matches the glob ``pattern`` (:mod:`.branchglob`); a malformed pattern
    (stored by another writer) matches nothing."""
    try:
        compiled = _compile(pattern)
    except BadInputError:
        return False
    return glob_matches(compiled, branch)


def _compile(pattern: str) -> Compiled:
    hit = _COMPILED.get(pattern)
    if hit is None:
        if len(_COMPILED) > 10_000:  # bounded: patterns come from stored records
            _COMPILED.clear()
        hit = _COMPILED[pattern] = compile_glob(pattern)
    return hit


async def _read(ctx: RepoContext, repo: Repository) -> tuple[Rules, str]:
    key = kvkeys.settings_key(kvkeys.PROTECTION_SETTING)
    try:
        raw = await ctx.kv.get(repo.partition, key)
    except NotFoundError:
        return Rules({}), ""
    where = f"{repo.partition.decode(errors='replace')}/{key.decode()}"
    return Rules.from_bytes(raw, where), checksum(raw)


async def get_rules(ctx: RepoContext, repo: Repository) -> tuple[Rules, str]:
    """The repository's rules as stored now and their checksum (``""``: none stored)."""
    rules, etag = await _read(ctx, repo)
    ctx.protection.keep(repo, rules, time.monotonic())
    return rules, etag


async def set_rules(ctx: RepoContext, repo: Repository, rules: Rules, if_match: str | None) -> str:
    """Store ``rules`` if the stored ones still have checksum ``if_match`` (module docstring);
    :class:`PreconditionFailedError` if not. Returns the new checksum."""
    if len(rules.rules) > MAX_RULES:
        raise BadInputError(f"at most {MAX_RULES} rules", field="rules")
    for pattern in rules.rules:
        validate_pattern(pattern)
    key = kvkeys.settings_key(kvkeys.PROTECTION_SETTING)
    new = rules.to_bytes()
    if if_match is None:
        await ctx.kv.set(repo.partition, key, new)
    else:
        changed = f"branch protection rules of repository {repo.id!r} changed since they were read"
        try:
            current: bytes | None = await ctx.kv.get(repo.partition, key)
        except NotFoundError:
            current = None
        if checksum(current) != if_match:
            raise PreconditionFailedError(f"{changed} (if-match {if_match!r})")
        # The swap expects exactly the bytes whose checksum matched (None: still absent).
        expect = Expect.ABSENT if current is None else Expect.equals(current)
        try:
            await ctx.kv.set_if(repo.partition, key, new, expect)
        except PreconditionFailedError as e:
            raise PreconditionFailedError(changed) from e
    ctx.protection.keep(repo, rules, time.monotonic())
    return checksum(new)


class ProtectionCache:
    """The rules each repository (instance) had when this process last read them."""

    def __init__(self) -> None:
        self._rules: dict[bytes, tuple[float, Rules]] = {}

    def get(self, repo: Repository, now: float, max_age: float) -> Rules | None:
        hit = self._rules.get(repo.partition)
        return hit[1] if hit is not None and now - hit[0] < max_age else None

    def keep(self, repo: Repository, rules: Rules, now: float) -> None:
        self._rules[repo.partition] = (now, rules)


async def check(ctx: RepoContext, repo: Repository, branch: str, *actions: Action) -> None:
    """Raise :class:`ProtectedBranchError` if a rule matching ``branch`` blocks one of ``actions``
    (checked in the order given); reads the rules through the cache."""
    now = time.monotonic()
    rules = ctx.protection.get(repo, now, ctx.settings.protection_cache_seconds)
    if rules is None:
        rules, _ = await _read(ctx, repo)
        ctx.protection.keep(repo, rules, now)
    if not rules.rules:
        return
    for action in actions:
        pattern = rules.blocking(branch, action)
        if pattern is not None:
            raise ProtectedBranchError(MESSAGES[action], repo=repo.id, branch=branch, pattern=pattern)


async def check_reset(ctx: RepoContext, repo: Repository, branch: str) -> None:
    """lakeFS's ResetHard: "protected branch" if commits are blocked, else the staging-write check."""
    try:
        await check(ctx, repo, branch, Action.COMMIT)
    except ProtectedBranchError as e:
        raise ProtectedBranchError(RESET_MESSAGE, repo=repo.id, branch=branch, pattern=e.pattern) from None
    await check(ctx, repo, branch, Action.STAGING_WRITE)
