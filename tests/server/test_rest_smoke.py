from __future__ import annotations

import lakefs_sdk
import pytest

from tests.server.rest_harness import ACCESS_KEY, SECRET_KEY, rest_server


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with rest_server(tmp_path_factory.mktemp("rest")) as s:
        yield s


def test_smoke(server, tmp_path):
    f = tmp_path / "x"
    f.write_bytes(b"hello")
    cfg = lakefs_sdk.Configuration(host=server.endpoint + "/api/v1", username=ACCESS_KEY, password=SECRET_KEY)
    client = lakefs_sdk.ApiClient(cfg)
    config = lakefs_sdk.ConfigApi(client).get_config()
    print(config)
    repo = lakefs_sdk.RepositoriesApi(client).create_repository(
        lakefs_sdk.RepositoryCreation(name="repo1", storage_namespace=server.namespace("repo1"))
    )
    print(repo)
    objs = lakefs_sdk.ObjectsApi(client)
    st = objs.upload_object("repo1", "main", "a/b.txt", content=str(f))
    print(st)
    print(objs.get_object("repo1", "main", "a/b.txt"))
    c = lakefs_sdk.CommitsApi(client).commit("repo1", "main", lakefs_sdk.CommitCreation(message="m"))
    print(c)
    print(objs.list_objects("repo1", "main", delimiter="/"))
