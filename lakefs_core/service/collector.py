"""The cyclic garbage collector in a ``lakefs-core`` process (the console script, ``python -m``).

A command builds most of its long-lived objects while it imports and opens its session: the
classes and schemas of click, pydantic, SQLAlchemy and protobuf, the engine, the event loop. CPython's
collector walks every one of them in each full collection, and the young collections that imports
trigger run hundreds of times. Measured on a 5,000-file ``fs upload -r`` (SQLite + local), the
collections took ~100 ms of a 1.2 s command, and a one-file upload went from 0.49 to 0.39 s without
them (``bench/RESULTS.md``). So a command process, and only one (:func:`command_process`, called by
the process entry point; ``main()`` called in-process by tests or an embedding program leaves the
collector alone):

- runs its start-up with the collector off: from the entry point until the command's module is
  imported (:func:`CLIGroup.get_command <lakefs_core.service.cli.CLIGroup.get_command>`), and again while
  its session opens (:func:`start_up` around :func:`~lakefs_core.wiring.open_core`);
- then freezes what start-up built (``gc.freeze``: the collector never walks those objects again;
  they are reclaimed by reference counting when they die, only a cycle among them outlives its use,
  as in a daemon after :func:`lakefs_core.service.daemon.freeze_startup_heap`) and resumes collecting, with
  a first generation of :data:`FIRST_GENERATION` objects instead of 700, so the per-object work of a
  bulk command (entries, results) triggers a young collection per ten thousand allocations, each
  still bounded by that size.

Nothing here runs at exit: the interpreter's last collection still finalizes whatever the command
left in a cycle (a ResourceWarning for a file left open still shows).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

FIRST_GENERATION = 10_000  # CPython's default is 700


class _State:
    command_process = False  # set once, by the process entry point


def command_process() -> None:
    """Make this process a command process (see the module docstring): the collector is off until
    start-up is over. Called once, by the process entry point, before the command is parsed."""
    _State.command_process = True
    gc.disable()


def started() -> None:
    """Start-up is over: freeze what it built and collect again (in a command process; else
    nothing). Safe to call more than once (each call freezes what was built since)."""
    if not _State.command_process:
        return
    gc.freeze()
    _, second, third = gc.get_threshold()
    gc.set_threshold(FIRST_GENERATION, second, third)
    gc.enable()


@contextmanager
def start_up() -> Iterator[None]:
    """Run the block as start-up (in a command process): the collector off, then :func:`started`,
    also when the block raises."""
    if _State.command_process:
        gc.disable()
    try:
        yield
    finally:
        started()
