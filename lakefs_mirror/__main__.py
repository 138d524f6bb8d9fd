"""``python -m lakefs_mirror`` is ``lakefs-mirror``."""

import sys

from lakefs_mirror.cli import main

sys.exit(main())
