"""Secret access keys encrypted at rest exactly as lakeFS encrypts them (``pkg/auth/crypt``).

The stored bytes are ``salt (8) || nonce (24) || secretbox(plaintext)``:

- the key is ``scrypt(secret, salt, N=512, r=8, p=1, 32 bytes)``, ``secret`` being the configured
  ``auth.encrypt.secret_key`` (its UTF-8 bytes) and ``salt`` 8 random bytes drawn per value;
- ``secretbox`` is NaCl's ``crypto_secretbox`` (XSalsa20-Poly1305) with a random 24-byte nonce, in
  the combined layout both Go's ``secretbox.Seal`` and libsodium's ``crypto_secretbox_easy`` write:
  the 16-byte Poly1305 tag, then the ciphertext.

So lakeFS decrypts what this module writes and the other way round, given the same secret; the same
secret, salt and nonce give identical bytes (tests/auth/test_crypt.py holds both to known vectors).

A value that does not open (a different secret, damaged bytes, a value too short to hold a salt,
nonce and tag) is :class:`~lakefs_core.errors.CorruptDataError`; messages never show the secret, the
key or the plaintext. Decrypting costs one scrypt derivation (about a millisecond, as lakeFS tuned it):
callers on a hot path cache decrypted credentials.
"""

from __future__ import annotations

import hashlib
import secrets

import nacl.exceptions
import nacl.secret

from lakefs_core.errors import BadInputError, CorruptDataError

__all__ = ["KEY_SIZE", "NONCE_SIZE", "OVERHEAD", "SALT_SIZE", "SecretStore"]

SALT_SIZE = 8
KEY_SIZE = 32
NONCE_SIZE = 24
TAG_SIZE = 16
OVERHEAD = SALT_SIZE + NONCE_SIZE + TAG_SIZE
# lakeFS's scrypt parameters (benchmarked there to about 1 ms: the KDF runs on every decryption)
SCRYPT_N = 512
SCRYPT_R = 8
SCRYPT_P = 1


class SecretStore:
    """Encrypts and decrypts values with a key derived from one shared secret (lakeFS's
    ``NaclSecretStore``). The secret never appears in ``repr`` or in any message."""

    __slots__ = ("_secret",)

    def __init__(self, secret: bytes | str) -> None:
        raw = secret.encode() if isinstance(secret, str) else bytes(secret)
        if not raw:
            # lakeFS accepts an empty secret; a key derived from nothing protects nothing.
            raise BadInputError("must not be empty", field="auth.encrypt.secret_key")
        self._secret = raw

    def __repr__(self) -> str:
        return "SecretStore(<secret>)"

    def derive_key(self, salt: bytes) -> bytes:
        """The secretbox key for ``salt`` (scrypt with lakeFS's parameters)."""
        return hashlib.scrypt(self._secret, salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, dklen=KEY_SIZE)

    def encrypt(self, plaintext: bytes, *, salt: bytes | None = None, nonce: bytes | None = None) -> bytes:
        """``salt || nonce || secretbox(plaintext)``; ``salt`` and ``nonce`` are random unless given
        (known-answer tests give them; nothing else should)."""
        salt = secrets.token_bytes(SALT_SIZE) if salt is None else salt
        nonce = secrets.token_bytes(NONCE_SIZE) if nonce is None else nonce
        if len(salt) != SALT_SIZE or len(nonce) != NONCE_SIZE:
            raise BadInputError(f"salt must be {SALT_SIZE} and nonce {NONCE_SIZE} bytes", field="nonce")
        box = nacl.secret.SecretBox(self.derive_key(salt))
        sealed = box.encrypt(plaintext, nonce)  # nonce || tag || ciphertext
        return salt + bytes(sealed)

    def decrypt(self, value: bytes, *, what: str = "an encrypted value") -> bytes:
        """The plaintext of ``value``; :class:`CorruptDataError` naming ``what`` if it does not open."""
        if len(value) < OVERHEAD:
            raise CorruptDataError(
                f"{what} is {len(value)} bytes, shorter than a salt, nonce and tag ({OVERHEAD})"
            )
        salt, nonce = value[:SALT_SIZE], value[SALT_SIZE : SALT_SIZE + NONCE_SIZE]
        box = nacl.secret.SecretBox(self.derive_key(salt))
        try:
            return box.decrypt(value[SALT_SIZE + NONCE_SIZE :], nonce)
        except nacl.exceptions.CryptoError:
            raise CorruptDataError(
                f"{what} does not decrypt: auth.encrypt.secret_key differs from the one it was "
                "encrypted with, or the stored bytes are damaged"
            ) from None
