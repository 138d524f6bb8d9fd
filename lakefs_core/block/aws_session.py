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
import ssl
import threading
from typing import Any, SupportsIndex

import aioboto3
import aiobotocore.session
import aiohttp
from aiobotocore.httpsession import AIOHTTPSession
from botocore.httpsession import create_urllib3_context, get_cert_path
from botocore.loaders import Loader

__all__ = ["SharedTLSSession", "new_session", "shared_loader", "tls_context"]

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


_CONTEXTS: dict[tuple[str | None, str | None, str | None], ssl.SSLContext] = {}


def tls_context(ca_certs: str | None, cert_file: str | None, key_file: str | None) -> ssl.SSLContext:
    """The process's TLS context for a CA bundle and a client certificate, built as aiobotocore
    builds one (urllib3's defaults, then the certificate and the bundle)."""
    key = (ca_certs, cert_file, key_file)
    with _LOCK:
        context = _CONTEXTS.get(key)
        if context is None:
            context = create_urllib3_context()
            if cert_file:
                context.load_cert_chain(cert_file, key_file)
            if ca_certs:
                context.load_verify_locations(ca_certs, None, None)
            _CONTEXTS[key] = context
        return context


class SharedTLSSession(AIOHTTPSession):
    """aiobotocore's HTTP session whose connector takes :func:`tls_context` (see the module
    docstring)."""

    # Set by AIOHTTPSession.__init__ (aiobotocore comes pinned through aioboto3's exact version);
    # _create_connector below is its own with the context taken instead of built.
    _verify: bool
    _cert_file: str | None
    _key_file: str | None
    _max_pool_connections: int
    _connector_args: dict[str, Any]

    def _create_connector(self, proxy_url: str | None) -> aiohttp.TCPConnector:
        if proxy_url or not self._verify:
            return super()._create_connector(proxy_url)  # type: ignore[misc,no-any-return]
        context = tls_context(get_cert_path(self._verify), self._cert_file, self._key_file)
        return aiohttp.TCPConnector(limit=self._max_pool_connections, ssl=context, **self._connector_args)
