"""boto3 against a real lakefs-server process, on SQLite + local over HTTP and on PostgreSQL + S3 (moto)
over HTTPS with a self-signed certificate; one server per backend for the module.

Each backend: objects written on a branch with metadata, read back whole, by range and with the
conditionals and ``response-*`` overrides lakeFS lacks; keys with ``//``, ``+``, spaces, unicode and
1,024 bytes round-trip; listings with a delimiter (branches as common prefixes, pagination, v1 and
v2); a commit with ``lakefs-core``, then reads by commit id and by tag; a write to a tag refused; a
Viewer refused a write and a delete, a Developer allowed; DeleteObjects with missing keys and per-key
errors; a body whose checksum does not match staged nowhere; presigned GET and PUT URLs.
"""

from __future__ import annotations

import base64
import hashlib
import io
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.client import Config
from botocore.exceptions import ClientError

from tests.server.harness import (
    ADMIN,
    DEVELOPER,
    REPO,
    REPO2,
    VIEWER,
    Keys,
    Server,
    local_core,
    running,
    swept_context,
)
from tests.support.timing import scaled


@pytest.fixture(scope="module", params=["sqlite-local-http", "postgres-s3-https"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    directory = tmp_path_factory.mktemp("server")
    if request.param == "sqlite-local-http":
        core, namespace = local_core(directory)
        with running(directory, core, namespace) as server:
            yield server
        return
    request.getfixturevalue("pg_database")  # skips locally / fails in CI when unreachable
    from tests.support.pg import create_database, drop_database

    # The worker's moto server (a bucket of this module's own), not one started for the module
    moto = request.getfixturevalue("moto_regions").get("us-east-1")
    bucket = f"lake-{uuid.uuid4().hex[:12]}"
    db = create_database()
    try:
        boto3.client("s3", **moto.client_kwargs()).create_bucket(Bucket=bucket)
        core = {
            "kv_url": db.url,
            "s3": {
                "endpoint_url": moto.endpoint,
                "region": "us-east-1",
                "credentials": {
                    "source": "static",
                    "access_key_id": moto.client_kwargs()["aws_access_key_id"],
                    "secret_access_key": moto.client_kwargs()["aws_secret_access_key"],
                },
            },
        }
        with running(directory, core, f"s3://{bucket}/repo", tls=True) as server:
            yield server
    finally:
        drop_database(db)


# Tests of the gateway's own logic (keys, listings, authorisation, deletes, the sweep) run on the first
# backend only; those touching the stores and the KV (objects, multipart, copies, commits, checksums)
# on both.
local_only = pytest.mark.parametrize("server", ["sqlite-local-http"], indirect=True)


def client(server: Server, keys: Keys = ADMIN, **config: Any) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=server.endpoint,
        region_name="us-east-1",
        aws_access_key_id=keys.access_key_id,
        aws_secret_access_key=keys.secret_access_key,
        verify=server.ca_bundle if server.ca_bundle else True,
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}, **config),
    )


@pytest.fixture(scope="module")
def s3(server: Server) -> Iterator[Any]:
    made = client(server)
    yield made
    made.close()


def code_of(call: Callable[[], object]) -> str:
    with pytest.raises(ClientError) as e:
        call()
    return str(e.value.response["Error"]["Code"])


def test_put_get_head_with_metadata_range_and_conditionals(s3: Any) -> None:
    body = b"0123456789" * 100
    put = s3.put_object(
        Bucket=REPO, Key="main/a/b.txt", Body=body, ContentType="text/plain", Metadata={"Owner": "Ann"}
    )
    etag = put["ETag"]
    got = s3.get_object(Bucket=REPO, Key="main/a/b.txt")
    assert got["Body"].read() == body and got["ETag"] == etag and got["ContentType"] == "text/plain"
    assert got["Metadata"] == {"owner": "Ann"} and got["ContentLength"] == 1000
    head = s3.head_object(Bucket=REPO, Key="main/a/b.txt")
    assert head["ContentLength"] == 1000 and head["ETag"] == etag
    part = s3.get_object(Bucket=REPO, Key="main/a/b.txt", Range="bytes=10-19")
    assert part["Body"].read() == b"0123456789" and part["ContentRange"] == "bytes 10-19/1000"
    assert s3.get_object(Bucket=REPO, Key="main/a/b.txt", Range="bytes=-3")["Body"].read() == b"789"
    assert (
        code_of(lambda: s3.get_object(Bucket=REPO, Key="main/a/b.txt", Range="bytes=5000-")) == "InvalidRange"
    )
    assert code_of(lambda: s3.get_object(Bucket=REPO, Key="main/a/b.txt", IfNoneMatch=etag)) == "304"
    assert (
        code_of(lambda: s3.get_object(Bucket=REPO, Key="main/a/b.txt", IfMatch='"nope"'))
        == "PreconditionFailed"
    )
    matched = s3.get_object(Bucket=REPO, Key="main/a/b.txt", IfMatch=etag)
    assert matched["ETag"] == etag and matched["Body"].read() == body
    over = s3.get_object(Bucket=REPO, Key="main/a/b.txt", ResponseContentType="application/x-y")
    assert over["ContentType"] == "application/x-y" and over["Body"].read() == body
    assert code_of(lambda: s3.get_object(Bucket=REPO, Key="main/missing")) == "NoSuchKey"
    assert code_of(lambda: s3.get_object(Bucket="no-such-repo", Key="main/x")) == "NoSuchBucket"
    # conditional writes
    assert code_of(lambda: s3.put_object(Bucket=REPO, Key="main/a/b.txt", Body=b"x", IfNoneMatch="*")) == (
        "PreconditionFailed"
    )
    s3.put_object(Bucket=REPO, Key="main/a/new.txt", Body=b"x", IfNoneMatch="*")


def test_racing_conditional_puts_exactly_one_wins(server: Server, s3: Any) -> None:
    """PUTs with ``If-None-Match: *`` (then ``If-Match`` on the winner's ETag) of one key at once, each
    on its own connection: checked atomically with the staging, exactly one wins, the others answer
    PreconditionFailed and stage nothing."""
    racers = [client(server) for _ in range(4)]

    def race(tag: str, **condition: str) -> list[int]:
        def one(i: int) -> int | None:
            try:
                racers[i].put_object(
                    Bucket=REPO, Key="main/race/key", Body=f"{tag}-{i}".encode(), **condition
                )
            except ClientError as e:
                assert e.response["Error"]["Code"] == "PreconditionFailed"
                return None
            return i

        with ThreadPoolExecutor(len(racers)) as pool:
            return [i for i in pool.map(one, range(len(racers))) if i is not None]

    [first] = race("new", IfNoneMatch="*")
    got = s3.get_object(Bucket=REPO, Key="main/race/key")
    assert got["Body"].read() == f"new-{first}".encode()
    [second] = race("match", IfMatch=got["ETag"])
    assert s3.get_object(Bucket=REPO, Key="main/race/key")["Body"].read() == f"match-{second}".encode()
    listed = s3.list_objects_v2(Bucket=REPO, Prefix="main/race/")
    assert [o["Key"] for o in listed["Contents"]] == ["main/race/key"]
    for racer in racers:
        racer.close()


@local_only
@pytest.mark.parametrize(
    "key",
    ["main/dir//double", "main/plus+sign", "main/with space", "main/ünï/cødé ✓", "main/" + "k" * 1024],
    ids=["double-slash", "plus", "space", "unicode", "1024-bytes"],
)
def test_keys_round_trip(s3: Any, key: str) -> None:
    s3.put_object(Bucket=REPO, Key=key, Body=key.encode())
    assert s3.get_object(Bucket=REPO, Key=key)["Body"].read() == key.encode()
    listed = s3.list_objects_v2(Bucket=REPO, Prefix=key)["Contents"]
    assert [o["Key"] for o in listed] == [key]
    listed_v1 = s3.list_objects(Bucket=REPO, Prefix=key)["Contents"]  # boto3 asks encoding-type=url
    assert [o["Key"] for o in listed_v1] == [key]


@local_only
def test_key_longer_than_1024_bytes_is_refused(s3: Any) -> None:
    assert (
        code_of(lambda: s3.put_object(Bucket=REPO, Key="main/" + "k" * 1025, Body=b"")) == "KeyTooLongError"
    )


@local_only
def test_listing_with_delimiter_branches_and_pagination(s3: Any) -> None:
    for name in ("l/x/1", "l/x/2", "l/y", "l/z/3"):
        s3.put_object(Bucket=REPO, Key=f"main/{name}", Body=b"1")
    top = s3.list_objects_v2(Bucket=REPO, Delimiter="/")
    assert {p["Prefix"] for p in top["CommonPrefixes"]} >= {"main/"}
    listing = s3.list_objects_v2(Bucket=REPO, Prefix="main/l/", Delimiter="/")
    assert [o["Key"] for o in listing["Contents"]] == ["main/l/y"]
    assert [p["Prefix"] for p in listing["CommonPrefixes"]] == ["main/l/x/", "main/l/z/"]
    pages = s3.get_paginator("list_objects_v2").paginate(
        Bucket=REPO, Prefix="main/l/", PaginationConfig={"PageSize": 1}
    )
    keys = [o["Key"] for page in pages for o in page.get("Contents", [])]
    assert keys == ["main/l/x/1", "main/l/x/2", "main/l/y", "main/l/z/3"]
    pages_v1 = list(
        s3.get_paginator("list_objects").paginate(
            Bucket=REPO, Prefix="main/l/", Delimiter="/", PaginationConfig={"PageSize": 1}
        )
    )
    seen = [(o.get("Key") or "") for page in pages_v1 for o in page.get("Contents", [])]
    prefixes = [p["Prefix"] for page in pages_v1 for p in page.get("CommonPrefixes", [])]
    assert seen == ["main/l/y"] and prefixes == ["main/l/x/", "main/l/z/"]
    assert s3.list_objects_v2(Bucket=REPO, Prefix="nobranch/")["KeyCount"] == 0


def test_commit_then_read_by_commit_and_tag_and_tag_refuses_writes(server: Server, s3: Any) -> None:
    s3.put_object(Bucket=REPO, Key="main/c/committed.txt", Body=b"v1")
    commit_id = server.commit_and_tag("v1")
    s3.put_object(Bucket=REPO, Key="main/c/committed.txt", Body=b"v2")
    assert s3.get_object(Bucket=REPO, Key=f"{commit_id}/c/committed.txt")["Body"].read() == b"v1"
    assert s3.get_object(Bucket=REPO, Key="v1/c/committed.txt")["Body"].read() == b"v1"
    assert s3.get_object(Bucket=REPO, Key="main/c/committed.txt")["Body"].read() == b"v2"
    listed = s3.list_objects_v2(Bucket=REPO, Prefix="v1/c/", Delimiter="/")
    assert [o["Key"] for o in listed["Contents"]] == ["v1/c/committed.txt"]
    assert code_of(lambda: s3.put_object(Bucket=REPO, Key="v1/c/new", Body=b"x")) == "NoSuchBucket"
    assert code_of(lambda: s3.put_object(Bucket=REPO, Key=f"{commit_id}/c/new", Body=b"x")) == "NoSuchBucket"


@local_only
def test_viewer_refused_writes_developer_allowed(server: Server, s3: Any) -> None:
    viewer, developer = client(server, VIEWER), client(server, DEVELOPER)
    s3.put_object(Bucket=REPO, Key="main/rbac/obj", Body=b"x")
    assert viewer.get_object(Bucket=REPO, Key="main/rbac/obj")["Body"].read() == b"x"
    assert code_of(lambda: viewer.put_object(Bucket=REPO, Key="main/rbac/v", Body=b"x")) == "AccessDenied"
    assert code_of(lambda: viewer.delete_object(Bucket=REPO, Key="main/rbac/obj")) == "AccessDenied"
    refused = viewer.delete_objects(Bucket=REPO, Delete={"Objects": [{"Key": "main/rbac/obj"}]})
    assert [e["Code"] for e in refused["Errors"]] == ["AccessDenied"]
    developer.put_object(Bucket=REPO, Key="main/rbac/d", Body=b"dev")
    assert s3.get_object(Bucket=REPO, Key="main/rbac/d")["Body"].read() == b"dev"
    bad = client(server, Keys(DEVELOPER.access_key_id, "x" * 40))
    assert code_of(lambda: bad.get_object(Bucket=REPO, Key="main/rbac/d")) == "SignatureDoesNotMatch"
    assert [b["Name"] for b in s3.list_buckets()["Buckets"]] == [REPO, REPO2]
    assert [b["Name"] for b in viewer.list_buckets()["Buckets"]] == [REPO, REPO2]
    for made in (viewer, developer, bad):
        made.close()


@local_only
def test_delete_object_and_delete_objects(s3: Any) -> None:
    for i in range(3):
        s3.put_object(Bucket=REPO, Key=f"main/del/{i}", Body=b"x")
    s3.delete_object(Bucket=REPO, Key="main/del/0")
    s3.delete_object(Bucket=REPO, Key="main/del/never-existed")  # 204 as S3
    answer = s3.delete_objects(
        Bucket=REPO,
        Delete={
            "Objects": [
                {"Key": "main/del/1"},
                {"Key": "main/del/2"},
                {"Key": "main/del/none"},
                {"Key": "v9/x"},
            ]
        },
    )
    assert sorted(d["Key"] for d in answer["Deleted"]) == ["main/del/1", "main/del/2", "main/del/none"]
    assert [(e["Key"], e["Code"]) for e in answer["Errors"]] == [("v9/x", "NoSuchBucket")]
    assert s3.list_objects_v2(Bucket=REPO, Prefix="main/del/")["KeyCount"] == 0


def stored_files(server: Server) -> set[Path]:
    """The files of the local namespace (empty for the S3 backend, whose objects moto holds)."""
    root = server.directory / "data" / "repo"
    return {p for p in root.rglob("*") if p.is_file()} if root.is_dir() else set()


def test_bad_checksum_stages_nothing_and_stores_nothing(server: Server, s3: Any) -> None:
    before = stored_files(server)
    wrong = base64.b64encode(hashlib.md5(b"other").digest()).decode()
    assert code_of(
        lambda: s3.put_object(Bucket=REPO, Key="main/bad/md5", Body=b"data", ContentMD5=wrong)
    ) == ("BadDigest")
    assert code_of(
        lambda: s3.put_object(Bucket=REPO, Key="main/bad/crc", Body=b"data", ChecksumCRC32="AAAAAA==")
    ) == ("BadDigest")
    assert s3.list_objects_v2(Bucket=REPO, Prefix="main/bad/")["KeyCount"] == 0
    assert stored_files(server) == before  # the bytes were never committed to the store
    crc = s3.put_object(Bucket=REPO, Key="main/good/crc", Body=b"data", ChecksumAlgorithm="SHA256")
    assert crc["ChecksumSHA256"] == base64.b64encode(hashlib.sha256(b"data").digest()).decode()


def intents_under(server: Server, prefix: bytes) -> list[Any]:
    """The hard-delete journal's intents whose path starts with ``prefix``."""
    import asyncio

    from lakefs_core.repos.journal import Journal

    async def scan() -> list[Any]:
        async with swept_context(server, 1e-6) as ctx:
            journal = Journal(ctx.core.graveler, await ctx.core.graveler.repository(REPO))
            return [i async for i in journal.intents() if i.key.startswith(prefix)]

    return asyncio.run(scan())


def test_bad_body_small_or_streamed_stores_nothing(server: Server, s3: Any) -> None:
    """Both body paths of PutObject: a body within the small-body bound (read whole, verified
    before the upload starts) and one over it (streamed, verified at its end, before the store
    commits it). A mismatch stores and stages nothing either way; the small body's is refused
    before the upload journals anything. A PUT to a missing branch is NoSuchBucket."""
    from lakefs_server.gateway.objects import SMALL_BODY_BYTES

    wrong = base64.b64encode(hashlib.md5(b"other").digest()).decode()
    before = stored_files(server)
    small, big = b"s" * 1000, bytes(range(256)) * (SMALL_BODY_BYTES // 256 + 1)
    for key, body in (("main/badbody/small", small), ("main/badbody/big", big)):
        assert code_of(lambda k=key, b=body: s3.put_object(Bucket=REPO, Key=k, Body=b, ContentMD5=wrong)) == (
            "BadDigest"
        )
    assert s3.list_objects_v2(Bucket=REPO, Prefix="main/badbody/")["KeyCount"] == 0
    assert stored_files(server) == before
    assert [i.key for i in intents_under(server, b"badbody/small")] == []
    for key, body in (("main/goodbody/small", small), ("main/goodbody/big", big)):
        s3.put_object(Bucket=REPO, Key=key, Body=body)
        assert s3.get_object(Bucket=REPO, Key=key)["Body"].read() == body
    assert code_of(lambda: s3.put_object(Bucket=REPO, Key="no-such-branch/x", Body=small)) == "NoSuchBucket"


@local_only
def test_when_required_checksums_and_presigned_urls(server: Server) -> None:
    s3 = client(
        server,
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
        signature_version="s3v4",  # boto3 presigns with SigV2 otherwise (tested below)
    )
    s3.put_object(Bucket=REPO, Key="main/wr/obj", Body=b"when required")
    assert s3.get_object(Bucket=REPO, Key="main/wr/obj")["Body"].read() == b"when required"
    put_url = s3.generate_presigned_url(
        "put_object", Params={"Bucket": REPO, "Key": "main/wr/pre"}, ExpiresIn=300
    )
    get_url = s3.generate_presigned_url(
        "get_object", Params={"Bucket": REPO, "Key": "main/wr/pre"}, ExpiresIn=300
    )
    import ssl

    context = ssl.create_default_context(cafile=server.ca_bundle) if server.ca_bundle else None
    # an explicit type: urllib's default (form-urlencoded) makes moto's server swallow the body
    request = urllib.request.Request(
        put_url, data=b"presigned", method="PUT", headers={"Content-Type": "application/octet-stream"}
    )
    with urllib.request.urlopen(request, timeout=scaled(10), context=context) as answer:
        assert answer.status == 200
    with urllib.request.urlopen(get_url, timeout=scaled(10), context=context) as answer:
        assert answer.read() == b"presigned"
    too_long = s3.generate_presigned_url(
        "get_object", Params={"Bucket": REPO, "Key": "main/wr/pre"}, ExpiresIn=8 * 86400
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(too_long, timeout=scaled(10), context=context)
    assert refused.value.code in (400, 403)
    refused.value.close()
    s3.close()
    v2 = client(server, signature_version="s3")  # botocore's SigV2 query signing
    put_v2 = v2.generate_presigned_url(
        "put_object", Params={"Bucket": REPO, "Key": "main/wr/v2"}, ExpiresIn=300
    )
    assert "AWSAccessKeyId=" in put_v2 and "Signature=" in put_v2
    request = urllib.request.Request(
        put_v2, data=b"presigned v2", method="PUT", headers={"Content-Type": "application/octet-stream"}
    )
    with pytest.raises(urllib.error.HTTPError) as unsigned_type:  # the content type is signed
        urllib.request.urlopen(request, timeout=scaled(10), context=context)
    assert unsigned_type.value.code == 403
    unsigned_type.value.close()
    put_v2 = v2.generate_presigned_url(
        "put_object",
        Params={"Bucket": REPO, "Key": "main/wr/v2", "ContentType": "application/octet-stream"},
        ExpiresIn=300,
    )
    request = urllib.request.Request(
        put_v2, data=b"presigned v2", method="PUT", headers={"Content-Type": "application/octet-stream"}
    )
    with urllib.request.urlopen(request, timeout=scaled(10), context=context) as answer:
        assert answer.status == 200
    get_v2 = v2.generate_presigned_url(
        "get_object", Params={"Bucket": REPO, "Key": "main/wr/v2"}, ExpiresIn=300
    )
    with urllib.request.urlopen(get_v2, timeout=scaled(10), context=context) as answer:
        assert answer.read() == b"presigned v2"
    # Bucket requests: botocore signs "/<bucket>/" and sends "/<bucket>", in the header and in
    # boto3's default (V2) presigned URLs.
    listed = v2.list_objects_v2(Bucket=REPO, Prefix="main/wr/", Delimiter="/")
    assert [o["Key"] for o in listed["Contents"]] == ["main/wr/obj", "main/wr/pre", "main/wr/v2"]
    v2.head_bucket(Bucket=REPO)
    list_v2 = v2.generate_presigned_url(
        "list_objects_v2", Params={"Bucket": REPO, "Prefix": "main/wr/v"}, ExpiresIn=300
    )
    with urllib.request.urlopen(list_v2, timeout=scaled(10), context=context) as answer:
        assert b"<Key>main/wr/v2</Key>" in answer.read()
    for expires_in in (-60, 8 * 86400):  # expired; longer than 7 days
        bad = v2.generate_presigned_url(
            "get_object", Params={"Bucket": REPO, "Key": "main/wr/v2"}, ExpiresIn=expires_in
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(bad, timeout=scaled(10), context=context)
        assert refused.value.code in (400, 403)
        refused.value.close()
    v2.close()


MiB = 1024 * 1024


def test_multipart_upload_copy_list_abort_and_complete(server: Server, s3: Any) -> None:
    from boto3.s3.transfer import TransferConfig

    data = bytes(range(256)) * (12 * MiB // 256)  # 12 MiB: three parts of 5, 5 and 2 MiB
    transfer = TransferConfig(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB)
    s3.upload_fileobj(io.BytesIO(data), REPO, "main/mp/big", Config=transfer)
    got = s3.get_object(Bucket=REPO, Key="main/mp/big")["Body"].read()
    assert len(got) == len(data) and hashlib.sha256(got).digest() == hashlib.sha256(data).digest()

    created = s3.create_multipart_upload(
        Bucket=REPO, Key="main/mp/copy", ContentType="x/y", Metadata={"a": "b"}
    )
    upload_id = created["UploadId"]
    first = s3.upload_part_copy(
        Bucket=REPO,
        Key="main/mp/copy",
        UploadId=upload_id,
        PartNumber=1,
        CopySource=f"{REPO}/main/mp/big",
        CopySourceRange=f"bytes=0-{5 * MiB - 1}",
    )["CopyPartResult"]["ETag"]
    second = s3.upload_part(Bucket=REPO, Key="main/mp/copy", UploadId=upload_id, PartNumber=2, Body=b"tail")[
        "ETag"
    ]
    listed = s3.list_parts(Bucket=REPO, Key="main/mp/copy", UploadId=upload_id)["Parts"]
    assert [(p["PartNumber"], p["Size"]) for p in listed] == [(1, 5 * MiB), (2, 4)]
    uploads = s3.list_multipart_uploads(Bucket=REPO)["Uploads"]
    assert [(u["Key"], u["UploadId"]) for u in uploads] == [("main/mp/copy", upload_id)]
    assert (
        code_of(
            lambda: s3.complete_multipart_upload(
                Bucket=REPO,
                Key="main/mp/copy",
                UploadId=upload_id,
                MultipartUpload={
                    "Parts": [{"PartNumber": 2, "ETag": second}, {"PartNumber": 1, "ETag": first}]
                },
            )
        )
        == "InvalidPartOrder"
    )
    s3.complete_multipart_upload(
        Bucket=REPO,
        Key="main/mp/copy",
        UploadId=upload_id,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": first}, {"PartNumber": 2, "ETag": second}]},
    )
    copied = s3.get_object(Bucket=REPO, Key="main/mp/copy")
    assert copied["Body"].read() == data[: 5 * MiB] + b"tail"
    assert copied["ContentType"] == "x/y" and copied["Metadata"] == {"a": "b"}
    assert "Uploads" not in s3.list_multipart_uploads(Bucket=REPO)

    aborted = s3.create_multipart_upload(Bucket=REPO, Key="main/mp/aborted")["UploadId"]
    s3.upload_part(Bucket=REPO, Key="main/mp/aborted", UploadId=aborted, PartNumber=1, Body=b"x")
    s3.abort_multipart_upload(Bucket=REPO, Key="main/mp/aborted", UploadId=aborted)
    assert (
        code_of(lambda: s3.list_parts(Bucket=REPO, Key="main/mp/aborted", UploadId=aborted)) == "NoSuchUpload"
    )
    assert code_of(lambda: s3.head_object(Bucket=REPO, Key="main/mp/aborted")) == "404"
    assert code_of(lambda: s3.create_multipart_upload(Bucket=REPO, Key="v1/mp/x")) in ("NoSuchBucket", "404")


@local_only
def test_expired_multipart_uploads_are_swept(server: Server, s3: Any) -> None:
    """The daemon's step: an upload older than the expiry is aborted, its parts (held by the
    local store's native upload) removed."""
    import asyncio

    from lakefs_server.gateway.multipart import sweep_expired

    upload_id = s3.create_multipart_upload(Bucket=REPO, Key="main/mp/stale")["UploadId"]
    s3.upload_part(Bucket=REPO, Key="main/mp/stale", UploadId=upload_id, PartNumber=1, Body=b"stale")

    async def sweep() -> tuple[int, int]:
        async with swept_context(server, 1e-6) as ctx:
            core = ctx.core
            repo = await core.graveler.repository(REPO)
            from lakefs_core.block.local import LocalBlockStore
            from lakefs_core.block.local_multipart import MP_DIR
            from lakefs_core.namespace import StorageNamespace
            from lakefs_core.refs import kvkeys
            from lakefs_server.gateway.multipart import PARTITION, Upload

            ns = StorageNamespace.parse(repo.storage_namespace)
            store = await core.graveler.namespace_store(ns)
            record = Upload.decode(await core.kv.get(PARTITION, kvkeys.multipart_upload_key(REPO, upload_id)))
            assert isinstance(store, LocalBlockStore) and record.store_upload and record.address
            held = store.real_root / MP_DIR / record.store_upload
            before = sorted(p.name for p in held.iterdir())
            swept = await sweep_expired(ctx)
            assert "part-1" in before and not held.exists()
            assert not await store.exists(ns.key(record.address))
            return swept, len(before)

    swept, _ = asyncio.run(sweep())
    assert swept >= 1
    assert (
        code_of(lambda: s3.list_parts(Bucket=REPO, Key="main/mp/stale", UploadId=upload_id)) == "NoSuchUpload"
    )


@local_only
def test_copy_object_within_across_branches_and_repositories(s3: Any) -> None:
    s3.put_object(Bucket=REPO, Key="main/cp/src", Body=b"source", ContentType="a/b", Metadata={"k": "v"})
    s3.copy_object(Bucket=REPO, Key="main/cp/same", CopySource={"Bucket": REPO, "Key": "main/cp/src"})
    same = s3.get_object(Bucket=REPO, Key="main/cp/same")
    assert (
        same["Body"].read() == b"source" and same["ContentType"] == "a/b" and same["Metadata"] == {"k": "v"}
    )
    s3.copy_object(
        Bucket=REPO,
        Key="dev/cp/replaced",
        CopySource=f"{REPO}/main/cp/src",
        MetadataDirective="REPLACE",
        ContentType="c/d",
        Metadata={"n": "m"},
    )
    replaced = s3.get_object(Bucket=REPO, Key="dev/cp/replaced")
    assert replaced["Body"].read() == b"source" and replaced["ContentType"] == "c/d"
    assert replaced["Metadata"] == {"n": "m"}
    s3.copy_object(Bucket=REPO2, Key="main/cp/other-repo", CopySource=f"{REPO}/main/cp/src")
    assert s3.get_object(Bucket=REPO2, Key="main/cp/other-repo")["Body"].read() == b"source"
    assert (
        code_of(lambda: s3.copy_object(Bucket=REPO, Key="main/cp/x", CopySource=f"{REPO}/main/cp/missing"))
        == "NoSuchKey"
    )


@local_only
def test_missing_data_is_no_such_version_and_purged_is_object_purged(server: Server, s3: Any) -> None:
    """An entry whose bytes left the store answers NoSuchVersion (lakeFS's code); an object an
    audited purge destroyed answers ObjectPurged (410), naming the purge record."""
    import asyncio
    import time

    from lakefs_core.settings import CoreSettings
    from lakefs_core.wiring import open_core

    before = stored_files(server)
    s3.put_object(Bucket=REPO, Key="main/gone/data", Body=b"soon gone")
    (new,) = stored_files(server) - before
    new.unlink()
    assert code_of(lambda: s3.get_object(Bucket=REPO, Key="main/gone/data")) == "NoSuchVersion"
    copy = {"Bucket": REPO, "Key": "main/gone/copy", "CopySource": f"{REPO}/main/gone/data"}
    assert code_of(lambda: s3.copy_object(**copy)) == "NoSuchVersion"

    s3.put_object(Bucket=REPO, Key="main/gone/purged", Body=b"personal data")

    async def purge() -> str:
        core = await open_core(CoreSettings.model_validate(server.core))
        try:
            report = await core.graveler.purge_path(
                REPO,
                "main",
                "gone/purged",
                all_history=True,
                reason="erasure request 1",
                actor="tests",
                yes=True,
            )
            return str(report.audit_id)
        finally:
            await core.aclose()

    audit_id = asyncio.run(purge())
    deadline = time.monotonic() + scaled(30)  # a process looks for new purges every half second
    while True:
        with pytest.raises(ClientError) as e:
            s3.get_object(Bucket=REPO, Key="main/gone/purged")
        if e.value.response["Error"]["Code"] == "ObjectPurged" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert e.value.response["Error"]["Code"] == "ObjectPurged"
    assert e.value.response["Error"].get("PurgeRecord") == audit_id


def _signed_trailer_put(
    server: Server, key: str, data: bytes, crc32: bytes, *, forge: bool = False
) -> tuple[int, bytes]:
    """PUT ``data`` as ``STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER`` (botocore never sends it):
    the seed signed by botocore's SigV4Auth, the chunk and trailer signatures computed here from
    AWS's description, independently of lakefs_core.auth; ``crc32`` is the trailer's checksum;
    ``forge`` signs the trailer with a wrong key."""
    import hmac
    import http.client
    from urllib.parse import urlsplit

    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    url = f"{server.endpoint}/{REPO}/{key}"
    trailer = f"x-amz-checksum-crc32:{base64.b64encode(crc32).decode()}"
    headers = {
        "X-Amz-Content-SHA256": "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER",
        "Content-Encoding": "aws-chunked",
        "X-Amz-Trailer": "x-amz-checksum-crc32",
        "X-Amz-Decoded-Content-Length": str(len(data)),
    }
    request = AWSRequest(method="PUT", url=url, headers=headers)
    SigV4Auth(Credentials(ADMIN.access_key_id, ADMIN.secret_access_key), "s3", "us-east-1").add_auth(request)
    amz_date = request.headers["X-Amz-Date"]
    scope = f"{amz_date[:8]}/us-east-1/s3/aws4_request"
    previous = request.headers["Authorization"].rpartition("Signature=")[2]
    signing = f"AWS4{ADMIN.secret_access_key}".encode()
    for part in (amz_date[:8], "us-east-1", "s3", "aws4_request"):
        signing = hmac.new(signing, part.encode(), hashlib.sha256).digest()

    def sign(text: str) -> str:
        return hmac.new(signing, text.encode(), hashlib.sha256).hexdigest()

    empty = hashlib.sha256(b"").hexdigest()
    body = bytearray()
    for chunk in [data[i : i + 65536] for i in range(0, len(data), 65536)] + [b""]:
        digest = hashlib.sha256(chunk).hexdigest()
        previous = sign(f"AWS4-HMAC-SHA256-PAYLOAD\n{amz_date}\n{scope}\n{previous}\n{empty}\n{digest}")
        body += f"{len(chunk):x};chunk-signature={previous}\r\n".encode() + chunk
        body += b"\r\n" if chunk else b""
    trailer_hash = hashlib.sha256(f"{trailer}\n".encode()).hexdigest()
    trailer_signature = sign(f"AWS4-HMAC-SHA256-TRAILER\n{amz_date}\n{scope}\n{previous}\n{trailer_hash}")
    if forge:
        trailer_signature = hashlib.sha256(trailer_signature.encode()).hexdigest()
    body += f"{trailer}\r\nx-amz-trailer-signature:{trailer_signature}\r\n\r\n".encode()
    parsed = urlsplit(url)
    connection = http.client.HTTPConnection(parsed.hostname or "", parsed.port, timeout=scaled(10))
    try:
        connection.request("PUT", parsed.path, body=bytes(body), headers=dict(request.headers.items()))
        answer = connection.getresponse()
        return answer.status, answer.read()
    finally:
        connection.close()


@local_only
def test_signed_trailer_upload_through_the_server(server: Server, s3: Any) -> None:
    """The signed-trailer form end to end: a good CRC32 trailer stores the object; a correctly
    signed trailer whose checksum is not the body's is refused with nothing staged or stored."""
    import zlib

    data = bytes(range(256)) * 700  # 175 KiB: three chunks
    good = zlib.crc32(data).to_bytes(4, "big")
    status, _ = _signed_trailer_put(server, "main/trailer/ok", data, good)
    assert status == 200
    assert s3.get_object(Bucket=REPO, Key="main/trailer/ok")["Body"].read() == data
    before = stored_files(server)
    status, answer = _signed_trailer_put(
        server, "main/trailer/bad", data, (zlib.crc32(data) ^ 1).to_bytes(4, "big")
    )
    assert status == 400 and b"<Code>BadDigest</Code>" in answer, answer
    status, answer = _signed_trailer_put(server, "main/trailer/forged", data, good, forge=True)
    assert status == 403 and b"<Code>SignatureDoesNotMatch</Code>" in answer, answer
    for key in ("main/trailer/bad", "main/trailer/forged"):
        assert code_of(lambda key=key: s3.head_object(Bucket=REPO, Key=key)) == "404"
    assert stored_files(server) == before
