"""The repository CLI end to end, as real ``python -m lakefs_core.cli`` processes.

One scenario (create, recursive upload, commit, branch, change + delete, diffs, commit, merge, tag,
reading old versions, log, ls) runs on the embedded default (no configuration: SQLite in the user
data dir, a ``local://`` namespace), every command a real process, and on S3 + DynamoDB (moto),
where its concurrent steps (two writers on a branch, five readers) are real processes and its
sequential commands, already run as processes on the embedded default, run in-process
(:class:`~tests.cli.helpers.Mixed`: each process there spent ~1.6 s of CPU importing the AWS SDK).
The files the CLI's commits wrote are then read by ``lakefs-core sst inspect`` and by RocksDB's
``sst_dump``. Two CLI processes uploading and committing at once on one SQLite store both succeed
and history stays linear.
"""

from __future__ import annotations

import itertools
import shutil
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3  # type: ignore[import-untyped]
import pytest

from lakefs_core.cli.sst import inspect_table
from tests.cli.helpers import Cli, InProcess, Mixed, set_user_env, table_files, user_env, write_tree
from tests.support.env import require_tool
from tests.support.moto import ACCESS_KEY, SECRET_KEY, MotoServer
from tests.support.timing import scaled
from tests.support.zygote import Zygote

BINARY = bytes(range(256)) * 40
FILES = {
    "top.txt": b"top\n",
    "data/a.txt": b"alpha\n",
    "data/sub/b.txt": b"bravo\n",
    "data/sub/c.bin": BINARY,
}
ROUNDS = 2  # upload + commit rounds per process in the concurrency test
EXPECTED_DIFF = [
    {"type": "changed", "path": "data/a.txt", "size_bytes": 7},
    {"type": "added", "path": "data/new.txt", "size_bytes": 4},
    {"type": "removed", "path": "data/sub/b.txt", "size_bytes": 6},
]


@dataclass
class Outcome:
    cli: Cli | Mixed
    initial: str
    imported: str
    changed: str
    merged: str
    merged_meta: str


def _diff(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [{k: d[k] for k in ("type", "path", "size_bytes")} for d in doc["results"]]


def run_scenario(cli: Cli | Mixed, namespace: str, work: Path) -> Outcome:
    src = write_tree(work / "src", FILES)
    write_tree(work / "change", {"a.txt": b"ALPHA!\n", "new.txt": b"new\n"})

    repo = cli.json("repo", "create", "lakefs://demo", namespace)
    assert (repo["id"], repo["default_branch"], repo["storage_namespace"]) == ("demo", "main", namespace)

    up = cli.json("fs", "upload", "lakefs://demo/main/", "--source", str(src), "--recursive")
    assert up["count"] == 4 and up["size_bytes"] == sum(len(v) for v in FILES.values())
    assert [o["path"] for o in up["results"]] == sorted(FILES)

    imported = cli.json("commit", "lakefs://demo/main", "-m", "import", "--meta", "source=test")
    assert (imported["message"], imported["committer"]) == ("import", "tester")
    assert imported["metadata"] == {"source": "test"} and len(imported["parents"]) == 1
    initial = imported["parents"][0]

    made = cli("--json", "branch", "create", "lakefs://demo/dev", "--source", "lakefs://demo/main").json()
    assert made == {"id": "dev", "commit_id": imported["id"]}

    # Two writers on the branch at once: change + add (relative --source, cwd = work), delete.
    upload, rm = cli.many(
        [
            "fs",
            "upload",
            "lakefs://demo/dev/data",
            "-s",
            "change",
            "-r",
            "--content-type",
            "text/x",
            "--json",
        ],
        ["fs", "rm", "lakefs://demo/dev/data/sub/b.txt", "--json"],
    )
    assert [o["path"] for o in upload.json()["results"]] == ["data/a.txt", "data/new.txt"]
    assert rm.json() == {"deleted": ["data/sub/b.txt"]}

    assert _diff(cli.json("diff", "lakefs://demo/dev")) == EXPECTED_DIFF
    changed = cli.json("commit", "lakefs://demo/dev", "-m", "change")
    assert changed["parents"] == [imported["id"]]
    assert _diff(cli.json("diff", "lakefs://demo/main", "lakefs://demo/dev")) == EXPECTED_DIFF

    merged = cli.json("merge", "lakefs://demo/dev", "lakefs://demo/main", "-m", "merge dev")
    assert merged["parents"] == [imported["id"], changed["id"]] and merged["message"] == "merge dev"

    tag = cli.json("tag", "create", "lakefs://demo/v1", "lakefs://demo/main~1")
    assert tag == {"id": "v1", "commit_id": imported["id"]}

    by_tag, deleted_by_ancestor, current, log, listing = cli.many(
        ["fs", "cat", "lakefs://demo/v1/data/a.txt"],
        ["fs", "cat", "lakefs://demo/main~1/data/sub/b.txt"],
        ["fs", "cat", "lakefs://demo/main/data/a.txt"],
        ["--json", "log", "lakefs://demo/main"],
        ["fs", "ls", "lakefs://demo/main/", "--recursive", "--json"],
    )
    assert by_tag.ok().raw == b"alpha\n"
    assert deleted_by_ancestor.ok().raw == b"bravo\n"
    assert current.ok().raw == b"ALPHA!\n"
    history = log.json()["results"]
    assert [c["id"] for c in history] == [merged["id"], imported["id"], initial]
    assert history[-1]["message"] == "Repository created"
    objects = listing.json()["results"]
    assert [(o["path"], o["size_bytes"]) for o in objects] == [
        ("data/a.txt", 7),
        ("data/new.txt", 4),
        ("data/sub/c.bin", len(BINARY)),
        ("top.txt", 4),
    ]
    assert objects[1]["content_type"] == "text/x"
    return Outcome(cli, initial, imported["id"], changed["id"], merged["id"], history[0]["meta_range_id"])


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Outcome, Path, Path]:
    """The scenario on the embedded default: no config file, no env; SQLite in the user data dir."""
    work = tmp_path_factory.mktemp("embedded")
    home = work / "home"
    ns_dir = work / "namespace"
    cli = Cli(user_env(home), cwd=work)
    return run_scenario(cli, f"local://{ns_dir}", work), home, ns_dir


def test_scenario_embedded_default(embedded: tuple[Outcome, Path, Path]) -> None:
    outcome, home, ns_dir = embedded
    assert (home / "data" / "lakefs-core" / "kv.sqlite3").is_file()
    assert not (home / "config").exists()
    data = [p for p in (ns_dir / "data").rglob("*") if p.is_file()]
    assert len(data) == 6  # four imported objects plus two uploaded on dev
    repos = outcome.cli.json("repo", "list")["results"]
    assert [(r["id"], r["storage_namespace"]) for r in repos] == [("demo", f"local://{ns_dir}")]


def test_tables_readable_by_sst_inspect_and_sst_dump(
    embedded: tuple[Outcome, Path, Path], tmp_path: Path
) -> None:
    outcome, _, ns_dir = embedded
    sst_dump = require_tool("sst_dump", "rocksdb-tools")
    files = list(table_files(ns_dir))
    reports = {p.name: inspect_table(p.read_bytes(), str(p), records=True) for p in files}
    kinds = {r["kind"] for r in reports.values()}
    assert kinds == {"ranges", "metaranges"}
    merged_meta = outcome.merged_meta
    assert merged_meta in reports and reports[merged_meta]["kind"] == "metaranges"
    assert all(r["id_matches_file_name"] for r in reports.values())

    # The merged commit's ranges hold exactly the merged tree.
    range_ids = [r["identity"] for r in reports[merged_meta]["records"]]
    keys = [rec["key"] for rid in range_ids for rec in reports[rid]["records"]]
    assert keys == ["data/a.txt", "data/new.txt", "data/sub/c.bin", "top.txt"]

    # The CLI itself on the merged metarange and one of its ranges.
    inspected = outcome.cli.many(
        ["sst", "inspect", str(ns_dir / "_lakefs" / merged_meta), "--json"],
        ["sst", "inspect", str(ns_dir / "_lakefs" / range_ids[0]), "--records", "--json"],
    )
    for table_id, result in zip([merged_meta, range_ids[0]], inspected, strict=True):
        report = result.json()
        assert report["id_matches_file_name"] is True and report["computed_id"] == table_id
        assert report["kind"] == reports[table_id]["kind"]
        assert report["count"] == reports[table_id]["count"]
    assert [r["key"] for r in inspected[1].json()["records"]] == keys[: len(inspected[1].json()["records"])]

    for path in files:
        named = tmp_path / f"{path.name}.sst"  # sst_dump only accepts *.sst names
        shutil.copyfile(path, named)
        dumped = subprocess.run(
            [sst_dump, f"--file={named}", "--command=scan", "--output_hex"],
            capture_output=True,
            text=True,
            timeout=scaled(30),
            check=False,
        )
        assert dumped.returncode == 0, dumped.stderr
        rows = [line for line in dumped.stdout.splitlines() if " => " in line]
        expected = [rec["key"] for rec in reports[path.name]["records"]]
        assert [bytes.fromhex(r.split("'")[1]).decode() for r in rows] == expected


def test_scenario_s3_and_dynamodb(
    moto: Callable[[str], MotoServer],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsysbinary: pytest.CaptureFixture[bytes],
) -> None:
    server = moto("us-east-1")
    s3 = boto3.client("s3", **server.client_kwargs())
    try:
        s3.create_bucket(Bucket="bucket")
        config = tmp_path / "lakefs-core.yaml"
        config.write_text(
            "s3:\n"
            "  region: us-east-1\n"
            f"  endpoint_url: {server.endpoint}\n"
            f"  access_key_id: {ACCESS_KEY}\n"
            f"  secret_access_key: {SECRET_KEY}\n"
            "committer: tester\n"
        )
        settings = {
            "LAKEFS_CORE_CONFIG": str(config),
            "LAKEFS_CORE__KV_URL": f"dynamodb://kvstore?region=us-east-1&endpoint={server.endpoint}",
        }
        set_user_env(monkeypatch, tmp_path / "home", **settings)
        monkeypatch.chdir(tmp_path)
        cli = Mixed(Cli(user_env(tmp_path / "home", **settings), cwd=tmp_path), capsysbinary)
        outcome = run_scenario(cli, "s3://bucket/repo", tmp_path)
        assert not (tmp_path / "home" / "data").exists()  # the embedded default was not used
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket="bucket", Prefix="repo/")["Contents"]]
        assert sum(k.startswith("repo/data/") for k in keys) == 6
        assert f"repo/_lakefs/{outcome.merged_meta}" in keys
        tables = boto3.client("dynamodb", **server.client_kwargs()).list_tables()["TableNames"]
        assert "kvstore" in tables
        assert all(SECRET_KEY not in r.err and SECRET_KEY.encode() not in r.raw for r in cli.history)
    finally:
        s3.close()


def test_concurrent_cli_commits_on_one_sqlite_store(
    run: InProcess, tmp_path: Path, core_zygote: Zygote
) -> None:
    """Two processes each upload then commit, two rounds, at the same time, on one branch.

    ``--allow-empty``: a writer's upload may already have been committed by the other writer's
    commit (it takes every staged change), leaving it nothing to commit. The repository is created
    and read back in-process (``run``, the same user): only the writers need to be processes (each
    command a child of the pre-imported ``lakefs-core``, ``core_zygote``).
    """
    cli = Cli(user_env(tmp_path / "home"), cwd=tmp_path, zygote=core_zygote)
    run("repo", "create", "lakefs://race", f"local://{tmp_path / 'ns'}").ok()
    for name in ("a", "b"):
        (tmp_path / f"{name}.txt").write_text(f"from {name}\n")
    failures: list[str] = []
    start = threading.Barrier(2)

    def writer(name: str) -> None:
        start.wait()
        for i in range(ROUNDS):
            for args in (
                ["fs", "upload", f"lakefs://race/main/{name}/{i}", "--source", f"{name}.txt"],
                ["commit", "lakefs://race/main", "-m", f"{name} {i}", "--allow-empty"],
            ):
                r = cli(*args)
                if r.returncode != 0:
                    failures.append(f"{args}: {r.returncode}: {r.err}")

    threads = [threading.Thread(target=writer, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []

    history = run.json("log", "lakefs://race/main")["results"]
    # Up to four commits on top of "Repository created": a commit whose staged changes were all
    # published by the other process's concurrent commit returns that commit instead of a new one.
    assert 1 + ROUNDS <= len(history) <= 1 + 2 * ROUNDS and history[-1]["message"] == "Repository created"
    for newer, older in itertools.pairwise(history):
        assert newer["parents"] == [older["id"]]  # linear: one parent each, the next entry
    assert {c["message"] for c in history[:-1]} <= {f"{n} {i}" for n in "ab" for i in range(ROUNDS)}
    listing = run.json("fs", "ls", "lakefs://race/main/", "-r")["results"]
    assert [o["path"] for o in listing] == [f"{n}/{i}" for n in "ab" for i in range(ROUNDS)]
