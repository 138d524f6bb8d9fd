"""SQLite as the embedded default: several OS processes (concurrent CLI runs, gateway workers) share
one file, each writing in groups (:mod:`lakefs_core.kv.sqlite_writer`) when its writes are concurrent."""

from __future__ import annotations

import asyncio
import sys
import textwrap
from pathlib import Path

from lakefs_core.kv import Expect, open_kv

REPO_ROOT = Path(__file__).resolve().parents[2]


async def run_children(code: str, argvs: list[list[str]]) -> list[str]:
    """``python -c code *argv`` for every argv, all at once; their outputs (each must exit 0)."""
    children = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            code,
            *argv,
            cwd=REPO_ROOT,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for argv in argvs
    ]
    results = await asyncio.gather(*(child.communicate() for child in children))
    outs = []
    for child, (out, err) in zip(children, results, strict=True):
        assert child.returncode == 0, err.decode()[-3000:]
        outs.append(out.decode().strip())
    return outs


# Each child opens the (possibly not yet existing) database itself, so the processes also race on
# creating the file, switching it to WAL and creating the table.
CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from lakefs_core.errors import PreconditionFailedError, TransientError
    from lakefs_core.kv import Expect, open_kv

    async def main(url: str, times: int, tag: str) -> None:
        kv = await open_kv(url)
        try:
            await kv.set(b"writers", tag.encode(), b"started")
            done = lost = 0
            while done < times:
                try:
                    current = await kv.get(b"p", b"counter")
                    await kv.set_if(b"p", b"counter", b"%d" % (int(current) + 1), Expect.equals(current))
                except (PreconditionFailedError, TransientError):
                    lost += 1
                    continue
                done += 1
                await kv.set_if(b"log", b"%s-%04d" % (tag.encode(), done), b"", Expect.ABSENT)
            print(f"{tag} done={done} lost={lost}")
        finally:
            await kv.close()

    asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3]))
    """
)


async def test_sqlite_cas_across_processes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shared.sqlite3'}"
    seed = await open_kv(url)
    await seed.set_if(b"p", b"counter", b"0", Expect.ABSENT)
    await seed.close()

    processes, per_process = 4, 40
    outs = await run_children(CHILD, [[url, str(per_process), f"proc{i}"] for i in range(processes)])
    for out in outs:
        assert f"done={per_process}" in out, out
        print(out)

    kv = await open_kv(url)
    try:
        assert await kv.get(b"p", b"counter") == b"%d" % (processes * per_process)
        log = [e.key async for e in kv.scan(b"log", page_size=17)]
        writers = [e.key async for e in kv.scan(b"writers")]
    finally:
        await kv.close()
    assert len(log) == processes * per_process
    assert writers == [b"proc%d" % i for i in range(processes)]


async def test_sqlite_fresh_file_created_by_racing_processes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fresh' / 'kv.sqlite3'}"
    code = textwrap.dedent(
        """
        import asyncio, sys
        from lakefs_core.kv import Expect, open_kv
        from lakefs_core.errors import PreconditionFailedError

        async def main() -> None:
            kv = await open_kv(sys.argv[1])
            try:
                try:
                    await kv.set_if(b"p", b"first", sys.argv[2].encode(), Expect.ABSENT)
                    print("won")
                except PreconditionFailedError:
                    print("lost")
            finally:
                await kv.close()

        asyncio.run(main())
        """
    )
    outs = await run_children(code, [[url, f"proc{i}"] for i in range(6)])
    assert sorted(outs) == ["lost"] * 5 + ["won"]
    kv = await open_kv(url)
    try:
        assert await kv.get(b"p", b"first") == b"proc%d" % outs.index("won")
    finally:
        await kv.close()


GROUPS_CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from lakefs_core.errors import PreconditionFailedError, TransientError
    from lakefs_core.kv import Expect, open_kv

    async def increment(kv, times):
        done = 0
        while done < times:
            try:
                current = await kv.get(b"p", b"counter")
                await kv.set_if(b"p", b"counter", b"%d" % (int(current) + 1), Expect.equals(current))
            except (PreconditionFailedError, TransientError):
                continue
            done += 1

    async def claim(kv, key, tag):
        try:
            await kv.set_if(b"claims", key, tag, Expect.ABSENT)
            return 1
        except PreconditionFailedError:
            return 0

    async def main(url, tag):
        kv = await open_kv(url)
        try:
            claims = [claim(kv, b"%03d" % i, tag.encode()) for i in range(60)]
            results = await asyncio.gather(*(increment(kv, 5) for _ in range(12)), *claims)
            print(f"{tag} won={sum(results[12:])}")
        finally:
            await kv.close()

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


async def test_two_processes_writing_in_groups_on_one_file(tmp_path: Path) -> None:
    """Two processes, each with many concurrent writers (so its writes go in groups), share one
    file: every CAS increment lands once, every key is claimed by one writer."""
    url = f"sqlite:///{tmp_path / 'shared.sqlite3'}"
    seed = await open_kv(url)
    try:
        await seed.set_if(b"p", b"counter", b"0", Expect.ABSENT)
        outs = await run_children(GROUPS_CHILD, [[url, tag] for tag in ("one", "two")])
        won = {}
        for out in outs:
            tag, count = out.split(" won=")
            won[tag.encode()] = int(count)
        assert await seed.get(b"p", b"counter") == b"%d" % (2 * 12 * 5)
        claims = [e.value async for e in seed.scan(b"claims")]
    finally:
        await seed.close()
    assert len(claims) == 60 and sum(won.values()) == 60
    assert {tag: claims.count(tag) for tag in won} == won
