"""lakeFS's esti API scenarios, ported to pytest against lakefs-server (one process, SQLite + local):
sanity, commits with tombstones, delete staged and committed, merge and list, repository basics,
read-only repositories, reset (all, path, object), revert and import. A local namespace cannot
presign: its scenario checks that the clients are told and that presigning is refused (the
presigned flows run on S3 in the contract suite). Last, lakeFS's wire
rules under hostile input, over raw HTTP."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import urllib3

from lakefs_core.auth.crypt import SecretStore
from lakefs_core.auth.store import AuthStore
from lakefs_core.repos.import_status import ImportStatuses
from lakefs_core.settings import CoreSettings
from lakefs_core.wiring import open_core
from lakefs_server.rest import routes
from tests.server.harness import ENCRYPT_SECRET
from tests.server.rest_harness import ACCESS_KEY, SECRET_KEY, RestServer, rest_server
from tests.support.lazy import lazy_module

lakefs_sdk = lazy_module("lakefs_sdk")  # pydantic models of the whole API: imported where a test uses them

MAIN = "main"
AUTH = "Basic " + base64.b64encode(f"{ACCESS_KEY}:{SECRET_KEY}".encode()).decode()
SIZE = 16


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestServer]:
    with rest_server(tmp_path_factory.mktemp("esti")) as s:
        yield s


@pytest.fixture(scope="module")
def client(server: RestServer) -> lakefs_sdk.ApiClient:
    return lakefs_sdk.ApiClient(
        lakefs_sdk.Configuration(host=server.api, username=ACCESS_KEY, password=SECRET_KEY)
    )


@pytest.fixture
def repo(server: RestServer, client: lakefs_sdk.ApiClient) -> Iterator[str]:
    name = f"esti-{uuid.uuid4().hex[:10]}"
    lakefs_sdk.RepositoriesApi(client).create_repository(
        lakefs_sdk.RepositoryCreation(name=name, storage_namespace=server.namespace(name))
    )
    yield name
    lakefs_sdk.RepositoriesApi(client).delete_repository(name, force=True)


class Api:
    def __init__(self, client: lakefs_sdk.ApiClient, tmp: Path) -> None:
        self.objects = lakefs_sdk.ObjectsApi(client)
        self.commits = lakefs_sdk.CommitsApi(client)
        self.branches = lakefs_sdk.BranchesApi(client)
        self.refs = lakefs_sdk.RefsApi(client)
        self.repos = lakefs_sdk.RepositoriesApi(client)
        self.tmp = tmp

    def upload_random(self, repo: str, branch: str, path: str, **kw: object) -> tuple[str, bytes]:
        data = os.urandom(SIZE // 2).hex().encode()
        f = self.tmp / uuid.uuid4().hex
        f.write_bytes(data)
        stat = self.objects.upload_object(repo, branch, path, content=str(f), **kw)
        return stat.checksum, data

    def paths(self, repo: str, ref: str) -> list[str]:
        return [o.path for o in self.objects.list_objects(repo, ref, amount=1000).results]

    def commit(self, repo: str, branch: str, message: str) -> lakefs_sdk.Commit:
        return self.commits.commit(repo, branch, lakefs_sdk.CommitCreation(message=message))


@pytest.fixture
def api(client: lakefs_sdk.ApiClient, tmp_path: Path) -> Api:
    return Api(client, tmp_path)


def status_of(call: object) -> int:
    try:
        call()  # type: ignore[operator]
    except lakefs_sdk.ApiException as e:
        return int(e.status)
    return 200


def test_sanity(api: Api, repo: str) -> None:
    assert api.paths(repo, MAIN) == []
    paths = [f"file{i}" for i in range(5)]
    contents = {p: api.upload_random(repo, MAIN, p)[1] for p in paths}
    for p in paths:
        assert api.objects.get_object(repo, MAIN, p) == contents[p]
    assert api.paths(repo, MAIN) == paths
    api.commit(repo, MAIN, "first commit")
    assert api.paths(repo, MAIN) == paths
    ref = api.branches.create_branch(repo, lakefs_sdk.BranchCreation(name="branch1", source=MAIN))
    assert ref
    listed = api.branches.list_branches(repo).results
    assert {b.id for b in listed} == {MAIN, "branch1"} and all(b.commit_id != b.id for b in listed)
    api.upload_random(repo, "branch1", "file0")
    api.objects.delete_object(repo, "branch1", "file1")
    api.upload_random(repo, "branch1", "fileX")
    assert api.paths(repo, MAIN) == paths
    assert api.paths(repo, "branch1") == ["file0", "file2", "file3", "file4", "fileX"]
    assert api.refs.diff_refs(repo, MAIN, "branch1").results == []  # nothing committed yet
    api.commit(repo, "branch1", "3 changes")
    diff = api.refs.diff_refs(repo, MAIN, "branch1", amount=-1).results
    assert sorted((d.path, d.path_type, d.type, d.size_bytes) for d in diff) == [
        ("file0", "object", "changed", SIZE), ("file1", "object", "removed", SIZE),
        ("fileX", "object", "added", SIZE)]  # fmt: skip
    assert api.refs.merge_into_branch(repo, "branch1", MAIN).reference
    assert api.refs.diff_refs(repo, MAIN, "branch1").results == []
    assert api.refs.diff_refs(repo, "branch1", MAIN).results == []


def test_commit_with_tombstone(api: Api, repo: str) -> None:
    api.upload_random(repo, MAIN, "objb.txt")
    api.upload_random(repo, MAIN, "objc.txt")
    api.commit(repo, MAIN, "First commit")
    api.upload_random(repo, MAIN, "obja.txt")
    api.upload_random(repo, MAIN, "objd.txt")
    api.objects.delete_object(repo, MAIN, "obja.txt")
    api.commit(repo, MAIN, "Commit with tombstone")
    assert api.paths(repo, MAIN) == ["objb.txt", "objc.txt", "objd.txt"]


def test_delete_staging_and_committed(api: Api, repo: str) -> None:
    api.upload_random(repo, MAIN, "staged")
    api.objects.delete_object(repo, MAIN, "staged")
    assert status_of(lambda: api.objects.stat_object(repo, MAIN, "staged")) == 404
    api.upload_random(repo, MAIN, "committed")
    api.commit(repo, MAIN, "one")
    api.objects.delete_object(repo, MAIN, "committed")
    assert status_of(lambda: api.objects.stat_object(repo, MAIN, "committed")) == 404
    api.commit(repo, MAIN, "delete committed")
    assert api.paths(repo, MAIN) == []
    assert status_of(lambda: api.objects.stat_object(repo, "main~1", "committed")) == 200


def test_commit_read_only_repository(server: RestServer, api: Api) -> None:
    name = f"esti-ro-{uuid.uuid4().hex[:8]}"
    api.repos.create_repository(
        lakefs_sdk.RepositoryCreation(name=name, storage_namespace=server.namespace(name), read_only=True)
    )
    assert api.repos.get_repository(name).read_only
    assert status_of(lambda: api.commit(name, MAIN, "singleCommit")) == 403
    assert status_of(lambda: api.upload_random(name, MAIN, "1.txt")) == 403
    api.upload_random(name, MAIN, "1.txt", force=True)
    api.commits.commit(name, MAIN, lakefs_sdk.CommitCreation(message="forced", force=True))
    assert status_of(lambda: api.repos.delete_repository(name)) == 403
    api.repos.delete_repository(name, force=True)


def test_merge_and_list(api: Api, repo: str) -> None:
    checksums = {api.upload_random(repo, MAIN, "README")[0]}
    api.commit(repo, MAIN, "Initial content")
    api.branches.create_branch(repo, lakefs_sdk.BranchCreation(name="feature-1", source=MAIN))
    for strategy in ("source-wins", "dest-wins"):
        for i in range(10):
            checksums.add(api.upload_random(repo, "feature-1", f"{i}.txt")[0])
        api.commit(repo, "feature-1", "Adding 10 files")
        merged = api.refs.merge_into_branch(
            repo, "feature-1", MAIN, merge=lakefs_sdk.Merge(strategy=strategy)
        )
        assert api.commits.get_commit(repo, merged.reference).metadata[".lakefs.merge.strategy"] == strategy
        listed = api.objects.list_objects(repo, MAIN, amount=100)
        assert not listed.pagination.has_more and len(listed.results) == 11
        assert all(o.checksum in checksums for o in listed.results)


def test_repository_basics(server: RestServer, api: Api) -> None:
    names = [f"esti-basic-{i}-{uuid.uuid4().hex[:6]}" for i in range(3)]
    for name in names:
        api.repos.create_repository(
            lakefs_sdk.RepositoryCreation(name=name, storage_namespace=server.namespace(name))
        )
    listed = {r.id for r in api.repos.list_repositories(amount=1000).results}
    assert set(names) <= listed
    for name in names:
        api.repos.delete_repository(name)
    assert not set(names) & {r.id for r in api.repos.list_repositories(amount=1000).results}
    # the name is free again (on a fresh namespace)
    api.repos.create_repository(
        lakefs_sdk.RepositoryCreation(name=names[0], storage_namespace=server.namespace(names[0] + "-again"))
    )
    api.repos.delete_repository(names[0])


def test_reset_all_path_object(api: Api, repo: str) -> None:
    for p in ("keep", "dir/a", "dir/b", "other/c"):
        api.upload_random(repo, MAIN, p)
    api.commit(repo, MAIN, "base")
    changed = {p: api.upload_random(repo, MAIN, p)[1] for p in ("dir/a", "dir/b", "other/c", "new")}
    api.branches.reset_branch(repo, MAIN, lakefs_sdk.ResetCreation(type="object", path="other/c"))
    api.branches.reset_branch(repo, MAIN, lakefs_sdk.ResetCreation(type="common_prefix", path="dir/"))
    assert [d.path for d in api.branches.diff_branch(repo, MAIN).results] == ["new"]
    assert api.objects.get_object(repo, MAIN, "dir/a") != changed["dir/a"]
    api.branches.reset_branch(repo, MAIN, lakefs_sdk.ResetCreation(type="reset"))
    assert api.branches.diff_branch(repo, MAIN).results == []


def test_revert(api: Api, repo: str) -> None:
    _, first = api.upload_random(repo, MAIN, "f")
    api.commit(repo, MAIN, "one")
    api.upload_random(repo, MAIN, "f")
    api.upload_random(repo, MAIN, "g")
    two = api.commit(repo, MAIN, "two")
    api.branches.revert_branch(repo, MAIN, lakefs_sdk.RevertCreation(ref=two.id, parent_number=0))
    assert api.objects.get_object(repo, MAIN, "f") == first
    assert api.paths(repo, MAIN) == ["f"]
    api.upload_random(repo, MAIN, "dirty")
    assert status_of(lambda: api.branches.revert_branch(
        repo, MAIN, lakefs_sdk.RevertCreation(ref=two.id, parent_number=0))) == 400  # dirty  # fmt: skip


def start_import(imports: lakefs_sdk.ImportApi, repo: str, source: str, destination: str) -> str:
    location = lakefs_sdk.ImportLocation(type="common_prefix", path=source, destination=destination)
    creation = lakefs_sdk.ImportCreation(paths=[location], commit=lakefs_sdk.CommitCreation(message="import"))
    return str(imports.import_start(repo, MAIN, creation).id)


def wait_import(imports: lakefs_sdk.ImportApi, repo: str, import_id: str) -> lakefs_sdk.ImportStatus:
    for _ in range(400):
        status = imports.import_status(repo, MAIN, import_id)
        if status.completed or status.error is not None:  # a failed import is not completed (lakeFS)
            return status
        time.sleep(0.05)
    raise AssertionError("import did not complete")


def test_import(api: Api, repo: str, client: lakefs_sdk.ApiClient, tmp_path: Path) -> None:
    source = tmp_path / "import-source"
    (source / "sub").mkdir(parents=True)
    for i in range(3):
        (source / "sub" / f"{i}.csv").write_bytes(b"a,b\n")
    imports = lakefs_sdk.ImportApi(client)
    started = start_import(imports, repo, f"local://{source}/", "imported/")
    status = wait_import(imports, repo, started)
    assert status.completed and status.error is None and status.ingested_objects == 3
    assert status.commit is not None and status.commit.message == "import"
    assert api.paths(repo, MAIN) == ["imported/sub/0.csv", "imported/sub/1.csv", "imported/sub/2.csv"]
    assert status_of(lambda: imports.import_status(repo, MAIN, "nope")) == 404
    assert status_of(lambda: imports.import_cancel(repo, MAIN, started)) == 409  # already done, as lakeFS
    status = wait_import(imports, repo, start_import(imports, repo, f"local://{tmp_path}/missing/", "x/"))
    assert status.error is not None


def test_import_status_from_every_worker(tmp_path: Path) -> None:
    """The status lives in the KV: with ``--workers 2`` sharing the port, every new connection
    (either process) reports the import and cancels it; a running import whose process is elsewhere
    (a status record only, as another instance would leave it) is cancelled from here."""
    with rest_server(tmp_path / "server", workers=2) as two:
        source = tmp_path / "source"
        source.mkdir()
        (source / "f.csv").write_bytes(b"a\n")

        def fresh() -> lakefs_sdk.ImportApi:  # a new connection: either worker may take it
            cfg = lakefs_sdk.Configuration(host=two.api, username=ACCESS_KEY, password=SECRET_KEY)
            return lakefs_sdk.ImportApi(lakefs_sdk.ApiClient(cfg))

        repo = f"workers-{uuid.uuid4().hex[:8]}"
        creation = lakefs_sdk.RepositoryCreation(name=repo, storage_namespace=two.namespace(repo))
        lakefs_sdk.RepositoriesApi(fresh().api_client).create_repository(creation)
        started = start_import(fresh(), repo, f"local://{source}/", "in/")
        done = wait_import(fresh(), repo, started)
        assert done.error is None and done.ingested_objects == 1
        for _ in range(12):
            assert fresh().import_status(repo, MAIN, started).commit == done.commit
            assert status_of(lambda: fresh().import_cancel(repo, MAIN, started)) == 409

        async def elsewhere() -> str:
            core = await open_core(CoreSettings.model_validate(two.process.core))
            try:
                return (await ImportStatuses(core.graveler).create(repo)).id
            finally:
                await core.aclose()

        running = asyncio.run(elsewhere())
        assert fresh().import_status(repo, MAIN, running).completed is False
        fresh().import_cancel(repo, MAIN, running)
        for _ in range(4):
            status = fresh().import_status(repo, MAIN, running)
            assert status.error is not None and status.error.message == "Canceled"


def test_presign_not_offered(server: RestServer, api: Api, repo: str, client: lakefs_sdk.ApiClient) -> None:
    assert lakefs_sdk.ConfigApi(client).get_config().storage_config.pre_sign_support is False
    api.upload_random(repo, MAIN, "p")
    assert status_of(lambda: api.objects.get_object(repo, MAIN, "p", presign=True)) == 400
    assert status_of(lambda: api.objects.stat_object(repo, MAIN, "p", presign=True)) == 400
    staging = lakefs_sdk.StagingApi(client)
    assert status_of(lambda: staging.get_physical_address(repo, MAIN, "q", presign=True)) == 400
    issued = staging.get_physical_address(repo, MAIN, "q")  # a client writing the file itself
    assert issued.physical_address.startswith(server.namespace(repo)) and issued.presigned_url is None


@pytest.mark.parametrize(
    ("method", "path", "body", "headers", "expected"),
    [
        ("POST", "/repositories", b"{not json", {}, 400),
        ("POST", "/repositories", b"[]", {}, 400),
        (
            "POST",
            "/repositories",
            json.dumps({"name": "Bad_Name", "storage_namespace": "local:///x"}).encode(),
            {},
            400,
        ),
        ("POST", "/repositories", json.dumps({"name": "ok-name", "storage_namespace": 7}).encode(), {}, 400),
        ("POST", "/repositories", b"{" + b" " * (17 << 20) + b"}", {}, 413),  # over the listener's 16 MiB
        ("GET", "/repositories/{repo}/refs/main/objects", b"", {}, 400),  # no path
        ("GET", "/repositories/{repo}/refs/main/objects?path=%2Fabs", b"", {}, 400),
        ("GET", "/repositories/{repo}/refs/main/objects/ls?amount=abc", b"", {}, 400),
        ("GET", "/repositories/{repo}/branches?show_hidden=maybe", b"", {}, 400),
        ("GET", "/repositories/{repo}/refs/main~999/objects/ls", b"", {}, 404),
        ("GET", "/repositories/{repo}/no/such/route", b"", {}, 404),
        ("GET", "/repositories/{repo}", b"", {"Authorization": "Basic !!!"}, 401),
        ("GET", "/repositories/{repo}", b"", {"Authorization": "Bearer " + "x" * 5_000}, 401),
        (
            "GET",
            "/repositories/{repo}",
            b"",
            {"Authorization": "Bearer " + "x" * 10_000},
            400,
        ),  # parser limit
        ("GET", "/repositories/{repo}/refs/main/objects/ls?amount=5000&user_metadata=TRUE", b"", {}, 200),
    ],
)
def test_wire_rules(  # noqa: PLR0917 (pytest passes the parameters positionally)
    server: RestServer, repo: str, method: str, path: str, body: bytes, headers: dict[str, str], expected: int
) -> None:
    http = urllib3.PoolManager()
    answer = http.request(
        method,
        server.api + path.format(repo=repo),
        body=body or None,
        headers={"Authorization": AUTH, "Content-Type": "application/json", **headers},
    )
    assert answer.status == expected, answer.data[:300]
    if expected != 200:
        assert set(json.loads(answer.data)) == {"message"}
    else:
        assert json.loads(answer.data)["pagination"]["max_per_page"] == 1000


BODIES: dict[str, object] = {
    "create_repository": {"name": "nobody-repo", "storage_namespace": "local:///tmp/nobody-repo"},
    "create_branch": {"name": "b2", "source": "main"},
    "create_tag": {"id": "t2", "ref": "main"},
    "commit": {"message": "m"},
    "revert_branch": {"ref": "main", "parent_number": 0},
    "cherry_pick": {"ref": "main"},
    "reset_branch": {"type": "reset"},
    "merge": {},
    "delete_objects": {"paths": ["a", "b"]},
    "copy_object": {"src_path": "p"},
    "update_user_metadata": {"set": {"a": "b"}},
    "import_start": {
        "paths": [{"type": "common_prefix", "path": "local:///tmp/x/", "destination": "x/"}],
        "commit": {"message": "m"},
    },
    "link_physical_address": {
        "staging": {"physical_address": "local:///x"},
        "checksum": "x",
        "size_bytes": 1,
    },
    "set_rules": [],
    "set_metadata": {"metadata": {"a": "b"}},
    "delete_metadata": {"keys": ["a"]},
}
OPEN = {"healthcheck": 204, "get_version": 200, "get_current_user": 200, "login": 400}


def test_every_operation_is_authorised(server: RestServer, repo: str) -> None:
    """A user without any policy is refused every operation (401, lakeFS's answer), whatever its
    input, except the few that need no permission; delete-many refuses path by path."""

    async def nobody() -> tuple[str, str]:
        core = await open_core(CoreSettings.model_validate(server.process.core))
        try:
            store = AuthStore(core.kv, SecretStore(ENCRYPT_SECRET))
            name = f"nobody{uuid.uuid4().hex[:6]}"
            await store.create_user(name)
            made = await store.create_credentials(name)
            assert made.secret_access_key is not None
            return made.access_key_id, made.secret_access_key
        finally:
            await core.aclose()

    key, secret = asyncio.run(nobody())
    auth = "Basic " + base64.b64encode(f"{key}:{secret}".encode()).decode()
    http = urllib3.PoolManager()
    params = {"repository": repo, "branch": MAIN, "ref": MAIN, "commitId": MAIN, "leftRef": MAIN,
              "rightRef": MAIN, "sourceRef": MAIN, "destinationBranch": MAIN, "tag": "t1"}  # fmt: skip
    for method, path, handler in routes.table():
        name = handler.__name__
        url = server.api + path.format(**params) + "?path=p&dest_path=q&id=x&ref=main"
        data = json.dumps(BODIES[name]).encode() if name in BODIES else b"x"
        headers = {"Authorization": auth, "Content-Type": "application/json"}
        answer = http.request(method, url, body=data if method in ("POST", "PUT") else None, headers=headers)
        if name == "delete_objects":
            assert answer.status == 200
            assert {e["status_code"] for e in json.loads(answer.data)["errors"]} == {401}
            continue
        assert answer.status == OPEN.get(name, 401), (method, path, answer.status, answer.data[:200])
