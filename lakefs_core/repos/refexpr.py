"""Ref expressions as lakectl understands them.

A ref is a branch, a tag or a commit id, optionally followed by modifiers:

- ``~N`` (``~`` alone is ``~1``): the N-th first-parent ancestor;
- ``^N`` (``^`` alone is ``^1``): the N-th parent (merge commits have two);
- ``@`` right after a branch name: the branch's committed head, ignoring uncommitted changes.

Resolution order for the base name, as lakeFS's: a full commit id (64 hex digits) that names an
existing commit, then a branch, then a tag (abbreviated ids are not resolved). Branch and tag names
may not be created with a full commit id as name (see :mod:`lakefs_core.refs.model`): such a branch
could not be read by its name.

A ref contains no ASCII whitespace (lakeFS refuses refs not matching its RE2 ``^[^\\s]+$``) and the
modifier counts are ASCII digits.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lakefs_core.errors import BadInputError

_MOD = re.compile(r"([~^])([0-9]*)")  # [0-9], not \d: int() would accept other scripts' digits
_WHITESPACE = re.compile(r"[\t\n\f\r ]")


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
    if _WHITESPACE.search(ref):
        raise BadInputError(f"{ref!r} contains whitespace", field="ref")
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
