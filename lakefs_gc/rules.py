"""Garbage-collection retention rules, stored exactly as lakeFS stores them.

Contract:

- JSON shape (lakeFS's ``GarbageCollectionRules`` schema of ``/settings/gc_rules``):
  ``{"default_retention_days": 14, "branches": [{"branch_id": "main", "retention_days": 21}]}``; both
  fields required. :class:`GCRules` validates it and is immutable.
- Storage: the binary protobuf ``io.treeverse.lakefs.graveler.GarbageCollectionRules``
  (``lakefs_core/format/proto/graveler.proto``) at ``<ns>/_lakefs/retention/gc/rules/config.json``
  (:meth:`StorageNamespace.gc_rules_key`), so a real lakeFS and this project read each other's rules.
- :func:`load_rules` answers ``None`` when the file is missing or empty (lakeFS: "no GC rules").
  Anything else that is not a valid rules message raises :class:`CorruptDataError` naming the file;
  GC then fails closed rather than guessing a retention.

Stricter than lakeFS (it casts JSON numbers to int32 and accepts any map key), on both the JSON and
the stored path: days must be 0..2**31-1 (negative days would put the threshold in the future, i.e.
delete more), branch ids must pass lakeFS's branch rule, a branch may be named once, at most
:data:`MAX_BRANCH_RULES` branches, and the stored file is at most :data:`MAX_RULES_BYTES` bytes.

lakeFS quirk kept on purpose: ``{"default_retention_days": 0, "branches": []}`` encodes to zero bytes
(proto3 omits defaults), which both lakeFS and :func:`load_rules` read back as "no rules".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from google.protobuf.message import DecodeError
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError, field_validator

from lakefs_core.block.base import BlockStore
from lakefs_core.errors import BadInputError, CorruptDataError, NotFoundError
from lakefs_core.format.proto import graveler_pb2
from lakefs_core.repos.graveler import StorageNamespace, validate_branch_id

INT32_MAX = 2**31 - 1
MAX_BRANCH_RULES = 10_000
MAX_RULES_BYTES = 1 << 20

Days = Annotated[StrictInt, Field(ge=0, le=INT32_MAX)]


class BranchRule(BaseModel):
    """One ``{"branch_id": ..., "retention_days": ...}`` item."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    branch_id: StrictStr
    retention_days: Days

    @field_validator("branch_id")
    @classmethod
    def _branch_rule(cls, value: str) -> str:
        try:
            return validate_branch_id(value)
        except BadInputError as e:
            raise ValueError(str(e)) from None


class GCRules(BaseModel):
    """lakeFS's GC rules: a default retention and per-branch overrides, in days."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    default_retention_days: Days
    branches: tuple[BranchRule, ...] = Field(max_length=MAX_BRANCH_RULES)

    @field_validator("branches")
    @classmethod
    def _unique(cls, value: tuple[BranchRule, ...]) -> tuple[BranchRule, ...]:
        seen: set[str] = set()
        for rule in value:
            if rule.branch_id in seen:
                # lakeFS silently keeps the last one; an ambiguous request is refused instead.
                raise ValueError(f"branch {rule.branch_id!r} is named more than once")
            seen.add(rule.branch_id)
        return tuple(sorted(value, key=lambda r: r.branch_id))

    @property
    def branch_days(self) -> dict[str, int]:
        return {r.branch_id: r.retention_days for r in self.branches}

    def retention_days(self, branch_id: str) -> int:
        """The branch's own rule, else the default (lakeFS's lookup)."""
        return self.branch_days.get(branch_id, self.default_retention_days)

    @classmethod
    def of(cls, default_retention_days: int, branches: Mapping[str, int] | None = None) -> GCRules:
        items = [{"branch_id": b, "retention_days": d} for b, d in (branches or {}).items()]
        return parse_rules_json({"default_retention_days": default_retention_days, "branches": items})

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def to_proto_bytes(self) -> bytes:
        """lakeFS's stored form. Deterministic (map entries sorted) so equal rules give equal bytes."""
        msg = graveler_pb2.GarbageCollectionRules(
            default_retention_days=self.default_retention_days,
            branch_retention_days=self.branch_days,
        )
        return msg.SerializeToString(deterministic=True)


def widest_rules(a: GCRules | None, b: GCRules | None) -> GCRules | None:
    """Rules that retain everything either of ``a`` and ``b`` retains: every branch (named or not)
    gets the longer of its two retentions. ``None`` (no rules: nothing expires) wins over any rules.

    Retention is monotone in the days (a longer window keeps a superset of commits), so the active
    set under the result contains the active sets under both."""
    if a is None or b is None:
        return None
    names = a.branch_days.keys() | b.branch_days.keys()
    branches = {n: max(a.retention_days(n), b.retention_days(n)) for n in sorted(names)}
    return GCRules.of(max(a.default_retention_days, b.default_retention_days), branches)


def parse_rules_json(body: object) -> GCRules:
    """A request body (already JSON-decoded) as :class:`GCRules`; :class:`BadInputError` names the
    first offending field path (``branches.0.branch_id``)."""
    try:
        return GCRules.model_validate(body)
    except ValidationError as e:
        first = e.errors()[0]
        path = ".".join(str(p) for p in first["loc"]) or "gc_rules"
        raise BadInputError(first["msg"], field=path) from None


def decode_rules(raw: bytes, *, file: str) -> GCRules | None:
    """The stored bytes as rules; ``None`` for an empty file. Raises :class:`CorruptDataError`."""
    if len(raw) == 0:
        return None
    if len(raw) > MAX_RULES_BYTES:
        raise CorruptDataError(f"GC rules larger than {MAX_RULES_BYTES} bytes", file=file)
    msg = graveler_pb2.GarbageCollectionRules()
    try:
        msg.ParseFromString(raw)
    except DecodeError as e:
        raise CorruptDataError(f"undecodable GC rules: {e}", file=file) from e
    if len(msg.branch_retention_days) > MAX_BRANCH_RULES:
        raise CorruptDataError(f"more than {MAX_BRANCH_RULES} branch rules", file=file)
    items = [{"branch_id": b, "retention_days": d} for b, d in msg.branch_retention_days.items()]
    try:
        return parse_rules_json({"default_retention_days": msg.default_retention_days, "branches": items})
    except BadInputError as e:
        raise CorruptDataError(f"invalid GC rules: {e}", file=file) from None


async def load_rules(store: BlockStore, ns: StorageNamespace) -> GCRules | None:
    """The repository's rules, or ``None`` when there are none (missing or empty file)."""
    key = ns.gc_rules_key()
    try:
        # One byte past the bound tells "too large" apart without reading a hostile giant file.
        raw = await store.get(key, length=MAX_RULES_BYTES + 1)
    except NotFoundError:
        return None
    return decode_rules(raw, file=f"{store.uri}/{key}")


async def save_rules(store: BlockStore, ns: StorageNamespace, rules: GCRules) -> None:
    """Replace the rules (a plain overwrite, as lakeFS's ``SaveRules``)."""
    await store.put(ns.gc_rules_key(), rules.to_proto_bytes())


async def delete_rules(store: BlockStore, ns: StorageNamespace) -> None:
    """Remove the rules the way lakeFS does (``SaveRules(nil)``): an empty file, read as "no rules"."""
    await store.put(ns.gc_rules_key(), b"")
