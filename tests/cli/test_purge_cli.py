"""``lakefs-gc purge`` (dry run by default, then with --yes) and ``lakefs-core fs cat`` of the purged
object: exit 17, the message naming the audit record.

Issue 32, item 8, as real processes: ``s.csv`` committed three times, ``purge --all-history --yes``
SIGKILLed at its second object delete (``LAKEFS_CORE_FAULT=purge:delete:2:kill``). Before any re-run,
every targeted version answers "purged" (exit 17, naming the record) through ``fs cat`` and
``fs download`` (``fs stat`` shows the entry with the unfinished record), although two of the three
objects are still in the store; the re-run completes the SAME audit record (one record in
``lakefs-gc purges``, done, every object gone). On SQLite + a local namespace and on PostgreSQL + S3
(moto). The three commits the purge starts from are made in-process (``run``'s
``InProcess``, the same user and settings): the processes are the purge and what reads after it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import boto3
import pytest

from lakefs_gc.cli import main as gc_main
from tests.cli.helpers import Cli, InProcess, Result, set_user_env, user_env
from tests.support.moto import ACCESS_KEY, SECRET_KEY, MotoServer
from tests.support.pg import PgDatabase
from tests.support.zygote import Zygote

KILLED = -9


def test_cli_purge_and_cat_exit_17(tmp_path: Path, run: InProcess) -> None:
    run("repo", "create", "lakefs://rp2", f"local://{tmp_path / 'ns2'}").ok()
    src = tmp_path / "f.txt"
    src.write_bytes(b"secret")
    run("fs", "upload", "lakefs://rp2/main/f.txt", "--source", str(src)).ok()
    run("commit", "lakefs://rp2/main", "-m", "one").ok()
    capsys = run.capsys
    capsys.readouterr()
    assert gc_main(["purge", "lakefs://rp2/main/f.txt", "--reason", "erase"]) == 0  # a dry run
    dry = json.loads(capsys.readouterr().out)
    assert dry["dry_run"] is True and len(dry["addresses"]) == 1
    assert run("fs", "cat", "lakefs://rp2/main/f.txt").ok().raw == b"secret"
    assert gc_main(["purge", "lakefs://rp2/main/f.txt", "--reason", "erase", "--yes"]) == 0
    done = json.loads(capsys.readouterr().out)
    assert done["audit_id"] and done["deleted"] == 1
    cat = run("fs", "cat", "lakefs://rp2/main/f.txt")
    assert cat.returncode == 17 and done["audit_id"] in cat.err and "purged" in cat.err


def test_purged_objects_are_shown_in_ls_and_skipped_by_download(tmp_path: Path, run: InProcess) -> None:
    """Issue 38: ``fs ls`` marks a purged object (text and --json, naming the audit record), ``fs
    stat`` prints its entry with the purge record (exit 0) while ``fs cat`` fails (17); ``fs
    download -r`` stops at it (exit 17) unless ``--skip-purged``, which skips and counts it."""
    run("repo", "create", "lakefs://rp4", f"local://{tmp_path / 'ns4'}").ok()
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "keep.txt").write_bytes(b"keep")
    (tree / "gone.txt").write_bytes(b"secret")
    run("fs", "upload", "-r", "-s", str(tree), "lakefs://rp4/main/d/").ok()
    run("commit", "lakefs://rp4/main", "-m", "one").ok()
    run.capsys.readouterr()
    assert gc_main(["purge", "lakefs://rp4/main/d/gone.txt", "--reason", "erase", "--yes"]) == 0
    audit = json.loads(run.capsys.readouterr().out)["audit_id"]
    lines = run("fs", "ls", "lakefs://rp4/main/d/").ok().out.splitlines()
    assert [line.endswith(f"(purged: audit record {audit})") for line in lines] == [True, False], lines
    listed = {r["path"]: r for r in run.json("fs", "ls", "-r", "lakefs://rp4/main/")["results"]}
    assert listed["d/gone.txt"]["purged"] == audit and "purged" not in listed["d/keep.txt"]
    # fs stat shows the entry with its purge record (exit 0); reading the bytes still fails (17)
    text = run("fs", "stat", "lakefs://rp4/main/d/gone.txt").ok().out
    assert "Path: d/gone.txt" in text and f"Purged: audit record {audit}" in text, text
    assert "Purge Reason: erase" in text and "Purged By: " in text and "Purged At: " in text, text
    stat = run.json("fs", "stat", "lakefs://rp4/main/d/gone.txt")
    assert stat["path"] == "d/gone.txt" and stat["size_bytes"] == 6 and stat["purged"] == audit
    assert stat["purge"]["audit_id"] == audit and stat["purge"]["reason"] == "erase"
    assert "addresses" not in stat["purge"] and stat["purge"]["state"] == "done"
    assert "purged" not in run.json("fs", "stat", "lakefs://rp4/main/d/keep.txt")
    run("fs", "cat", "lakefs://rp4/main/d/gone.txt").failed(17, audit)
    run("fs", "download", "-r", "lakefs://rp4/main/d/", str(tmp_path / "out1")).failed(17, audit)
    result = run("fs", "download", "-r", "--skip-purged", "lakefs://rp4/main/d/", str(tmp_path / "out2"))
    assert result.ok().err.strip() == "lakefs-core: skipped 1 purged object(s)"
    assert "skipped (purged): lakefs://rp4/main/d/gone.txt" in result.out
    assert sorted(p.name for p in (tmp_path / "out2").iterdir()) == ["keep.txt"]
    doc = run.json("fs", "download", "-r", "--skip-purged", "lakefs://rp4/main/d/", str(tmp_path / "out3"))
    assert doc["count"] == 1 and doc["skipped_purged"] == ["d/gone.txt"]


def test_cli_dry_run_names_the_refs_sharing_the_object(tmp_path: Path, run: InProcess) -> None:
    """The object main's f.txt has is also dev's and tag t1's: the dry run says so before --yes."""
    run("repo", "create", "lakefs://rp3", f"local://{tmp_path / 'ns3'}").ok()
    src = tmp_path / "f.txt"
    src.write_bytes(b"secret")
    run("fs", "upload", "lakefs://rp3/main/f.txt", "--source", str(src)).ok()
    run("commit", "lakefs://rp3/main", "-m", "one").ok()
    run("branch", "create", "lakefs://rp3/dev", "--source", "lakefs://rp3/main").ok()
    run("tag", "create", "lakefs://rp3/t1", "lakefs://rp3/main").ok()
    run.capsys.readouterr()
    assert gc_main(["purge", "lakefs://rp3/main/f.txt", "--reason", "erase"]) == 0
    dry = json.loads(run.capsys.readouterr().out)
    [use] = dry["shared"]
    assert (use["path"], use["branches"], use["tags"], dry["shared_truncated"]) == (
        "f.txt",
        ["dev"],
        ["t1"],
        False,
    )
    assert use["address"] == dry["addresses"][0]


class GcCli(Cli):
    """``python -m lakefs_gc.cli`` as a real process."""

    def gc(self, *args: str, **extra_env: str) -> Result:
        proc = subprocess.run(
            [sys.executable, "-m", "lakefs_gc.cli", *args],
            capture_output=True,
            env={**self.env, **extra_env},
            cwd=self.cwd,
            timeout=self.timeout,
            check=False,
        )
        result = Result(tuple(args), proc.returncode, proc.stdout, proc.stderr.decode(errors="replace"))
        assert "Traceback" not in result.err, result.err
        return result


# A backend: the user's settings (environment variables), the namespace, whether an address exists.
Backend = tuple[dict[str, str], str, Callable[[str], bool]]


def _sqlite_local(tmp_path: Path, request: pytest.FixtureRequest) -> Backend:
    ns = tmp_path / "ns"
    return {}, f"local://{ns}", lambda address: (ns / address).exists()


def _postgres_s3(tmp_path: Path, request: pytest.FixtureRequest) -> Backend:
    db: PgDatabase = request.getfixturevalue("pg_database")
    moto: Callable[[str], MotoServer] = request.getfixturevalue("moto")
    server = moto("us-east-1")
    s3 = boto3.client("s3", **server.client_kwargs())
    request.addfinalizer(s3.close)
    s3.create_bucket(Bucket="purge-bucket")
    config = tmp_path / "lakefs-core.yaml"
    config.write_text(
        "s3:\n"
        "  region: us-east-1\n"
        f"  endpoint_url: {server.endpoint}\n"
        f"  access_key_id: {ACCESS_KEY}\n"
        f"  secret_access_key: {SECRET_KEY}\n"
    )
    settings = {"LAKEFS_CORE_CONFIG": str(config), "LAKEFS_CORE__KV_URL": db.url}
    prefix = f"ns-{uuid.uuid4().hex[:8]}"

    def exists(address: str) -> bool:
        listed = s3.list_objects_v2(Bucket="purge-bucket", Prefix=f"{prefix}/{address}")
        return any(o["Key"] == f"{prefix}/{address}" for o in listed.get("Contents", []))

    return settings, f"s3://purge-bucket/{prefix}", exists


BACKENDS = {"sqlite-local": _sqlite_local, "postgres-s3": _postgres_s3}


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_a_purge_killed_mid_way_is_purged_and_completed_by_a_rerun(
    backend: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings, namespace, exists = BACKENDS[backend](tmp_path, request)
    # its lakefs-core commands fork from the zygote; the lakefs-gc runs (cli.gc) stay processes
    zygote: Zygote = request.getfixturevalue("core_zygote")
    cli = GcCli(user_env(tmp_path / "home", **settings), cwd=tmp_path, zygote=zygote)
    set_user_env(monkeypatch, tmp_path / "home", **settings)  # the in-process set-up: the same user
    monkeypatch.chdir(tmp_path)
    setup = InProcess(capsys)
    repo = f"rp{uuid.uuid4().hex[:8]}"  # the PostgreSQL database is the session's
    setup("repo", "create", f"lakefs://{repo}", namespace).ok()
    for version in (1, 2, 3):
        (tmp_path / "s.csv").write_text(f"ssn,version {version}\n")
        setup("fs", "upload", f"lakefs://{repo}/main/s.csv", "--source", str(tmp_path / "s.csv")).ok()
        setup("commit", f"lakefs://{repo}/main", "-m", f"version {version}").ok()
    target = f"lakefs://{repo}/main/s.csv"
    refs = ("main", "main~1", "main~2")
    addresses = [setup.json("fs", "stat", f"lakefs://{repo}/{ref}/s.csv")["physical_address"] for ref in refs]

    killed = cli.gc(
        "purge", target, "--all-history", "--reason", "r", "--yes", LAKEFS_CORE_FAULT="purge:delete:2:kill"
    )
    assert killed.returncode == KILLED, killed.err
    assert sum(exists(a) for a in addresses) == 2  # one object deleted, two still in the store
    # every targeted version is purged BEFORE any re-run, its bytes in the store or not
    lines = [cli("fs", "cat", f"lakefs://{repo}/{ref}/s.csv").failed(17, "purged") for ref in refs]
    named = {m.group(1) for m in (re.search(r"audit record ([\w-]+)", line) for line in lines) if m}
    assert len(named) == 1, lines
    audit = named.pop()
    for ref in refs:  # shown with the (unfinished) purge record, not refused
        assert cli.json("fs", "stat", f"lakefs://{repo}/{ref}/s.csv")["purge"]["state"] == "deleting"
    cli("fs", "download", f"lakefs://{repo}/main~1/s.csv", str(tmp_path / "out.csv")).failed(17, audit)
    assert not (tmp_path / "out.csv").exists()
    [rec] = json.loads(cli.gc("purges", f"lakefs://{repo}").raw)["results"]
    assert (rec["audit_id"], rec["state"], rec["deleted"], rec["objects"]) == (audit, "deleting", 0, 3)

    rerun = json.loads(cli.gc("purge", target, "--all-history", "--reason", "r", "--yes").raw)
    assert (rerun["audit_id"], rerun["completed"], rerun["deleted"]) == (audit, [audit], 3)
    assert rerun["already_purged"] == dict.fromkeys(sorted(addresses), audit)
    [record] = json.loads(cli.gc("purges", f"lakefs://{repo}").raw)["results"]
    assert (record["audit_id"], record["state"], record["deleted"]) == (audit, "done", 3)
    assert not any(exists(a) for a in addresses)
    cli("fs", "cat", f"lakefs://{repo}/main~2/s.csv").failed(17, "purged", audit)
    again = json.loads(cli.gc("purge", target, "--all-history", "--reason", "r", "--yes").raw)
    assert again["audit_id"] is None and again["deleted"] == 0  # nothing left: no second record
    assert json.loads(cli.gc("purges", f"lakefs://{repo}").raw)["count"] == 1
