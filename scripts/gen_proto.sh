#!/usr/bin/env bash
# Regenerate the checked-in protobuf code under lakefs_core/format/proto/.
#
# Usage: scripts/gen_proto.sh [OUT_ROOT]
#   OUT_ROOT defaults to the repository root (regenerate in place). tests/format/test_proto.py passes
#   a temporary directory and compares the result with the checked-in files, so they cannot drift.
#
# The include root is the repository root (not the proto folder), so descriptors are registered as
# "lakefs_core/format/proto/<name>.proto" (no clash with other users of a bare "catalog.proto" in the
# global descriptor pool) and any cross-file import is emitted as a fully qualified
# "from lakefs_core.format.proto import ..." that works without sys.path tricks.
#
# The gencode version is that of grpcio-tools' bundled protoc; it must not be newer than the protobuf
# runtime (the generated modules check this at import time).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out_root="${1:-$repo_root}"
python="${PYTHON:-$repo_root/.venv/bin/python}"

cd "$repo_root"
mkdir -p "$out_root/lakefs_core/format/proto"
"$python" -m grpc_tools.protoc \
    -I. \
    --python_out="$out_root" \
    --pyi_out="$out_root" \
    lakefs_core/format/proto/catalog.proto \
    lakefs_core/format/proto/committed.proto \
    lakefs_core/format/proto/graveler.proto \
    lakefs_core/format/proto/auth.proto \
    lakefs_core/format/proto/kvindex.proto
