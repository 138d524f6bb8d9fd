"""A pre-imported fork server for the command-line processes a test kills (issue 33).

A SIGKILL test needs a real process to kill, but a command-line process spends most of its CPU
importing (a lite ``lakefs-gc mark --sweep`` of the kill tests' repository: ~0.6 s, ~0.45 s of it
imports; a ``lakefs-mirror run`` daemon ~0.85 s), and ``tests/gc/test_gc_kill.py`` starts ~37 of
them only to kill them (``tests/gc/test_daemon_process.py`` and ``tests/mirror/test_crash.py``
kill daemons the same way). :class:`Zygote` starts
``python -m tests.support.zygote`` once: it imports the command's modules, checks that it has
started no thread (a fork copies only the forking thread: a lock another thread held would stay
held in the child forever), and then forks one child per :meth:`Zygote.spawn` (asyncio,
:class:`ZygoteProcess`) or :meth:`Zygote.popen` (:class:`ForkedPopen`, for a synchronous test).
The child is what the console script would run: a new session (``start_new_session``), the
caller's stdin and stdout/stderr (pipes, ``/dev/null`` or the caller's files) as fds 0-2, the
caller's environment (``os.environ`` replaced, so fault points read it) and working directory,
``sys.argv``, then ``sys.exit(main(argv[1:]))`` at the top of the interpreter (atexit handlers and
the interpreter's shutdown run as in the console script). It is a real process: the test kills it
(``os.killpg``) and reads its exit status, as the exit code or the negative signal number
:mod:`subprocess` would answer, relayed by a waiter process the zygote forks for each child (the
child's parent, which reaps it and sends the status over the request's socket).

Only the imports differ from a fresh process: they happened before the fork, with the test's
environment at the zygote's start. Anything a module reads from the environment at import time is
therefore the zygote's, so a test whose variable matters at import (none of ``lakefs-gc``'s fault
points or options) starts a plain process instead; so does one that reads a process's environment
from ``/proc/<pid>/environ`` (the zygote's there) or needs an exec (``setarch -R``).

The protocol (a ``SOCK_SEQPACKET`` Unix socket, one connection per child): the client sends one
JSON message ``{"argv", "env", "cwd"}`` with three file descriptors (stdin, stdout, stderr); the
waiter answers ``{"pid": N}`` once the child is forked and ``{"returncode": N}`` when it ended. The
zygote ends when its stdin closes (its test process is gone) or on SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tests.support.timing import scaled

_MAX_MESSAGE = 1 << 20


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _child(
    conn: socket.socket, listener: socket.socket, request: dict[str, Any], fds: list[int]
) -> list[str]:
    """In the forked child: become the command's process; returns its argv (the caller runs main)."""
    conn.close()
    listener.close()
    os.setsid()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    argv: list[str] = request["argv"]
    sys.argv = list(argv)
    return argv


def _waiter(
    conn: socket.socket, listener: socket.socket, request: dict[str, Any], fds: list[int]
) -> list[str] | None:
    """In the waiter (forked per request): fork the child, report its pid once the child has its
    own session (as ``Popen(start_new_session=True)`` returns: the caller may signal the group at
    once), report its exit status when it ends, and reap it only once the caller has read that
    status (closed the connection): until then the ended child stays a zombie, as a child of the
    caller's would, so a ``killpg`` racing its end still finds the group. Returns the child's argv
    in the child, never in the waiter."""
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(ready_r)
        argv = _child(conn, listener, request, fds)
        os.close(ready_w)  # its session and streams are in place
        return argv
    os.close(ready_w)
    for fd in fds:
        os.close(fd)
    try:
        os.read(ready_r, 1)  # EOF: the child is set up (or died)
        os.close(ready_r)
        conn.send(json.dumps({"pid": pid}).encode())
        ended = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        assert ended is not None  # WNOHANG is not asked for
        code = ended.si_status if ended.si_code == os.CLD_EXITED else -ended.si_status
        conn.send(json.dumps({"returncode": code}).encode())
        conn.recv(1)  # b"": the caller has the status
        os.waitpid(pid, 0)
    finally:
        os._exit(0)


def serve(path: str, preload: Sequence[str]) -> list[str] | None:
    """Import ``preload``, then fork a child per request on the socket ``path``. Returns in a child
    (its argv); returns None when the zygote ends."""
    for name in preload:
        importlib.import_module(name)
    threads = _threads()
    if threads != 1:  # a thread's held lock would stay held in every child
        raise SystemExit(f"zygote: {threads} threads after importing {list(preload)}: cannot fork safely")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(16)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes select() to reap the waiters
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(sys.stdin, selectors.EVENT_READ)
    print("ready", flush=True)
    with listener:  # closed also when SIGTERM ends the zygote (no ResourceWarning)
        while True:
            for key, _ in selector.select():
                if key.fileobj is sys.stdin:
                    if not sys.stdin.buffer.read1(4096):  # the test process is gone
                        return None
                    continue
                conn, _ = listener.accept()
                message, fds, _, _ = socket.recv_fds(conn, _MAX_MESSAGE, 3)
                if os.fork() == 0:
                    selector.close()
                    argv = _waiter(conn, listener, json.loads(message), fds)
                    if argv is not None:
                        return argv
                conn.close()
                for fd in fds:
                    os.close(fd)
            while True:  # reap the waiters that have ended
                try:
                    if os.waitpid(-1, os.WNOHANG)[0] == 0:
                        break
                except ChildProcessError:
                    break


class ZygoteProcess:
    """A child of the zygote, with what :func:`asyncio.create_subprocess_exec`'s process offers the
    kill tests: ``pid``, ``returncode``, :meth:`wait` and :meth:`communicate` (stdout, stderr)."""

    def __init__(self, conn: socket.socket, pid: int, out: int, err: int) -> None:
        self._conn = conn
        self.pid = pid
        self.returncode: int | None = None
        self._out, self._err = out, err
        self._status: asyncio.Task[int] | None = None

    def _read_status(self) -> int:
        message = self._conn.recv(_MAX_MESSAGE)
        self._conn.close()
        if not message:
            raise RuntimeError(f"zygote: no exit status for pid {self.pid} (the zygote ended)")
        return int(json.loads(message)["returncode"])

    def kill(self) -> None:
        """SIGKILL the child (its pid alone, as :meth:`asyncio.subprocess.Process.kill` does). A child
        that has already ended is left alone (its waiter reaps it at once): :meth:`wait` tells how."""
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)

    async def wait(self) -> int:
        if self._status is None:
            self._status = asyncio.ensure_future(asyncio.to_thread(self._read_status))
        self.returncode = await asyncio.shield(self._status)
        return self.returncode

    async def communicate(self) -> tuple[bytes, bytes]:
        out, err, _ = await asyncio.gather(
            asyncio.to_thread(_drain, self._out), asyncio.to_thread(_drain, self._err), self.wait()
        )
        return out, err


class ForkedPopen:
    """A child of the zygote with :class:`subprocess.Popen`'s ``pid``, ``returncode``, ``poll()`` and
    ``wait(timeout)``."""

    def __init__(self, conn: socket.socket, pid: int) -> None:
        self._conn = conn
        self.pid = pid
        self.returncode: int | None = None

    def _status(self, message: bytes) -> int:
        self._conn.close()
        if not message:
            raise RuntimeError(f"zygote: no exit status for pid {self.pid} (the zygote ended)")
        self.returncode = int(json.loads(message)["returncode"])
        return self.returncode

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                message = self._conn.recv(_MAX_MESSAGE, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return None
            return self._status(message)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self._conn.settimeout(timeout)
            try:
                message = self._conn.recv(_MAX_MESSAGE)
            except TimeoutError:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0.0) from None
            return self._status(message)
        return self.returncode


class Zygote:
    """``python -m tests.support.zygote`` with ``preload`` imported; :meth:`spawn` forks a child that
    runs ``target`` (``module:function``, called with ``argv[1:]``, as the console script calls it)."""

    def __init__(self, target: str, preload: Sequence[str], env: Mapping[str, str] | None = None) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="zygote-")
        self.path = str(Path(self._dir.name) / "socket")
        #: the environment the zygote imported with (the caller's unless given)
        self.env = dict(os.environ if env is None else env)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.zygote", self.path, target, *preload],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=self.env,
            cwd=Path(__file__).resolve().parents[2],
        )
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()  # its imports: under a second of CPU
        if line != b"ready\n":
            self.close()
            raise RuntimeError(f"zygote did not start (exit {self._proc.returncode}): {line!r}")

    def _request(
        self, argv: Sequence[str], env: dict[str, str], cwd: str | None, fds: list[int]
    ) -> socket.socket:
        """Send a request; the connection its waiter answers on (the pid first)."""
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            conn.settimeout(scaled(30))
            conn.connect(self.path)
            request = {"argv": list(argv), "env": env, "cwd": cwd or os.getcwd()}
            socket.send_fds(conn, [json.dumps(request).encode()], fds)
        except BaseException:
            conn.close()
            raise
        return conn

    @staticmethod
    def _pid(conn: socket.socket, message: bytes) -> int:
        if not message:
            raise RuntimeError("zygote: no child started (the zygote ended)")
        conn.settimeout(None)  # the status comes when the child ends, however long it runs
        return int(json.loads(message)["pid"])

    async def spawn(
        self, argv: Sequence[str], env: dict[str, str], *, discard: bool = False, cwd: str | None = None
    ) -> ZygoteProcess:
        """Fork a child running ``argv``; its stdout and stderr are pipes :meth:`ZygoteProcess.communicate`
        reads, or with ``discard`` go to ``/dev/null`` (a daemon nobody reads, whose pipe would fill)."""
        if discard:
            out_r, out_w = os.open(os.devnull, os.O_RDONLY), os.open(os.devnull, os.O_WRONLY)
            err_r, err_w = os.open(os.devnull, os.O_RDONLY), os.open(os.devnull, os.O_WRONLY)
        else:
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
        try:
            conn = self._request(argv, env, cwd, [0, out_w, err_w])
            try:
                pid = self._pid(conn, await asyncio.to_thread(conn.recv, _MAX_MESSAGE))
            except BaseException:
                conn.close()
                raise
        except BaseException:
            os.close(out_r)
            os.close(err_r)
            raise
        finally:
            os.close(out_w)
            os.close(err_w)
        return ZygoteProcess(conn, pid, out_r, err_r)

    def popen(
        self, argv: Sequence[str], env: dict[str, str], *, stdout: int, stderr: int, cwd: str, stdin: int = 0
    ) -> ForkedPopen:
        """Fork a child running ``argv`` with the given stdin, stdout and stderr file descriptors (the
        caller keeps and closes its own); what :class:`subprocess.Popen` offers a synchronous test."""
        conn = self._request(argv, env, cwd, [stdin, stdout, stderr])
        try:
            return ForkedPopen(conn, self._pid(conn, conn.recv(_MAX_MESSAGE)))
        except BaseException:
            conn.close()
            raise

    def run(
        self, argv: Sequence[str], env: dict[str, str], *, cwd: str, input: bytes | None, timeout: float
    ) -> subprocess.CompletedProcess[bytes]:
        """What ``subprocess.run(argv, input=input, capture_output=True, timeout=timeout)`` answers,
        from a forked child: ``input`` (when given) on a pipe as its stdin, else the caller's stdin;
        stdout and stderr pipes read to their end; on the timeout its group is SIGKILLed and
        :class:`subprocess.TimeoutExpired` raised."""
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        in_r, in_w = os.pipe() if input is not None else (0, -1)
        try:
            proc = self.popen(argv, env, stdin=in_r, stdout=out_w, stderr=err_w, cwd=cwd)
        except BaseException:
            for fd in (out_r, err_r, in_w):
                if fd >= 0:
                    os.close(fd)
            raise
        finally:
            for fd in (out_w, err_w) if in_r == 0 else (out_w, err_w, in_r):
                os.close(fd)
        with ThreadPoolExecutor(3) as pool:
            if input is not None:
                pool.submit(_feed, in_w, input)
            out, err = pool.submit(_drain, out_r), pool.submit(_drain, err_r)
            try:
                code = proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                raise subprocess.TimeoutExpired(list(argv), timeout) from None
            return subprocess.CompletedProcess(list(argv), code, out.result(), err.result())

    def __enter__(self) -> Zygote:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(scaled(30))
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        for stream in (self._proc.stdin, self._proc.stdout):
            if stream is not None:
                stream.close()
        self._dir.cleanup()


def _feed(fd: int, data: bytes) -> None:
    """Write ``data`` to a child's stdin pipe and close it (a child that exits unread: EPIPE, as
    :meth:`subprocess.Popen.communicate` ignores it)."""
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view) :]
    except BrokenPipeError:
        pass
    finally:
        os.close(fd)


def _drain(fd: int) -> bytes:
    with open(fd, "rb", closefd=True) as stream:
        return stream.read()


def _main() -> None:
    path, target, *preload = sys.argv[1:]
    module, _, function = target.partition(":")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    argv = serve(path, [*preload, module])
    if argv is None:
        return
    main = getattr(importlib.import_module(module), function)
    sys.exit(main(argv[1:]))  # the child: as the console script does


if __name__ == "__main__":
    _main()
