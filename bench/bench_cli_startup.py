"""How long the command lines take to start (issue 38), hyperfine-style: repeated runs, medians.

Each command runs ``--runs`` times as a real process (the console scripts of the interpreter
running this benchmark), interleaved round by round with the baseline, ``python -c pass`` (the
interpreter's own start-up, site and the editable-install finder included), so the load of other
processes falls on all alike. One warm-up round runs first (page cache, ``__pycache__``: the
benchmark unsets ``PYTHONDONTWRITEBYTECODE``, as an installed command has its bytecode).

Commands: ``lakefs-core --help``, ``lakefs-core --version``, ``lakefs-core fs ls`` of a small branch
(``--objects`` committed objects, listed as lakectl does) on the embedded default (SQLite + a local
namespace, in a private home), ``lakefs-gc --help``, ``lakefs-mirror --help``.

Reported per command: the median wall seconds and the median CPU seconds (user + system of the
child), ``over_python``: the median of the per-round differences to the baseline's wall time (what
the command adds to an empty interpreter) and ``ratio``: median wall / median baseline wall.
Targets (issue 38): ``lakefs-core --help`` ≤ 0.15 s, ``fs ls`` ≤ 0.3 s, ``lakefs-gc --help`` and
``lakefs-mirror --help`` ≤ 0.2 s.

Run: ``.venv/bin/python -m bench.bench_cli_startup [--runs 15] [--objects 3]``.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import machine, report

BIN = Path(sys.executable).parent


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one run of ``argv`` (which must succeed)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{argv}: exit {proc.returncode}: {proc.stderr.decode(errors='replace')}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def prepare(home: Path, objects: int) -> dict[str, str]:
    """A private home with one repository whose ``main`` holds ``objects`` committed objects."""
    # PYTHONDONTWRITEBYTECODE (set in some sandboxes) would recompile every changed module on every
    # run (0.7 s of `fs ls` here): an installed command has its bytecode, the warm-up round writes it.
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LAKEFS_CORE", "XDG_")) and k != "PYTHONDONTWRITEBYTECODE"
    }
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / "config"), XDG_DATA_HOME=str(home / "data"))
    core = str(BIN / "lakefs-core")
    tree = home / "tree"
    tree.mkdir(parents=True)
    for i in range(objects):
        (tree / f"part-{i:04d}.parquet").write_bytes(b"x" * 100)
    steps = [
        [core, "repo", "create", "lakefs://bench", f"local://{home / 'ns'}"],
        [core, "fs", "upload", "-r", "-s", str(tree), "lakefs://bench/main/data/"],
        [core, "commit", "-m", "data", "lakefs://bench/main"],
    ]
    for argv in steps:
        subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
    return env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--objects", type=int, default=3)
    args = parser.parse_args()
    core, gc, mirror = (str(BIN / name) for name in ("lakefs-core", "lakefs-gc", "lakefs-mirror"))
    commands = {
        "python -c pass (baseline)": [sys.executable, "-c", "pass"],
        "lakefs-core --version": [core, "--version"],
        "lakefs-core --help": [core, "--help"],
        "lakefs-core fs ls": [core, "fs", "ls", "lakefs://bench/main/data/"],
        "lakefs-gc --help": [gc, "--help"],
        "lakefs-mirror --help": [mirror, "--help"],
    }
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as tmp:
        env = prepare(Path(tmp), args.objects)
        walls: dict[str, list[float]] = {name: [] for name in commands}
        cpus: dict[str, list[float]] = {name: [] for name in commands}
        for round_ in range(args.runs + 1):
            for name, argv in commands.items():
                wall, cpu = timed(argv, env)
                if round_:  # round 0 warms up
                    walls[name].append(wall)
                    cpus[name].append(cpu)
    base = walls["python -c pass (baseline)"]
    results = {}
    for name in commands:
        results[name] = {
            "wall_median_s": round(statistics.median(walls[name]), 4),
            "wall_min_s": round(min(walls[name]), 4),
            "cpu_median_s": round(statistics.median(cpus[name]), 4),
            "over_python_s": round(
                statistics.median(w - b for w, b in zip(walls[name], base, strict=True)), 4
            ),
            "ratio": round(statistics.median(walls[name]) / statistics.median(base), 2),
        }
    for name, row in results.items():
        print(
            f"{name:28} wall {row['wall_median_s']:.3f} s (min {row['wall_min_s']:.3f})  "
            f"cpu {row['cpu_median_s']:.3f} s  +{row['over_python_s']:.3f} s over python  ×{row['ratio']}"
        )
    print(f"load average {os.getloadavg()}")
    report("cli_startup", runs=args.runs, objects=args.objects, machine=machine(), results=results)


if __name__ == "__main__":
    main()
