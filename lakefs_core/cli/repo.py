"""``lakefs-core repo``: create (also bare), list and delete repositories (lakectl's ``repo`` commands)."""

from __future__ import annotations

import click

from lakefs_core.cli.context import Session, run_session
from lakefs_core.cli.output import emit, fmt_time, json_option, repo_doc, table
from lakefs_core.refs.model import Repository
from lakefs_core.repos.uri import LakeFSURI
from lakefs_core.service.cli import REPO_URI, confirm, yes_option


@click.group()
def repo() -> None:
    """Create, list and delete repositories."""


@repo.command("create")
@click.argument("repository", type=REPO_URI)
@click.argument("storage_namespace")
@click.option("--default-branch", "-d", default="main", show_default=True, help="Name of the default branch.")
@click.option(
    "--reuse-namespace",
    is_flag=True,
    help="Take over a namespace that holds a deleted repository's _lakefs/ (refused without it).",
)
@json_option
def create_cmd(
    repository: LakeFSURI, storage_namespace: str, default_branch: str, reuse_namespace: bool
) -> None:
    """Create REPOSITORY (lakefs://repo) storing its data under STORAGE_NAMESPACE
    (local:///abs/dir, s3://bucket/prefix). The namespace must not equal, lie inside or enclose
    another repository's (exit code 15), nor be the filesystem root or a system directory. A local
    one is recorded at its real path (symlinks resolved; a dangling one is refused), shown here.
    A namespace that already holds a repository's _lakefs/ (a deleted one's) is refused (exit 15)
    unless --reuse-namespace."""

    async def op(s: Session) -> Repository:
        return await s.graveler.create_repository(
            repository.repo, storage_namespace, default_branch, reuse_namespace=reuse_namespace
        )

    created = run_session(op)

    def human() -> None:
        click.echo(f"Repository: {repository}")
        click.echo(f"Repository '{created.id}' created:")
        shown = created.storage_namespace
        if shown != storage_namespace.rstrip("/"):  # a symlink, "..", "//": where it really is
            shown += f" (given as {storage_namespace})"
        click.echo(f"storage namespace: {shown}")
        click.echo(f"default branch: {created.default_branch}")
        click.echo(f"timestamp: {int(created.creation_date.timestamp())}")

    emit(repo_doc(created), human)


@repo.command("create-bare")
@click.argument("repository", type=REPO_URI)
@click.argument("storage_namespace")
@click.option("--default-branch", "-d", default="main", show_default=True, help="Name of the default branch.")
@json_option
def create_bare_cmd(repository: LakeFSURI, storage_namespace: str, default_branch: str) -> None:
    """Create REPOSITORY with no commit and no branch, to restore refs into (lakectl's
    repo create-bare). The namespace is claimed as by repo create, but no _lakefs/ marker is written
    (a restore targets a namespace that holds the data). Until refs are restored, commands that need a
    commit say the repository has none."""

    async def op(s: Session) -> Repository:
        graveler = s.graveler
        return await graveler.create_repository(repository.repo, storage_namespace, default_branch, bare=True)

    created = run_session(op)

    def human() -> None:
        click.echo(f"Repository: {repository}")
        click.echo(f"Repository '{created.id}' created (bare):")
        click.echo(f"storage namespace: {created.storage_namespace}")
        click.echo(f"default branch: {created.default_branch} (no commits yet)")
        click.echo(f"timestamp: {int(created.creation_date.timestamp())}")

    emit(repo_doc(created), human)


@repo.command("list")
@json_option
def list_cmd() -> None:
    """List repositories."""

    async def op(s: Session) -> list[Repository]:
        return [r async for r in s.graveler.list_repositories()]

    repos = run_session(op)

    def human() -> None:
        rows = [[r.id, fmt_time(r.creation_date), r.default_branch, r.storage_namespace] for r in repos]
        table(["Repository", "Creation Date", "Default Ref Name", "Storage Namespace"], rows)

    emit({"results": [repo_doc(r) for r in repos]}, human)


@repo.command("delete")
@click.argument("repository", type=REPO_URI)
@yes_option
@json_option
def delete_cmd(repository: LakeFSURI, yes: bool) -> None:
    """Delete REPOSITORY (its refs; the objects in its storage namespace are left alone)."""
    confirm(f"Delete repository {repository.repo!r}", yes)

    async def op(s: Session) -> None:
        await s.graveler.delete_repository(repository.repo)

    run_session(op)
    emit({"deleted": repository.repo}, lambda: click.echo(f"Deleted repository '{repository.repo}'"))
