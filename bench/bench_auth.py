"""Request-body verification cost (lakefs_core.auth.payload), per mode, against an MD5 pass.

The S3 gateway verifies every uploaded body as it streams (issue 34: signature and checksum
verification at most 15% of a 1 GiB upload's CPU). The gateway computes the object's MD5 anyway (the
ETag), so the same-run baseline is one MD5 pass over the same bytes fed in the same 64 KiB pieces.
Each mode's figure is its verification time over ``--mib`` MiB (best of ``--repeat``), as MB/s and
as a ratio to the MD5 pass: ``aws-chunked`` bodies are framed as boto3 frames them (64 KiB chunks).

``python -m bench.bench_auth [--mib 256] [--repeat 3]``
"""

from __future__ import annotations

import argparse
import hashlib
import os

from botocore.httpchecksum import CrtCrc64NvmeChecksum  # type: ignore[import-untyped]

from bench.common import best_of, machine, report
from lakefs_core.auth import sigv4
from lakefs_core.auth.payload import body_verifier
from lakefs_core.auth.signed import (
    STREAMING_SIGNED,
    STREAMING_UNSIGNED_TRAILER,
    UNSIGNED_PAYLOAD,
    ChunkSigning,
    SignedRequest,
    VerifiedRequest,
)

PIECE = 64 * 1024
DATE, SCOPE = "20260101T000000Z", "20260101/us-east-1/s3/aws4_request"


def signed_body(data: bytes, key: bytes, seed: str) -> bytes:
    out, previous = [], seed
    for i in range(0, len(data) + 1, PIECE):
        chunk = data[i : i + PIECE]
        previous = sigv4.chunk_signature(key, DATE, SCOPE, previous, hashlib.sha256(chunk).hexdigest())
        out.append(b"%x;chunk-signature=%s\r\n%s\r\n" % (len(chunk), previous.encode(), chunk))
        if not chunk:
            break
    return b"".join(out)


def unsigned_trailer_body(data: bytes) -> bytes:
    """botocore's aws-chunked framing (AwsChunkedWrapper's; its read() is quadratic on a large body)."""
    crc = CrtCrc64NvmeChecksum()
    crc.update(data)
    chunks = [
        b"%x\r\n%s\r\n" % (len(data[i : i + PIECE]), data[i : i + PIECE]) for i in range(0, len(data), PIECE)
    ]
    return b"".join([*chunks, b"0\r\nx-amz-checksum-crc64nvme:%s\r\n\r\n" % crc.b64digest().encode()])


def feed(verifier_factory: object, body: bytes) -> None:
    verifier = verifier_factory()  # type: ignore[operator]
    for i in range(0, len(body), PIECE):
        verifier.feed(body[i : i + PIECE])
    verifier.finish()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    data = os.urandom(args.mib << 20)
    key = sigv4.signing_key("secret", "20260101", "us-east-1", "s3")
    seed = "0" * 64

    def md5_pass() -> None:
        h = hashlib.md5(usedforsecurity=False)
        for i in range(0, len(data), PIECE):
            h.update(data[i : i + PIECE])

    baseline = best_of(args.repeat, md5_pass)
    sha = hashlib.sha256(data).hexdigest()
    crc_body = unsigned_trailer_body(data)
    modes = {
        "unsigned-payload": (UNSIGNED_PAYLOAD, (), data, None),
        "content-sha256": (sha, (), data, None),
        "signed-chunks": (
            STREAMING_SIGNED,
            (),
            signed_body(data, key, seed),
            ChunkSigning(key, DATE, SCOPE, seed),
        ),
        "unsigned-trailer-crc64nvme": (
            STREAMING_UNSIGNED_TRAILER,
            (("x-amz-trailer", "x-amz-checksum-crc64nvme"),),
            crc_body,
            None,
        ),
    }
    report(
        "auth_body_md5_baseline", mib=args.mib, seconds=round(baseline, 4), mb_s=round(args.mib / baseline, 1)
    )
    for name, (payload, headers, body, signing) in modes.items():
        request = SignedRequest("PUT", "/r/main/k", "", headers)
        verified = VerifiedRequest("AKIAJBENCHBENCHBENCQ", 4, payload, False, signing)
        seconds = best_of(args.repeat, lambda: feed(lambda: body_verifier(verified, request), body))  # noqa: B023
        report(
            "auth_body_verify",
            mode=name,
            mib=args.mib,
            seconds=round(seconds, 4),
            mb_s=round(args.mib / seconds, 1),
            ratio_to_md5=round(seconds / baseline, 3),
            repeat=args.repeat,
        )
    report("auth_machine", **machine())


if __name__ == "__main__":
    main()
