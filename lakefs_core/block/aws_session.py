"""New aioboto3 sessions that share botocore's data loader with every other one of this process.

A new ``aioboto3.Session`` gets a new botocore data loader, which parses the service's model, its
endpoint rule set and the partitions file again when the session makes its first client: about
0.1 s of CPU for an S3 client, ten times what making the client costs once they are loaded. A
store or KV opened per task (every partition of a GC job opens its namespace's store from a
:class:`~lakefs_core.compute.partition.StoreRef`) paid it every time.

:func:`new_session` gives each caller its own session (credentials, configuration, event hooks and
clients stay per session, as before) whose loader is shared: the loader holds only what it read
from botocore's and boto3's data files, parsed once per process and per ``AWS_DATA_PATH``. One
session already shares its loader between all the clients it makes, from any thread.
"""

from __future__ import annotations

import os
import threading
from typing import SupportsIndex

import aioboto3
import aiobotocore.session
from botocore.loaders import Loader

__all__ = ["new_session", "shared_loader"]

_LOADERS: dict[str | None, Loader] = {}
_LOCK = threading.Lock()


class _SearchPaths(list[str]):
    """A loader's search path list that keeps one copy of each path: boto3's session appends its
    own data directory to its loader's list, once per session."""

    def append(self, path: str) -> None:
        if path not in self:
            super().append(path)

    def insert(self, index: SupportsIndex, path: str) -> None:
        if path not in self:
            super().insert(index, path)


def shared_loader(data_path: str | None) -> Loader:
    """The process's loader for botocore's ``data_path`` setting (``AWS_DATA_PATH``: extra
    directories, separated by ``os.pathsep``, searched before the built-in ones)."""
    with _LOCK:
        loader = _LOADERS.get(data_path)
        if loader is None:
            paths = (data_path or "").split(os.pathsep)
            extra = [os.path.expanduser(os.path.expandvars(p)) for p in paths if p]
            loader = _LOADERS[data_path] = Loader(extra_search_paths=_SearchPaths(extra))
        return loader


def new_session() -> aioboto3.Session:
    """A new ``aioboto3.Session()`` (credentials and region from the environment, as that gives)
    whose botocore data loader is the process's shared one."""
    core = aiobotocore.session.get_session()
    core.register_component("data_loader", shared_loader(core.get_config_variable("data_path")))
    return aioboto3.Session(botocore_session=core)
