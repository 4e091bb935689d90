"""`python -m common.upload`: send runs kept offline (server unreachable) to the tracking server."""

from __future__ import annotations

from common.cli import ArgumentParser
from common.cli import cli_entry
from common.errors import BenchError
from common.tracking import spool_dir, spooled_runs, upload_spooled


@cli_entry
def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m common.upload", description=__doc__)
    parser.add_argument(
        "--spool-dir", default=None, help=f"where offline runs are kept (default {spool_dir()})"
    )
    parser.add_argument("--list", action="store_true", help="only list the spooled runs")
    args = parser.parse_args(argv)
    from pathlib import Path

    folder = Path(args.spool_dir) if args.spool_dir else spool_dir()
    entries = spooled_runs(folder)
    if args.list or not entries:
        for e in entries:
            rec = e["record"]
            # a run id: the server has the run (created before the outage) and upload completes it in place
            where = f"completes run {e['run_id']} on" if e.get("run_id") else "for"
            print(
                f"{e['local_id']}  {rec['run_kind']:8s} {rec.get('run_name') or '':40s} {e['status']}  ({where} {e['tracking_uri']})"
            )
        print(f"{len(entries)} spooled run(s) in {folder}")
        return 0
    sent, left = upload_spooled(folder)
    print(f"uploaded {sent} run(s); {left} left in {folder}")
    if left:
        raise BenchError(
            f"{left} run(s) could not be uploaded yet: run this command again when the server is back"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
