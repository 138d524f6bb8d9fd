"""S3 clients unchanged against one real lakefs-server over HTTPS (a self-signed certificate made in the
test), on SQLite + local: rclone, awscli, s3fs, pyarrow's S3FileSystem, polars, minio-py (presigned
GET/PUT) and s3cmd with V2 and V4 signatures.

Every client writes on a branch (module fixture ``written``, which then commits once with
``lakefs-core`` and tags the commit); each client then reads its objects back by commit id and by
tag and lists them with a delimiter; a write to the tag is refused; a Viewer is refused a write and
a Developer allowed. (The boto3 suite, tests/server/test_gateway_boto3.py, also covers HTTP and the
PostgreSQL + S3 backend.) awscli runs as the machine's ``aws`` in its own interpreter (it pins another
botocore than the project's aioboto3); without it its tests skip, or fail under CI.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import ssl
import subprocess
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.server.harness import ADMIN, BIN, DEVELOPER, REPO, VIEWER, Keys, Server, local_core, running
from tests.support.env import skip_or_fail
from tests.support.timing import scaled

MiB = 1024 * 1024
BIG = bytes(range(256)) * (6 * MiB // 256)  # two parts for the clients told to split at 5 MiB
MULTIPART = frozenset({"rclone", "awscli", "s3cmd-v2", "s3cmd-v4"})  # they upload BIG in parts


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    directory = tmp_path_factory.mktemp("clients")
    core, namespace = local_core(directory)
    with running(directory, core, namespace, tls=True) as server:
        yield server


@dataclass
class Client:
    """One S3 client's operations on the server, for the shared checks."""

    name: str
    write: Callable[[Keys, str, bytes], None]  # (keys, "<ref>/<path>", body); raises on refusal
    read: Callable[[str], bytes]  # "<ref>/<path>"
    list_dir: Callable[[str], list[str]]  # "<ref>/<dir>/" -> names directly below, "/" suffix for dirs
    # (keys, local directory, "<ref>/<dir>"): the directory's files in one command (the command-line
    # clients: one process start for a tree); None: one ``write`` a file
    write_tree: Callable[[Keys, Path, str], None] | None = None


def run(
    args: list[str], env: dict[str, str] | None = None, *, ok: bool = True
) -> subprocess.CompletedProcess[bytes]:
    done = subprocess.run(args, capture_output=True, env=env, timeout=scaled(120), check=False)
    if ok:
        assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    return done


# -- rclone ------------------------------------------------------------------------------------------


def rclone_env(server: Server, keys: Keys) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "RCLONE_"))}
    env.update(
        RCLONE_CONFIG_LK_TYPE="s3",
        RCLONE_CONFIG_LK_PROVIDER="Other",
        RCLONE_CONFIG_LK_ACCESS_KEY_ID=keys.access_key_id,
        RCLONE_CONFIG_LK_SECRET_ACCESS_KEY=keys.secret_access_key,
        RCLONE_CONFIG_LK_ENDPOINT=server.endpoint,
        RCLONE_CONFIG_LK_REGION="us-east-1",
        RCLONE_CONFIG_LK_FORCE_PATH_STYLE="true",
        RCLONE_CONFIG_LK_NO_CHECK_BUCKET="true",  # lakeFS's advice: repositories are not created over S3
        RCLONE_CONFIG_LK_UPLOAD_CUTOFF="5M",
        RCLONE_CONFIG_LK_CHUNK_SIZE="5M",
        RCLONE_CA_CERT=server.ca_bundle or "",
        RCLONE_CONFIG="/dev/null",
    )
    return env


def rclone(server: Server, keys: Keys, *args: str, ok: bool = True) -> subprocess.CompletedProcess[bytes]:
    return run([str(BIN / "rclone"), *args], rclone_env(server, keys), ok=ok)


def rclone_client(server: Server, tmp: Path) -> Client:
    def write(keys: Keys, key: str, body: bytes) -> None:
        source = tmp / f"rclone-src-{uuid.uuid4().hex}"  # unique: the checks run at once
        source.write_bytes(body)
        rclone(server, keys, "copyto", str(source), f"lk:{REPO}/{key}")

    def read(key: str) -> bytes:
        return rclone(server, ADMIN, "cat", f"lk:{REPO}/{key}").stdout

    def list_dir(prefix: str) -> list[str]:
        return rclone(server, ADMIN, "lsf", f"lk:{REPO}/{prefix}").stdout.decode().split()

    def write_tree(keys: Keys, source: Path, prefix: str) -> None:
        rclone(server, keys, "copy", str(source), f"lk:{REPO}/{prefix}")

    return Client("rclone", write, read, list_dir, write_tree)


# -- awscli (the machine's) ----------------------------------------------------------------------------


def aws_env(server: Server, keys: Keys, tmp: Path) -> dict[str, str]:
    config = tmp / f"aws-config-{keys.access_key_id}"
    config.write_text(
        "[default]\nregion = us-east-1\ns3 =\n  addressing_style = path\n"
        "  multipart_threshold = 5MB\n  multipart_chunksize = 5MB\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_ACCESS_KEY_ID=keys.access_key_id,
        AWS_SECRET_ACCESS_KEY=keys.secret_access_key,
        AWS_CONFIG_FILE=str(config),
        AWS_SHARED_CREDENTIALS_FILE="/dev/null",
        AWS_CA_BUNDLE=server.ca_bundle or "",
    )
    env.pop("VIRTUAL_ENV", None)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p)
    return env


def aws_binary() -> str:
    found = shutil.which(
        "aws",
        path=os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if ".venv" not in p),
    )
    if found is None:
        skip_or_fail("the machine's awscli (`aws`) is not installed")
    return str(found)


def aws_client(server: Server, tmp: Path) -> Client:
    binary = aws_binary()

    def aws(keys: Keys, *args: str) -> bytes:
        return run([binary, "--endpoint-url", server.endpoint, *args], aws_env(server, keys, tmp)).stdout

    def write_tree(keys: Keys, source: Path, prefix: str) -> None:
        aws(keys, "s3", "sync", str(source), f"s3://{REPO}/{prefix}/")

    def write(keys: Keys, key: str, body: bytes) -> None:
        # `s3 sync` of a directory holding the one file (cp's code path is sync's, per file)
        source = tmp / f"aws-src-{uuid.uuid4().hex}"
        source.mkdir()
        (source / key.rpartition("/")[2]).write_bytes(body)
        write_tree(keys, source, key.rpartition("/")[0])

    def read(key: str) -> bytes:
        return aws(ADMIN, "s3", "cp", f"s3://{REPO}/{key}", "-")

    def list_dir(prefix: str) -> list[str]:
        lines = aws(ADMIN, "s3", "ls", f"s3://{REPO}/{prefix}").decode().splitlines()
        return [line.split()[-1] for line in lines if line.strip()]

    return Client("awscli", write, read, list_dir, write_tree)


# -- s3fs, pyarrow, polars, minio, s3cmd ---------------------------------------------------------------


def s3fs_client(server: Server) -> Client:
    import s3fs

    def fs(keys: Keys) -> Any:
        return s3fs.S3FileSystem(
            key=keys.access_key_id,
            secret=keys.secret_access_key,
            client_kwargs={
                "endpoint_url": server.endpoint,
                "verify": server.ca_bundle,
                "region_name": "us-east-1",
            },
            skip_instance_cache=True,
            use_listings_cache=False,
        )

    def write(keys: Keys, key: str, body: bytes) -> None:
        fs(keys).pipe(f"{REPO}/{key}", body)

    def read(key: str) -> bytes:
        return bytes(fs(ADMIN).cat(f"{REPO}/{key}"))

    def list_dir(prefix: str) -> list[str]:
        out = []
        for info in fs(ADMIN).ls(f"{REPO}/{prefix}", detail=True):
            name = info["name"].rstrip("/").rpartition("/")[2]
            out.append(name + "/" if info["type"] == "directory" else name)
        return out

    return Client("s3fs", write, read, list_dir)


def pyarrow_fs(server: Server, keys: Keys) -> Any:
    from pyarrow import fs

    return fs.S3FileSystem(
        access_key=keys.access_key_id,
        secret_key=keys.secret_access_key,
        endpoint_override=server.endpoint.split("://", 1)[1],
        scheme="https",
        region="us-east-1",
        tls_ca_file_path=server.ca_bundle,
        allow_bucket_creation=False,
        check_directory_existence_before_creation=False,
    )


def pyarrow_client(server: Server) -> Client:
    from pyarrow import fs as pafs

    def write(keys: Keys, key: str, body: bytes) -> None:
        with pyarrow_fs(server, keys).open_output_stream(f"{REPO}/{key}") as out:
            out.write(body)

    def read(key: str) -> bytes:
        with pyarrow_fs(server, ADMIN).open_input_stream(f"{REPO}/{key}") as source:
            return bytes(source.read())

    def list_dir(prefix: str) -> list[str]:
        infos = pyarrow_fs(server, ADMIN).get_file_info(pafs.FileSelector(f"{REPO}/{prefix}"))
        return [i.base_name + ("/" if i.type == pafs.FileType.Directory else "") for i in infos]

    return Client("pyarrow", write, read, list_dir)


def minio_client(server: Server) -> Client:
    import urllib3
    from minio import Minio

    def client(keys: Keys) -> Any:
        http = urllib3.PoolManager(cert_reqs="CERT_REQUIRED", ca_certs=server.ca_bundle)
        host = server.endpoint.split("://", 1)[1]
        return Minio(
            host,
            keys.access_key_id,
            keys.secret_access_key,
            secure=True,
            region="us-east-1",
            http_client=http,
        )

    context = ssl.create_default_context(cafile=server.ca_bundle)

    def write(keys: Keys, key: str, body: bytes) -> None:
        url = client(keys).presigned_put_object(REPO, key)
        request = urllib.request.Request(
            url, data=body, method="PUT", headers={"Content-Type": "application/octet-stream"}
        )
        with urllib.request.urlopen(request, timeout=scaled(30), context=context) as answer:
            assert answer.status == 200

    def read(key: str) -> bytes:
        with urllib.request.urlopen(
            client(ADMIN).presigned_get_object(REPO, key), timeout=scaled(30), context=context
        ) as a:
            return bytes(a.read())

    def list_dir(prefix: str) -> list[str]:
        names = []
        for obj in client(ADMIN).list_objects(REPO, prefix=prefix):
            names.append(obj.object_name[len(prefix) :])
        return names

    return Client("minio", write, read, list_dir)


def s3cmd_client(server: Server, tmp: Path, version: int) -> Client:
    def config(keys: Keys) -> Path:
        path = tmp / f"s3cmd-{version}-{keys.access_key_id}.cfg"
        host = server.endpoint.split("://", 1)[1]
        path.write_text(
            "[default]\n"
            f"access_key = {keys.access_key_id}\nsecret_key = {keys.secret_access_key}\n"
            f"host_base = {host}\nhost_bucket = {host}\nuse_https = True\n"
            f"ca_certs_file = {server.ca_bundle}\ncheck_ssl_certificate = True\n"
            f"signature_v2 = {version == 2}\nbucket_location = us-east-1\n"
            "multipart_chunk_size_mb = 5\n"
        )
        return path

    def s3cmd(keys: Keys, *args: str) -> bytes:
        return run([str(BIN / "s3cmd"), "-c", str(config(keys)), "--no-progress", *args]).stdout

    def write(keys: Keys, key: str, body: bytes) -> None:
        source = tmp / f"s3cmd-src-{uuid.uuid4().hex}"
        source.write_bytes(body)
        s3cmd(keys, "put", str(source), f"s3://{REPO}/{key}")

    def read(key: str) -> bytes:
        target = tmp / f"s3cmd-get-{uuid.uuid4().hex}"
        s3cmd(ADMIN, "get", "--force", f"s3://{REPO}/{key}", str(target))
        return target.read_bytes()

    def list_dir(prefix: str) -> list[str]:
        lines = s3cmd(ADMIN, "ls", f"s3://{REPO}/{prefix}").decode().splitlines()
        return [
            line.split()[-1].rstrip("/").rpartition("/")[2] + ("/" if "DIR" in line else "") for line in lines
        ]

    def write_tree(keys: Keys, source: Path, prefix: str) -> None:
        s3cmd(keys, "put", "--recursive", f"{source}/", f"s3://{REPO}/{prefix}/")

    return Client(f"s3cmd-v{version}", write, read, list_dir, write_tree)


CLIENTS = ["rclone", "awscli", "s3fs", "pyarrow", "minio", "s3cmd-v2", "s3cmd-v4"]


def make_client(name: str, server: Server, tmp: Path) -> Client:
    if name == "rclone":
        return rclone_client(server, tmp)
    if name == "awscli":
        return aws_client(server, tmp)
    if name == "s3fs":
        return s3fs_client(server)
    if name == "pyarrow":
        return pyarrow_client(server)
    if name == "minio":
        return minio_client(server)
    return s3cmd_client(server, tmp, int(name[-1]))


@pytest.fixture(scope="module")
def written(server: Server, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Every client writes ``main/<client>/small`` and ``main/<client>/sub/big`` (6 MiB: in two parts
    by the clients in MULTIPART, a small one by the others; the command-line clients both files in
    one command), the clients at once; then one commit with ``lakefs-core`` and the tag ``v1``."""
    tmp = tmp_path_factory.mktemp("client-files")

    def write_all(name: str) -> None:
        client = make_client(name, server, tmp / name)
        big = BIG if name in MULTIPART else b"big"
        if client.write_tree is None:
            client.write(ADMIN, f"main/{name}/small", name.encode())
            client.write(ADMIN, f"main/{name}/sub/big", big)
            return
        tree = tmp / name / "tree"
        (tree / "sub").mkdir(parents=True)
        (tree / "small").write_bytes(name.encode())
        (tree / "sub" / "big").write_bytes(big)
        client.write_tree(ADMIN, tree, f"main/{name}")

    names = [n for n in CLIENTS if n != "awscli" or shutil.which("aws") is not None]
    for name in names:
        (tmp / name).mkdir()
    with ThreadPoolExecutor(len(names)) as pool:
        list(pool.map(write_all, names))
    commit = server.lakefs_core("commit", f"lakefs://{REPO}/main", "-m", "written by every client")
    server.tag("v1", commit["id"])  # in this process: one command start less
    return {"commit": commit["id"], "tag": "v1"}


def refused(write: Callable[[], None]) -> bool:
    try:
        write()
    except Exception:  # each client reports a refusal its own way (exit status, exception class)
        return True
    return False


@pytest.mark.parametrize("name", CLIENTS)
def test_client_round_trip(server: Server, written: dict[str, str], name: str, tmp_path: Path) -> None:
    """Read by commit id and by tag, list with a delimiter, a write to the tag refused, a Viewer's
    write refused, a Developer's allowed: the client's commands run at once (they are independent)."""
    client = make_client(name, server, tmp_path)
    commit, tag = written["commit"], written["tag"]
    checks: dict[str, Callable[[], object]] = {
        "by commit": lambda: client.read(f"{commit}/{name}/small"),
        "by tag": lambda: hashlib.sha256(client.read(f"{tag}/{name}/sub/big")).digest(),
        "listed": lambda: sorted(client.list_dir(f"{commit}/{name}/")),
        "tag refused": lambda: refused(lambda: client.write(ADMIN, f"{tag}/{name}/refused", b"x")),
        "viewer refused": lambda: refused(lambda: client.write(VIEWER, f"main/{name}/viewer", b"x")),
        "developer allowed": lambda: refused(lambda: client.write(DEVELOPER, f"main/{name}/developer", b"d")),
    }
    with ThreadPoolExecutor(len(checks)) as pool:
        futures = {what: pool.submit(check) for what, check in checks.items()}
        answers = {what: future.result() for what, future in futures.items()}
    expected_big = BIG if name in MULTIPART else b"big"
    assert answers == {
        "by commit": name.encode(),
        "by tag": hashlib.sha256(expected_big).digest(),
        "listed": ["small", "sub/"],
        "tag refused": True,
        "viewer refused": True,
        "developer allowed": False,
    }


def test_rclone_sync_check_and_multipart(server: Server, tmp_path: Path) -> None:
    source = tmp_path / "tree"
    (source / "d").mkdir(parents=True)
    (source / "a.txt").write_bytes(b"a")
    (source / "d" / "b.bin").write_bytes(BIG)
    rclone(server, ADMIN, "sync", str(source), f"lk:{REPO}/main/sync")
    rclone(server, ADMIN, "check", str(source), f"lk:{REPO}/main/sync")
    (source / "a.txt").unlink()
    rclone(server, ADMIN, "sync", str(source), f"lk:{REPO}/main/sync")
    listed = rclone(server, ADMIN, "lsf", "-R", f"lk:{REPO}/main/sync").stdout.decode().split()
    assert sorted(listed) == ["d/", "d/b.bin"]


def test_awscli_ls_and_rm_recursive(server: Server, written: dict[str, str], tmp_path: Path) -> None:
    """``aws s3 ls --recursive`` and ``rm --recursive`` (the uploads, ``sync`` among them, are the
    round trip's)."""
    binary = aws_binary()
    env = aws_env(server, ADMIN, tmp_path)
    aws = [binary, "--endpoint-url", server.endpoint, "s3"]
    listed = run([*aws, "ls", "--recursive", f"s3://{REPO}/main/awscli/"], env).stdout.decode().split("\n")
    assert {line.split()[-1] for line in listed if line.strip()} >= {
        "main/awscli/small",
        "main/awscli/sub/big",
    }
    run([*aws, "rm", "--recursive", f"s3://{REPO}/main/awscli/sub/"], env)
    import boto3

    s3 = boto3.client(
        "s3",
        endpoint_url=server.endpoint,
        region_name="us-east-1",
        aws_access_key_id=ADMIN.access_key_id,
        aws_secret_access_key=ADMIN.secret_access_key,
        verify=server.ca_bundle,
    )
    assert s3.list_objects_v2(Bucket=REPO, Prefix="main/awscli/sub/")["KeyCount"] == 0
    s3.close()


def test_pyarrow_dataset_and_polars(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    fs = pyarrow_fs(server, ADMIN)
    table = pa.table({"n": list(range(1000)), "s": [str(i) for i in range(1000)]})
    # create_dir=False: pyarrow would PUT directory markers for every parent, "main/" among them,
    # and a ref itself is no object (refused as lakeFS refuses an empty path)
    ds.write_dataset(table, f"{REPO}/main/dataset", filesystem=fs, format="parquet", create_dir=False)
    back = ds.dataset(f"{REPO}/main/dataset", filesystem=fs, format="parquet").to_table()
    assert back.sort_by("n").equals(table)
    import polars as pl

    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    pl_fs = pyarrow_fs(server, ADMIN)
    with pl_fs.open_output_stream(f"{REPO}/main/polars/t.parquet") as out:
        out.write(buffer.getvalue())
    monkeypatch.setenv("SSL_CERT_FILE", server.ca_bundle or "")  # polars' TLS (rustls) trusts the test CA
    frame = pl.read_parquet(
        f"s3://{REPO}/main/polars/t.parquet",
        storage_options={
            "aws_endpoint_url": server.endpoint,
            "aws_access_key_id": ADMIN.access_key_id,
            "aws_secret_access_key": ADMIN.secret_access_key,
            "aws_region": "us-east-1",
            "aws_virtual_hosted_style_request": "false",
        },
    )
    assert frame.height == 1000 and frame["n"].sum() == sum(range(1000))
