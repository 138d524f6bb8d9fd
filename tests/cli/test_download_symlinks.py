"""``fs download`` never writes through a symbolic link below its destination (issue 32, item 7).

Real CLI processes for the downloads (the repository they read is set up in-process: ``repo create``
and ``upload -r`` run as processes in test_scenario.py). A link planted below DEST (to a directory
outside it, to a file outside it, or dangling) at every level a key's path crosses is refused with
one line naming the link (exit 9, BadInputError) and nothing outside DEST is created, modified or
deleted (the tree outside is compared entry by entry). On c5cbe05, ``download -r`` made its
temporary file and renamed it through ``DEST/sub -> /outside``, writing ``/outside/a.txt``. A DEST
given as a link is the user's own choice: resolved once, as ``cp`` would, and written below its
target; links below DEST that no key crosses do not matter.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.block.test_local_symlinks import snapshot
from tests.cli.helpers import Cli, InProcess, user_env, write_tree
from tests.support.zygote import Zygote

FILES = {"sub/a.txt": b"a", "sub/deep/b.txt": b"bb", "top.txt": b"top"}


@pytest.fixture
def cli(run: InProcess, tmp_path: Path, core_zygote: Zygote) -> Cli:
    run("repo", "create", "lakefs://dlr", f"local://{tmp_path / 'ns'}").ok()  # the same user as below
    write_tree(tmp_path / "src", FILES)
    run("fs", "upload", "-r", "lakefs://dlr/main/", "--source", str(tmp_path / "src")).ok()
    return Cli(user_env(tmp_path / "home"), cwd=tmp_path, zygote=core_zygote)


def outside_tree(tmp_path: Path) -> Path:
    """A directory outside DEST holding what a followed link would overwrite."""
    outside = tmp_path / "outside"
    write_tree(outside, {"a.txt": b"theirs", "deep/b.txt": b"theirs", "b.txt": b"theirs", "file": b"theirs"})
    return outside


# name: (the link's path below DEST, what it points to below "outside", the key it captures)
PLACEMENTS = {
    "directory": ("sub", "", "sub/a.txt"),
    "deeper-directory": ("sub/deep", "deep", "sub/deep/b.txt"),
    "file": ("top.txt", "file", "top.txt"),
    "dangling": ("sub/a.txt", "new-file", "sub/a.txt"),
}


@pytest.mark.parametrize("placement", list(PLACEMENTS))
def test_a_link_below_dest_is_refused_and_nothing_outside_is_touched(
    cli: Cli, tmp_path: Path, placement: str
) -> None:
    where, target, _ = PLACEMENTS[placement]
    outside = outside_tree(tmp_path)
    dest = tmp_path / "dest"
    link = dest / where
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(outside / target if target else outside)
    before = snapshot(outside)
    result = cli("fs", "download", "-r", "lakefs://dlr/main/", str(dest), "-p", "1")
    assert snapshot(outside) == before
    assert link.is_symlink() and not (outside / "new-file").exists()
    line = result.failed(9, "symbolic link")
    assert f"DEST: {link} is a symbolic link inside the destination" in line
    assert not [p for p in dest.rglob(".lakefs-download-*")], "temporary files left behind"


def test_a_single_download_into_a_directory_refuses_a_link_at_its_name(cli: Cli, tmp_path: Path) -> None:
    outside = outside_tree(tmp_path)
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "top.txt").symlink_to(outside / "file")
    before = snapshot(outside)
    for into in (str(dest), f"{dest}/"):
        cli("fs", "download", "lakefs://dlr/main/top.txt", into).failed(
            9, f"{dest / 'top.txt'} is a symbolic link"
        )
    assert snapshot(outside) == before


def test_a_dest_given_as_a_link_is_followed_once(cli: Cli, tmp_path: Path) -> None:
    """DEST itself may be a link (the user's); links below it that no key crosses do not matter."""
    outside = outside_tree(tmp_path)
    real = tmp_path / "real-dest"
    real.mkdir()
    (real / "unrelated").symlink_to(outside)
    dest = tmp_path / "dest-link"
    dest.symlink_to(real)
    before = snapshot(outside)
    doc = cli.json("fs", "download", "-r", "lakefs://dlr/main/", str(dest))
    assert doc["count"] == 3
    got = {
        p.relative_to(real).as_posix(): p.read_bytes()
        for p in real.rglob("*")
        if p.is_file() and not p.is_symlink()
    }
    assert got == FILES
    assert snapshot(outside) == before
    # a single object to a file the user names through a link: written to the link's target
    named = tmp_path / "named-link"
    named.symlink_to(outside / "file")
    cli("fs", "download", "lakefs://dlr/main/top.txt", str(named)).ok()
    assert (outside / "file").read_bytes() == b"top" and named.is_symlink()
    assert not list(outside.glob(".lakefs-download-*"))
    os.unlink(named)
