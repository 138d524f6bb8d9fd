"""History commands: ``commit``, ``log``, ``diff``, ``merge``, ``tag create/list/delete``, ``show commit``."""

from __future__ import annotations

import click

from lakefs_core.cli.context import Session, run_session
from lakefs_core.cli.output import (
    commit_doc,
    diff_doc,
    emit,
    json_option,
    parse_meta,
    print_commit,
    print_commit_summary,
    printable,
    ref_doc,
    table,
)
from lakefs_core.errors import BadInputError
from lakefs_core.refs.model import Commit, Tag
from lakefs_core.repos.uri import Kind, LakeFSURI, parse_uri, same_repo
from lakefs_core.service.cli import BRANCH_URI, PREFIX_URI, REF_URI, REPO_URI, TAG_URI, confirm, yes_option

_DIFF_SIGN = {"added": "+ added", "removed": "- removed", "changed": "~ changed"}


@click.command("commit")
@click.argument("branch_uri", metavar="lakefs://<repository>/<branch>", type=BRANCH_URI)
@click.option("--message", "-m", required=True, help="Commit message.")
@click.option("--meta", multiple=True, metavar="KEY=VALUE", help="Commit metadata (repeatable).")
@click.option("--allow-empty", is_flag=True, help="Commit even when nothing changed.")
@json_option
def commit_cmd(branch_uri: LakeFSURI, message: str, meta: tuple[str, ...], allow_empty: bool) -> None:
    """Commit the uncommitted changes of a branch."""
    metadata = parse_meta(meta)

    async def op(s: Session) -> Commit:
        made = await s.graveler.commit(
            branch_uri.repo,
            branch_uri.ref,
            committer=s.committer,
            message=message,
            metadata=metadata,
            allow_empty=allow_empty,
        )
        await s.cleanup_tokens()
        return made

    made = run_session(op)

    def human() -> None:
        click.echo(f"Branch: {branch_uri}")
        click.echo(f'Commit for branch "{branch_uri.ref}" completed.')
        click.echo("")
        print_commit_summary(made)

    emit(commit_doc(made), human)


@click.command("log")
@click.argument("ref_uri", metavar="lakefs://<repository>/<ref>", type=REF_URI)
@click.option("--amount", "-n", type=click.IntRange(min=1), default=None, help="How many commits to show.")
@click.option("--after", default=None, help="Continue after this commit id.")
@click.option("--show-meta-range-id", is_flag=True, help="Also show each commit's metarange id.")
@json_option
def log_cmd(ref_uri: LakeFSURI, amount: int | None, after: str | None, show_meta_range_id: bool) -> None:
    """Show the first-parent history of a ref, newest first."""

    async def op(s: Session) -> list[Commit]:
        return [c async for c in s.graveler.log(ref_uri.repo, ref_uri.ref, amount=amount, after=after)]

    commits = run_session(op)

    def human() -> None:
        for c in commits:
            print_commit(c, show_metarange=show_meta_range_id)

    emit({"results": [commit_doc(c) for c in commits]}, human)


@click.command("diff")
@click.argument("left", metavar="lakefs://<repository>/<ref>", type=REF_URI)
@click.argument("right", metavar="[lakefs://<repository>/<other ref>]", type=REF_URI, required=False)
@json_option
def diff_cmd(left: LakeFSURI, right: LakeFSURI | None) -> None:
    """With one ref (a branch): its uncommitted changes. With two: what changed from LEFT to RIGHT."""
    if right is None:
        parse_uri(str(left), Kind.BRANCH, field="LEFT")  # uncommitted changes exist on branches only
    else:
        same_repo(left, right, "RIGHT")

    async def op(s: Session) -> list[dict[str, object]]:
        if right is None:
            records = s.graveler.diff_uncommitted(left.repo, left.ref)
        else:
            records = s.graveler.diff(left.repo, left.ref, right.ref)
        return [diff_doc(d) async for d in records]

    changes = run_session(op)

    def human() -> None:
        if right is None:
            click.echo(f"Ref: {left}")
        else:
            click.echo(f"Left ref: {left}")
            click.echo(f"Right ref: {right}")
        click.echo("")
        if not changes:
            click.echo("No changes")
        for d in changes:
            click.echo(f"{_DIFF_SIGN[str(d['type'])]} {printable(str(d['path']))}")

    emit({"results": changes}, human)


@click.command("merge")
@click.argument("source", metavar="lakefs://<repository>/<source ref>", type=REF_URI)
@click.argument("destination", metavar="lakefs://<repository>/<destination branch>", type=BRANCH_URI)
@click.option(
    "--strategy",
    type=click.Choice(["dest-wins", "source-wins"]),
    default=None,
    help="Resolve conflicting keys in favour of one side (default: report conflicts).",
)
@click.option("--message", "-m", default=None, help="Merge commit message.")
@click.option("--meta", multiple=True, metavar="KEY=VALUE", help="Merge commit metadata (repeatable).")
@json_option
def merge_cmd(
    source: LakeFSURI,
    destination: LakeFSURI,
    strategy: str | None,
    message: str | None,
    meta: tuple[str, ...],
) -> None:
    """Merge a source ref into a destination branch."""
    from lakefs_core.committed.model import MergeStrategy

    same_repo(source, destination, "DESTINATION")
    metadata = parse_meta(meta)

    async def op(s: Session) -> Commit:
        return await s.graveler.merge(
            source.repo,
            source.ref,
            destination.ref,
            committer=s.committer,
            message=message,
            strategy=MergeStrategy(strategy) if strategy else MergeStrategy.NONE,
            metadata=metadata,
        )

    made = run_session(op)

    def human() -> None:
        click.echo(f"Source: {source}")
        click.echo(f"Destination: {destination}")
        click.echo(f'Merged "{source.ref}" into "{destination.ref}" to get "{made.id}".')

    emit(commit_doc(made), human)


@click.command("cherry-pick")
@click.argument("commit_uri", metavar="lakefs://<repository>/<ref>", type=REF_URI)
@click.argument("branch_uri", metavar="lakefs://<repository>/<branch>", type=BRANCH_URI)
@click.option(
    "--parent-number",
    "-m",
    type=click.IntRange(min=1),
    default=None,
    help="For a merge commit: the parent whose change to apply (required for one).",
)
@json_option
def cherry_pick_cmd(commit_uri: LakeFSURI, branch_uri: LakeFSURI, parent_number: int | None) -> None:
    """Apply the change of a commit to a branch in a new commit (lakeFS's cherry-pick)."""
    same_repo(commit_uri, branch_uri, "BRANCH")

    async def op(s: Session) -> Commit:
        return await s.graveler.cherry_pick(
            branch_uri.repo,
            branch_uri.ref,
            commit_uri.ref,
            committer=s.committer,
            parent_number=parent_number,
        )

    made = run_session(op)

    def human() -> None:
        click.echo(f"Branch: {branch_uri}")
        click.echo(f"Cherry-picked {commit_uri.ref}")
        click.echo("")
        print_commit_summary(made)

    emit(commit_doc(made), human)


MAX_ANNOTATED = 10_000  # objects one annotate attributes (each costs the history walk until found)


@click.command("annotate")
@click.argument("path", metavar="lakefs://<repository>/<ref>/[path]", type=PREFIX_URI)
@click.option("--recursive", "-r", is_flag=True, help="Every object under the path (not only its level).")
@json_option
def annotate_cmd(path: LakeFSURI, recursive: bool) -> None:
    """Show the last commit that changed each object under a path (lakectl's annotate)."""
    from lakefs_core.repos.annotate import annotate

    async def op(s: Session) -> list[tuple[str, Commit]]:
        keys: list[bytes] = []
        async for entry in s.graveler.list_entries(path.repo, path.ref, prefix=path.path.encode()):
            rest = entry.key[len(path.path.encode()) :]
            if recursive or b"/" not in rest:
                keys.append(entry.key)
                if len(keys) > MAX_ANNOTATED:
                    raise BadInputError(
                        f"more than {MAX_ANNOTATED} objects: annotate a narrower path", field="PATH"
                    )
        found = await annotate(s.graveler, path.repo, path.ref, keys)
        return [(k.decode("utf-8", "backslashreplace"), found[k]) for k in keys if k in found]

    rows = run_session(op)

    def human() -> None:
        for key, commit in rows:
            when = commit.creation_date.strftime("%Y-%m-%d %H:%M:%S")
            click.echo(f"{commit.id[:16]}  {printable(commit.committer):<16} {when}  {printable(key)}")

    emit({"results": [{"path": k, "commit": commit_doc(c)} for k, c in rows]}, human)


@click.group("tag")
def tag() -> None:
    """Create, list and delete tags."""


@tag.command("create")
@click.argument("tag_uri", metavar="lakefs://<repository>/<tag>", type=TAG_URI)
@click.argument("ref_uri", metavar="lakefs://<repository>/<ref>", type=REF_URI)
@json_option
def tag_create_cmd(tag_uri: LakeFSURI, ref_uri: LakeFSURI) -> None:
    """Create a tag pointing at the commit a ref resolves to."""
    same_repo(tag_uri, ref_uri, "REF_URI")

    async def op(s: Session) -> Tag:
        return await s.graveler.create_tag(tag_uri.repo, tag_uri.ref, ref_uri.ref)

    made = run_session(op)
    emit(ref_doc(made.id, made.commit_id), lambda: click.echo(f"Created tag '{made.id}' ({made.commit_id})"))


@tag.command("list")
@click.argument("repository", type=REPO_URI)
@json_option
def tag_list_cmd(repository: LakeFSURI) -> None:
    """List the tags of a repository."""

    async def op(s: Session) -> list[Tag]:
        return [t async for t in s.graveler.list_tags(repository.repo)]

    tags = run_session(op)
    emit(
        {"results": [ref_doc(t.id, t.commit_id) for t in tags]},
        lambda: table(["Tag", "Commit ID"], [[t.id, t.commit_id] for t in tags]),
    )


@tag.command("delete")
@click.argument("tag_uri", metavar="lakefs://<repository>/<tag>", type=TAG_URI)
@yes_option
@json_option
def tag_delete_cmd(tag_uri: LakeFSURI, yes: bool) -> None:
    """Delete a tag."""
    confirm(f"Delete tag {tag_uri.ref!r} of {tag_uri.repo!r}", yes)

    async def op(s: Session) -> None:
        await s.graveler.delete_tag(tag_uri.repo, tag_uri.ref)

    run_session(op)
    emit(
        {"deleted": tag_uri.ref, "repository": tag_uri.repo},
        lambda: click.echo(f"Deleted tag '{tag_uri.ref}'"),
    )


@click.group("show")
def show() -> None:
    """Show details of an object in the repository graph."""


@show.command("commit")
@click.argument("ref_uri", metavar="lakefs://<repository>/<commit id or ref>", type=REF_URI)
@json_option
def show_commit_cmd(ref_uri: LakeFSURI) -> None:
    """Show one commit (a commit id or any ref, e.g. main~1 or a tag)."""

    async def op(s: Session) -> Commit:
        return await s.graveler.get_commit(ref_uri.repo, ref_uri.ref)

    found = run_session(op)
    emit(commit_doc(found), lambda: print_commit(found, show_metarange=True))
