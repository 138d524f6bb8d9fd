"""lakeFS's permission vocabulary: action names, resource ARNs and required-permission trees.

Action names are lakeFS's (``pkg/permissions/actions.go``): ``<service>:<Action>`` with the services
``fs``, ``auth``, ``ci``, ``retention``, ``branches``, ``pr`` and ``catalog``; :data:`ACTIONS` lists
every one lakeFS defines. Resources are ARNs ``arn:lakefs:<service>:::<resource>`` built by the
functions below exactly as lakeFS builds them (an object's ARN names its repository and path, not
its ref).

What an operation requires is a tree (lakeFS's ``permissions.Node``): a :class:`Permission` (one
action on one resource), :class:`AllOf` (every child) or :class:`AnyOf` (at least one child, none
denied). :mod:`lakefs_core.auth.policy` evaluates a tree against a principal's policies; the tables
mapping operations to trees live per protocol (:mod:`lakefs_core.auth.s3perms` for the S3 gateway;
the REST API's table goes beside it as its own module).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = [
    "ACTIONS",
    "ALL",
    "SERVICES",
    "AllOf",
    "AnyOf",
    "Node",
    "Permission",
    "branch_arn",
    "group_arn",
    "object_arn",
    "policy_arn",
    "repo_arn",
    "storage_namespace_arn",
    "tag_arn",
    "user_arn",
]

ALL: Final = "*"

FS_ARN_PREFIX: Final = "arn:lakefs:fs:::"
AUTH_ARN_PREFIX: Final = "arn:lakefs:auth:::"

# fs
READ_REPOSITORY: Final = "fs:ReadRepository"
CREATE_REPOSITORY: Final = "fs:CreateRepository"
UPDATE_REPOSITORY: Final = "fs:UpdateRepository"
ATTACH_STORAGE_NAMESPACE: Final = "fs:AttachStorageNamespace"
IMPORT_FROM_STORAGE: Final = "fs:ImportFromStorage"
IMPORT_CANCEL: Final = "fs:ImportCancel"
DELETE_REPOSITORY: Final = "fs:DeleteRepository"
LIST_REPOSITORIES: Final = "fs:ListRepositories"
READ_OBJECT: Final = "fs:ReadObject"
WRITE_OBJECT: Final = "fs:WriteObject"
DELETE_OBJECT: Final = "fs:DeleteObject"
LIST_OBJECTS: Final = "fs:ListObjects"
CREATE_COMMIT: Final = "fs:CreateCommit"
READ_COMMIT: Final = "fs:ReadCommit"
LIST_COMMITS: Final = "fs:ListCommits"
CREATE_BRANCH: Final = "fs:CreateBranch"
DELETE_BRANCH: Final = "fs:DeleteBranch"
READ_BRANCH: Final = "fs:ReadBranch"
REVERT_BRANCH: Final = "fs:RevertBranch"
LIST_BRANCHES: Final = "fs:ListBranches"
CREATE_TAG: Final = "fs:CreateTag"
DELETE_TAG: Final = "fs:DeleteTag"
READ_TAG: Final = "fs:ReadTag"
LIST_TAGS: Final = "fs:ListTags"
READ_CONFIG: Final = "fs:ReadConfig"
# auth
READ_USER: Final = "auth:ReadUser"
CREATE_USER: Final = "auth:CreateUser"
DELETE_USER: Final = "auth:DeleteUser"
LIST_USERS: Final = "auth:ListUsers"
READ_GROUP: Final = "auth:ReadGroup"
CREATE_GROUP: Final = "auth:CreateGroup"
DELETE_GROUP: Final = "auth:DeleteGroup"
LIST_GROUPS: Final = "auth:ListGroups"
ADD_GROUP_MEMBER: Final = "auth:AddGroupMember"
REMOVE_GROUP_MEMBER: Final = "auth:RemoveGroupMember"
READ_POLICY: Final = "auth:ReadPolicy"
CREATE_POLICY: Final = "auth:CreatePolicy"
UPDATE_POLICY: Final = "auth:UpdatePolicy"
DELETE_POLICY: Final = "auth:DeletePolicy"
LIST_POLICIES: Final = "auth:ListPolicies"
ATTACH_POLICY: Final = "auth:AttachPolicy"
DETACH_POLICY: Final = "auth:DetachPolicy"
READ_CREDENTIALS: Final = "auth:ReadCredentials"
CREATE_CREDENTIALS: Final = "auth:CreateCredentials"
DELETE_CREDENTIALS: Final = "auth:DeleteCredentials"
LIST_CREDENTIALS: Final = "auth:ListCredentials"
CREATE_USER_EXTERNAL_PRINCIPAL: Final = "auth:CreateUserExternalPrincipal"
DELETE_USER_EXTERNAL_PRINCIPAL: Final = "auth:DeleteUserExternalPrincipal"
READ_EXTERNAL_PRINCIPAL: Final = "auth:ReadExternalPrincipal"
# the others
READ_ACTION: Final = "ci:ReadAction"
PREPARE_GC_COMMITS: Final = "retention:PrepareGarbageCollectionCommits"
GET_GC_RULES: Final = "retention:GetGarbageCollectionRules"
SET_GC_RULES: Final = "retention:SetGarbageCollectionRules"
PREPARE_GC_UNCOMMITTED: Final = "retention:PrepareGarbageCollectionUncommitted"
GET_BRANCH_PROTECTION_RULES: Final = "branches:GetBranchProtectionRules"
SET_BRANCH_PROTECTION_RULES: Final = "branches:SetBranchProtectionRules"
READ_PULL_REQUEST: Final = "pr:ReadPullRequest"
WRITE_PULL_REQUEST: Final = "pr:WritePullRequest"
LIST_PULL_REQUESTS: Final = "pr:ListPullRequests"

CATALOG_READ_ACTIONS: Final = (
    "catalog:ListNamespaces",
    "catalog:GetNamespace",
    "catalog:ListTables",
    "catalog:ReadTable",
    "catalog:ListViews",
    "catalog:ReadView",
)

# Every action lakeFS defines, in its order (pkg/permissions/actions.gen.go).
ACTIONS: Final[tuple[str, ...]] = (
    READ_REPOSITORY,
    CREATE_REPOSITORY,
    UPDATE_REPOSITORY,
    ATTACH_STORAGE_NAMESPACE,
    IMPORT_FROM_STORAGE,
    IMPORT_CANCEL,
    DELETE_REPOSITORY,
    LIST_REPOSITORIES,
    READ_OBJECT,
    WRITE_OBJECT,
    DELETE_OBJECT,
    LIST_OBJECTS,
    CREATE_COMMIT,
    READ_COMMIT,
    LIST_COMMITS,
    CREATE_BRANCH,
    DELETE_BRANCH,
    READ_BRANCH,
    REVERT_BRANCH,
    LIST_BRANCHES,
    CREATE_TAG,
    DELETE_TAG,
    READ_TAG,
    LIST_TAGS,
    READ_CONFIG,
    READ_USER,
    CREATE_USER,
    DELETE_USER,
    LIST_USERS,
    READ_GROUP,
    CREATE_GROUP,
    DELETE_GROUP,
    LIST_GROUPS,
    ADD_GROUP_MEMBER,
    REMOVE_GROUP_MEMBER,
    READ_POLICY,
    CREATE_POLICY,
    UPDATE_POLICY,
    DELETE_POLICY,
    LIST_POLICIES,
    ATTACH_POLICY,
    DETACH_POLICY,
    READ_CREDENTIALS,
    CREATE_CREDENTIALS,
    DELETE_CREDENTIALS,
    LIST_CREDENTIALS,
    CREATE_USER_EXTERNAL_PRINCIPAL,
    DELETE_USER_EXTERNAL_PRINCIPAL,
    READ_EXTERNAL_PRINCIPAL,
    READ_ACTION,
    PREPARE_GC_COMMITS,
    GET_GC_RULES,
    SET_GC_RULES,
    PREPARE_GC_UNCOMMITTED,
    GET_BRANCH_PROTECTION_RULES,
    SET_BRANCH_PROTECTION_RULES,
    READ_PULL_REQUEST,
    WRITE_PULL_REQUEST,
    LIST_PULL_REQUESTS,
    "catalog:ListNamespaces",
    "catalog:GetNamespace",
    "catalog:CreateNamespace",
    "catalog:UpdateNamespace",
    "catalog:DeleteNamespace",
    "catalog:ListTables",
    "catalog:ReadTable",
    "catalog:CreateTable",
    "catalog:UpdateTable",
    "catalog:DeleteTable",
    "catalog:ListViews",
    "catalog:ReadView",
    "catalog:CreateView",
    "catalog:UpdateView",
    "catalog:DeleteView",
)

SERVICES: Final = frozenset({"fs", "auth", "ci", "retention", "branches", "pr", "catalog"})


def repo_arn(repo: str) -> str:
    return f"{FS_ARN_PREFIX}repository/{repo}"


def object_arn(repo: str, path: str) -> str:
    return f"{FS_ARN_PREFIX}repository/{repo}/object/{path}"


def branch_arn(repo: str, branch: str) -> str:
    return f"{FS_ARN_PREFIX}repository/{repo}/branch/{branch}"


def tag_arn(repo: str, tag: str) -> str:
    return f"{FS_ARN_PREFIX}repository/{repo}/tag/{tag}"


def storage_namespace_arn(namespace: str) -> str:
    return f"{FS_ARN_PREFIX}namespace/{namespace}"


def user_arn(user: str) -> str:
    return f"{AUTH_ARN_PREFIX}user/{user}"


def group_arn(group: str) -> str:
    return f"{AUTH_ARN_PREFIX}group/{group}"


def policy_arn(policy: str) -> str:
    return f"{AUTH_ARN_PREFIX}policy/{policy}"


@dataclass(frozen=True)
class Permission:
    """One action on one resource."""

    action: str
    resource: str


@dataclass(frozen=True)
class AllOf:
    """Allowed when every child is allowed; denied when one is denied."""

    nodes: tuple[Node, ...]


@dataclass(frozen=True)
class AnyOf:
    """Allowed when one child is allowed and none is denied."""

    nodes: tuple[Node, ...]


Node = Permission | AllOf | AnyOf
