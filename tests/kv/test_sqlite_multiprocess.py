"""SQLite as the embedded default: several OS processes (concurrent CLI runs) share one file."""

from __future__ import annotations

import asyncio
import sys
import textwrap
from pathlib import Path

from lakefs_core.kv import Expect, open_kv

REPO_ROOT = Path(__file__).resolve().parents[2]

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
    children = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            CHILD,
            url,
            str(per_process),
            f"proc{i}",
            cwd=REPO_ROOT,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for i in range(processes)
    ]
    results = await asyncio.gather(*(child.communicate() for child in children))
    for child, (out, err) in zip(children, results, strict=True):
        assert child.returncode == 0, err.decode()[-3000:]
        assert b"done=%d" % per_process in out, out
        print(out.decode().strip())

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
    children = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            code,
            url,
            f"proc{i}",
            cwd=REPO_ROOT,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for i in range(6)
    ]
    results = await asyncio.gather(*(child.communicate() for child in children))
    outs = []
    for child, (out, err) in zip(children, results, strict=True):
        assert child.returncode == 0, err.decode()[-3000:]
        outs.append(out.decode().strip())
    assert sorted(outs) == ["lost"] * 5 + ["won"]
    kv = await open_kv(url)
    try:
        assert await kv.get(b"p", b"first") == b"proc%d" % outs.index("won")
    finally:
        await kv.close()
