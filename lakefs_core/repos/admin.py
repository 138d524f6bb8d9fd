"""Administrative ref moves and history queries of the :class:`~lakefs_core.repos.graveler.Graveler` facade.

For daemons (the mirror now, GC next) that move refs on behalf of the system rather than a user:

- :func:`set_branch_head_if` and :func:`set_tag_if` are compare-and-swap moves: the ref moves to the
  new commit only if it still points at ``expected`` (``None``: only if it does not exist yet, which
  creates it); otherwise :class:`~lakefs_core.errors.PreconditionFailedError`, and nothing changed.
  The target commit must exist in the repository (:class:`~lakefs_core.errors.NotFoundError`): a ref
  never points at a missing commit. A read-only repository refuses them unless ``force=True`` (as
  lakeFS's own administrative calls for read-only repositories do); a mirror passes it for its own
  repositories. A branch created here gets a fresh, empty staging token.
- :func:`put_commit` stores a commit record verbatim (ids computed elsewhere, e.g. a mirror copying
  its source's commits), after checking that the record hashes to its id.
- :func:`is_descendant` walks parents from a commit, pruning by generation.
"""

from __future__ import annotations

from dataclasses import replace

from lakefs_core.errors import ConflictError, CorruptDataError, PreconditionFailedError, TooManyRetriesError
from lakefs_core.refs import kvkeys
from lakefs_core.refs.ids import validate_branch_id, validate_tag_id
from lakefs_core.refs.model import Branch, Commit, Tag
from lakefs_core.repos.context import RepoContext


def _moved(kind: str, name: str, expected: str | None, actual: str | None) -> PreconditionFailedError:
    want = "absent" if expected is None else expected[:12]
    got = "absent" if actual is None else actual[:12]
    return PreconditionFailedError(f"{kind} {name!r} is {got}, not {want}: it moved")


async def set_branch_head_if(
    ctx: RepoContext, repo_id: str, branch: str, expected: str | None, new_commit: str, *, force: bool
) -> Branch:
    repo = await ctx.repository(repo_id)
    ctx.writable(repo, force)
    validate_branch_id(branch)
    await ctx.refs.get_commit(repo, new_commit)  # NotFoundError: never point at a missing commit
    if expected is None:
        created = Branch(branch, new_commit, kvkeys.new_staging_token(repo.id, branch))
        try:
            await ctx.refs.create_branch(repo, created)
        except ConflictError as e:  # it exists
            current, _ = await ctx.refs.get_branch(repo, branch)
            raise _moved("branch", branch, None, current.commit_id) from e
        return created
    for _ in range(ctx.settings.write_attempts):
        current, raw = await ctx.refs.get_branch(repo, branch)
        if current.commit_id != expected:
            raise _moved("branch", branch, expected, current.commit_id)
        moved = replace(current, commit_id=new_commit)
        try:
            await ctx.refs.cas_branch(repo, moved, raw)
        except PreconditionFailedError:
            continue  # the record changed: re-read (only a staging-token rotation keeps the head)
        return moved
    raise TooManyRetriesError(f"branch {branch!r} kept changing")


async def set_tag_if(
    ctx: RepoContext, repo_id: str, tag: str, expected: str | None, commit_id: str, *, force: bool
) -> Tag:
    repo = await ctx.repository(repo_id)
    ctx.writable(repo, force)
    validate_tag_id(tag)
    await ctx.refs.get_commit(repo, commit_id)
    record = Tag(tag, commit_id)
    if expected is None:
        try:
            await ctx.refs.create_tag(repo, record)
        except ConflictError as e:  # it exists
            current = await ctx.refs.get_tag(repo, tag)
            raise _moved("tag", tag, None, current.commit_id) from e
        return record
    current, raw = await ctx.refs.get_tag_raw(repo, tag)
    if current.commit_id != expected:
        raise _moved("tag", tag, expected, current.commit_id)
    await ctx.refs.cas_tag(repo, record, raw)  # PreconditionFailedError: it moved meanwhile
    return record


async def put_commit(ctx: RepoContext, repo_id: str, commit: Commit, *, force: bool) -> None:
    repo = await ctx.repository(repo_id)
    ctx.writable(repo, force)
    if commit.computed_id() != commit.id:
        raise CorruptDataError(f"commit {commit.id} does not hash to its id; refusing to store it")
    await ctx.refs.put_commit(repo, commit)


async def is_descendant(ctx: RepoContext, repo_id: str, commit_id: str, ancestor_id: str) -> bool:
    """True iff ``ancestor_id`` is ``commit_id`` or one of its ancestors (both must exist)."""
    repo = await ctx.repository(repo_id)
    ancestor = await ctx.refs.get_commit(repo, ancestor_id)
    stack, seen = [await ctx.refs.get_commit(repo, commit_id)], set()
    while stack:
        commit = stack.pop()
        if commit.id == ancestor_id:
            return True
        # A parent's generation is below its child's: below the ancestor's, it cannot be reached.
        if commit.id in seen or commit.generation <= ancestor.generation:
            continue
        seen.add(commit.id)
        for parent in commit.parents:
            stack.append(await ctx.refs.get_commit(repo, parent))
    return False
