"""lakeFS's policy language and evaluation (lakefs_core.auth.policy), the built-in policies, and the
S3 gateway's required-permission table (lakefs_core.auth.s3perms)."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakefs_core.auth import permissions as perms
from lakefs_core.auth.permissions import AllOf, AnyOf, Permission
from lakefs_core.auth.policy import (
    Decision,
    Policy,
    Statement,
    arn_match,
    authorize,
    check,
    check_permission,
    parse_policy_document,
    wildcard_match,
)
from lakefs_core.auth.s3perms import (
    CopySource,
    S3Operation,
    bucket_visible,
    delete_objects_key,
    may_list_buckets,
    parse_copy_source,
    s3_required_permissions,
)
from lakefs_core.auth.setup import BUILTIN_GROUPS, builtin_policies
from lakefs_core.errors import BadInputError, BadRequestError, PermissionDeniedError
from tests.support.profiles import examples


def allow(
    actions: tuple[str, ...], resource: str = "*", **condition: dict[str, tuple[str, ...]]
) -> Statement:
    return Statement("allow", actions, resource, condition)


def deny(actions: tuple[str, ...], resource: str = "*") -> Statement:
    return Statement("deny", actions, resource)


def group_policies(group: str) -> list[Policy]:
    by_name = {p.name: p for p in builtin_policies()}
    return [by_name[name] for name in BUILTIN_GROUPS[group]]


@pytest.mark.parametrize(
    ("pattern", "name", "expected"),
    [
        ("*", "", True),
        ("fs:*", "fs:ReadObject", True),
        ("fs:Read*", "fs:ReadObject", True),
        ("fs:Read*", "fs:WriteObject", False),
        ("fs:?eadObject", "fs:ReadObject", True),
        ("a*b*c", "aXbYc", True),
        ("a*b*c", "aXbYcZ", False),
        ("a*b", "ab", True),
        ("ab*", "a", False),
        ("*a*a*a*a*a*a*a*a*b", "a" * 2000, False),  # no backtracking blow-up
        ("ü*", "über", True),
        ("a?c", "aüc", True),
        ("repository/r/object/*", "repository/r/object/a/b/c", True),
    ],
)
def test_wildcards(pattern: str, name: str, expected: bool) -> None:
    assert wildcard_match(pattern, name) is expected


@settings(max_examples=examples(3), deadline=None)
@given(pattern=st.text("ab*?/", max_size=8), name=st.text("ab/", max_size=8))
def test_wildcards_agree_with_a_regex(pattern: str, name: str) -> None:
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    assert wildcard_match(pattern, name) is bool(re.fullmatch(regex, name, re.DOTALL))


def test_arn_matching_compares_service_and_account_exactly() -> None:
    target = perms.object_arn("repo", "a/b")
    assert arn_match("*", target)
    assert arn_match("arn:lakefs:fs:::repository/repo/object/*", target)
    assert arn_match("arn:lakefs:fs:us-east-1::repository/repo/*", target)  # region ignored
    assert not arn_match("arn:lakefs:auth:::repository/repo/*", target)
    assert not arn_match("arn:lakefs:fs::123:repository/repo/*", target)
    assert not arn_match("arn:lakefs:fs:::*", "not an arn")
    assert not arn_match("arn:aws:fs:::*", target)


def test_deny_wins_and_no_match_refuses() -> None:
    read = Permission(perms.READ_OBJECT, perms.object_arn("repo", "secret/x"))
    policies = [
        Policy(
            "p",
            (allow(("fs:*",)), deny(("fs:ReadObject",), "arn:lakefs:fs:::repository/repo/object/secret/*")),
        )
    ]
    assert check(read, "u", policies) is Decision.DENY
    assert (
        check(Permission(perms.READ_OBJECT, perms.object_arn("repo", "public")), "u", policies)
        is Decision.ALLOW
    )
    assert check(Permission(perms.READ_USER, perms.user_arn("u")), "u", policies) is Decision.NEUTRAL
    with pytest.raises(PermissionDeniedError, match="denied permission to fs:ReadObject"):
        authorize(read, "u", policies)
    with pytest.raises(PermissionDeniedError, match="not allowed to auth:ReadUser"):
        authorize(Permission(perms.READ_USER, perms.user_arn("u")), "u", policies)
    authorize(Permission(perms.WRITE_OBJECT, perms.object_arn("repo", "k")), "u", policies)


def test_trees_user_substitution_and_resource_lists() -> None:
    own = [Policy("own", (allow(("auth:*Credentials",), perms.user_arn("${user}")),))]
    assert (
        check(Permission(perms.CREATE_CREDENTIALS, perms.user_arn("alice")), "alice", own) is Decision.ALLOW
    )
    assert (
        check(Permission(perms.CREATE_CREDENTIALS, perms.user_arn("bob")), "alice", own) is Decision.NEUTRAL
    )
    listed = [
        Policy(
            "l",
            (
                allow(
                    ("fs:ReadObject",), json.dumps([perms.object_arn("a", "*"), perms.object_arn("b", "x")])
                ),
            ),
        )
    ]
    a, b, c = (Permission(perms.READ_OBJECT, perms.object_arn(r, "x")) for r in "abc")
    assert [check(p, "u", listed) for p in (a, b, c)] == [Decision.ALLOW, Decision.ALLOW, Decision.NEUTRAL]
    assert check(AllOf((a, b)), "u", listed) is Decision.ALLOW
    assert check(AllOf((a, c)), "u", listed) is Decision.NEUTRAL
    assert check(AnyOf((c, a)), "u", listed) is Decision.ALLOW
    broken = [*listed, Policy("bad", (allow(("fs:ReadObject",), "[not json]"),))]
    assert check(a, "u", broken) is Decision.DENY  # what cannot be evaluated never allows


def test_conditions() -> None:
    office = [Policy("o", (allow(("fs:*",), IpAddress={"SourceIp": ("10.0.0.0/8", "192.168.1.7")}),))]
    write = Permission(perms.WRITE_OBJECT, perms.object_arn("r", "k"))
    assert check(write, "u", office, {"SourceIp": "10.2.3.4"}) is Decision.ALLOW
    assert check(write, "u", office, {"SourceIp": "::ffff:10.2.3.4"}) is Decision.ALLOW
    assert check(write, "u", office, {"SourceIp": "192.168.1.8"}) is Decision.NEUTRAL
    assert check(write, "u", office) is Decision.NEUTRAL  # a request without the field fails the condition
    assert check(write, "u", office, {"SourceIp": "not-an-ip"}) is Decision.DENY
    unknown = [Policy("x", (allow(("fs:*",), DateLessThan={"t": ("1",)}),))]
    assert check(write, "u", unknown, {"SourceIp": "10.0.0.1"}) is Decision.DENY
    assert not check_permission(
        perms.object_arn("r", "k"), "u", office, perms.WRITE_OBJECT
    )  # filters skip them


def test_policy_documents() -> None:
    doc = {"statement": [{"effect": "allow", "action": ["fs:Read*"], "resource": "*"}]}
    policy = parse_policy_document(json.dumps(doc), "Readers")
    assert policy.name == "Readers" and policy.statements == (allow(("fs:Read*",)),)
    assert parse_policy_document(json.dumps({**doc, "id": "FromDoc"})).name == "FromDoc"
    assert parse_policy_document(json.dumps(policy.to_doc())).to_doc() == {"id": "Readers", **doc}
    bad = [
        "not json",
        json.dumps([]),
        json.dumps(doc),  # no name
        json.dumps({"statement": [{"effect": "Allow", "action": ["fs:Read*"], "resource": "*"}], "id": "x"}),
        json.dumps(
            {"statement": [{"effect": "allow", "action": ["s3:GetObject"], "resource": "*"}], "id": "x"}
        ),
        json.dumps(
            {"statement": [{"effect": "allow", "action": ["fs:Read*"], "resource": "repo/*"}], "id": "x"}
        ),
        json.dumps({"statement": [{"effect": "allow", "action": [], "resource": "*"}], "id": "x"}),
        json.dumps({"statement": [], "id": "x"}),
        json.dumps(
            {"statement": [{"effect": "allow", "action": ["fs:a"], "resource": "*", "x": 1}], "id": "x"}
        ),
        json.dumps({**doc, "id": "a/b"}),
        json.dumps(
            {
                "statement": [{**doc["statement"][0], "condition": {"IpAddress": {"SourceIp": ["x"]}}}],
                "id": "c",
            }
        ),
        "[" * 100000,
    ]
    for text in bad:
        with pytest.raises(BadInputError):
            parse_policy_document(text)


def test_builtin_groups_have_lakefs_permissions() -> None:
    repo, obj = perms.repo_arn("r"), perms.object_arn("r", "k")
    cases = {
        "Admins": {(perms.WRITE_OBJECT, obj): True, (perms.CREATE_USER, perms.user_arn("x")): True},
        "SuperUsers": {
            (perms.DELETE_REPOSITORY, repo): True,
            (perms.CREATE_USER, perms.user_arn("x")): False,
        },
        "Developers": {
            (perms.WRITE_OBJECT, obj): True,
            (perms.CREATE_COMMIT, repo): True,
            (perms.DELETE_REPOSITORY, repo): False,
            (perms.CREATE_CREDENTIALS, perms.user_arn("dev")): True,
            (perms.CREATE_CREDENTIALS, perms.user_arn("other")): False,
        },
        "Viewers": {
            (perms.READ_OBJECT, obj): True,
            (perms.LIST_OBJECTS, repo): True,
            (perms.WRITE_OBJECT, obj): False,
        },
    }
    for group, expected in cases.items():
        for (action, resource), allowed in expected.items():
            decision = check(Permission(action, resource), "dev", group_policies(group))
            assert (decision is Decision.ALLOW) is allowed, (group, action, resource)
    names = [p.name for p in builtin_policies()]
    assert (
        set(names)
        == {n for ps in BUILTIN_GROUPS.values() for n in ps} | {"FSReadWriteAll", "FSReadAll"} - set()
    )
    assert len(names) == len(set(names)) == 10


REPO = perms.repo_arn("r")


def OBJ(path: str) -> str:
    return perms.object_arn("r", path)


@pytest.mark.parametrize(
    ("operation", "kwargs", "expected"),
    [
        (S3Operation.HEAD_BUCKET, {}, Permission(perms.READ_REPOSITORY, REPO)),
        (S3Operation.CREATE_BUCKET, {}, Permission(perms.CREATE_REPOSITORY, REPO)),
        (S3Operation.LIST_OBJECTS_V2, {"delimiter": "/"}, Permission(perms.LIST_BRANCHES, REPO)),
        (S3Operation.LIST_OBJECTS, {"delimiter": "/", "prefix": "ma"}, Permission(perms.LIST_BRANCHES, REPO)),
        (S3Operation.LIST_OBJECTS, {"delimiter": "/", "prefix": "m/"}, Permission(perms.LIST_OBJECTS, REPO)),
        (S3Operation.LIST_OBJECTS_V2, {"prefix": "main"}, Permission(perms.LIST_OBJECTS, REPO)),
        (S3Operation.GET_BUCKET_LOCATION, {}, Permission(perms.LIST_OBJECTS, REPO)),
        (S3Operation.GET_OBJECT, {"path": "a/b"}, Permission(perms.READ_OBJECT, OBJ("a/b"))),
        (S3Operation.HEAD_OBJECT, {"path": "a"}, Permission(perms.READ_OBJECT, OBJ("a"))),
        (S3Operation.LIST_PARTS, {"path": "a"}, Permission(perms.READ_OBJECT, OBJ("a"))),
        (S3Operation.PUT_OBJECT, {"path": "a"}, Permission(perms.WRITE_OBJECT, OBJ("a"))),
        (S3Operation.UPLOAD_PART, {"path": "a"}, Permission(perms.WRITE_OBJECT, OBJ("a"))),
        (S3Operation.COMPLETE_MULTIPART_UPLOAD, {"path": "a"}, Permission(perms.WRITE_OBJECT, OBJ("a"))),
        (S3Operation.DELETE_OBJECT, {"path": "a"}, Permission(perms.DELETE_OBJECT, OBJ("a"))),
        (S3Operation.ABORT_MULTIPART_UPLOAD, {"path": "a"}, Permission(perms.DELETE_OBJECT, OBJ("a"))),
        (
            S3Operation.COPY_OBJECT,
            {"path": "d", "copy_source": CopySource("s", "main", "x/y")},
            AllOf((Permission(perms.WRITE_OBJECT, OBJ("d")),
                   Permission(perms.READ_OBJECT, "arn:lakefs:fs:::repository/s/object/x/y"))),
        ),
        (S3Operation.LIST_BUCKETS, {}, None),
        (S3Operation.DELETE_OBJECTS, {}, None),
    ],
)  # fmt: skip
def test_s3_required_permissions_table(
    operation: S3Operation, kwargs: dict[str, object], expected: object
) -> None:
    assert s3_required_permissions(operation, "r", "main", **kwargs) == expected  # type: ignore[arg-type]


def test_s3_table_item_rules_and_copy_sources() -> None:
    assert delete_objects_key("r", "k") == Permission(perms.DELETE_OBJECT, perms.object_arn("r", "k"))
    viewers, nobody = group_policies("Viewers"), [Policy("n", (allow(("fs:ReadObject",)),))]
    assert may_list_buckets(viewers) and not may_list_buckets(nobody)
    one = [Policy("one", (allow(("fs:ListRepositories",), perms.repo_arn("a*")),))]
    assert bucket_visible("abc", "u", one) and not bucket_visible("xyz", "u", one)
    assert parse_copy_source("/repo/main/a%20b//c%2Bd") == CopySource("repo", "main", "a b//c+d")
    assert parse_copy_source("repo/main/") == CopySource("repo", "main", "")
    for bad in ("repo/main", "/repo", "repo/main/a?versionId=1", "r/m/%ff", "r/m/ü"):
        with pytest.raises(BadRequestError):
            parse_copy_source(bad)
    with pytest.raises(BadRequestError):
        s3_required_permissions(S3Operation.COPY_OBJECT, "r", "main", "k")
    with pytest.raises(BadRequestError):
        s3_required_permissions(S3Operation.GET_OBJECT, "r", "main")
