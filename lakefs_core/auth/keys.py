"""Access key ids and secret access keys generated as lakeFS generates them (``pkg/auth/keys``).

- access key id: ``AKIAJ`` + 14 characters of the alphabet ``A-Z2-7`` + ``Q`` (20 characters; one
  random byte per character, taken modulo 32, which the 256 byte values divide evenly);
- secret access key: 30 random bytes, standard base64 (40 characters, ``A-Za-z0-9+/``).

:func:`valid_access_key_id` is lakeFS's own rule for keys given by a caller (3 to 20 characters); this
project also refuses characters that would break the credential scope of a signed request or a KV
key (``/``, whitespace, controls).
"""

from __future__ import annotations

import base64
import re
import secrets

__all__ = [
    "ACCESS_KEY_ALPHABET",
    "generate_access_key_id",
    "generate_secret_access_key",
    "valid_access_key_id",
]

ACCESS_KEY_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
_ACCESS_KEY_RANDOM = 14
_SECRET_BYTES = 30
_GIVEN_KEY = re.compile(r"[!-.0-~]{3,20}")  # printable ASCII without space and '/'


def generate_access_key_id() -> str:
    random = secrets.token_bytes(_ACCESS_KEY_RANDOM)
    return "AKIAJ" + "".join(ACCESS_KEY_ALPHABET[b % len(ACCESS_KEY_ALPHABET)] for b in random) + "Q"


def generate_secret_access_key() -> str:
    return base64.b64encode(secrets.token_bytes(_SECRET_BYTES)).decode()


def valid_access_key_id(key: str) -> bool:
    """lakeFS's length rule (3-20) plus printable ASCII without ``/`` or space."""
    return bool(_GIVEN_KEY.fullmatch(key))
