"""``lakefs-core import``: lakectl's import, entries pointing at existing objects in place.

    lakefs-core import --from s3://bucket/prefix --to lakefs://repo/branch/path/ [-m MSG]
                       [--spark [--master local[*]] [--partitions N]]

Every object under the source becomes an entry ``path/<key relative to the source>`` with its full
address (nothing is copied), written straight into ranges and committed as ONE commit on the branch;
what was under ``path/`` is replaced, the rest of the branch kept, staged changes stay staged. A
``--to`` without a path would replace the whole branch: that needs ``--whole-branch``. Small
imports run in this process; ``--spark`` runs the range building on PySpark (``local[*]`` by
default; a cluster through the ``core-import`` job of ``lakefs_core.compute``, which needs the ``spark``
extra). A killed import leaves no commit; run it again. The source may be ``s3://bucket/prefix``,
``local:///dir`` or an absolute directory path; a local one is imported from (recorded at, and
addressed by the entries at) its real path, which the output shows. Symbolic links in a local
source are never imported (the store never follows one): the output counts them
(``skipped_symlinks``), so a tree of links is not mistaken for an empty import.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from lakefs_core.cli.context import Session, run_session
from lakefs_core.cli.output import emit, json_option
from lakefs_core.errors import BadInputError
from lakefs_core.repos.uri import LakeFSURI
from lakefs_core.service.cli import PREFIX_URI


@click.command("import")
@click.option("--from", "source", required=True, help="s3://bucket/prefix, local:///dir or /dir.")
@click.option(
    "--to",
    "dest",
    required=True,
    type=PREFIX_URI,
    metavar="lakefs://<repository>/<branch>/<path>",
    help="Where the entries go. Everything under the path is replaced.",
)
@click.option("--message", "-m", default=None, help="Commit message (default: Import SOURCE to PATH).")
@click.option("--spark", is_flag=True, help="Build the ranges on PySpark executors.")
@click.option("--master", default="local[*]", show_default=True, help="Spark master with --spark.")
@click.option("--partitions", type=click.IntRange(1, 100_000), default=None, help="Spark tasks.")
@click.option("--whole-branch", is_flag=True, help="Allow a --to without a path: replace the whole branch.")
@json_option
def import_cmd(
    *,
    source: str,
    dest: LakeFSURI,
    message: str | None,
    spark: bool,
    master: str,
    partitions: int | None,
    whole_branch: bool,
) -> None:
    """Import the objects under --from as entries under --to's path, in one commit.

    Nothing is copied: each entry points at its source object, which must stay in place. What was
    under the path on the branch is replaced; the rest of the branch and its staged changes stay.
    """
    if not dest.path and not whole_branch:
        raise BadInputError(
            "names no path: an import replaces everything under its path, here the whole branch "
            "(pass --whole-branch for that)",
            field="--to",
        )

    async def op(s: Session) -> dict[str, Any]:
        if not spark:
            result = await s.graveler.import_objects(
                dest.repo, dest.ref, dest.path, source, committer=s.committer, message=message
            )
            return {"executor": "in-process", **result.to_json()}
        from lakefs_core.compute.executor import SparkExecutor
        from lakefs_core.compute.import_job import import_with_executor

        executor = SparkExecutor(master=master)
        try:
            result = await import_with_executor(
                s.graveler, executor, dest.repo, dest.ref, dest_path=dest.path, source_uri=source,
                committer=s.committer, message=message, partitions=partitions,
            )  # fmt: skip
        finally:
            executor.close()
        return {"executor": f"spark {master}", **result.to_json()}

    doc = run_session(op)
    source_uri = str(doc.get("source", ""))
    if source_uri.startswith("local://"):
        doc["skipped_symlinks"] = count_symlinks(Path(source_uri.removeprefix("local://")))

    def human() -> None:
        what = f"{doc['entries']} objects from {doc['source']}"
        click.echo(f"Imported {what} into {dest} in {doc['seconds']} s")
        click.echo(f"Commit: {doc['commit_id']}")
        if doc.get("skipped_symlinks"):
            click.echo(
                f"Skipped {doc['skipped_symlinks']} symbolic link(s): never imported (import their targets)"
            )

    emit(doc, human)


def count_symlinks(root: Path) -> int:
    """The symbolic links under ``root`` (a linked directory counts once and is not entered), as
    the local store's listing skips them; directories that cannot be read are not counted."""
    found = 0
    pending = [os.fspath(root)]
    while pending:
        try:
            with os.scandir(pending.pop()) as entries:
                for entry in entries:
                    if entry.is_symlink():
                        found += 1
                    elif entry.is_dir(follow_symlinks=False):
                        pending.append(entry.path)
        except OSError:
            continue  # gone or unreadable: the import's own listing decided about it
    return found
