"""The project's typed errors through Spark: one line where they are raised, recovered on the driver.

Spark does not pass a Python worker's exception object to the driver; it passes its TEXT. A task's
:class:`~lakefs_core.errors.LakeFSError` (an object missing or purged, a value that does not fit the
schema) reaches the caller of ``collect()``/``save()`` as PySpark's ``PythonException``, and one
raised while the data source is created, planned or committed (a ref that does not exist, a write
to a tag) as its ``AnalysisException`` (condition ``PYTHON_DATA_SOURCE_ERROR``). Either's text is
Spark's first line (``An exception was thrown from the Python worker:``, ``[PYTHON_DATA_SOURCE_ERROR]
Failed to create Python data source instance: ...``), the Python traceback (only the frames of the
code that raised: PySpark sets ``SPARK_SIMPLIFIED_TRACEBACK``) and, as its last Python line, ours::

    lakefs_core.errors.NotFoundError: lakefs://repo/t/a.parquet (address data/...): ...

- :func:`one_line_errors` (around each worker entry point of :mod:`.source`): a message spanning
  lines (a pyarrow parse error quoting the input) is joined into one, so that last line is the
  whole message.
- :func:`project_error` / :func:`project_errors` (on the driver): the error's class and message
  recovered from that text; ``with project_errors(): df.collect()`` re-raises the project's error
  ``from`` Spark's, so callers catch :class:`~lakefs_core.errors.NotFoundError` and CLIs exit with
  its code. The fields a class keeps besides its message (``field``, ``audit_id``, ...) do not
  travel in the text: they are ``None`` on the recovered error (the message names them).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator
from contextlib import contextmanager

from lakefs_core import errors
from lakefs_core.errors import LakeFSError

MAX_TEXT = 1 << 20  # the tail of a Spark error searched (its JVM stack trace can be long)
MAX_MESSAGE = 4096
_LINE = re.compile(r"^lakefs_core\.errors\.([A-Za-z]{1,64}): ([^\r\n]{0,4096})", re.MULTILINE)
_BREAKS = re.compile(r"\s*[\r\n]+\s*")


def one_line(error: LakeFSError) -> LakeFSError:
    """``error`` with its message on one line (changed in place: the traceback and cause stay)."""
    if error.args and isinstance(error.args[0], str) and ("\n" in error.args[0] or "\r" in error.args[0]):
        error.args = (_BREAKS.sub(" | ", error.args[0].strip()), *error.args[1:])
    return error


@contextmanager
def one_line_errors() -> Iterator[None]:
    """Around a worker's entry point: the project's errors leave it with one-line messages."""
    try:
        yield
    except LakeFSError as e:
        one_line(e)
        raise


def _error_class(name: str) -> type[LakeFSError] | None:
    cls = getattr(errors, name, None)
    return cls if isinstance(cls, type) and issubclass(cls, LakeFSError) else None


def _rebuilt(cls: type[LakeFSError], message: str) -> LakeFSError:
    """An instance of ``cls`` with ``message``, without ``__init__`` (whose keyword-only fields the
    text does not carry): each such field is None."""
    error = cls.__new__(cls, message)
    error.args = (message,)
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or klass in (BaseException, Exception):
            continue
        for parameter in inspect.signature(init).parameters.values():
            if parameter.kind is inspect.Parameter.KEYWORD_ONLY and parameter.name not in error.__dict__:
                default = parameter.default
                setattr(error, parameter.name, None if default is inspect.Parameter.empty else default)
    return error


def project_error(exc: BaseException) -> LakeFSError | None:
    """The project's error inside Spark's exception ``exc`` (or its causes), else None."""
    seen = 0
    current: BaseException | None = exc
    while current is not None and seen < 8:
        if isinstance(current, LakeFSError):
            return current
        text = str(current)[-MAX_TEXT:]
        matches = list(_LINE.finditer(text))
        for match in reversed(matches):  # the last one is the exception that was raised
            cls = _error_class(match.group(1))
            if cls is not None:
                return _rebuilt(cls, match.group(2).rstrip()[:MAX_MESSAGE])
        current = current.__cause__ or current.__context__
        seen += 1
    return None


@contextmanager
def project_errors() -> Iterator[None]:
    """Re-raise a Spark exception that carries the project's error as that error (``from`` it)."""
    try:
        yield
    except LakeFSError:
        raise
    except Exception as e:
        found = project_error(e)
        if found is None:
            raise
        raise found from e
