"""``python -m lakefs_core.cli`` is ``lakefs-core``."""

import sys

from lakefs_core.cli import main

sys.exit(main())
