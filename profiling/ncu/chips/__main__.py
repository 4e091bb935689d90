"""`python -m profiling.ncu.chips [--write]`: print the per-chip counter tables of docs/profiling.md,
or regenerate the committed table (ncu_chips.json) from NVIDIA's metric database."""

from __future__ import annotations

import argparse
import sys

from profiling.ncu import nvperf
from profiling.ncu.chips.counters import TABLE_FILE
from profiling.ncu.chips.table import aggregates_markdown, build_table, markdown, table_text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m profiling.ncu.chips",
        description="NVIDIA's metric database as this project uses it: regenerate the committed "
        "table, or print the per-chip counter table of docs/profiling.md",
    )
    p.add_argument(
        "--write",
        action="store_true",
        help=f"regenerate {TABLE_FILE.name} from {nvperf.LIBRARY_NAME}",
    )
    args = p.parse_args(argv)
    if args.write:
        db = nvperf.open_database()
        if db is None:
            print(f"error: {nvperf.load_error()}", file=sys.stderr)
            return 1
        TABLE_FILE.write_text(table_text(build_table(db)), encoding="utf-8")
        print(
            f"wrote {TABLE_FILE} ({len(db.chips)} chips, ncu-report {nvperf.ncu_report_version()})"
        )
        return 0
    print(markdown())
    print()
    print(aggregates_markdown())
    return 0


if __name__ == "__main__":
    sys.exit(main())
