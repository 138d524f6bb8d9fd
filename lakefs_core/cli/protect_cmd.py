"""``lakefs-core branch-protect add|list|delete``: a repository's branch protection rules (lakectl's
``branch-protect``).

Each rule is a branch-name pattern (``main``, ``release-*``) blocking both staged writes and commits
on the branches it matches, as lakectl's rules do. ``add`` and ``delete`` read the rules with their
checksum and write them back only if unchanged meanwhile (exit code 4 when another writer got there
first: run the command again).
"""

from __future__ import annotations

import click

from lakefs_core.cli.context import Session, run_session
from lakefs_core.cli.output import emit, json_option, table
from lakefs_core.errors import ConflictError, NotFoundError
from lakefs_core.repos.protection import Rules, validate_pattern
from lakefs_core.repos.uri import LakeFSURI
from lakefs_core.service.cli import REPO_URI, confirm, yes_option


@click.group("branch-protect")
def branch_protect() -> None:
    """Add, list and delete branch protection rules."""


def _check_pattern(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    validate_pattern(value)
    return value


@branch_protect.command("add")
@click.argument("repository", type=REPO_URI)
@click.argument("pattern", callback=_check_pattern)
@json_option
def add_cmd(repository: LakeFSURI, pattern: str) -> None:
    """Protect the branches of REPOSITORY whose names match PATTERN (e.g. 'main', 'release-*'): no
    object writes and no commits on them; merges into them stay allowed (as lakeFS)."""

    async def op(s: Session) -> None:
        rules, etag = await s.graveler.get_branch_protection(repository.repo)
        if pattern in rules.rules:
            raise ConflictError(f"repository {repository.repo!r} already has a rule for pattern {pattern!r}")
        added = Rules({**rules.rules, **Rules.of([pattern]).rules})
        await s.graveler.set_branch_protection(repository.repo, added, etag)

    run_session(op)
    human = f"Added branch protection rule {pattern!r} to repository {repository.repo!r}"
    emit({"added": pattern, "repository": repository.repo}, lambda: click.echo(human))


@branch_protect.command("list")
@click.argument("repository", type=REPO_URI)
@json_option
def list_cmd(repository: LakeFSURI) -> None:
    """List the branch protection rules of REPOSITORY."""

    async def op(s: Session) -> Rules:
        return (await s.graveler.get_branch_protection(repository.repo))[0]

    rules = run_session(op)
    doc = {"results": [{"pattern": p} for p in rules.rules]}
    emit(doc, lambda: table(["Branch Name Pattern"], [[p] for p in rules.rules]))


@branch_protect.command("delete")
@click.argument("repository", type=REPO_URI)
@click.argument("pattern")
@yes_option
@json_option
def delete_cmd(repository: LakeFSURI, pattern: str, yes: bool) -> None:
    """Delete the branch protection rule of REPOSITORY for exactly PATTERN."""
    confirm(f"Delete the branch protection rule {pattern!r} of {repository.repo!r}", yes)

    async def op(s: Session) -> None:
        rules, etag = await s.graveler.get_branch_protection(repository.repo)
        if pattern not in rules.rules:
            raise NotFoundError(
                f"branch protection rule {pattern!r} not found in repository {repository.repo!r}"
            )
        kept = {p: actions for p, actions in rules.rules.items() if p != pattern}
        await s.graveler.set_branch_protection(repository.repo, Rules(kept), etag)

    run_session(op)
    human = f"Deleted branch protection rule {pattern!r} of repository {repository.repo!r}"
    emit({"deleted": pattern, "repository": repository.repo}, lambda: click.echo(human))
