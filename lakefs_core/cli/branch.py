"""``lakefs-core branch``: create, list, delete, reset and revert branches (lakectl's ``branch``)."""

from __future__ import annotations

import click

from lakefs_core.cli.context import Session, run_session
from lakefs_core.cli.output import commit_doc, emit, json_option, print_commit_summary, ref_doc, table
from lakefs_core.errors import BadInputError, encode_utf8
from lakefs_core.refs.model import Branch, Commit
from lakefs_core.repos.uri import SCHEME, Kind, LakeFSURI, parse_uri, same_repo
from lakefs_core.service.cli import BRANCH_URI, REF_URI, REPO_URI, confirm, yes_option


@click.group()
def branch() -> None:
    """Create, list, delete, reset and revert branches."""


@branch.command("create")
@click.argument("branch_uri", metavar="lakefs://<repository>/<branch>", type=BRANCH_URI)
@click.option("--source", "-s", required=True, type=REF_URI, help="Ref to branch from (lakefs://repo/ref).")
@json_option
def create_cmd(branch_uri: LakeFSURI, source: LakeFSURI) -> None:
    """Create a branch from a source ref."""
    same_repo(branch_uri, source, "--source")

    async def op(s: Session) -> Branch:
        return await s.graveler.create_branch(branch_uri.repo, branch_uri.ref, source.ref)

    made = run_session(op)

    def human() -> None:
        click.echo(f"Source ref: {source}")
        click.echo(f"created branch '{made.id}' {made.commit_id}")

    emit(ref_doc(made.id, made.commit_id), human)


@branch.command("list")
@click.argument("repository", type=REPO_URI)
@json_option
def list_cmd(repository: LakeFSURI) -> None:
    """List the branches of a repository."""

    async def op(s: Session) -> list[Branch]:
        return [b async for b in s.graveler.list_branches(repository.repo)]

    branches = run_session(op)
    emit(
        {"results": [ref_doc(b.id, b.commit_id) for b in branches]},
        lambda: table(["Branch", "Commit ID"], [[b.id, b.commit_id] for b in branches]),
    )


@branch.command("delete")
@click.argument("branch_uri", metavar="lakefs://<repository>/<branch>", type=BRANCH_URI)
@yes_option
@json_option
def delete_cmd(branch_uri: LakeFSURI, yes: bool) -> None:
    """Delete a branch (not the default branch); its uncommitted changes are dropped."""
    confirm(f"Delete branch {branch_uri.ref!r} of {branch_uri.repo!r}", yes)

    async def op(s: Session) -> None:
        await s.graveler.delete_branch(branch_uri.repo, branch_uri.ref)
        await s.cleanup_tokens()

    run_session(op)
    emit(
        {"deleted": branch_uri.ref, "repository": branch_uri.repo},
        lambda: click.echo(f"Deleted branch '{branch_uri.ref}'"),
    )


@branch.command("reset")
@click.argument("branch_uri", metavar="lakefs://<repository>/<branch>", type=BRANCH_URI)
@click.option("--prefix", default=None, help="Only the changes of paths starting with this prefix.")
@click.option("--object", "object_path", default=None, help="Only the changes of this one path.")
@yes_option
@json_option
def reset_cmd(branch_uri: LakeFSURI, prefix: str | None, object_path: str | None, yes: bool) -> None:
    """Drop the uncommitted changes of a branch (all, or of --prefix / --object)."""
    if prefix is not None and object_path is not None:
        raise BadInputError("give --prefix or --object, not both", field="--object")
    if prefix is not None or object_path is not None:
        _reset_paths(branch_uri, prefix, object_path, yes)
        return
    confirm(f"Drop all uncommitted changes of branch {branch_uri.ref!r}", yes)

    async def op(s: Session) -> Branch:
        reset = await s.graveler.reset_branch(branch_uri.repo, branch_uri.ref)
        await s.cleanup_tokens()
        return reset

    done = run_session(op)
    emit(
        ref_doc(done.id, done.commit_id),
        lambda: click.echo(f"Branch '{done.id}' reset to {done.commit_id}: uncommitted changes dropped"),
    )


def _reset_paths(branch_uri: LakeFSURI, prefix: str | None, object_path: str | None, yes: bool) -> None:
    path, field = (prefix, "--prefix") if prefix is not None else (object_path or "", "--object")
    raw = encode_utf8(path, field)
    if object_path is not None and not raw:
        raise BadInputError("must not be empty", field="--object")
    what = f"under {path!r}" if prefix is not None else f"of {path!r}"
    confirm(f"Drop the uncommitted changes {what} on branch {branch_uri.ref!r}", yes)

    async def op(s: Session) -> list[bytes]:
        return await s.graveler.reset_changes(branch_uri.repo, branch_uri.ref, raw, prefix=prefix is not None)

    dropped = [k.decode("utf-8", "backslashreplace") for k in run_session(op)]
    emit(
        {"branch": branch_uri.ref, "reset": dropped},
        lambda: click.echo(
            f"Branch '{branch_uri.ref}': uncommitted changes {what} dropped ({len(dropped)} path(s))"
        ),
    )


def _commit_ref(text: str, branch_uri: LakeFSURI) -> str:
    """COMMIT_REF is a plain ref (``main~1``, a commit id) or a lakefs:// URI in the same repository."""
    if text.startswith(SCHEME):
        uri = parse_uri(text, Kind.REF, field="COMMIT_REF")
        same_repo(branch_uri, uri, "COMMIT_REF")
        return uri.ref
    return parse_uri(f"{SCHEME}{branch_uri.repo}/{text}", Kind.REF, field="COMMIT_REF").ref


@branch.command("revert")
@click.argument("branch_uri", metavar="lakefs://<repository>/<branch>", type=BRANCH_URI)
@click.argument("commit_ref")
@click.option(
    "--parent-number",
    "-m",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="For a merge commit: which parent's side to keep.",
)
@click.option("--allow-empty", is_flag=True, help="Commit the revert even when it changes nothing.")
@json_option
def revert_cmd(branch_uri: LakeFSURI, commit_ref: str, parent_number: int, allow_empty: bool) -> None:
    """Undo the changes of COMMIT_REF on the branch with a new commit (a revert that changes nothing
    is refused unless --allow-empty, as lakectl's)."""
    ref = _commit_ref(commit_ref, branch_uri)

    async def op(s: Session) -> Commit:
        return await s.graveler.revert(
            branch_uri.repo,
            branch_uri.ref,
            ref,
            committer=s.committer,
            parent_number=parent_number,
            allow_empty=allow_empty,
        )

    made = run_session(op)

    def human() -> None:
        click.echo(f"Branch: {branch_uri}")
        click.echo(f"Reverted {commit_ref}")
        click.echo("")
        print_commit_summary(made)

    emit(commit_doc(made), human)
