"""``python -m lakefs_gc.cli`` is ``lakefs-gc``."""

import sys

from lakefs_gc.cli import main

sys.exit(main())
