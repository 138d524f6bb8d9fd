"""What lakeFS's users run, unchanged, against lakefs-server: the high-level SDK (``lakefs``) and the
fsspec filesystem (``lakefs-spec``) configured by ``LAKECTL_*`` variables, and pandas, polars and
DuckDB reading and writing ``lakefs://`` URLs. One server process (SQLite + local) for the module."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from tests.server.rest_harness import ACCESS_KEY, SECRET_KEY, RestServer, rest_server
from tests.support.lazy import lazy_module

# lakeFS's SDKs (the pydantic models of its whole API): imported where a test uses them
lakefs = lazy_module("lakefs")
lakefs_spec = lazy_module("lakefs_spec")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestServer]:
    with rest_server(tmp_path_factory.mktemp("users")) as s:
        saved = {k: os.environ.get(k) for k in _ENV}
        os.environ.update(
            {
                "LAKECTL_SERVER_ENDPOINT_URL": s.endpoint,
                "LAKECTL_CREDENTIALS_ACCESS_KEY_ID": ACCESS_KEY,
                "LAKECTL_CREDENTIALS_SECRET_ACCESS_KEY": SECRET_KEY,
                "LAKECTL_CONFIG_FILE": str(tmp_path_factory.mktemp("home") / "none.yaml"),
            }
        )
        try:
            yield s
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


_ENV = (
    "LAKECTL_SERVER_ENDPOINT_URL",
    "LAKECTL_CREDENTIALS_ACCESS_KEY_ID",
    "LAKECTL_CREDENTIALS_SECRET_ACCESS_KEY",
    "LAKECTL_CONFIG_FILE",
)


def new_repo(server: RestServer) -> lakefs.Repository:
    name = f"user-{uuid.uuid4().hex[:10]}"
    return lakefs.Repository(name, client=lakefs.Client()).create(storage_namespace=server.namespace(name))


@pytest.fixture
def fs(server: RestServer) -> lakefs_spec.LakeFSFileSystem:
    return lakefs_spec.LakeFSFileSystem(skip_instance_cache=True)


def test_objects_commits_and_history(server: RestServer) -> None:
    repo = new_repo(server)
    main = repo.branch("main")
    obj = main.object("data/hello.txt").upload(b"hello world", metadata={"owner": "alice"})
    stat = obj.stat()
    assert stat.metadata == {"owner": "alice"} and stat.size_bytes == 11
    with main.object("data/hello.txt").reader(mode="rb") as f:
        f.seek(6)
        assert f.read(100) == b"world"  # a read past the end stops at the end
        assert f.read(10) == b""
    assert [c.type for c in main.uncommitted()] == ["added"]
    first = main.commit(message="first", metadata={"k": "v"})
    assert first.get_commit().message == "first" and list(main.uncommitted()) == []
    repo.tag("v1").create(main)
    dev = repo.branch("dev").create(source_reference="main")
    dev.object("data/new.txt").upload(b"new")
    dev.commit(message="dev work")
    assert [d.path for d in main.diff(dev)] == ["data/new.txt"]
    dev.merge_into(main)
    assert main.object("data/new.txt").reader().read() == b"new"
    assert [c.message for c in main.log(max_amount=3)] == [
        "Merge 'dev' into 'main'", "dev work", "first"]  # fmt: skip
    main.revert(main.get_commit().id, parent_number=1)
    assert not main.object("data/new.txt").exists()
    main.object("scratch").upload(b"x")
    main.reset_changes()
    assert not main.object("scratch").exists()
    assert repo.tag("v1").get_commit().id == first.get_commit().id


def test_listing_pages_and_bulk_delete(
    server: RestServer, fs: lakefs_spec.LakeFSFileSystem, tmp_path: Path
) -> None:
    repo = new_repo(server)
    main = repo.branch("main")
    source = tmp_path / "source"
    source.mkdir()
    paths = [f"many/{i:04d}" for i in range(1001)]
    for i in range(1001):
        (source / f"{i:04d}").write_bytes(b"x")
    status = (
        main.import_data(commit_message="import")
        .prefix(f"local://{source}/", "many/")
        .run(poll_interval=timedelta(seconds=0.05))
    )
    assert status.completed and status.ingested_objects == 1001 and status.error is None
    listed = [o.path for o in main.objects(prefix="many/", max_amount=None)]
    assert listed == paths  # more than one page of 1,000
    with pytest.raises(lakefs.exceptions.BadRequestException):
        main.delete_objects(paths)  # lakeFS's limit: 1,000 paths a request
    fs.rm(f"lakefs://{repo.id}/main/many/", recursive=True)  # lakefs-spec deletes in batches
    assert list(main.objects(prefix="many/")) == []
    main.commit(message="delete 1,001 objects")
    with main.transact(commit_message="in a transaction") as tx:
        tx.object("tx/one").upload(b"1")
    assert main.get_commit().message.startswith("Merge")
    assert main.object("tx/one").exists()
    assert [b.id for b in repo.branches()] == ["main"]  # the ephemeral branch is gone


def test_errors_as_clients_expect(server: RestServer, fs: lakefs_spec.LakeFSFileSystem) -> None:
    repo = new_repo(server)
    main = repo.branch("main")
    main.object("exists").upload(b"e")
    with pytest.raises(lakefs.exceptions.ObjectExistsException):
        main.object("exists").upload(b"again", mode="x")
    with pytest.raises(FileNotFoundError):
        fs.open(f"lakefs://{repo.id}/main/missing", "rb").read()
    with pytest.raises(FileExistsError), fs.open(f"lakefs://{repo.id}/main/exists", "xb") as f:
        f.write(b"no")
    lakefs.Repository(repo.id).branch("main")  # resolvable
    import lakefs_sdk

    api = lakefs.Client().sdk_client.repositories_api
    api.set_branch_protection_rules(repo.id, [lakefs_sdk.BranchProtectionRule(pattern="main")])
    with pytest.raises(PermissionError, match="protected branch"):
        fs.pipe(f"lakefs://{repo.id}/main/blocked", b"x")


def test_lakefs_spec_files_and_transaction(
    server: RestServer, fs: lakefs_spec.LakeFSFileSystem, tmp_path: Path
) -> None:
    repo = new_repo(server)
    local = tmp_path / "up.bin"
    local.write_bytes(os.urandom(70_000))
    fs.put_file(str(local), f"lakefs://{repo.id}/main/up.bin")
    fs.get_file(f"lakefs://{repo.id}/main/up.bin", str(tmp_path / "down.bin"))
    assert (tmp_path / "down.bin").read_bytes() == local.read_bytes()
    assert fs.info(f"lakefs://{repo.id}/main/up.bin")["size"] == 70_000
    assert (
        fs.cat_file(f"lakefs://{repo.id}/main/up.bin", start=69_990, end=80_000)
        == local.read_bytes()[69_990:]
    )
    repo.branch("main").commit(message="upload")
    with fs.transaction(repo.id, "main") as tx:
        fs.pipe(f"lakefs://{repo.id}/{tx.branch.id}/tx.txt", b"in a transaction")
        tx.commit(message="from a transaction")
    assert fs.cat(f"lakefs://{repo.id}/main/tx.txt") == b"in a transaction"
    assert [b.id for b in repo.branches()] == ["main"]
    assert fs.ls(f"lakefs://{repo.id}/main/", detail=False) == [
        f"{repo.id}/main/tx.txt",
        f"{repo.id}/main/up.bin",
    ]
    fs.rm(f"lakefs://{repo.id}/main/up.bin")
    assert not fs.exists(f"lakefs://{repo.id}/main/up.bin")


def test_dataframes_through_lakefs_urls(server: RestServer, fs: lakefs_spec.LakeFSFileSystem) -> None:
    pd = pytest.importorskip("pandas")
    pl = pytest.importorskip("polars")
    duckdb = pytest.importorskip("duckdb")
    repo = new_repo(server)
    frame = pd.DataFrame({"lake": ["Superior", "Baikal", "Tanganyika"], "depth": [406, 1642, 1470]})
    frame.to_parquet(f"lakefs://{repo.id}/main/lakes.parquet", index=False)
    assert pd.read_parquet(f"lakefs://{repo.id}/main/lakes.parquet").equals(frame)
    with fs.open(f"lakefs://{repo.id}/main/lakes.parquet", "rb") as f:
        assert pl.read_parquet(f)["depth"].to_list() == [406, 1642, 1470]
    with fs.open(f"lakefs://{repo.id}/main/x.csv", "wb") as f:
        pl.DataFrame({"x": [1, 2]}).write_csv(f)
    con = duckdb.connect()
    con.register_filesystem(fs)
    deepest = con.sql(
        f"SELECT lake FROM read_parquet('lakefs://{repo.id}/main/lakes.parquet') ORDER BY depth DESC LIMIT 1"
    )
    assert deepest.fetchall() == [("Baikal",)]
    assert con.sql(f"SELECT sum(x) FROM read_csv('lakefs://{repo.id}/main/x.csv')").fetchall() == [(3,)]
