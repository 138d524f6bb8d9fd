"""lakeFS's policy language: statements, their validation, and the evaluation of a required-permission
tree (:mod:`lakefs_core.auth.permissions`) against a principal's policies.

A policy is a named list of statements; a statement has an ``effect`` (``allow`` or ``deny``), a list
of actions (``fs:ReadObject``; ``*`` matches any run of characters and ``?`` one character, so
``fs:Read*`` and ``*`` are actions too), a resource (an ARN with the same wildcards, ``*``, or a JSON
list of them written as one string: ``["arn:...","arn:..."]``) and optional conditions
(``IpAddress``/``NotIpAddress`` on ``SourceIp``, ``StringLike``/``StringNotLike``: lakeFS's four
operators). ``${user}`` in a resource is the requesting user's name.

Evaluation is lakeFS's (``pkg/auth/service.go``'s ``CheckPermissions``), decided per leaf
:class:`~lakefs_core.auth.permissions.Permission`:

- a statement applies when its conditions hold, one of its resources matches the leaf's resource (a
  resource pattern matches an ARN with the same partition, service and account whose resource part
  the pattern's matches; ``*`` matches every ARN) and one of its actions matches the leaf's action;
- any applying ``deny`` decides DENY (deny wins); else any applying ``allow`` decides ALLOW; else
  NEUTRAL. No match is therefore a refusal, like a deny;
- :class:`~lakefs_core.auth.permissions.AllOf` is ALLOW when every child is, DENY or NEUTRAL as its
  first child that is not; :class:`~lakefs_core.auth.permissions.AnyOf` is DENY when a child is
  denied, else ALLOW when one is allowed;
- a statement that cannot be evaluated (an unknown condition operator, a malformed resource list, a
  client address that is not an IP address) makes the leaf DENY, never ALLOW.

Wildcard matching is linear in the name for a given pattern (no backtracking blow-up on hostile
keys): each ``*``-free piece is placed at its first match, which is always safe for ``*`` and ``?``.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any

from lakefs_core.auth import permissions as perms
from lakefs_core.auth.permissions import AllOf, AnyOf, Node, Permission
from lakefs_core.errors import BadInputError, PermissionDeniedError

__all__ = [
    "CONDITION_OPERATORS",
    "Decision",
    "Policy",
    "Statement",
    "arn_match",
    "authorize",
    "check",
    "check_permission",
    "has_action_on_any_resource",
    "parse_policy_document",
    "validate_entity_id",
    "wildcard_match",
]

ALLOW = "allow"
DENY = "deny"
CONDITION_OPERATORS = frozenset({"IpAddress", "NotIpAddress", "StringLike", "StringNotLike"})
MAX_ENTITY_ID = 512
MAX_STATEMENTS = 1000


class Decision(Enum):
    ALLOW = "allow"
    NEUTRAL = "neutral"
    DENY = "deny"


@dataclass(frozen=True)
class Statement:
    effect: str
    actions: tuple[str, ...]
    resource: str
    # operator -> field -> values, e.g. {"IpAddress": {"SourceIp": ("10.0.0.0/8",)}}
    condition: Mapping[str, Mapping[str, tuple[str, ...]]] = field(default_factory=dict)

    def to_doc(self) -> dict[str, Any]:
        """The statement in lakeFS's policy JSON (``effect``, ``action``, ``resource``, ``condition``)."""
        doc: dict[str, Any] = {"effect": self.effect, "action": list(self.actions), "resource": self.resource}
        if self.condition:
            doc["condition"] = {op: {f: list(v) for f, v in fs.items()} for op, fs in self.condition.items()}
        return doc


@dataclass(frozen=True)
class Policy:
    name: str
    statements: tuple[Statement, ...]
    created_at: datetime | None = None
    # The permission of a policy lakeFS's "simplified" (ACL) auth wrote; kept on rewrite, never evaluated.
    acl_permission: str = ""

    def to_doc(self) -> dict[str, Any]:
        """lakeFS's policy JSON (``id``, ``creation_date`` in Unix seconds, ``statement``)."""
        doc: dict[str, Any] = {"id": self.name, "statement": [s.to_doc() for s in self.statements]}
        if self.created_at is not None:
            doc["creation_date"] = int(self.created_at.timestamp())
        return doc


# -- validation ------------------------------------------------------------------------------------------


def validate_entity_id(name: str, what: str) -> str:
    """lakeFS's rule for user, group and policy names (non-empty, no ``/``: they are KV key segments),
    plus no NUL or other control character and at most :data:`MAX_ENTITY_ID` characters."""
    if not isinstance(name, str) or not name:
        raise BadInputError("must not be empty", field=what)
    if "/" in name:
        raise BadInputError("must not contain '/'", field=what)
    if len(name) > MAX_ENTITY_ID or any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        raise BadInputError(f"must be at most {MAX_ENTITY_ID} characters without controls", field=what)
    try:
        name.encode()
    except UnicodeEncodeError:
        raise BadInputError("must be valid UTF-8", field=what) from None
    return name


def _validate_action(action: str, where: str) -> None:
    service, sep, name = action.partition(":")
    if not sep or ":" in name or service not in perms.SERVICES:
        raise BadInputError(
            f"'{action[:100]}' is not an action (<service>:<Action>, service one of "
            f"{', '.join(sorted(perms.SERVICES))})",
            field=where,
        )


def _validate_resource(resource: str, where: str) -> None:
    for one in resource_list(resource, where):
        # aws-sdk-go's arn.IsARN, as lakeFS validates: "arn:" and at least six ':'-separated sections
        if one != perms.ALL and not (one.startswith("arn:") and one.count(":") >= 5):
            raise BadInputError(f"'{one[:200]}' is not an ARN or '*'", field=where)


def _validate_condition(condition: Mapping[str, Mapping[str, Sequence[str]]], where: str) -> None:
    for op, fields in condition.items():
        if op not in CONDITION_OPERATORS:
            raise BadInputError(
                f"unsupported operator '{op[:100]}' (one of {', '.join(sorted(CONDITION_OPERATORS))})",
                field=where,
            )
        for name, values in fields.items():
            if not name:
                raise BadInputError(f"{op}: a field name is empty", field=where)
            if op.endswith("IpAddress"):
                for value in values:
                    if _ip_network(value) is None:
                        raise BadInputError(f"{op}.{name}: '{value[:100]}' is not an IP or CIDR", field=where)


def validate_statement(stmt: Statement, where: str) -> None:
    if stmt.effect not in (ALLOW, DENY):
        raise BadInputError("effect must be 'allow' or 'deny'", field=f"{where}.effect")
    if not stmt.actions:
        raise BadInputError("must name at least one action", field=f"{where}.action")
    for i, action in enumerate(stmt.actions):
        _validate_action(action, f"{where}.action.{i}")
    _validate_resource(stmt.resource, f"{where}.resource")
    _validate_condition(stmt.condition, f"{where}.condition")


def validate_policy(policy: Policy) -> Policy:
    """lakeFS's ``ValidatePolicy`` (name, action names, ARNs, effect) plus conditions and sizes."""
    validate_entity_id(policy.name, "policy")
    if not policy.statements or len(policy.statements) > MAX_STATEMENTS:
        raise BadInputError(f"must hold 1 to {MAX_STATEMENTS} statements", field="statement")
    for i, stmt in enumerate(policy.statements):
        validate_statement(stmt, f"statement.{i}")
    return policy


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BadInputError("must be a list of strings", field=where)
    return tuple(value)


def _statement_from_doc(doc: Any, where: str) -> Statement:
    if not isinstance(doc, dict):
        raise BadInputError("must be an object", field=where)
    unknown = set(doc) - {"effect", "action", "resource", "condition"}
    if unknown:
        raise BadInputError(f"unknown key(s) {', '.join(sorted(map(str, unknown)))[:200]}", field=where)
    for key in ("effect", "action", "resource"):
        if key not in doc:
            raise BadInputError("is missing", field=f"{where}.{key}")
    if not isinstance(doc["effect"], str) or not isinstance(doc["resource"], str):
        raise BadInputError("effect and resource must be strings", field=where)
    condition: dict[str, dict[str, tuple[str, ...]]] = {}
    raw = doc.get("condition") or {}
    if not isinstance(raw, dict) or not all(isinstance(v, dict) for v in raw.values()):
        raise BadInputError("must map operators to {field: [values]}", field=f"{where}.condition")
    for op, fields in raw.items():
        condition[op] = {name: _strings(v, f"{where}.condition.{op}.{name}") for name, v in fields.items()}
    return Statement(doc["effect"], _strings(doc["action"], f"{where}.action"), doc["resource"], condition)


def parse_policy_document(text: str | bytes, name: str | None = None) -> Policy:
    """A policy from lakeFS's policy JSON (what ``lakectl auth policies create --statement-document``
    reads): ``{"statement": [{"effect", "action", "resource", "condition"?}], "id"?}``. ``name``
    (the command's ``--id``) wins over the document's ``id``; one of them is required. Validated."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        raise BadInputError("is not a JSON document", field="policy document") from None
    if not isinstance(doc, dict) or "statement" not in doc:
        raise BadInputError("must be an object with a 'statement' list", field="policy document")
    unknown = set(doc) - {"id", "statement", "creation_date"}
    if unknown:
        raise BadInputError(f"unknown key(s) {', '.join(sorted(map(str, unknown)))[:200]}", field="policy")
    name = name if name is not None else doc.get("id")
    if not isinstance(name, str):
        raise BadInputError("give the policy's name (--id, or 'id' in the document)", field="id")
    raw = doc["statement"]
    if not isinstance(raw, list):
        raise BadInputError("must be a list", field="statement")
    statements = tuple(_statement_from_doc(s, f"statement.{i}") for i, s in enumerate(raw))
    return validate_policy(Policy(name, statements))


# -- matching --------------------------------------------------------------------------------------------


def _piece_at(piece: str, name: str, at: int) -> bool:
    """``piece`` (literals and ``?``) matches ``name`` at index ``at``."""
    if at < 0 or at + len(piece) > len(name):
        return False
    if "?" not in piece:  # a literal (most pieces): one comparison in C, per request's leaf
        return name.startswith(piece, at)
    return all(p == "?" or p == name[at + i] for i, p in enumerate(piece))


def wildcard_match(pattern: str, name: str) -> bool:
    """lakeFS's ``wildcard.Match``: ``*`` matches any run of characters (``/`` included), ``?`` exactly
    one character, everything else itself; the whole name must match."""
    if pattern == "*":
        return True
    pieces = pattern.split("*")
    if len(pieces) == 1:
        return len(pattern) == len(name) and _piece_at(pattern, name, 0)
    first, middle, last = pieces[0], pieces[1:-1], pieces[-1]
    end = len(name) - len(last)
    if end < len(first) or not _piece_at(first, name, 0) or not _piece_at(last, name, end):
        return False
    pos = len(first)
    for piece in middle:
        if not piece:
            continue
        if "?" not in piece:
            found = name.find(piece, pos, end)
        else:
            found = next((i for i in range(pos, end - len(piece) + 1) if _piece_at(piece, name, i)), -1)
        if found < 0:
            return False
        pos = found + len(piece)
    return True


def _split_arn(arn: str) -> tuple[str, str, str, str] | None:
    """(partition, service, account, resource) of ``arn:lakefs:<service>:<region>:<account>:<resource>``."""
    parts = arn.split(":", 5)
    if len(parts) < 6 or parts[0] != "arn" or parts[1] != "lakefs" or not parts[2] or not parts[5]:
        return None
    return parts[1], parts[2], parts[4], parts[5]


def arn_match(pattern: str, arn: str) -> bool:
    """lakeFS's ``ArnMatch``: ``*`` matches everything; otherwise partition, service and account are
    equal and the resource part matches with wildcards (the region is not compared)."""
    if pattern == perms.ALL:
        return True
    src, dst = _split_arn(pattern), _split_arn(arn)
    if src is None or dst is None or src[:3] != dst[:3]:
        return False
    return wildcard_match(src[3], dst[3])


class _Unevaluable(Exception):
    """A statement this engine cannot evaluate; the leaf is denied."""


def resource_list(resource: str, where: str = "resource") -> list[str]:
    """The resources of a statement: one, or a JSON list written as a string (lakeFS's
    ``ParsePolicyResourceAsList``)."""
    if not resource:
        raise BadInputError("must not be empty", field=where)
    if not (resource.startswith("[") and resource.endswith("]")):
        return [resource]
    try:
        value = json.loads(resource)
    except ValueError:
        raise BadInputError("is not a JSON list of strings", field=where) from None
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise BadInputError("is not a JSON list of non-empty strings", field=where)
    return value


def _ip_network(value: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    try:
        return ipaddress.ip_network(value.strip(), strict=False)
    except ValueError:
        return None


def _ip_matches(values: Iterable[str], client: str) -> bool:
    try:
        address = ipaddress.ip_address(client)
    except ValueError:
        raise _Unevaluable from None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped  # Go's net.IP compares an IPv4-mapped address as IPv4
    for value in values:
        network = _ip_network(value)
        if network is None:
            raise _Unevaluable
        if address.version == network.version and address in network:
            return True
    return False


def _conditions_hold(
    condition: Mapping[str, Mapping[str, Sequence[str]]], context: Mapping[str, str]
) -> bool:
    for op, fields in condition.items():
        if op not in CONDITION_OPERATORS:
            raise _Unevaluable
        negate = op.startswith("Not") or op == "StringNotLike"
        for name, values in fields.items():
            value = context.get(name)
            if not value:
                return False  # a field the request lacks fails the condition (lakeFS)
            if op.endswith("IpAddress"):
                matched = _ip_matches(values, value)
            else:
                matched = any(wildcard_match(v, value) for v in values)
            if matched == negate:
                return False
    return True


# -- evaluation ------------------------------------------------------------------------------------------


def _check_leaf(
    leaf: Permission,
    username: str,
    policies: Sequence[Policy],
    context: Mapping[str, str],
    missing: list[str],
) -> Decision:
    allowed = False
    try:
        for policy in policies:
            for stmt in policy.statements:
                if stmt.condition and not _conditions_hold(stmt.condition, context):
                    continue
                try:
                    resources = resource_list(stmt.resource)
                except BadInputError:
                    raise _Unevaluable from None
                if not any(arn_match(r.replace("${user}", username), leaf.resource) for r in resources):
                    continue
                if any(wildcard_match(a, leaf.action) for a in stmt.actions):
                    if stmt.effect == DENY:
                        missing.append(f"denied:{leaf.action}")
                        return Decision.DENY
                    allowed = allowed or stmt.effect == ALLOW
    except _Unevaluable:
        missing.append(f"denied:{leaf.action}")
        return Decision.DENY
    if not allowed:
        missing.append(f"unauthorized:{leaf.action}")
    return Decision.ALLOW if allowed else Decision.NEUTRAL


def _check(
    node: Node, username: str, policies: Sequence[Policy], context: Mapping[str, str], missing: list[str]
) -> Decision:
    if isinstance(node, Permission):
        return _check_leaf(node, username, policies, context, missing)
    if isinstance(node, AllOf):
        for child in node.nodes:
            result = _check(child, username, policies, context, missing)
            if result is not Decision.ALLOW:
                return result
        return Decision.ALLOW
    if isinstance(node, AnyOf):
        decision = Decision.NEUTRAL
        for child in node.nodes:
            result = _check(child, username, policies, context, missing)
            if result is Decision.DENY:
                return Decision.DENY
            if result is Decision.ALLOW:
                decision = Decision.ALLOW
        return decision
    return Decision.DENY  # not a node: never allow what is not understood


def check(
    node: Node, username: str, policies: Sequence[Policy], context: Mapping[str, str] | None = None
) -> Decision:
    """The decision for ``node`` (see the module). ``context`` holds condition fields (``SourceIp``)."""
    return _check(node, username, policies, context or {}, [])


def authorize(
    node: Node, username: str, policies: Sequence[Policy], context: Mapping[str, str] | None = None
) -> None:
    """Return if ``node`` is allowed, else raise :class:`PermissionDeniedError` naming the denied or
    missing actions as lakeFS does (``denied permission to fs:WriteObject``,
    ``not allowed to fs:ReadObject``)."""
    missing: list[str] = []
    if _check(node, username, policies, context or {}, missing) is Decision.ALLOW:
        return
    denied = [m.split(":", 1)[1] for m in missing if m.startswith("denied:")]
    unauthorized = [m.split(":", 1)[1] for m in missing if m.startswith("unauthorized:")]
    if denied:
        raise PermissionDeniedError(f"user {username}: denied permission to {','.join(denied)}")
    raise PermissionDeniedError(f"user {username}: not allowed to {','.join(unauthorized) or 'do this'}")


def has_action_on_any_resource(policies: Sequence[Policy], action: str) -> bool:
    """Some ``allow`` statement names ``action`` on some resource (lakeFS's gate for ListBuckets)."""
    return any(
        stmt.effect == ALLOW and any(wildcard_match(a, action) for a in stmt.actions)
        for policy in policies
        for stmt in policy.statements
    )


def check_permission(
    resource: str,
    username: str,
    policies: Sequence[Policy],
    action: str,
    context: Mapping[str, str] | None = None,
) -> bool:
    """Whether ``action`` on ``resource`` is allowed, for filtering listings (lakeFS's
    ``CheckPermission``): without ``context`` statements with conditions are skipped."""
    if context is None:
        policies = [Policy(p.name, tuple(s for s in p.statements if not s.condition)) for p in policies]
    return check(Permission(action, resource), username, policies, context) is Decision.ALLOW
