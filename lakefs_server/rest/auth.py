"""Who is calling: HTTP Basic (access key id and secret), a Bearer JWT, or the login cookie.

lakeFS's API accepts the three (``pkg/api/auth_middleware.go``); so does this one:

- ``Authorization: Basic base64(key:secret)``: the credential's secret, compared in constant time;
- ``Authorization: Bearer <jwt>`` or the ``internal_auth_session`` cookie: a token from
  ``POST /auth/login``, HS256-signed with the server's secret (lakeFS's ``auth.encrypt.secret_key``),
  ``sub`` the user, ``aud`` ``login``, expiring after :data:`LOGIN_DURATION` (a secret shorter than
  32 bytes is stretched by SHA-256 into the key).

Every failure is one :class:`~lakefs_server.rest.wire.UnauthorizedError` (401) that never says which
part was wrong, nor echoes a secret or a token.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import time
import uuid
from dataclasses import dataclass
from typing import Final

import jwt
from aiohttp import web

from lakefs_core.auth.model import User
from lakefs_core.auth.store import AuthStore
from lakefs_core.errors import LakeFSError, NotFoundError
from lakefs_server.rest.wire import UnauthorizedError

COOKIE: Final = "internal_auth_session"
AUDIENCE: Final = "login"
LOGIN_DURATION: Final = 7 * 24 * 3600  # lakeFS's auth.login_duration default
MAX_HEADER: Final = 8192
MAX_CACHED: Final = 10_000


@dataclass(frozen=True)
class Principal:
    user: User

    @property
    def username(self) -> str:
        return self.user.username


class Authenticator:
    """Checks credentials against the auth store and issues and verifies login tokens."""

    def __init__(self, store: AuthStore, secret: bytes, *, cache_seconds: float = 0.0) -> None:
        if not secret:
            raise ValueError("the token signing secret must not be empty")
        self.store = store
        # Users already verified, by (key id, SHA-256 of the secret) or token subject: one KV read
        # less per request. As long as the auth store's own cache (auth.cache_seconds): a deleted
        # user or key stops working within the same time either way.
        self._cache_seconds = cache_seconds
        self._users: dict[tuple[str, bytes], tuple[float, User]] = {}
        # HS256 wants a key of at least 32 bytes; a shorter configured secret is stretched by SHA-256
        # (lakeFS signs with auth.encrypt.secret_key as it is).
        self._secret = secret if len(secret) >= 32 else hashlib.sha256(secret).digest()

    def __repr__(self) -> str:  # never the secret
        return "Authenticator()"

    def _cached(self, key: tuple[str, bytes]) -> User | None:
        hit = self._users.get(key)
        if hit is None or time.monotonic() - hit[0] > self._cache_seconds:
            return None
        return hit[1]

    def _remember(self, key: tuple[str, bytes], user: User) -> User:
        if self._cache_seconds > 0:
            if len(self._users) >= MAX_CACHED:
                self._users.clear()
            self._users[key] = (time.monotonic(), user)
        return user

    async def check_key(self, access_key_id: str, secret_access_key: str) -> User:
        """The user holding this key pair; :class:`UnauthorizedError` otherwise."""
        cache_key = (access_key_id, hashlib.sha256(secret_access_key.encode()).digest())
        cached = self._cached(cache_key)
        if cached is not None:
            return cached
        try:
            credential = await self.store.get_credentials(access_key_id)
            user = await self.store.get_user(credential.username)
        except NotFoundError:
            raise UnauthorizedError("error authenticating request") from None
        stored = (credential.secret_access_key or "").encode()
        if not stored or not hmac.compare_digest(stored, secret_access_key.encode()):
            raise UnauthorizedError("error authenticating request")
        return self._remember(cache_key, user)

    def issue(self, username: str, now: float | None = None) -> tuple[str, int]:
        """A login token for ``username`` and its expiry (unix seconds)."""
        issued = int(time.time() if now is None else now)
        expires = issued + LOGIN_DURATION
        claims = {"sub": username, "aud": AUDIENCE, "iat": issued, "exp": expires, "jti": uuid.uuid4().hex}
        return jwt.encode(claims, self._secret, algorithm="HS256"), expires

    async def check_token(self, token: str) -> User:
        try:
            claims = jwt.decode(
                token,
                self._secret,
                algorithms=["HS256"],
                audience=AUDIENCE,
                options={"require": ["sub", "exp"]},
            )
        except jwt.PyJWTError:
            raise UnauthorizedError("error authenticating request") from None
        subject = claims.get("sub")
        if not isinstance(subject, str):
            raise UnauthorizedError("error authenticating request")
        cache_key = ("\0jwt", subject.encode())
        cached = self._cached(cache_key)
        if cached is not None:
            return cached
        try:
            return self._remember(cache_key, await self.store.get_user(subject))
        except NotFoundError:
            raise UnauthorizedError("error authenticating request") from None

    async def principal(self, request: web.Request) -> Principal:
        """The caller of ``request``: Basic, then Bearer, then the cookie."""
        header = request.headers.get("Authorization", "")
        if len(header) > MAX_HEADER:
            raise UnauthorizedError("error authenticating request")
        scheme, _, value = header.partition(" ")
        try:
            if scheme.lower() == "basic":
                key, secret = _basic(value.strip())
                return Principal(await self.check_key(key, secret))
            if scheme.lower() == "bearer":
                return Principal(await self.check_token(value.strip()))
            cookie = request.cookies.get(COOKIE)
            if cookie and len(cookie) <= MAX_HEADER:
                return Principal(await self.check_token(cookie))
        except UnauthorizedError:
            raise
        except LakeFSError:
            raise UnauthorizedError("error authenticating request") from None
        raise UnauthorizedError("error authenticating request")


def _basic(value: str) -> tuple[str, str]:
    try:
        decoded = base64.b64decode(value, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        raise UnauthorizedError("error authenticating request") from None
    key, sep, secret = decoded.partition(":")
    if not sep or not key:
        raise UnauthorizedError("error authenticating request")
    return key, secret
