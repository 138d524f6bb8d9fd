"""Ref expressions as lakectl understands them.

A ref is a branch, a tag or a commit id, optionally followed by modifiers:

- ``~N`` (``~`` alone is ``~1``): the N-th first-parent ancestor;
- ``^N`` (``^`` alone is ``^1``): the N-th parent (merge commits have two);
- ``@`` right after a branch name: the branch's committed head, ignoring uncommitted changes.

Resolution order for the base name: branch, then tag, then commit id (the full 64-hex id;
abbreviated ids are not resolved).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lakefs_core.errors import BadInputError

_MOD = re.compile(r"([~^])(\d*)")


@dataclass(frozen=True)
class RefExpr:
    base: str
    committed_only: bool
    modifiers: tuple[tuple[str, int], ...]  # ("~", n) or ("^", n)

    @property
    def plain(self) -> bool:
        return not self.modifiers and not self.committed_only


def parse_ref(ref: str) -> RefExpr:
    if not ref:
        raise BadInputError("must not be empty", field="ref")
    cut = len(ref)
    for i, ch in enumerate(ref):
        if ch in "~^@":
            cut = i
            break
    base, rest = ref[:cut], ref[cut:]
    if not base:
        raise BadInputError(f"{ref!r} has no branch, tag or commit before its modifiers", field="ref")
    committed_only = rest.startswith("@")
    if committed_only:
        rest = rest[1:]
    modifiers: list[tuple[str, int]] = []
    pos = 0
    while pos < len(rest):
        m = _MOD.match(rest, pos)
        if m is None:
            raise BadInputError(f"{ref!r}: cannot parse modifier at {rest[pos:]!r}", field="ref")
        modifiers.append((m.group(1), int(m.group(2)) if m.group(2) else 1))
        pos = m.end()
    return RefExpr(base, committed_only, tuple(modifiers))
