"""``python -m lakefs_mirror`` is ``lakefs-mirror``."""

import sys

from lakefs_mirror.cli import main

if __name__ == "__main__":  # a spawned worker process imports this module under another name
    sys.exit(main())
