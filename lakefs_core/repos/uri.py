"""``lakefs://repo/ref/path`` URIs as lakectl writes them, parsed and validated in one place.

- ``lakefs://repo`` names a repository (a trailing ``/`` is allowed);
- ``lakefs://repo/ref`` names a ref: a branch, tag or full commit id, optionally with ``~N``/``^N``/``@``
  modifiers (lakectl's ref expressions, see :mod:`lakefs_core.repos.refexpr`);
- ``lakefs://repo/ref/path`` names an object, or with an empty or ``/``-terminated path a prefix.

Every problem raises :class:`~lakefs_core.errors.BadInputError` whose ``field`` is the command-line
argument (or API field) that held the URI, so the one-line message says which argument was wrong.
The command lines' click parameter types are :mod:`lakefs_core.service.cli`'s (``REPO_URI``, ...).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from lakefs_core.errors import BadInputError, encode_utf8
from lakefs_core.refs.ids import validate_branch_id, validate_repo_id, validate_tag_id
from lakefs_core.repos.refexpr import parse_ref

SCHEME = "lakefs://"


class Kind(Enum):
    REPO = "repository"  # lakefs://repo
    REF = "ref"  # lakefs://repo/ref
    BRANCH = "branch"  # lakefs://repo/branch (a plain branch name)
    TAG = "tag"  # lakefs://repo/tag (a plain tag name)
    PATH = "path"  # lakefs://repo/ref/path (non-empty path)
    PREFIX = "prefix"  # lakefs://repo/ref/[prefix]


EXAMPLES = {
    Kind.REPO: "lakefs://<repository>",
    Kind.REF: "lakefs://<repository>/<ref>",
    Kind.BRANCH: "lakefs://<repository>/<branch>",
    Kind.TAG: "lakefs://<repository>/<tag>",
    Kind.PATH: "lakefs://<repository>/<ref>/<path>",
    Kind.PREFIX: "lakefs://<repository>/<ref>/[prefix]",
}


@dataclass(frozen=True)
class LakeFSURI:
    repo: str
    ref: str = ""
    path: str = ""

    def __str__(self) -> str:
        out = SCHEME + self.repo
        if self.ref:
            out += "/" + self.ref
            if self.path:
                out += "/" + self.path
        return out

    def with_path(self, path: str) -> LakeFSURI:
        return LakeFSURI(self.repo, self.ref, path)


def parse_uri(text: str, kind: Kind, *, field: str = "uri") -> LakeFSURI:
    """Parse ``text`` as a URI of ``kind``; errors name ``field``."""

    def bad(problem: str) -> BadInputError:
        return BadInputError(f"{problem} (expected {EXAMPLES[kind]})", field=field)

    if not isinstance(text, str) or not text.startswith(SCHEME):
        shown = text[:200] if isinstance(text, str) else ""
        raise bad(f"{shown!r} is not a lakefs:// URI")
    if "\0" in text:
        raise bad("URI contains a NUL character")
    try:
        encode_utf8(text, field)  # bytes the OS could not decode, given back as lone surrogates
    except BadInputError as e:
        raise bad(str(e).split(": ", 1)[-1]) from None
    rest = text[len(SCHEME) :]
    repo, _, remainder = rest.partition("/")
    if not repo:
        raise bad("missing repository")
    try:
        validate_repo_id(repo)
    except BadInputError as e:
        raise BadInputError(str(e).split(": ", 1)[-1], field=field) from None
    ref, has_path, path = remainder.partition("/")
    if kind is Kind.REPO:
        if remainder:
            raise bad("a repository URI takes no ref or path")
        return LakeFSURI(repo)
    if not ref:
        raise bad("missing ref" if kind is not Kind.BRANCH else "missing branch")
    validators = {Kind.BRANCH: validate_branch_id, Kind.TAG: validate_tag_id}
    try:
        if kind in validators:
            validators[kind](ref)
        else:
            parse_ref(ref)
    except BadInputError as e:
        raise BadInputError(str(e).split(": ", 1)[-1], field=field) from None
    if kind in (Kind.REF, Kind.BRANCH, Kind.TAG):
        if path:
            raise bad(f"a {kind.value} URI takes no object path")
        return LakeFSURI(repo, ref)
    if path.startswith("/"):
        raise bad("the object path must not start with '/'")
    if kind is Kind.PATH and not path:
        raise bad("missing object path" if not has_path else "empty object path")
    return LakeFSURI(repo, ref, path)


def same_repo(first: LakeFSURI, second: LakeFSURI, field: str) -> None:
    if first.repo != second.repo:
        raise BadInputError(
            f"must be in repository {first.repo!r} (got {second.repo!r})",
            field=field,
        )
