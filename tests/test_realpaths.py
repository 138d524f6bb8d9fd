"""The one normaliser of local paths (lakefs_core/realpaths.py): where a path leads, against
``os.path.realpath`` on generated trees of directories and symlinks (relative, absolute, chained, to
ancestors, dangling, looping), the overlap verdict of two such paths against the verdict on
``os.path.realpath`` of both, and the refusals of what is about to be owned (a dangling link, a
loop, a component below a file)."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakefs_core.errors import BadInputError
from lakefs_core.namespace import StorageNamespace, given_local_path
from lakefs_core.realpaths import MAX_SYMLINKS, real_location, resolve_path
from tests.support.profiles import examples

NAMES = ("a", "b", "c")
STEPS = (*NAMES, "..", ".", "", "x")  # "x" never exists; "" is a doubled slash


def realpath_overlap(a: str, b: str) -> bool:
    """Equal, or one inside the other, by ``os.path.realpath`` and string prefixes (the oracle)."""
    ra, rb = (os.path.realpath(p).rstrip("/") + "/" for p in (a, b))
    return ra.startswith(rb) or rb.startswith(ra)


# -- examples ---------------------------------------------------------------------------------------------


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "t"
    (root / "real" / "deep" / "er").mkdir(parents=True)
    (root / "file").write_bytes(b"f")
    os.symlink("real/deep", root / "rel")  # relative
    os.symlink(root / "real", root / "abs")  # absolute
    os.symlink("rel", root / "chain")  # chained
    os.symlink("../..", root / "real" / "deep" / "up")  # to an ancestor
    os.symlink("missing/target", root / "dangling")
    os.symlink("loop2", root / "loop1")
    os.symlink("loop1", root / "loop2")
    return root


@pytest.mark.parametrize(
    ("given", "real"),
    [
        ("rel", "real/deep"),
        ("abs/deep/er", "real/deep/er"),
        ("chain/er", "real/deep/er"),
        ("real/deep/up/abs", "real"),
        ("rel/..", "real"),  # ".." after a link: the link's target's parent, not the link's
        ("real//deep/./er/", "real/deep/er"),
        ("chain/new/dirs", "real/deep/new/dirs"),  # not there yet: the existing ancestor resolved
        ("x/../chain", "real/deep"),  # ".." removes a missing component, then resolves again
        ("real/deep/up/real/deep/up/rel", "real/deep"),
    ],
)
def test_paths_resolve_where_they_lead(tree: Path, given: str, real: str) -> None:
    path = f"{tree}/{given}"
    assert resolve_path(path) == f"{tree}/{real}" == os.path.realpath(path)
    ns = real_location(f"local://{path}")
    assert ns == StorageNamespace(f"local://{tree}/{real}")


@pytest.mark.parametrize(
    ("given", "needle"),
    [
        ("dangling", "dangling symbolic link"),
        ("dangling/below", "dangling symbolic link"),
        ("loop1", f"more than {MAX_SYMLINKS} symbolic links"),
        ("real/loop-via/x", None),  # made below: a link to a looping link
        ("file/below", "below a file"),
    ],
)
def test_what_cannot_be_owned_is_refused(tree: Path, given: str, needle: str | None) -> None:
    os.symlink("../loop1", tree / "real" / "loop-via")
    path = f"{tree}/{given}"
    with pytest.raises(BadInputError, match=needle or "symbolic links") as info:
        resolve_path(path, field="source")
    assert info.value.field == "source" and str(tree) in str(info.value)


def test_the_other_side_of_a_comparison_leads_where_its_links_point(tree: Path) -> None:
    """Not strict (a stored record): a dangling link resolves to its target (a directory made there
    later is where the record leads), a component below a file is a path that does not exist."""
    assert resolve_path(f"{tree}/dangling/y", strict=False) == f"{tree}/missing/target/y"
    assert resolve_path(f"{tree}/file/y", strict=False) == f"{tree}/file/y"
    with pytest.raises(BadInputError, match="symbolic links"):  # a loop leads nowhere known
        resolve_path(f"{tree}/loop1", strict=False)


def test_given_local_paths(tree: Path) -> None:
    assert given_local_path("s3://bucket/x") is None and given_local_path("mem://m/x") is None
    assert given_local_path("local:///a//b/../c/") == "/a//b/../c/"
    for bad, needle in [
        ("local://relative", "absolute"),
        ("local:///a\0b", "NUL"),
        ("local:///" + "x" * 4096, "4096 bytes"),
        ("local:///a\udcff", "UTF-8"),
    ]:
        with pytest.raises(BadInputError, match=needle):
            given_local_path(bad)
    # S3 keys are literal: nothing there is resolved, and a non-normal one stays refused.
    assert real_location("s3://bucket/a/b/") == StorageNamespace("s3://bucket/a/b")
    with pytest.raises(BadInputError):
        real_location("s3://bucket/a/../b")


def test_a_path_that_resolves_too_long_is_refused(tmp_path: Path) -> None:
    os.symlink("/" + "y" * 200 + "/" + "z" * 200, tmp_path / "l")
    deep = f"{tmp_path}/l/" + "/".join(["w" * 250] * 16)
    with pytest.raises(BadInputError, match="longer than 4096 bytes"):
        resolve_path(deep, strict=False)


# -- generated trees ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Node:
    parent: int  # index into the directories made so far (0: the root)
    name: str
    link: tuple[bool, tuple[str, ...]] | None  # (absolute?, target steps); None: a directory


PLACES = st.lists(st.sampled_from(STEPS), min_size=1, max_size=4).map(tuple)
nodes = st.lists(
    st.builds(
        Node,
        st.integers(0, 20),
        st.sampled_from(NAMES),
        st.none()
        | st.tuples(st.booleans(), st.lists(st.sampled_from(STEPS), min_size=1, max_size=4).map(tuple)),
    ),
    max_size=9,
)
paths = st.lists(st.sampled_from(STEPS), min_size=1, max_size=6).map(tuple)


def build(root: Path, spec: list[Node]) -> None:
    """Make ``spec`` under ``root``: each node a directory or a symlink in a directory made before."""
    dirs = [""]
    for node in spec:
        rel = f"{dirs[node.parent % len(dirs)]}/{node.name}".lstrip("/")
        if os.path.lexists(root / rel):
            continue
        if node.link is None:
            (root / rel).mkdir()
            dirs.append(rel)
            continue
        absolute, steps = node.link
        target = "/".join(steps) or "."
        os.symlink(f"{root}/{target}" if absolute else target, root / rel)


@contextlib.contextmanager
def made(spec: list[Node]) -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="rp-"))
    try:
        build(root, spec)
        yield root
    finally:
        shutil.rmtree(root)


def under(root: Path, steps: tuple[str, ...]) -> str:
    return f"{root}/" + "/".join(steps)


def check_one(path: str) -> str | None:
    """Strict and lenient resolution of ``path`` against ``os.path.realpath``; the strict answer."""
    try:
        lenient = resolve_path(path, strict=False)
    except BadInputError as e:
        assert "symbolic links" in str(e)  # only a loop leaves a stored path's place unknown
        with pytest.raises(OSError):
            os.path.realpath(path, strict=True)
    else:
        assert lenient == os.path.realpath(path)
    try:
        real = resolve_path(path)
    except BadInputError:
        with pytest.raises(OSError):  # refused only where a link leads nowhere (yet)
            os.path.realpath(path, strict=True)
        return None
    assert real == os.path.realpath(path)
    return real


@settings(max_examples=examples(3), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=nodes, a=paths, b=paths)
def test_generated_trees_resolve_and_compare_as_realpath_does(
    spec: list[Node], a: tuple[str, ...], b: tuple[str, ...]
) -> None:
    with made(spec) as root:
        pa, pb = under(root, a), under(root, b)
        ra, rb = check_one(pa), check_one(pb)
        if ra is None or rb is None:
            return
        mine = real_location(f"local://{pa}").overlaps(real_location(f"local://{pb}"))
        assert mine == realpath_overlap(pa, pb), (ra, rb)


def test_trees_without_bad_links_are_never_refused(tmp_path: Path) -> None:
    """Refusals come from dangling or looping links only: a tree of directories and links to
    existing directories resolves every path (the generated test's refusals are not vacuous)."""
    spec = [Node(0, "a", None), Node(1, "b", None), Node(0, "c", (False, ("a", "b"))),
            Node(2, "a", (False, ("..", "..", "c"))), Node(1, "c", (True, ("a",)))]  # fmt: skip
    with made(spec) as root:
        for steps in [("c", "a", "a", "b"), ("a", "c", "b", ".."), ("c", "x", "..", "a"), ("a", "b", "a")]:
            assert check_one(under(root, steps)) is not None, steps
