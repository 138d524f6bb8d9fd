"""Build hook for the one optional C extension (everything else is in pyproject.toml).

``lakefs_core.format._fastpath`` is the compiled per-record path of the table writer
(Cython). It is optional: where it cannot be compiled, the install still succeeds and the
pure-Python twin in ``writer.py`` is used (``lakefs_core.format.sstable.writer.ACCELERATED``
tells which). Both produce the same bytes; tests/format/test_fastpath.py checks it.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "lakefs_core.format._fastpath",
            ["lakefs_core/format/_fastpath.pyx"],
            optional=True,
        )
    ]
)
