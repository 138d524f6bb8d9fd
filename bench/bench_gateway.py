"""lakefs-server's S3 gateway against ``rclone serve s3`` over a local directory (issue 34).

Both servers run on this machine, on 127.0.0.1, each with as many processes/threads as cores
(lakefs-server ``--workers <cores>``, SO_REUSEPORT; rclone is one multi-threaded process); ours on
SQLite + a local namespace. The load comes from boto3 in this process (threads), which shares the
cores with the server under test: both servers pay for the same client, so the ratios are fair,
if compressed. Figures (same run, ratios ours / rclone):

- 1 KiB objects, ``--clients`` concurrent clients: PUT and GET objects/s;
- one big object (``--big-mib``, default 256 MiB instead of the issue's 1 GiB to fit a session; the
  rate is per byte either way) in 16 MiB parts, 4 at once: multipart PUT and GET MB/s, and the peak
  RSS of the server's processes (VmHWM);
- ListObjectsV2 over ``--keys`` committed keys (100 directories of ``keys/100``): every key,
  paginated (1,000 a page; best of 2), and the directories with delimiter ``/`` (best of 5), each
  after a warm-up;
- the share of the server's CPU that request-body verification takes during the big upload: the
  verification's CPU for the same bytes and payload mode (measured alone, in this process) over the
  server processes' CPU time for the upload.

With ``--tls`` both servers serve HTTPS with a self-signed certificate (``openssl``), boto3
trusting it: over HTTPS boto3 sends no payload hash (``UNSIGNED-PAYLOAD`` and a CRC32 trailer), so
the verification share is then CRC32's alone, the bound of what the HTTP figure's SHA-256 adds.

``python -m bench.bench_gateway [--clients 16] [--objects 2000] [--big-mib 256] [--keys 100000] [--tls]``;
``--only-big --big-mib 1024`` runs the big object alone, at the issue's size (a few minutes);
``--only-listing`` the small objects (which stay staged) and the listings, no big object.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import boto3  # type: ignore[import-untyped]
import yaml
from boto3.s3.transfer import TransferConfig  # type: ignore[import-untyped]
from botocore.client import Config  # type: ignore[import-untyped]

from bench.common import machine, report

BIN = Path(sys.executable).parent
ACCESS, SECRET = "AKIAIOSFODNN7BENCH00", "benchsecret0123456789abcdefghijklmnopqrs"
ENCRYPT = "bench-encryption-secret-0123456789"
MiB = 1024 * 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(
    url: str, proc: subprocess.Popen[bytes], ok: Callable[[int], bool], ca_bundle: str | None = None
) -> None:
    context = ssl.create_default_context(cafile=ca_bundle) if ca_bundle else None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2, context=context) as answer:
                if ok(answer.status):
                    return
        except urllib.error.HTTPError as e:
            if ok(e.code):
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer")


async def seed(root: Path, keys: int) -> None:
    from lakefs_core.auth.crypt import SecretStore
    from lakefs_core.auth.setup import setup
    from lakefs_core.auth.store import AuthStore
    from lakefs_core.repos.objects import UploadItem
    from lakefs_core.settings import CoreSettings
    from lakefs_core.wiring import open_core

    core = await open_core(CoreSettings.model_validate({"kv_url": f"sqlite:///{root / 'kv.sqlite3'}"}))
    try:
        await setup(
            AuthStore(core.kv, SecretStore(ENCRYPT)), "admin", access_key_id=ACCESS, secret_access_key=SECRET
        )
        await core.graveler.create_repository("repo", f"local://{root / 'ns'}")
        per_dir = keys // 100
        for d in range(100):
            items = [UploadItem(f"list/d{d:03d}/f{i:05d}", b"x") for i in range(per_dir)]
            await core.objects.upload_many("repo", "main", items)
        await core.graveler.commit(
            "repo", "main", committer="bench", message="listing keys"
        )  # listed committed
    finally:
        await core.aclose()


def self_signed(root: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key (``openssl``), as PEM files."""
    cert, key = root / "cert.pem", root / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


class Servers:
    """lakefs-server and rclone serve s3, started side by side (HTTPS with ``tls``)."""

    ours: subprocess.Popen[bytes] | None = None
    theirs: subprocess.Popen[bytes] | None = None
    ca_bundle: str | None = None

    def __init__(self, root: Path, tls: bool = False) -> None:
        self.root = root
        self.tls = tls

    def start(self, keys: int) -> None:
        root = self.root
        (root / "lakefs").mkdir()
        asyncio.run(seed(root / "lakefs", keys))
        cores = os.cpu_count() or 2
        s3_port, admin_port = free_port(), free_port()
        gateway: dict[str, Any] = {"listen": f"127.0.0.1:{s3_port}"}
        tls_args: list[str] = []
        if self.tls:
            cert, key = self_signed(root)
            gateway["tls"] = {"cert_file": str(cert), "key_file": str(key)}
            tls_args = ["--cert", str(cert), "--key", str(key)]
            self.ca_bundle = str(cert)
        scheme = "https" if self.tls else "http"
        config = {
            "core": {"kv_url": f"sqlite:///{root / 'lakefs' / 'kv.sqlite3'}"},
            "auth": {"encrypt": {"secret_key": ENCRYPT}},
            "gateway": gateway,
            "listen": f"127.0.0.1:{admin_port}",
            "log_level": "WARNING",
        }
        (root / "server.yaml").write_text(yaml.safe_dump(config))
        env = {k: v for k, v in os.environ.items() if not k.startswith("LAKEFS_")}
        self.ours = subprocess.Popen(
            [str(BIN / "lakefs-server"), "run", "--config", str(root / "server.yaml"),
             "--workers", str(cores)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        wait_http(f"http://127.0.0.1:{admin_port}/_ready", self.ours, lambda s: s == 200)
        self.ours_url = f"{scheme}://127.0.0.1:{s3_port}"
        data = root / "rclone"
        (data / "repo" / "main").mkdir(parents=True)
        per_dir = keys // 100
        for d in range(100):
            directory = data / "repo" / "main" / "list" / f"d{d:03d}"
            directory.mkdir(parents=True)
            for i in range(per_dir):
                (directory / f"f{i:05d}").write_bytes(b"x")
        rport = free_port()
        rclone = shutil.which("rclone", path=str(BIN)) or "rclone"
        self.theirs = subprocess.Popen(
            [rclone, "serve", "s3", "--auth-key", f"{ACCESS},{SECRET}", "--addr", f"127.0.0.1:{rport}",
             "--config", "/dev/null", *tls_args, str(data)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        self.theirs_url = f"{scheme}://127.0.0.1:{rport}"
        wait_http(self.theirs_url + "/", self.theirs, lambda s: s in (200, 400, 403), self.ca_bundle)

    def pids(self, which: str) -> list[int]:
        """The server's processes (ours: the parent and its workers)."""
        proc = self.ours if which == "ours" else self.theirs
        assert proc is not None
        found = [proc.pid]
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                if int(stat[1]) == proc.pid:
                    found.append(int(entry.name))
        return found

    def cpu_seconds(self, which: str) -> float:
        total = 0
        for pid in self.pids(which):
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += int(fields[11]) + int(fields[12])
        return total / os.sysconf("SC_CLK_TCK")

    def peak_rss_mb(self, which: str) -> float:
        peak = 0
        for pid in self.pids(which):
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        peak = max(peak, int(line.split()[1]))
            except OSError:
                continue
        return peak / 1024

    def stop(self) -> None:
        for proc in (self.ours, self.theirs):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)


def client(url: str, clients: int, ca_bundle: str | None = None) -> Any:
    config = Config(
        s3={"addressing_style": "path"}, max_pool_connections=clients + 4, retries={"max_attempts": 2}
    )
    return boto3.client(
        "s3",
        endpoint_url=url,
        verify=ca_bundle,
        region_name="us-east-1",
        aws_access_key_id=ACCESS,
        aws_secret_access_key=SECRET,
        config=config,
    )


def small_objects(url: str, clients: int, objects: int, ca_bundle: str | None) -> tuple[float, float]:
    s3 = client(url, clients, ca_bundle)
    body = os.urandom(1024)
    keys = [f"main/small/{i:06d}" for i in range(objects)]

    def run(fn: Callable[[str], object]) -> float:
        started = time.perf_counter()
        with ThreadPoolExecutor(clients) as pool:
            list(pool.map(fn, keys))
        return objects / (time.perf_counter() - started)

    put = run(lambda k: s3.put_object(Bucket="repo", Key=k, Body=body))
    get = run(lambda k: s3.get_object(Bucket="repo", Key=k)["Body"].read())
    return put, get


def big_object(servers: Servers, which: str, url: str, mib: int) -> dict[str, float]:
    s3 = client(url, 8, servers.ca_bundle)
    data = os.urandom(mib * MiB)
    transfer = TransferConfig(multipart_threshold=16 * MiB, multipart_chunksize=16 * MiB, max_concurrency=4)
    cpu = servers.cpu_seconds(which)
    started = time.perf_counter()
    s3.upload_fileobj(io.BytesIO(data), "repo", "main/big", Config=transfer)
    put_s = time.perf_counter() - started
    put_cpu = servers.cpu_seconds(which) - cpu
    out = io.BytesIO()
    started = time.perf_counter()
    s3.download_fileobj("repo", "main/big", out, Config=transfer)
    get_s = time.perf_counter() - started
    assert out.getvalue() == data
    return {
        "put_mb_s": mib * MiB / put_s / 1e6,
        "get_mb_s": mib * MiB / get_s / 1e6,
        "put_cpu_s": put_cpu,
        "peak_rss_mb": servers.peak_rss_mb(which),
    }


def listing(url: str, ca_bundle: str | None) -> tuple[float, float]:
    """Every key paginated (keys/s, best of 2) and the delimited directories (seconds, best of 5),
    after one warm-up of each (every worker's caches)."""
    s3 = client(url, 4, ca_bundle)

    def every() -> float:
        started = time.perf_counter()
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket="repo", Prefix="main/list/")
        count = sum(page.get("KeyCount", 0) for page in pages)
        return count / (time.perf_counter() - started)

    def delimited() -> float:
        started = time.perf_counter()
        dirs = s3.list_objects_v2(Bucket="repo", Prefix="main/list/", Delimiter="/")
        took = time.perf_counter() - started
        assert len(dirs.get("CommonPrefixes", [])) == 100, dirs.get("KeyCount")
        return took

    every(), delimited(), delimited()
    return max(every() for _ in range(2)), min(delimited() for _ in range(5))


def verification_cpu(mib: int, tls: bool = False) -> float:
    """CPU seconds to verify ``mib`` MiB as boto3 sends a multipart part over HTTP (a signed SHA-256
    payload hash plus a CRC32 checksum header), or over HTTPS (``tls``: no payload hash, the CRC32
    alone; boto3 sends it as a trailer, whose framing costs nothing per byte)."""
    import base64
    import hashlib
    import zlib

    from lakefs_core.auth.payload import body_verifier
    from lakefs_core.auth.signed import SignedRequest, VerifiedRequest

    part = os.urandom(16 * MiB)
    crc = base64.b64encode(zlib.crc32(part).to_bytes(4, "big")).decode()
    request = SignedRequest("PUT", "/repo/main/big", "", (("x-amz-checksum-crc32", crc),))
    payload = "UNSIGNED-PAYLOAD" if tls else hashlib.sha256(part).hexdigest()
    verified = VerifiedRequest(ACCESS, 4, payload)
    started = time.process_time()
    for _ in range(mib // 16):
        verifier = body_verifier(verified, request)
        for i in range(0, len(part), 1 << 20):
            verifier.feed(part[i : i + (1 << 20)])
        verifier.finish()
    return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--objects", type=int, default=2000)
    parser.add_argument("--big-mib", type=int, default=256)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--tls", action="store_true", help="both servers over HTTPS (self-signed)")
    only = parser.add_mutually_exclusive_group()
    only.add_argument(
        "--only-big",
        action="store_true",
        help="the big multipart PUT and GET only (no small objects, no listing)",
    )
    only.add_argument(
        "--only-listing",
        action="store_true",
        help="the small objects (which stay staged) and the listings only (no big object)",
    )
    args = parser.parse_args()
    if args.only_big:
        args.keys = 100
    root = Path(tempfile.mkdtemp(prefix="bench-gateway-"))
    servers = Servers(root, tls=args.tls)
    try:
        servers.start(args.keys)
        figures: dict[str, Any] = {}
        for which, url in (("ours", servers.ours_url), ("rclone", servers.theirs_url)):
            try:
                big = {} if args.only_listing else big_object(servers, which, url, args.big_mib)
            except Exception as e:  # rclone serve s3 refuses boto3's chunked HTTPS uploads (411)
                if which == "ours" or not args.tls:
                    raise
                print(f"rclone: the big object failed over HTTPS: {e}", file=sys.stderr)
                big = {
                    "put_mb_s": float("nan"),
                    "get_mb_s": float("nan"),
                    "put_cpu_s": 0.0,
                    "peak_rss_mb": 0.0,
                }
            if args.only_big:
                figures[which] = big
                continue
            put, get = small_objects(url, args.clients, args.objects, servers.ca_bundle)
            every, delimited = listing(url, servers.ca_bundle)
            figures[which] = {"put_1k_per_s": put, "get_1k_per_s": get, "list_keys_per_s": every,
                              "list_delimited_s": delimited, **big}  # fmt: skip
        ours, theirs = figures["ours"], figures["rclone"]
        common: dict[str, Any] = {"machine": machine(), "args": vars(args), "ours": ours, "rclone": theirs}
        if not args.only_big:
            common |= {
                "ratio_put_1k": ours["put_1k_per_s"] / theirs["put_1k_per_s"],
                "ratio_get_1k": ours["get_1k_per_s"] / theirs["get_1k_per_s"],
                "ratio_list_every_key": ours["list_keys_per_s"] / theirs["list_keys_per_s"],
                "ratio_list_delimited": theirs["list_delimited_s"] / ours["list_delimited_s"],
            }
        if args.only_listing:
            report("gateway-listing", **common)
            return
        verify = verification_cpu(args.big_mib, tls=args.tls)
        report(
            "gateway-big" if args.only_big else "gateway",
            **common,
            ratio_big_put=ours["put_mb_s"] / theirs["put_mb_s"],
            ratio_big_get=ours["get_mb_s"] / theirs["get_mb_s"],
            verification_cpu_s=verify,
            verification_share_of_upload_cpu=verify / ours["put_cpu_s"] if ours["put_cpu_s"] else None,
        )
    finally:
        servers.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
