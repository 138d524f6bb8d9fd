"""``repo create`` refuses a storage namespace another repository owns, with its own exit code; a
namespace or an import source through a symlink is refused as its real path is, and GC refuses a
namespace that leads elsewhere than recorded (issue 32, items 3 and 4, as real processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from lakefs_core.errors import BadInputError, NamespaceConflictError
from tests.cli.helpers import Cli, InProcess, Result, user_env, write_tree
from tests.support.timing import scaled
from tests.support.zygote import Zygote


def test_nested_namespace_exits_with_the_namespace_conflict_code(tmp_path: Path, core_zygote: Zygote) -> None:
    cli = Cli(user_env(tmp_path / "home"), cwd=tmp_path, zygote=core_zygote)
    cli("repo", "create", "lakefs://repo1", f"local://{tmp_path}/ns/repo1").ok()
    line = cli("repo", "create", "lakefs://repo2", f"local://{tmp_path}/ns/repo1/data").failed(
        NamespaceConflictError.exit_code, "repo1", "storage namespace"
    )
    assert NamespaceConflictError.exit_code == 15, line


def test_in_process_conflicts_and_system_directories(run: InProcess, tmp_path: Path) -> None:
    run("repo", "create", "lakefs://repo1", f"local://{tmp_path}/ns/repo1").ok()
    for other in ("ns/repo1", "ns/repo1/_lakefs", "ns", ""):
        run("repo", "create", "lakefs://repo2", f"local://{tmp_path}/{other}".rstrip("/")).failed(
            NamespaceConflictError.exit_code, "repo1"
        )
    for system in ("local:///", "local:///etc", "local:///etc/lakefs"):
        run("repo", "create", "lakefs://repo3", system).failed(BadInputError.exit_code, "storage_namespace")
    run("repo", "delete", "lakefs://repo1", "-y").ok()
    run("repo", "create", "lakefs://repo2", f"local://{tmp_path}/ns").ok()


# -- real paths (issue 32, items 3 and 4), as real processes ------------------------------------------------


def gc_cli(cli: Cli, *args: str) -> Result:
    """``lakefs-gc`` as a process, as the same user (the same embedded KV) as ``cli``."""
    proc = subprocess.run(
        [sys.executable, "-m", "lakefs_gc.cli", *args],
        capture_output=True,
        env=cli.env,
        cwd=cli.cwd,
        timeout=scaled(120),
        check=False,
    )
    result = Result(tuple(args), proc.returncode, proc.stdout, proc.stderr.decode(errors="replace"))
    assert "Traceback" not in result.err, result.err
    return result


def refused_gc(result: Result, *needles: str) -> str:
    assert result.returncode == NamespaceConflictError.exit_code, result
    line = result.err.strip()
    assert "\n" not in line and line.startswith("lakefs-gc: "), result.err
    for needle in needles:
        assert needle in line, (needle, line)
    return line


LANDING = {"a.csv": b"a", "data/0000000000/obj": b"obj", "sub/b.csv": b"b"}


def assert_readable(cli: Cli, repo: str, landing: Path) -> None:
    for rel, body in LANDING.items():
        assert (landing / rel).read_bytes() == body
        assert cli("fs", "cat", f"lakefs://{repo}/main/imp/{rel}").ok().raw == body


def test_item4_a_namespace_through_a_symlink_to_an_import_source_is_refused(
    tmp_path: Path, core_zygote: Zygote
) -> None:
    """``repo create lakefs://r7 local:///srcdir`` was refused (exit 15) but ``local:///link`` (to
    srcdir) accepted, and GC of r7 deleted the files r6 had imported. Now every spelling is refused
    (equal, inside, enclosing); and should r7's own directory be swapped for that link after its
    creation, its GC refuses in one line and r6's imported files stay readable."""
    cli = Cli(user_env(tmp_path / "home"), cwd=tmp_path, zygote=core_zygote)
    src = write_tree(tmp_path / "outer" / "srcdir", LANDING)
    cli("repo", "create", "lakefs://rr6", f"local://{tmp_path}/ns6").ok()
    cli("import", "--from", str(src), "--to", "lakefs://rr6/main/imp/").ok()
    os.symlink(src, tmp_path / "link")
    os.symlink(tmp_path, tmp_path / "here")
    os.symlink(tmp_path / "outer", tmp_path / "to-outer")
    for namespace in (src, tmp_path / "link", tmp_path / "link" / "sub", tmp_path / "to-outer"):
        cli("repo", "create", "lakefs://rr7", f"local://{namespace}").failed(
            NamespaceConflictError.exit_code, "'rr6' imported", f"local://{src}"
        )
    created = cli.json("repo", "create", "lakefs://rr7", f"local://{tmp_path}/here/ns7/")
    assert created["storage_namespace"] == f"local://{tmp_path}/ns7"  # stored at its real path
    listed = cli.json("repo", "list")["results"]
    assert [r["storage_namespace"] for r in listed if r["id"] == "rr7"] == [f"local://{tmp_path}/ns7"]
    (tmp_path / "ns7").rename(tmp_path / "ns7-away")
    os.symlink(src, tmp_path / "ns7")
    refused_gc(
        gc_cli(cli, "mark", "lakefs://rr7", "--lite", "--sweep", "--min-age", "0s"),
        f"storage namespace local://{tmp_path}/ns7 of repository 'rr7' now leads to local://{src}",
    )
    assert_readable(cli, "rr6", src)
    assert not (src / "_lakefs").exists()


def test_item3_an_import_through_a_symlink_into_a_namespace_is_refused(
    tmp_path: Path, core_zygote: Zygote
) -> None:
    """``import --from nsA/data`` was refused but ``--from link-to-nsA/data`` accepted, and GC of
    repoA then deleted objects repoB had committed. Now every spelling is refused (exit 9, naming
    repoA); repoB imports its own landing directory instead, and GC of repoA deletes repoA's garbage
    only: repoB's committed objects and repoA's own stay readable."""
    cli = Cli(user_env(tmp_path / "home"), cwd=tmp_path, zygote=core_zygote)
    ns_a = tmp_path / "nsA"
    cli("repo", "create", "lakefs://repo-a", f"local://{ns_a}").ok()
    cli("repo", "create", "lakefs://repo-b", f"local://{tmp_path}/nsB").ok()
    (tmp_path / "f.csv").write_bytes(b"kept by repo-a")
    cli("fs", "upload", "lakefs://repo-a/main/f.csv", "--source", str(tmp_path / "f.csv")).ok()
    cli("commit", "lakefs://repo-a/main", "-m", "one").ok()
    # repo-a's own garbage: an object in its data/ that nothing references and no journal intent
    # covers (an upload's object removed from staging stays the reconciler's until it decides it).
    slice_dir = next(p for p in (ns_a / "data").iterdir() if p.is_dir())
    orphan = slice_dir / "orphan-object"
    orphan.write_bytes(b"garbage of repo-a")
    os.symlink(ns_a / "data", tmp_path / "link")
    for source in (
        f"{ns_a}/data",
        str(tmp_path / "link"),
        f"local://{tmp_path}/link",
        f"{tmp_path}/x/../link/",
    ):
        cli("import", "--from", source, "--to", "lakefs://repo-b/main/imp/").failed(
            BadInputError.exit_code, "source:", "'repo-a'"
        )
    landing = write_tree(tmp_path / "landing", LANDING)
    os.symlink(landing, tmp_path / "to-landing")
    done = cli.json("import", "--from", str(tmp_path / "to-landing"), "--to", "lakefs://repo-b/main/imp/")
    assert done["source"] == f"local://{landing}"
    run = gc_cli(cli, "mark", "lakefs://repo-a", "--lite", "--sweep", "--min-age", "0s")
    assert run.returncode == 0, run.err
    assert json.loads(run.out)["sweep"]["deleted"] == 1  # the orphan, repo-a's own garbage
    assert not orphan.exists()
    assert cli("fs", "cat", "lakefs://repo-a/main/f.csv").ok().raw == b"kept by repo-a"
    assert_readable(cli, "repo-b", landing)


def test_a_deleted_repositorys_namespace_is_not_reused_silently(run: InProcess, tmp_path: Path) -> None:
    # issue 38: lakeFS refuses a namespace holding a repository's _lakefs/; so does repo create,
    # naming the marker and the deleted repository, under its old id or a new one, until the user
    # says --reuse-namespace
    ns = f"local://{tmp_path}/ns/old"
    run("repo", "create", "lakefs://old", ns).ok()
    run("repo", "delete", "lakefs://old", "--yes").ok()
    for repo in ("lakefs://old", "lakefs://new"):
        line = run("repo", "create", repo, ns).failed(
            NamespaceConflictError.exit_code,
            "_lakefs/dummy exists",
            "repository 'old', deleted",
            "--reuse-namespace",
        )
        assert "is already in use by a deleted repository" in line
    assert run("repo", "list", "--json").json() == {"results": []}
    run("repo", "create", "lakefs://new", ns, "--reuse-namespace").ok()
    assert [r["id"] for r in run("repo", "list", "--json").json()["results"]] == ["new"]
