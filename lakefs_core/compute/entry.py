"""spark-submit entry script: ``spark-submit [options] <this file> JOB --args FILE --result FILE``.

spark-submit needs a ``.py`` path; this file only hands over to :func:`lakefs_core.compute.job.main`
(the project must be importable by the driver's Python: the venv, or ``./env`` from ``--archives``).
"""

import sys

# spark-submit puts this file's directory first on sys.path; its modules are not top-level modules.
if sys.path and sys.path[0] and __file__.startswith(sys.path[0]):
    del sys.path[0]

from lakefs_core.compute.job import main

if __name__ == "__main__":
    sys.exit(main())
