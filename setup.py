"""Build hook for the optional C extensions (everything else is in pyproject.toml).

``lakefs_core.format._fastpath`` is the compiled per-record path of the table writer and
``lakefs_core.block._localput`` the local store's batched small puts without the GIL (Cython).
Both are optional: where they cannot be compiled, the install still succeeds and the pure-Python
twins are used (``lakefs_core.format.accel`` loads them). The twins have the same outcome;
tests/format/test_fastpath.py and tests/block/test_local_batch.py check it.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "lakefs_core.format._fastpath",
            ["lakefs_core/format/_fastpath.pyx"],
            optional=True,
        ),
        Extension(
            "lakefs_core.block._localput",
            ["lakefs_core/block/_localput.pyx"],
            optional=True,
        ),
    ]
)
