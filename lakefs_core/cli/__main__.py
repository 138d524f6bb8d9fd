"""``python -m lakefs_core.cli`` is ``lakefs-core``."""

import sys

from lakefs_core.cli import process_main

sys.exit(process_main())
