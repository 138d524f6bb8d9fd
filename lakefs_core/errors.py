"""The project's one exception tree.

Every error raised by library code (``lakefs_core``, ``lakefs_mirror``, ``lakefs_gc``) is a
:class:`LakeFSError`. Drivers translate SDK errors at their edge with ``raise ... from e`` into one
of the branches below, so callers never need to know which driver they talk to:

- :class:`NotFoundError`: the thing asked for does not exist (a definite answer).
- :class:`ConflictError`: the world is not as the caller expected. :class:`PreconditionFailedError`
  is the compare-and-swap flavour (a pointer moved under us); :class:`MergeConflictError` carries
  the conflicting keys; :class:`NoChangesError` refuses an empty commit or merge.
  :class:`NamespaceConflictError` refuses a storage namespace that equals, contains or lies inside
  another repository's. :class:`CanceledError`: an operation was canceled and stopped at a
  checkpoint.
- :class:`CorruptDataError`: stored bytes are not what the format promises; names the file and the
  byte offset. Never retried, never papered over. :class:`TamperedError` is the GC sweep's flavour:
  a run's files do not match the digests its KV record binds them to (``reason`` says how).
- :class:`BadInputError`: the caller's input is wrong; names the field or key path.
  :class:`NotConfirmedError`: a destructive command was not confirmed (no terminal and no ``--yes``,
  or answered no).
- :class:`StartupError`: a daemon cannot start in this environment; names the config key.
- :class:`AccessDeniedError`: the store refused the credentials or the permission.
- :class:`AuthenticationError`: a CLIENT's credentials or request signature were refused;
  :class:`PermissionDeniedError`: its policies do not allow the operation;
  :class:`ProtectedBranchError`: a branch protection rule refuses the write;
  :class:`BadRequestError`: its request is malformed or its body does not match what it declared.
  Each carries the ``s3_code`` an S3 gateway answers. :class:`AlreadySetUpError` refuses a second
  ``auth setup``.
- :class:`StorageFullError`: no space left (local disk, SQLite, PostgreSQL 53100, an S3-compatible
  store's 507); not retryable, since retrying cannot free space.
- :class:`TransientError`: the outcome is unknown or the service is temporarily unavailable;
  ``retryable`` is true. An unknown outcome must never cause a delete.

Each class carries a distinct ``exit_code`` so the CLIs can map errors to process exit codes, and an
``http_status`` that the daemons' HTTP APIs answer (:mod:`lakefs_core.service.http`; a subclass inherits its
parent's unless it says otherwise).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar


class LakeFSError(Exception):
    """Root of every error this project raises."""

    exit_code: ClassVar[int] = 1
    retryable: ClassVar[bool] = False
    # The HTTP status a daemon's API answers for this class (lakefs_core.service.http maps errors by
    # it alone).
    http_status: ClassVar[int] = 500

    def with_note(self, note: str) -> LakeFSError:
        """The same error (class and fields) with ``note`` appended to its message in parentheses:
        for a caller that knows what had already happened when it was raised."""
        message = f"{self.args[0]} ({note})" if self.args else note
        return _rebuild_error(type(self), (message, *self.args[1:]), dict(self.__dict__))

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled as class, args and fields, rebuilt without calling ``__init__``: subclasses take
        # keyword-only fields (``audit_id``, ``key``) that Exception's default, ``cls(*args)``,
        # cannot pass, and an error that does not unpickle breaks a worker-process pool.
        return (_rebuild_error, (type(self), self.args, dict(self.__dict__)))


def _rebuild_error(cls: type[LakeFSError], args: tuple[Any, ...], fields: dict[str, Any]) -> LakeFSError:
    error = cls.__new__(cls, *args)
    error.args = args
    error.__dict__.update(fields)
    return error


class NotFoundError(LakeFSError):
    """The requested object, record, ref or file does not exist."""

    exit_code = 2
    http_status = 404


class PurgedError(NotFoundError):
    """The object was deliberately destroyed by an audited purge; ``audit_id`` names the record."""

    exit_code = 17
    http_status = 410

    def __init__(self, message: str, *, audit_id: str) -> None:
        super().__init__(message)
        self.audit_id = audit_id


class ConflictError(LakeFSError):
    """The operation conflicts with the current state."""

    exit_code = 3
    http_status = 409


class PreconditionFailedError(ConflictError):
    """A compare-and-swap expectation (absent / exists / equals bytes) did not hold."""

    exit_code = 4
    http_status = 409


class MergeConflictError(ConflictError):
    """A three-way merge found keys changed differently on both sides."""

    exit_code = 5
    http_status = 409

    def __init__(self, keys: Sequence[bytes], message: str | None = None) -> None:
        self.keys: list[bytes] = list(keys)
        shown = ", ".join(k.decode("utf-8", "backslashreplace") for k in self.keys[:10])
        more = f" (+{len(self.keys) - 10} more)" if len(self.keys) > 10 else ""
        super().__init__(message or f"merge conflict on {len(self.keys)} key(s): {shown}{more}")


class ReadOnlyError(ConflictError):
    """A write was refused because the target (e.g. a mirror repository) is read-only."""

    exit_code = 6
    http_status = 409


class TooManyRetriesError(ConflictError):
    """A bounded compare-and-swap retry loop was exhausted by concurrent writers."""

    exit_code = 7
    http_status = 503  # concurrent writers won every round: retry later


class NoChangesError(ConflictError):
    """A commit or merge would change nothing (and empty commits were not allowed)."""

    exit_code = 13
    http_status = 409


class NamespaceConflictError(ConflictError):
    """A storage namespace equals, contains or lies inside one another repository already claims."""

    exit_code = 15
    http_status = 409


class CanceledError(ConflictError):
    """A long operation stopped at a checkpoint because it was canceled (an import canceled through
    its status record); what it had done is not visible."""

    exit_code = 25
    http_status = 409


class CorruptDataError(LakeFSError):
    """Stored bytes violate the format. Names the file and, where known, the byte offset."""

    exit_code = 8
    http_status = 500

    def __init__(self, message: str, *, file: str | None = None, offset: int | None = None) -> None:
        self.file = file
        self.offset = offset
        where = []
        if file is not None:
            where.append(f"file {file}")
        if offset is not None:
            where.append(f"offset {offset}")
        super().__init__(f"{message} ({', '.join(where)})" if where else message)


class TamperedError(CorruptDataError):
    """A GC run's files in the namespace do not match its run record in the KV (a digest, a part
    missing or extra, no record, a record not ``complete``), or name an address outside the
    namespace's ``data/``. The sweep refuses the run: nothing is deleted. ``reason`` is one of a
    fixed set (the refusal metric's label)."""

    exit_code = 18
    http_status = 409

    def __init__(self, message: str, *, reason: str, file: str | None = None) -> None:
        self.reason = reason
        super().__init__(message, file=file)


class BadInputError(LakeFSError, ValueError):
    """The caller's input is invalid. ``field`` names what was wrong (a key path, argument, field)."""

    exit_code = 9
    http_status = 400

    def __init__(self, message: str, *, field: str | None = None) -> None:
        self.field = field
        super().__init__(f"{field}: {message}" if field else message)


class NotConfirmedError(BadInputError):
    """A destructive command was not confirmed: answered "no" on the terminal, or run without one
    (a script, a pipe) and without ``--yes``. Nothing was changed. Distinct from 130 (Ctrl-C)."""

    exit_code = 19
    http_status = 400

    def __init__(self, message: str) -> None:
        super().__init__(message, field="--yes")


class InjectedFaultError(LakeFSError):
    """A crash test's injected failure (``LAKEFS_GC_FAULT``); never raised in normal operation."""

    exit_code = 86
    http_status = 500


class StartupError(LakeFSError):
    """A daemon cannot start in this environment: listen port in use, state directory not
    creatable, a SQLite database whose directory does not exist. ``key`` names the config key."""

    exit_code = 16
    http_status = 500

    def __init__(self, message: str, *, key: str) -> None:
        self.key = key
        super().__init__(f"{key}: {message}")


class ConfigError(BadInputError):
    """A configuration with one or more problems, ALL listed: ``problems`` holds ``(key path,
    message)`` pairs (messages never repeat a value); ``field`` and the text start with the first."""

    def __init__(self, problems: Sequence[tuple[str, str]]) -> None:
        self.problems: list[tuple[str, str]] = list(problems) or [("config", "invalid configuration")]
        first_field, first = self.problems[0]
        rest = "".join(f"; {field}: {message}" for field, message in self.problems[1:])
        more = f" ({len(self.problems)} problems)" if len(self.problems) > 1 else ""
        super().__init__(f"{first}{rest}{more}", field=first_field)


class AccessDeniedError(LakeFSError):
    """The object store refused the credentials or the permission (S3 AccessDenied, EACCES)."""

    exit_code = 12
    http_status = 502  # a store refused THIS daemon's credentials, not the client's


class AuthenticationError(LakeFSError):
    """A client's credentials or request signature were refused: an unknown access key, a signature
    that does not match, a request outside its time window. ``s3_code`` is the S3 error code to
    answer (``SignatureDoesNotMatch``, ``InvalidAccessKeyId``, ``RequestTimeTooSkewed``,
    ``AccessDenied`` for an expired presigned URL). Never carries a secret or a signature."""

    exit_code = 20
    http_status = 403

    def __init__(self, message: str, *, s3_code: str = "AccessDenied") -> None:
        self.s3_code = s3_code
        super().__init__(message)


class PermissionDeniedError(LakeFSError):
    """An authenticated principal's policies do not allow the operation (an explicit deny, or no
    statement allows it: lakeFS's RBAC)."""

    exit_code = 21
    http_status = 403
    s3_code = "AccessDenied"


class ProtectedBranchError(PermissionDeniedError):
    """A write into a branch that a branch protection rule of its repository protects (lakeFS's
    ``ErrProtectedBranch``; the message starts with lakeFS's: "cannot write to protected branch",
    "cannot commit to protected branch" or "protected branch"). ``repo``, ``branch`` and ``pattern``
    name the branch and the rule that matched it."""

    exit_code = 24
    http_status = 403

    def __init__(self, message: str, *, repo: str = "", branch: str = "", pattern: str = "") -> None:
        self.repo, self.branch, self.pattern = repo, branch, pattern
        where = f": branch {branch!r} of repository {repo!r} matches rule {pattern!r}" if branch else ""
        super().__init__(f"{message}{where}")
        self.lakefs_message = message


class BadRequestError(BadInputError):
    """A client's request is malformed (an authorization header, a chunk of a streamed body) or its
    body does not match what it declared (``Content-MD5``, ``x-amz-checksum-*``,
    ``x-amz-content-sha256``, a decoded length). ``s3_code`` is the S3 error code to answer
    (``AuthorizationHeaderMalformed``, ``InvalidArgument``, ``BadDigest``, ``InvalidDigest``,
    ``XAmzContentSHA256Mismatch``, ``IncompleteBody``, ...)."""

    exit_code = 22
    http_status = 400

    def __init__(self, message: str, *, s3_code: str = "InvalidArgument", field: str | None = None) -> None:
        self.s3_code = s3_code
        super().__init__(message, field=field)


class AlreadySetUpError(ConflictError):
    """``auth setup`` ran before on this KV store (lakeFS's installation metadata says so)."""

    exit_code = 23
    http_status = 409


class StorageFullError(LakeFSError):
    """No space left where data or metadata is written (ENOSPC/EDQUOT on a local namespace, SQLite
    "database or disk is full", PostgreSQL 53100). Not retryable: retrying cannot free space."""

    exit_code = 14
    http_status = 507


class TransientError(LakeFSError):
    """Temporary failure or unknown outcome: safe to retry, never grounds for a delete."""

    exit_code = 10
    http_status = 503
    retryable = True


class UnreachableError(TransientError):
    """A backing service (KV store, object store, peer daemon) could not be reached."""

    exit_code = 11
    http_status = 503


def is_retryable(exc: BaseException) -> bool:
    """True for errors that a bounded retry loop may try again (tenacity predicate helper)."""
    return isinstance(exc, LakeFSError) and exc.retryable


def first_exception(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first leaf exception of a task group's failure: bounded-concurrency helpers re-raise it
    alone (``raise first_exception(g) from None``), so callers see one typed error, not a group."""
    first = group.exceptions[0]
    return first_exception(first) if isinstance(first, BaseExceptionGroup) else first


def undecodable_shown(text: str) -> str:
    """``text`` for a message, the bytes the OS could not decode shown as ``\\xNN`` escapes (other
    lone surrogates as ``\\udNNN``)."""
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode()
    return raw.decode("utf-8", "backslashreplace")


def encode_utf8(text: str, field: str) -> bytes:
    """``text`` as UTF-8, or :class:`BadInputError` naming ``field`` for a lone surrogate (bytes the
    OS could not decode, from argv, the environment or a file name), shown as those bytes."""
    try:
        return text.encode()
    except UnicodeEncodeError:
        raise BadInputError(f"'{undecodable_shown(text)[:200]}' is not valid UTF-8", field=field) from None
