"""Shell completion of ``lakefs://`` values for ``lakefs-core`` (bash, zsh, fish through click).

Commands and options complete through click's own machinery (``_LAKEFS_CORE_COMPLETE=bash_source
lakefs-core``, see docs/cli.md); a ``lakefs://`` argument or option completes here, from the KV
store the command would use (the global ``--config`` when it is already on the command line):

- ``lakefs://re`` -> the repositories starting with ``re``;
- ``lakefs://repo/ma`` -> its branches and tags starting with ``ma`` (a ``/`` follows when the
  argument takes a path);
- ``lakefs://repo/main/dir/pa`` -> the objects and common prefixes under ``dir/`` starting with
  ``pa`` (one listing page, delimiter ``/``).

Completion never fails a shell: any error (no KV store yet, an unknown repository, a bad
configuration) completes nothing. At most :data:`LIMIT` values are offered.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import click

from lakefs_core.errors import LakeFSError
from lakefs_core.repos.uri import SCHEME, Kind

LIMIT = 200
_WITH_PATH = (Kind.PATH, Kind.PREFIX)


def complete_uri(ctx: click.Context, kind: Kind, incomplete: str) -> list[str]:
    """The completions of ``incomplete`` for an argument of ``kind`` (see the module docstring)."""
    if not incomplete.startswith(SCHEME):
        return [SCHEME] if SCHEME.startswith(incomplete) else []
    repo, has_ref, rest = incomplete[len(SCHEME) :].partition("/")
    if has_ref and kind is Kind.REPO:
        return []
    config_path = ctx.find_root().params.get("config_path")
    try:
        return asyncio.run(_complete(config_path, kind, repo, rest if has_ref else None))[:LIMIT]
    except (LakeFSError, OSError, ValueError):
        return []


async def _complete(config_path: Path | None, kind: Kind, repo: str, rest: str | None) -> list[str]:
    from lakefs_core.cli.context import open_session
    from lakefs_core.coreconfig import load_core_config

    async with open_session(load_core_config(config_path)) as s:
        if rest is None:
            tail = "" if kind is Kind.REPO else "/"
            found = []
            async for r in s.graveler.list_repositories():
                if r.id.startswith(repo):
                    found.append(f"{SCHEME}{r.id}{tail}")
                if len(found) >= LIMIT:
                    break
            return found
        ref, has_path, path = rest.partition("/")
        if not has_path:
            names = [b.id async for b in s.graveler.list_branches(repo)]
            if kind is not Kind.BRANCH:
                names += [t.id async for t in s.graveler.list_tags(repo)]
            tail = "/" if kind in _WITH_PATH else ""
            return [f"{SCHEME}{repo}/{n}{tail}" for n in sorted(set(names)) if n.startswith(ref)]
        if kind not in _WITH_PATH:
            return []
        with contextlib.suppress(LakeFSError):
            page = await s.objects.list(repo, ref, prefix=path, delimiter="/", amount=LIMIT)
            keys = sorted([o.path for o in page.objects] + list(page.common_prefixes))
            return [f"{SCHEME}{repo}/{ref}/{k}" for k in keys]
        return []
