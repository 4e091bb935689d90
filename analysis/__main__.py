"""`python -m analysis --help`: see analysis/app.py and docs/analysis.md."""

import sys

from analysis.app import cli

if __name__ == "__main__":
    sys.exit(cli())
