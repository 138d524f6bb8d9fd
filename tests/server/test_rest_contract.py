"""lakeFS's REST API through lakeFS's own generated client (lakefs-sdk, strict models): every served
operation and lakeFS's status codes, on SQLite + local namespaces and PostgreSQL + S3 (moto)."""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jwt
import pytest
import urllib3

from tests.server.harness import DEVELOPER, ENCRYPT_SECRET, VIEWER, Keys
from tests.server.rest_harness import ACCESS_KEY, SECRET_KEY, RestServer, pg_s3_core, rest_server
from tests.support.lazy import lazy_module

lakefs_sdk = lazy_module("lakefs_sdk")  # pydantic models of the whole API: imported where a test uses them

_names = itertools.count()


@pytest.fixture(scope="module", params=["sqlite-local", "pg-s3"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestServer]:
    tmp = tmp_path_factory.mktemp("rest")
    if request.param == "sqlite-local":
        with rest_server(tmp) as s:
            yield s
        return
    core, root = pg_s3_core(request, "rest")
    with rest_server(tmp, core, root) as s:
        yield s


@pytest.fixture(scope="module")
def client(server: RestServer) -> lakefs_sdk.ApiClient:
    cfg = lakefs_sdk.Configuration(host=server.endpoint + "/api/v1", username=ACCESS_KEY, password=SECRET_KEY)
    return lakefs_sdk.ApiClient(cfg)


def new_repo(server: RestServer, client: lakefs_sdk.ApiClient, **kwargs: object) -> str:
    name = f"repo-{next(_names)}-{uuid.uuid4().hex[:6]}"
    lakefs_sdk.RepositoriesApi(client).create_repository(
        lakefs_sdk.RepositoryCreation(name=name, storage_namespace=server.namespace(name), **kwargs)
    )
    return name


def status(call: object) -> int:
    try:
        call()  # type: ignore[operator]
    except lakefs_sdk.ApiException as e:
        return int(e.status)
    return 200


def upload(
    client: lakefs_sdk.ApiClient, repo: str, branch: str, path: str, data: bytes, *, tmp: Path
) -> lakefs_sdk.ObjectStats:
    f = tmp / uuid.uuid4().hex
    f.write_bytes(data)
    return lakefs_sdk.ObjectsApi(client).upload_object(repo, branch, path, content=str(f))


def test_setup_operations(server: RestServer, client: lakefs_sdk.ApiClient) -> None:
    config = lakefs_sdk.ConfigApi(client).get_config()
    assert config.version_config.version_context == "lakeFS"
    assert tuple(int(x) for x in config.version_config.version.split(".")) >= (1, 60, 0)
    assert config.storage_config_list == []
    assert config.storage_config.pre_sign_support is server.namespace_root.startswith("s3://")
    internal = lakefs_sdk.InternalApi(client)
    with pytest.warns(DeprecationWarning):
        assert internal.get_storage_config().blockstore_type in ("local", "s3")
    with pytest.warns(DeprecationWarning):
        assert internal.get_lake_fs_version().version_context == "lakeFS"
    assert lakefs_sdk.AuthApi(client).get_current_user().user.id == "admin"
    lakefs_sdk.HealthCheckApi(
        lakefs_sdk.ApiClient(lakefs_sdk.Configuration(host=server.endpoint + "/api/v1"))
    ).health_check()


def test_metrics(server: RestServer, client: lakefs_sdk.ApiClient) -> None:
    lakefs_sdk.ConfigApi(client).get_config()
    with pytest.raises(lakefs_sdk.ApiException):
        lakefs_sdk.RepositoriesApi(client).get_repository("no-such-repo")
    text = urllib3.PoolManager().request("GET", server.process.admin + "/metrics").data.decode()
    assert 'lakefs_server_rest_requests_total{operation="get_config",region="us-east-1",status="200"}' in text
    assert 'operation="get_repository",region="us-east-1",status="404"' in text
    assert "lakefs_server_rest_request_duration_seconds_bucket" in text


def test_authentication(server: RestServer) -> None:
    anon = lakefs_sdk.ApiClient(lakefs_sdk.Configuration(host=server.endpoint + "/api/v1"))
    assert status(lambda: lakefs_sdk.RepositoriesApi(anon).list_repositories()) == 401
    bad = lakefs_sdk.ApiClient(
        lakefs_sdk.Configuration(host=server.endpoint + "/api/v1", username=ACCESS_KEY, password="wrong")
    )
    assert status(lambda: lakefs_sdk.AuthApi(bad).get_current_user()) == 401
    login = lakefs_sdk.AuthApi(anon).login(
        lakefs_sdk.LoginInformation(access_key_id=ACCESS_KEY, secret_access_key=SECRET_KEY)
    )
    assert login.token and login.token_expiration
    bearer = lakefs_sdk.ApiClient(
        lakefs_sdk.Configuration(host=server.endpoint + "/api/v1", access_token=login.token)
    )
    assert lakefs_sdk.AuthApi(bearer).get_current_user().user.id == "admin"
    assert (
        status(
            lambda: lakefs_sdk.AuthApi(anon).login(
                lakefs_sdk.LoginInformation(access_key_id=ACCESS_KEY, secret_access_key="nope")
            )
        )
        == 401
    )
    # The login cookie alone authenticates too.
    http = urllib3.PoolManager()
    answer = http.request(
        "GET", server.endpoint + "/api/v1/user", headers={"Cookie": f"internal_auth_session={login.token}"}
    )
    assert answer.status == 200
    expired = jwt.encode(
        {"sub": "admin", "aud": "login", "exp": int(time.time()) - 10}, ENCRYPT_SECRET, "HS256"
    )
    other_key = jwt.encode({"sub": "admin", "aud": "login", "exp": int(time.time()) + 60}, "x" * 32, "HS256")
    for token in (expired, other_key):
        answer = urllib3.PoolManager().request(
            "GET", server.api + "/user", headers={"Authorization": f"Bearer {token}"}
        )
        assert answer.status == 401
    forged = login.token[:-4] + ("AAAA" if not login.token.endswith("AAAA") else "BBBB")
    answer = http.request(
        "GET", server.endpoint + "/api/v1/user", headers={"Authorization": f"Bearer {forged}"}
    )
    assert answer.status == 401 and b"message" in answer.data


def test_authorisation(server: RestServer, client: lakefs_sdk.ApiClient, tmp_path: Path) -> None:
    repo = new_repo(server, client)
    upload(client, repo, "main", "seen", b"s", tmp=tmp_path)

    def as_user(keys: Keys) -> lakefs_sdk.ApiClient:
        cfg = lakefs_sdk.Configuration(
            host=server.api, username=keys.access_key_id, password=keys.secret_access_key
        )
        return lakefs_sdk.ApiClient(cfg)

    viewer, developer = as_user(VIEWER), as_user(DEVELOPER)
    assert lakefs_sdk.ObjectsApi(viewer).get_object(repo, "main", "seen") == b"s"
    assert repo in {r.id for r in lakefs_sdk.RepositoriesApi(viewer).list_repositories(amount=1000).results}
    with pytest.raises(lakefs_sdk.ApiException) as refused:
        upload(viewer, repo, "main", "nope", b"n", tmp=tmp_path)
    assert refused.value.status == 401 and "fs:WriteObject" in (refused.value.body or "")
    assert (
        status(
            lambda: lakefs_sdk.CommitsApi(viewer).commit(repo, "main", lakefs_sdk.CommitCreation(message="m"))
        )
        == 401
    )
    upload(developer, repo, "main", "dev", b"d", tmp=tmp_path)
    creation = lakefs_sdk.RepositoryCreation(name="dev-made", storage_namespace=server.namespace("dev-made"))
    assert status(lambda: lakefs_sdk.RepositoriesApi(developer).create_repository(creation)) == 401
    assert status(lambda: lakefs_sdk.RepositoriesApi(developer).delete_repository(repo)) == 401


def test_repositories(server: RestServer, client: lakefs_sdk.ApiClient) -> None:
    repos = lakefs_sdk.RepositoriesApi(client)
    name = new_repo(server, client)
    got = repos.get_repository(name)
    assert got.default_branch == "main" and got.storage_namespace.endswith(name)
    assert (
        status(
            lambda: (
                new_repo.__wrapped__
                if False
                else repos.create_repository(
                    lakefs_sdk.RepositoryCreation(name=name, storage_namespace=server.namespace(name + "-x"))
                )
            )
        )
        == 409
    )
    listed = repos.list_repositories(prefix=name)
    assert [r.id for r in listed.results] == [name]
    assert listed.pagination.max_per_page == 1000
    repos.set_branch_protection_rules(name, [lakefs_sdk.BranchProtectionRule(pattern="main")])
    assert [r.pattern for r in repos.get_branch_protection_rules(name)] == ["main"]
    assert repos.get_repository_metadata(name) == {}
    repos.delete_repository(name)
    assert status(lambda: repos.get_repository(name)) == 404
    assert status(lambda: repos.get_repository("no-such-repo")) == 404


def test_branches(server: RestServer, client: lakefs_sdk.ApiClient, tmp_path: Path) -> None:
    repo = new_repo(server, client)
    branches = lakefs_sdk.BranchesApi(client)
    upload(client, repo, "main", "a.txt", b"a", tmp=tmp_path)
    head = lakefs_sdk.CommitsApi(client).commit(repo, "main", lakefs_sdk.CommitCreation(message="one"))
    made = branches.create_branch(repo, lakefs_sdk.BranchCreation(name="dev", source="main"))
    assert made == head.id
    assert (
        status(lambda: branches.create_branch(repo, lakefs_sdk.BranchCreation(name="dev", source="main")))
        == 409
    )
    assert branches.get_branch(repo, "dev").commit_id == head.id
    listed = branches.list_branches(repo, amount=1)
    assert [b.id for b in listed.results] == ["dev"] and listed.pagination.has_more
    assert [b.id for b in branches.list_branches(repo, after="dev").results] == ["main"]
    assert status(lambda: branches.delete_branch(repo, "main")) == 403
    upload(client, repo, "dev", "b.txt", b"b", tmp=tmp_path)
    diff = branches.diff_branch(repo, "dev")
    assert [(d.type, d.path) for d in diff.results] == [("added", "b.txt")]
    branches.reset_branch(repo, "dev", lakefs_sdk.ResetCreation(type="object", path="b.txt"))
    assert branches.diff_branch(repo, "dev").results == []
    branches.delete_branch(repo, "dev")
    assert status(lambda: branches.get_branch(repo, "dev")) == 404


def test_commits_log_diff_merge(server: RestServer, client: lakefs_sdk.ApiClient, tmp_path: Path) -> None:
    repo = new_repo(server, client)
    commits, refs, branches = (
        lakefs_sdk.CommitsApi(client),
        lakefs_sdk.RefsApi(client),
        lakefs_sdk.BranchesApi(client),
    )
    assert status(lambda: commits.commit(repo, "main", lakefs_sdk.CommitCreation(message="empty"))) == 400
    empty = commits.commit(repo, "main", lakefs_sdk.CommitCreation(message="empty", allow_empty=True))
    upload(client, repo, "main", "x/1", b"1", tmp=tmp_path)
    first = commits.commit(repo, "main", lakefs_sdk.CommitCreation(message="first", metadata={"k": "v"}))
    assert first.metadata == {"k": "v"} and first.parents == [empty.id]
    assert commits.get_commit(repo, "main~1").id == empty.id
    log = refs.log_commits(repo, "main", amount=2)
    assert [c.id for c in log.results] == [first.id, empty.id] and log.pagination.has_more
    assert [c.message for c in refs.log_commits(repo, "main", after=empty.id).results] == [
        "Repository created"
    ]
    assert [c.id for c in refs.log_commits(repo, "main", objects=["x/1"]).results] == [first.id]
    branches.create_branch(repo, lakefs_sdk.BranchCreation(name="feature", source="main"))
    upload(client, repo, "feature", "x/2", b"2", tmp=tmp_path)
    upload(client, repo, "feature", "y/3", b"3", tmp=tmp_path)
    commits.commit(repo, "feature", lakefs_sdk.CommitCreation(message="feature"))
    diff = refs.diff_refs(repo, "main", "feature")
    assert [(d.type, d.path) for d in diff.results] == [("added", "x/2"), ("added", "y/3")]
    by_dir = refs.diff_refs(repo, "main", "feature", delimiter="/")
    assert [(d.type, d.path, d.path_type) for d in by_dir.results] == [
        ("prefix_changed", "x/", "common_prefix"),
        ("prefix_changed", "y/", "common_prefix"),
    ]
    merged = refs.merge_into_branch(repo, "feature", "main")
    head = commits.get_commit(repo, "main")
    assert head.id == merged.reference and head.message == "Merge 'feature' into 'main'"
    assert status(lambda: refs.merge_into_branch(repo, "feature", "main")) == 400
    # conflicts: 409
    upload(client, repo, "feature", "x/1", b"f", tmp=tmp_path)
    commits.commit(repo, "feature", lakefs_sdk.CommitCreation(message="f"))
    upload(client, repo, "main", "x/1", b"m", tmp=tmp_path)
    commits.commit(repo, "main", lakefs_sdk.CommitCreation(message="m"))
    assert status(lambda: refs.merge_into_branch(repo, "feature", "main")) == 409
    wins = lakefs_sdk.Merge(strategy="source-wins", message="theirs", metadata={"why": "conflict"})
    refs.merge_into_branch(repo, "feature", "main", merge=wins)
    assert lakefs_sdk.ObjectsApi(client).get_object(repo, "main", "x/1") == b"f"
    merge_commit = commits.get_commit(repo, "main")  # the merge commit's message and metadata, as lakeFS
    assert merge_commit.message == "theirs" and merge_commit.metadata["why"] == "conflict"


def test_tags_revert_cherry_pick_reset(
    server: RestServer, client: lakefs_sdk.ApiClient, tmp_path: Path
) -> None:
    repo = new_repo(server, client)
    commits, tags, branches = (
        lakefs_sdk.CommitsApi(client),
        lakefs_sdk.TagsApi(client),
        lakefs_sdk.BranchesApi(client),
    )
    objects = lakefs_sdk.ObjectsApi(client)
    upload(client, repo, "main", "f", b"1", tmp=tmp_path)
    one = commits.commit(repo, "main", lakefs_sdk.CommitCreation(message="one"))
    tag = tags.create_tag(repo, lakefs_sdk.TagCreation(id="v1", ref="main"))
    assert tag.commit_id == one.id
    assert status(lambda: tags.create_tag(repo, lakefs_sdk.TagCreation(id="v1", ref="main"))) == 409
    assert [t.id for t in tags.list_tags(repo).results] == ["v1"]
    assert tags.get_tag(repo, "v1").commit_id == one.id
    upload(client, repo, "main", "f", b"2", tmp=tmp_path)
    two = commits.commit(repo, "main", lakefs_sdk.CommitCreation(message="two"))
    branches.revert_branch(repo, "main", lakefs_sdk.RevertCreation(ref=two.id, parent_number=0))
    assert objects.get_object(repo, "main", "f") == b"1"
    branches.create_branch(repo, lakefs_sdk.BranchCreation(name="pick", source="v1"))
    picked = branches.cherry_pick(repo, "pick", lakefs_sdk.CherryPickCreation(ref=two.id))
    assert picked.message == "two" and objects.get_object(repo, "pick", "f") == b"2"
    upload(client, repo, "main", "g", b"g", tmp=tmp_path)
    branches.reset_branch(repo, "main", lakefs_sdk.ResetCreation(type="reset"))
    assert status(lambda: objects.stat_object(repo, "main", "g")) == 404
    tags.delete_tag(repo, "v1")
    assert status(lambda: tags.get_tag(repo, "v1")) == 404


def test_objects(server: RestServer, client: lakefs_sdk.ApiClient, tmp_path: Path) -> None:
    repo = new_repo(server, client)
    objects = lakefs_sdk.ObjectsApi(client)
    stat = upload(client, repo, "main", "dir/a.bin", b"0123456789", tmp=tmp_path)
    assert stat.checksum == "781e5e245d69b566979b86e28d23f2c7" and stat.size_bytes == 10
    assert objects.get_object(repo, "main", "dir/a.bin", range="bytes=2-4") == b"234"
    assert status(lambda: objects.get_object(repo, "main", "dir/a.bin", range="bytes=20-")) == 416
    objects.head_object(repo, "main", "dir/a.bin")
    assert status(lambda: objects.head_object(repo, "main", "nope")) == 404
    assert objects.stat_object(repo, "main", "dir/a.bin").checksum == stat.checksum
    f = tmp_path / "again"
    f.write_bytes(b"x")
    assert (
        status(lambda: objects.upload_object(repo, "main", "dir/a.bin", if_none_match="*", content=str(f)))
        == 412
    )
    copied = objects.copy_object(
        repo, "main", "dir/b.bin", lakefs_sdk.ObjectCopyCreation(src_path="dir/a.bin")
    )
    assert copied.checksum == stat.checksum
    for i in range(5):
        upload(client, repo, "main", f"many/{i}", b"m", tmp=tmp_path)
    page1 = objects.list_objects(repo, "main", prefix="many/", amount=3)
    assert [o.path for o in page1.results] == ["many/0", "many/1", "many/2"] and page1.pagination.has_more
    page2 = objects.list_objects(repo, "main", prefix="many/", after=page1.pagination.next_offset)
    assert [o.path for o in page2.results] == ["many/3", "many/4"]
    top = objects.list_objects(repo, "main", delimiter="/")
    assert [(o.path, o.path_type) for o in top.results] == [
        ("dir/", "common_prefix"),
        ("many/", "common_prefix"),
    ]
    result = objects.delete_objects(repo, "main", lakefs_sdk.PathList(paths=["many/0", "many/1", "missing"]))
    assert result.errors == []
    assert [o.path for o in objects.list_objects(repo, "main", prefix="many/").results] == [
        "many/2",
        "many/3",
        "many/4",
    ]
    objects.delete_object(repo, "main", "dir/b.bin")
    assert status(lambda: objects.delete_object(repo, "main", "dir/b.bin")) == 404
    assert status(lambda: objects.get_object(repo, "main", "nope")) == 404
    assert status(lambda: objects.get_object(repo, "no-such-branch", "dir/a.bin")) == 404
    too_many = lakefs_sdk.PathList.construct(paths=[f"p{i}" for i in range(1001)])
    assert status(lambda: objects.delete_objects(repo, "main", too_many)) == 400


def test_racing_conditional_uploads_exactly_one_wins(
    server: RestServer, client: lakefs_sdk.ApiClient, tmp_path: Path
) -> None:
    """Uploads with ``If-None-Match: *`` (then ``If-Match`` on the winner's ETag) of one path at once,
    each on its own connection: the condition holds atomically with the staging, so exactly one
    wins and the others answer 412 with nothing staged."""
    repo = new_repo(server, client)
    cfg = client.configuration

    def race(tag: str, **condition: str) -> list[int]:
        def one(i: int) -> int | None:
            f = tmp_path / f"{tag}-{i}"
            f.write_bytes(f"{tag}-{i}".encode())
            api = lakefs_sdk.ObjectsApi(lakefs_sdk.ApiClient(cfg))
            code = status(lambda: api.upload_object(repo, "main", "raced", content=str(f), **condition))
            assert code in (201, 200, 412), code
            return i if code != 412 else None

        with ThreadPoolExecutor(4) as pool:
            return [i for i in pool.map(one, range(4)) if i is not None]

    objects = lakefs_sdk.ObjectsApi(client)
    [first] = race("new", if_none_match="*")
    assert objects.get_object(repo, "main", "raced") == f"new-{first}".encode()
    etag = objects.stat_object(repo, "main", "raced").checksum
    [second] = race("match", if_match=etag)
    assert objects.get_object(repo, "main", "raced") == f"match-{second}".encode()
    assert [o.path for o in objects.list_objects(repo, "main").results] == ["raced"]


def test_protected_branch(server: RestServer, client: lakefs_sdk.ApiClient, tmp_path: Path) -> None:
    repo = new_repo(server, client)
    repos = lakefs_sdk.RepositoriesApi(client)
    upload(client, repo, "main", "before", b"b", tmp=tmp_path)
    lakefs_sdk.CommitsApi(client).commit(repo, "main", lakefs_sdk.CommitCreation(message="before"))
    repos.set_branch_protection_rules(repo, [lakefs_sdk.BranchProtectionRule(pattern="ma*")])
    f = tmp_path / "p"
    f.write_bytes(b"p")
    objects = lakefs_sdk.ObjectsApi(client)
    with pytest.raises(lakefs_sdk.ApiException) as e:
        objects.upload_object(repo, "main", "x", content=str(f))
    assert e.value.status == 403 and "protected branch" in (e.value.body or "")
    assert (
        status(
            lambda: lakefs_sdk.CommitsApi(client).commit(repo, "main", lakefs_sdk.CommitCreation(message="m"))
        )
        == 403
    )
    assert status(lambda: objects.delete_object(repo, "main", "before")) == 403
    # merges into a protected branch are how it changes (lakeFS's quickstart)
    lakefs_sdk.BranchesApi(client).create_branch(repo, lakefs_sdk.BranchCreation(name="work", source="main"))
    objects.upload_object(repo, "work", "after", content=str(f))
    lakefs_sdk.CommitsApi(client).commit(repo, "work", lakefs_sdk.CommitCreation(message="w"))
    lakefs_sdk.RefsApi(client).merge_into_branch(repo, "work", "main")
    assert objects.get_object(repo, "main", "after") == b"p"


def test_sample_data(server: RestServer, client: lakefs_sdk.ApiClient) -> None:
    repo = new_repo(server, client, sample_data=True)
    objects = lakefs_sdk.ObjectsApi(client)
    paths = {o.path: o.size_bytes for o in objects.list_objects(repo, "main").results}
    assert {"README.md", "lakes.parquet", "data/lakes.source.md"} <= set(paths)
    assert paths["lakes.parquet"] >= 512 * 1024
    assert any(p.startswith("images/") for p in paths)
    assert [r.pattern for r in lakefs_sdk.RepositoriesApi(client).get_branch_protection_rules(repo)] == [
        "main"
    ]


def test_presigned_staging(server: RestServer, client: lakefs_sdk.ApiClient) -> None:
    repo = new_repo(server, client)
    staging = lakefs_sdk.StagingApi(client)
    objects = lakefs_sdk.ObjectsApi(client)
    if not server.namespace_root.startswith("s3://"):
        assert status(lambda: staging.get_physical_address(repo, "main", "p", presign=True)) == 400
        return
    location = staging.get_physical_address(repo, "main", "p", presign=True)
    assert location.physical_address.startswith(server.namespace(repo)) and location.presigned_url
    http = urllib3.PoolManager()
    assert http.request("PUT", location.presigned_url, body=b"presigned bytes").status == 200
    meta = lakefs_sdk.StagingMetadata(staging=location, checksum="x", size_bytes=15, user_metadata={"a": "b"})
    linked = staging.link_physical_address(repo, "main", "p", meta)
    assert linked.size_bytes == 15 and linked.metadata == {"a": "b"}
    assert objects.get_object(repo, "main", "p") == b"presigned bytes"
    stat = objects.stat_object(repo, "main", "p", presign=True)
    assert http.request("GET", stat.physical_address).data == b"presigned bytes"
    redirect = http.request(
        "GET", f"{server.api}/repositories/{repo}/refs/main/objects?path=p&presign=true",
        headers=urllib3.make_headers(basic_auth=f"{ACCESS_KEY}:{SECRET_KEY}"), redirect=False,
    )  # fmt: skip
    assert (
        redirect.status == 302
        and http.request("GET", redirect.headers["Location"]).data == b"presigned bytes"
    )
    # linked once: the address is no longer pending; another path or a wrong size is refused
    assert status(lambda: staging.link_physical_address(repo, "main", "p", meta)) == 400
    other = staging.get_physical_address(repo, "main", "q", presign=True)
    http.request("PUT", other.presigned_url, body=b"12345")
    wrong = lakefs_sdk.StagingMetadata(staging=other, checksum="x", size_bytes=15)
    assert status(lambda: staging.link_physical_address(repo, "main", "other-path", wrong)) == 400
    assert status(lambda: staging.link_physical_address(repo, "main", "q", wrong)) == 400
    outside = lakefs_sdk.StagingMetadata(
        staging=lakefs_sdk.StagingLocation(physical_address="s3://elsewhere/x"), checksum="x", size_bytes=5
    )
    assert status(lambda: staging.link_physical_address(repo, "main", "q", outside)) == 400
    # lakeFS's high-level client uploads and reads through presigned URLs when the server offers them
    import lakefs

    high = lakefs.Client(host=server.endpoint, username=ACCESS_KEY, password=SECRET_KEY)
    obj = lakefs.Repository(repo, client=high).branch("main").object("high/level")
    obj.upload(b"through a presigned URL", pre_sign=True)
    assert obj.reader(pre_sign=True).read() == b"through a presigned URL"


def test_commit_date_and_overrides(server: RestServer, client: lakefs_sdk.ApiClient, tmp_path: Path) -> None:
    repo = new_repo(server, client)
    commits, branches = lakefs_sdk.CommitsApi(client), lakefs_sdk.BranchesApi(client)
    upload(client, repo, "main", "f", b"1", tmp=tmp_path)
    dated = commits.commit(repo, "main", lakefs_sdk.CommitCreation(message="dated", date=1_000_000_000))
    assert dated.creation_date == 1_000_000_000
    assert commits.get_commit(repo, dated.id).creation_date == 1_000_000_000
    for bad in (-(10**12), 10**13, "soon", 1.5):  # outside a protobuf Timestamp, or not unix seconds
        raw = urllib3.PoolManager().request(
            "POST", f"{server.api}/repositories/{repo}/branches/main/commits",
            body=f'{{"message": "m", "allow_empty": true, "date": {json_value(bad)}}}',
            headers={**urllib3.make_headers(basic_auth=f"{ACCESS_KEY}:{SECRET_KEY}"),
                     "Content-Type": "application/json"},
        )  # fmt: skip
        assert raw.status == 400 and "date" in raw.json()["message"], (bad, raw.data)
    upload(client, repo, "main", "f", b"2", tmp=tmp_path)
    two = commits.commit(repo, "main", lakefs_sdk.CommitCreation(message="two", metadata={"k": "v"}))
    overrides = lakefs_sdk.CommitOverrides(message="undo two", metadata={"why": "test"})
    revert = lakefs_sdk.RevertCreation(ref=two.id, parent_number=0, commit_overrides=overrides)
    branches.revert_branch(repo, "main", revert)
    reverted = commits.get_commit(repo, "main")
    assert (reverted.message, reverted.metadata) == ("undo two", {"why": "test"})
    branches.revert_branch(repo, "main", lakefs_sdk.RevertCreation(ref="main", parent_number=0))
    assert commits.get_commit(repo, "main").message == "Revert main"  # lakeFS names the ref as given
    # reverting a commit that changed nothing: 400 unless allow_empty, as lakeFS
    empty = commits.commit(repo, "main", lakefs_sdk.CommitCreation(message="empty", allow_empty=True))
    again = lakefs_sdk.RevertCreation(ref=empty.id, parent_number=0)
    assert status(lambda: branches.revert_branch(repo, "main", again)) == 400
    again.allow_empty = True
    branches.revert_branch(repo, "main", again)
    assert commits.get_commit(repo, "main").parents == [empty.id]
    branches.create_branch(repo, lakefs_sdk.BranchCreation(name="pick", source=dated.id))
    pick = lakefs_sdk.CherryPickCreation(ref=two.id, commit_overrides=lakefs_sdk.CommitOverrides(message="m"))
    picked = branches.cherry_pick(repo, "pick", pick)
    assert picked.message == "m" and picked.metadata == {
        "k": "v", "cherry-pick-origin": two.id, "cherry-pick-committer": two.committer,
    }  # fmt: skip


def json_value(value: object) -> str:
    import json

    return json.dumps(value)


def test_bare_repository(server: RestServer, client: lakefs_sdk.ApiClient) -> None:
    repos = lakefs_sdk.RepositoriesApi(client)
    name = f"bare-{uuid.uuid4().hex[:8]}"
    creation = lakefs_sdk.RepositoryCreation(
        name=name, storage_namespace=server.namespace(name), sample_data=True
    )
    made = repos.create_repository(creation, bare=True)
    assert made.id == name and made.default_branch == "main" and made.read_only is None
    branches = lakefs_sdk.BranchesApi(client)
    assert branches.list_branches(name).results == []
    assert status(lambda: branches.get_branch(name, "main")) == 404
    assert status(lambda: repos.create_repository(creation, bare=True)) == 409
    repos.delete_repository(name)


def test_copy_object_to_a_fresh_address(
    server: RestServer, client: lakefs_sdk.ApiClient, tmp_path: Path
) -> None:
    repo = new_repo(server, client)
    objects = lakefs_sdk.ObjectsApi(client)
    data = bytes(range(256)) * 4096  # 1 MiB
    f = tmp_path / "src"
    f.write_bytes(data)
    source = objects.upload_object(repo, "main", "src", content=str(f), _headers={"x-lakefs-meta-a": "b"})
    lakefs_sdk.CommitsApi(client).commit(repo, "main", lakefs_sdk.CommitCreation(message="src"))
    lakefs_sdk.BranchesApi(client).create_branch(repo, lakefs_sdk.BranchCreation(name="dev", source="main"))
    objects.delete_object(repo, "main", "src")  # the copy reads the ref's entry, not main's
    copies = [
        objects.copy_object(repo, "dev", "c1", lakefs_sdk.ObjectCopyCreation(src_path="src")),
        objects.copy_object(repo, "main", "c2", lakefs_sdk.ObjectCopyCreation(src_path="src", src_ref="dev")),
        objects.copy_object(
            repo, "main", "c3", lakefs_sdk.ObjectCopyCreation(src_path="src", src_ref="dev", shallow=True)
        ),
    ]
    addresses = {source.physical_address} | {c.physical_address for c in copies}
    assert len(addresses) == 4  # never a shared address, shallow or not (hard-delete and GC rely on it)
    for c, branch in zip(copies, ("dev", "main", "main"), strict=True):
        assert c.size_bytes == len(data) and c.metadata == {"a": "b"} and c.checksum == source.checksum
        assert objects.get_object(repo, branch, c.path) == data
    missing = lakefs_sdk.ObjectCopyCreation(src_path="nope")
    assert status(lambda: objects.copy_object(repo, "main", "c4", missing)) == 404


def test_user_metadata_update_and_underlying_properties(
    server: RestServer, client: lakefs_sdk.ApiClient, tmp_path: Path
) -> None:
    repo = new_repo(server, client)
    objects = lakefs_sdk.ObjectsApi(client)
    before = upload(client, repo, "main", "m", b"meta", tmp=tmp_path)
    objects.update_object_user_metadata(
        repo, "main", "m", lakefs_sdk.UpdateObjectUserMetadata(set={"owner": "me", "k": "v"})
    )
    after = objects.stat_object(repo, "main", "m", user_metadata=True)
    assert after.metadata == {"owner": "me", "k": "v"}
    assert (after.physical_address, after.checksum) == (before.physical_address, before.checksum)
    objects.update_object_user_metadata(repo, "main", "m", lakefs_sdk.UpdateObjectUserMetadata(set={}))
    assert objects.stat_object(repo, "main", "m", user_metadata=True).metadata == {}
    update = lakefs_sdk.UpdateObjectUserMetadata(set={"a": "b"})
    assert status(lambda: objects.update_object_user_metadata(repo, "main", "nope", update)) == 404
    huge = lakefs_sdk.UpdateObjectUserMetadata(set={"k": "v" * 5000})
    assert status(lambda: objects.update_object_user_metadata(repo, "main", "m", huge)) == 400
    assert objects.get_underlying_properties(repo, "main", "m").storage_class is None
    assert status(lambda: objects.get_underlying_properties(repo, "main", "nope")) == 404
