"""Branch-name globs as lakeFS's branch protection matches them (``gobwas/glob`` without separators).

``*`` any run of characters, ``?`` one character, ``[abc]`` / ``[a-z]`` a class, ``[!abc]`` its
complement, ``{a,b}`` alternatives (nestable), ``\\`` makes the next character literal; anything else
is literal.

Patterns come from stored records another writer may have made, so matching is bounded: the
alternatives are expanded (at most :data:`MAX_ALTERNATIVES` sequences) into sequences of
single-character tokens and stars, matched by the two-pointer algorithm that backtracks only to the
last star, O(len(pattern) x len(name)) whatever the pattern (a regular expression of many stars
backtracks exponentially on a name that does not match).
"""

from __future__ import annotations

from dataclasses import dataclass

from lakefs_core.errors import BadInputError

__all__ = ["MAX_ALTERNATIVES", "Compiled", "compile_glob", "glob_matches"]

MAX_ALTERNATIVES = 256


@dataclass(frozen=True)
class _Char:
    """One character in ``ranges`` (inclusive pairs), or not in them when ``negate``."""

    ranges: tuple[tuple[str, str], ...]
    negate: bool = False

    def __call__(self, c: str) -> bool:
        return any(lo <= c <= hi for lo, hi in self.ranges) != self.negate


_STAR = None
_ANY = _Char((), negate=True)
_NOTHING = _Char(())  # past the end of the pattern: matches no character
_Token = _Char | None
_Seq = tuple[_Token, ...]
Compiled = tuple[_Seq, ...]


def _bad(pattern: str, what: str) -> BadInputError:
    return BadInputError(f"{what} in pattern {pattern!r}", field="pattern")


def _class(pattern: str, i: int) -> tuple[_Char, int]:
    """The class starting after the ``[`` at ``i - 1``; returns it and the index after ``]``."""
    negate = pattern.startswith("!", i)
    start = i + 1 if negate else i
    end = pattern.find("]", start)
    if end <= start:
        raise _bad(pattern, "an unclosed or empty '['")
    body = pattern[start:end]
    ranges: list[tuple[str, str]] = []
    j = 0
    while j < len(body):
        if j + 2 < len(body) and body[j + 1] == "-":
            if body[j] > body[j + 2]:
                raise _bad(pattern, f"a reversed range {body[j : j + 3]!r}")
            ranges.append((body[j], body[j + 2]))
            j += 3
        else:
            ranges.append((body[j], body[j]))
            j += 1
    return _Char(tuple(ranges), negate), end + 1


def _atom(pattern: str, i: int) -> tuple[_Token, int]:
    c = pattern[i]
    if c == "*":
        return _STAR, i + 1
    if c == "?":
        return _ANY, i + 1
    if c == "[":
        return _class(pattern, i + 1)
    if c == "\\" and i + 1 < len(pattern):
        c, i = pattern[i + 1], i + 1
    return _Char(((c, c),)), i + 1


def _sequence(pattern: str, i: int, depth: int) -> tuple[list[_Seq], int]:
    """The expansions of the sequence starting at ``i``, up to the end (or, inside braces, the
    next ``,`` or ``}`` of this level), and the index where it stopped."""
    expansions: list[_Seq] = [()]
    while i < len(pattern):
        c = pattern[i]
        if depth and c in ",}":
            break
        if c == "{":
            alternatives: list[_Seq] = []
            i += 1
            while True:
                found, i = _sequence(pattern, i, depth + 1)
                alternatives.extend(found)
                if i >= len(pattern):
                    raise _bad(pattern, "an unclosed '{'")
                i += 1
                if pattern[i - 1] == "}":
                    break
            expansions = [e + a for e in expansions for a in alternatives]
        else:
            token, i = _atom(pattern, i)
            expansions = [(*e, token) for e in expansions]
        if len(expansions) > MAX_ALTERNATIVES:
            raise _bad(pattern, f"more than {MAX_ALTERNATIVES} alternatives")
    return expansions, i


def compile_glob(pattern: str) -> Compiled:
    """The token sequences of ``pattern`` (:class:`BadInputError` for a malformed one)."""
    return tuple(_sequence(pattern, 0, 0)[0])


def _match(tokens: _Seq, name: str) -> bool:
    t = s = 0
    star, mark = -1, 0
    while s < len(name):
        token = tokens[t] if t < len(tokens) else _NOTHING
        if token is _STAR:
            star, mark, t = t, s, t + 1
        elif token(name[s]):
            t, s = t + 1, s + 1
        elif star >= 0:  # let the last star take one more character
            mark += 1
            t, s = star + 1, mark
        else:
            return False
    return all(token is _STAR for token in tokens[t:])


def glob_matches(compiled: Compiled, name: str) -> bool:
    return any(_match(tokens, name) for tokens in compiled)
