"""Which mirrors the daemon admits: the checks a mirror creation passes before it is recorded.

:meth:`Admission.admit` runs them in order, before the one database transaction that creates the
mirror (the API's ``POST .../mirrors``, :mod:`lakefs_mirror.api`):

1. the namespace parses (400 naming ``storage_namespace``; also a ``mem://`` namespace, refused by
   the request model), a ``local://`` namespace lies under one of the destination region's
   ``local_roots`` and is no system directory (409, :func:`check_local_root`, :func:`check_local_dirs`:
   the rule ``repo create`` applies too), the branch filter is valid (400);
2. a mirror never replaces its own source repository (409 on ``name``);
3. the source repository exists in this daemon's region (404 naming it);
4. the destination region's KV lets repository ``name`` live in the namespace (409): no other
   repository claims or uses an overlapping namespace, and a repository already named ``name`` there
   must be a read-only mirror of this very source in this very namespace (it is adopted; the hint
   says how to delete a leftover). Advisory: the engine's ``create_repository`` takes the claim
   atomically and refuses the same cases;
5. with a namespace probe (:func:`store_probe`), this daemon can write, read back and delete a probe
   object under the namespace's ``_lakefs/`` through the destination region's block store (422,
   :class:`NamespaceUnusableError`, naming the failed step; a transient failure stays 503).

:func:`progress_warnings` names what would keep an admitted mirror from ever progressing (native
mode into a local namespace, or within one region): such a mirror is accepted with the warning in
the response and in its status.

Regions this daemon has no KV access to (no Graveler) are not checked there.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from lakefs_core.errors import (
    BadInputError,
    CorruptDataError,
    LakeFSError,
    NamespaceConflictError,
    NotFoundError,
    TransientError,
)
from lakefs_core.repos.graveler import Graveler, StorageNamespace
from lakefs_mirror.config import MirrorConfig
from lakefs_mirror.db import FieldConflictError, Mirror, check_branch_filter

__all__ = [
    "Admission",
    "NamespaceProbe",
    "NamespaceUnusableError",
    "SourceRepoExists",
    "check_local_dirs",
    "check_local_root",
    "normalised_namespace",
    "progress_warnings",
    "require_source",
    "store_probe",
]

SourceRepoExists = Callable[[str], Awaitable[bool]]
NamespaceProbe = Callable[[str, str], Awaitable[None]]  # (destination region, namespace) -> raises


class NamespaceUnusableError(BadInputError):
    """The destination namespace is well-formed but this daemon cannot write or read it there."""

    http_status = 422


def store_probe(gravelers: Mapping[str, Graveler]) -> NamespaceProbe:
    """A probe writing ``<ns>/_lakefs/probe-<random>`` through the region's block store (as this
    daemon's configuration reaches that region), reading it back and deleting it. Only the probe's
    own, freshly named object is ever deleted. Regions without a Graveler are not probed."""

    async def probe(region: str, namespace: str) -> None:
        g = gravelers.get(region)
        if g is None:
            return
        ns = StorageNamespace(namespace)
        token = uuid.uuid4().hex
        key = ns.probe_key(token)
        payload = f"lakefs-mirror namespace probe {token}\n".encode()
        step = "open the store of"
        try:
            store = await g.namespace_store(ns)
            step = "write"
            await store.put(key, payload, if_none_match=True)
            try:
                step = "read back"
                if await store.get(key) != payload:
                    raise CorruptDataError("read back other bytes than written", file=key)
            finally:
                step = "delete"
                await store.delete(key)
        except TransientError:
            raise  # unreachable for now: 503, retry later
        except LakeFSError as e:
            raise NamespaceUnusableError(
                f"this daemon cannot use the namespace in region {region!r}: {step} "
                f"{key} failed ({type(e).__name__}: {e})",
                field="storage_namespace",
            ) from e

    return probe


@dataclass(frozen=True)
class Admission:
    """The admission checks of one daemon (see the module docstring)."""

    config: MirrorConfig
    gravelers: Mapping[str, Graveler]  # the regions this daemon has KV access to
    source_exists: SourceRepoExists  # in this daemon's region
    probe: NamespaceProbe | None = None

    async def admit(
        self,
        source_repo: str,
        *,
        name: str,
        region: str,
        storage_namespace: str,
        branch_filter: Sequence[str],
    ) -> tuple[str, tuple[str, ...]]:
        """The normalised namespace and the checked branch filter of an admitted mirror; the first
        check that fails raises (see the module docstring for the order and the status codes)."""
        namespace = normalised_namespace(storage_namespace)
        check_local_root(namespace, self.config.regions[region].local_roots, region)
        check_local_dirs(namespace)
        globs = check_branch_filter(branch_filter)
        if region == self.config.region and name == source_repo:
            raise FieldConflictError("a mirror cannot replace its own source repository", field="name")
        await require_source(self, source_repo, self.config.region)
        await _check_destination(self, source_repo, name, region, namespace)
        if self.probe is not None:
            await self.probe(region, namespace)
        return namespace, globs


def check_local_dirs(namespace: str) -> None:
    """The filesystem root and system directories can be no repository's namespace
    (:meth:`StorageNamespace.check_repository_namespace`, the rule ``repo create`` applies too).
    A 409: the body matches the schema, the deployment refuses it."""
    try:
        StorageNamespace(namespace).check_repository_namespace()
    except BadInputError as e:
        message = str(e).removeprefix("storage_namespace: ")
        raise FieldConflictError(message, field="storage_namespace") from None


def check_local_root(namespace: str, roots: Sequence[Path], region: str) -> None:
    """A ``local://`` namespace must lie under one of its region's configured ``local_roots`` (409)."""
    ns = StorageNamespace(namespace)
    if ns.scheme != "local" or not roots:
        return
    path = PurePosixPath(ns.store_uri.removeprefix("local://"))
    if not any(path == root or root in path.parents for root in map(PurePosixPath, roots)):
        raise FieldConflictError(
            f"a local namespace in region {region!r} must be under one of its local_roots",
            field="storage_namespace",
        )


def normalised_namespace(value: str) -> str:
    try:
        return str(StorageNamespace(value))
    except BadInputError as e:
        raise BadInputError(str(e).removeprefix("storage_namespace: "), field="storage_namespace") from None


async def require_source(a: Admission, repo: str, region: str) -> None:
    """404 unless ``repo`` exists in ``region`` (regions this daemon has no KV access to: unchecked)."""
    if region == a.config.region:
        exists = await a.source_exists(repo)
    else:
        g = a.gravelers.get(region)
        if g is None:
            return
        try:
            await g.repository(repo)
            exists = True
        except NotFoundError:
            exists = False
    if not exists:
        raise NotFoundError(f"source repository {repo!r} not found in region {region!r}")


def _delete_hint(name: str, region: str) -> str:
    return (
        f"delete the leftover repository (`lakefs-core repo delete lakefs://{name}` with region "
        f"{region!r}'s configuration) or choose another name"
    )


async def _check_adoptable(a: Admission, source_repo: str, name: str, region: str, head: str) -> None:
    """A leftover mirror repository is adopted only if it mirrored THIS source: its default branch
    head (a commit copied verbatim from the source) must be a commit of the source repository."""
    src = a.gravelers.get(a.config.region)
    if src is None:
        return
    try:
        await src.get_commit(source_repo, head)
    except NotFoundError:
        raise FieldConflictError(
            f"repository {name!r} in region {region!r} is a leftover mirror of another source repository "
            f"(its head {head[:12]} is no commit of {source_repo!r}): {_delete_hint(name, region)}",
            field="name",
        ) from None


async def _check_destination(a: Admission, source_repo: str, name: str, region: str, namespace: str) -> None:
    """409 unless the destination region's KV lets repository ``name`` live in ``namespace``: no
    other repository may claim or use an overlapping namespace, and a repository already named
    ``name`` there must be a read-only mirror of this source in this very namespace (it is adopted).

    Advisory (a repository may appear between this check and the engine's first pass); the engine's
    ``create_repository`` takes the namespace claim atomically and refuses the same cases.
    """
    dst = a.gravelers.get(region)
    if dst is None:
        return  # no KV access configured for that region (tests, or an API-only deployment)
    try:
        existing = await dst.repository(name)
    except NotFoundError:
        pass
    else:
        if not existing.read_only:
            raise FieldConflictError(
                f"repository {name!r} already exists in region {region!r} and is not a read-only mirror "
                "in this storage namespace: choose another name",
                field="name",
            )
        there = StorageNamespace(existing.storage_namespace)
        if there.canonical != StorageNamespace(namespace).canonical:
            raise FieldConflictError(
                f"repository {name!r} in region {region!r} is a leftover read-only mirror in another "
                f"storage namespace ({there}): use that storage_namespace to adopt it, or "
                f"{_delete_hint(name, region)}",
                field="name",
            )
        try:
            head = (await dst.get_commit(name, existing.default_branch)).id
        except NotFoundError:
            raise FieldConflictError(
                f"repository {name!r} in region {region!r} has no default branch to continue from: "
                f"{_delete_hint(name, region)}",
                field="name",
            ) from None
        await _check_adoptable(a, source_repo, name, region, head)
    try:
        await dst.check_namespace_available(namespace, name)
    except NamespaceConflictError as e:
        raise FieldConflictError(f"{e} (in region {region!r})", field="storage_namespace") from e


def progress_warnings(mirror: Mirror) -> list[str]:
    """Why ``mirror`` can never progress as configured (accepted anyway: the operator may be about
    to fix it, e.g. with ``PATCH {"mode": "active"}``). Shown on creation and in every status."""
    out: list[str] = []
    if mirror.mode != "native":
        return out
    if StorageNamespace(mirror.storage_namespace).scheme == "local":
        out.append(
            "mode native with a local destination namespace: nothing replicates into a local directory, "
            'so this mirror can never progress; switch it to active (PATCH {"mode": "active"})'
        )
    if mirror.source_region == mirror.region:
        out.append(
            f"source and destination are both in region {mirror.region!r}: native mode waits for "
            "cross-region replication, which never delivers here; switch it to active "
            '(PATCH {"mode": "active"})'
        )
    return out
