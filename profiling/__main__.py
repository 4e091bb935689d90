"""`python -m profiling` (see profiling/cli.py and docs/profiling.md)."""

import sys

from profiling.cli import main

if __name__ == "__main__":
    sys.exit(main())
