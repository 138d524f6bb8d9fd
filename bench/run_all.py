"""``make bench``: run every benchmark in turn with its defaults; each prints JSON lines.

``python -m bench.run_all [--quick]``: ``--quick`` runs each at a small size (a smoke check of the
benchmarks themselves, not figures to record).
"""

from __future__ import annotations

import argparse
import subprocess
import sys

BENCHES = {
    "bench.bench_graveler": ["--records", "50000", "--lookups", "50000", "--raggedness", "5000"],
    "bench.bench_repos": ["--objects", "5000", "--big", "50000", "--drivers", "memory,sqlite"],
    "bench.bench_mirror": ["--objects", "300", "--repeat", "3"],
    "bench.bench_mirror_fleet": ["--mirrors", "100", "--objects", "5", "--repeat", "3"],
    "bench.bench_auth": ["--mib", "16", "--repeat", "1"],
    "bench.bench_copy": ["--objects", "2", "--mib", "4"],
    "bench.bench_kv_writes": ["--ops", "20", "--rounds", "1"],
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: check the benchmarks run")
    args = parser.parse_args()
    failed = []
    for module, quick_args in BENCHES.items():
        print(f"# {module}", flush=True)
        cmd = [sys.executable, "-m", module, *(quick_args if args.quick else [])]
        if subprocess.run(cmd, check=False).returncode != 0:
            failed.append(module)
    if failed:
        print(f"# failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
