"""`python -m common.upload`: send runs kept offline (server unreachable) to the tracking server.

`upload_spooled` is also what a resumed sweep calls to send its own spooled runs first.
"""

from __future__ import annotations

import shutil
from dataclasses import asdict
from pathlib import Path

from common import console
from common.cli import ArgumentParser, cli_entry
from common.errors import BenchError, one_line
from common.server import is_unreachable
from common.spool import save_entry, spool_dir, spooled_runs
from common.tracking import RunRecord, RunSession, experiment_id_for, mlflow_client


def upload_spooled(folder: Path | None = None, select=None) -> tuple[int, int]:
    """Send spooled runs to the current tracking server. Returns (sent, still_spooled).

    `select(entry)` limits the upload to some entries (a resumed sweep sends its own). Safe to
    interrupt and repeat: a run id is written back into its entry (and into its children's entries,
    as their parent) as soon as the server created it, and what was sent is dropped from the entry,
    so a second upload completes the same run instead of creating another. Progress is told through
    common.console.info (silent inside console.quiet()).
    """
    client = mlflow_client()
    sent = 0
    every = spooled_runs(folder)
    entries = [e for e in every if select is None or select(e)]
    run_ids: dict[str, str] = {}
    waiting = 0
    for entry in entries:
        rec = RunRecord(**entry["record"])
        # Entries written before "unsent" existed hold only the unsent part in "record": that
        # format shipped (main at stop 8, before commit 8146611), so such entries may be on disk.
        unsent = rec if entry.get("unsent") is None else RunRecord(**entry["unsent"])
        parent_local = entry.get("parent_local_id")
        parent_run = entry.get("parent_run_id") or run_ids.get(parent_local or "")
        if (
            parent_local
            and not parent_run
            and not entry.get("run_id")
            and any(e["local_id"] == parent_local for e in every if Path(e["_path"]).exists())
        ):
            waiting += 1  # its parent is still spooled: creating it now would orphan it
            continue
        session = RunSession(rec.run_kind, run_name=rec.run_name, tags=rec.tags, source_tags=False)
        try:
            if entry.get("run_id"):
                session.continue_run(entry["run_id"], client)
            else:
                exp_id = entry.get("experiment_id") or (
                    experiment_id_for(entry["experiment"], create=True, client=client)
                    if entry.get("experiment")
                    else "0"
                )
                session.create_run(exp_id, parent_run, client)
                entry.update(
                    run_id=session.run_id,
                    experiment_id=exp_id,
                    parent_run_id=parent_run,
                    unsent=asdict(unsent),
                )
                save_entry(entry)
                _link_children(every, entry)
            session.send(unsent)
            session.terminate(entry.get("status") or "FINISHED")
        except Exception as exc:  # noqa: BLE001
            if entry.get("run_id"):
                entry["unsent"] = asdict(unsent)  # what send has not sent yet
                save_entry(entry)
            if is_unreachable(exc):
                console.info(f"server still unreachable: {one_line(exc)[:200]}")
                break
            raise
        run_ids[entry["local_id"]] = session.run_id
        _link_children(every, entry)
        shutil.rmtree(Path(entry["_path"]).parent, ignore_errors=True)
        sent += 1
        console.info(f"uploaded {rec.run_kind} run {rec.run_name or ''} -> {session.run_id}")
    if waiting:
        console.info(f"{waiting} run(s) wait for their parent run to be uploaded first")
    return sent, len(entries) - sent


def _link_children(entries: list[dict], parent: dict) -> None:
    """Record `parent`'s server run id in its spooled children, so a later upload links them."""
    for child in entries:
        if (
            child.get("parent_local_id") == parent["local_id"]
            and not child.get("parent_run_id")
            and Path(child["_path"]).exists()
        ):
            child["parent_run_id"] = parent["run_id"]
            save_entry(child)


@cli_entry
def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m common.upload", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--spool-dir", default=None, help=f"where offline runs are kept (default {spool_dir()})"
    )
    parser.add_argument("--list", action="store_true", help="only list the spooled runs")
    args = parser.parse_args(argv)
    folder = Path(args.spool_dir) if args.spool_dir else spool_dir()
    entries = spooled_runs(folder)
    if args.list or not entries:
        for e in entries:
            rec = e["record"]
            # a run id: the server has the run (created before the outage) and upload completes it in place
            where = f"completes run {e['run_id']} on" if e.get("run_id") else "for"
            console.result(
                f"{e['local_id']}  {rec['run_kind']:8s} {rec.get('run_name') or '':40s} {e['status']}  ({where} {e['tracking_uri']})"
            )
        console.result(f"{len(entries)} spooled run(s) in {folder}")
        return 0
    sent, left = upload_spooled(folder)
    console.result(f"uploaded {sent} run(s); {left} left in {folder}")
    if left:
        raise BenchError(
            f"{left} run(s) could not be uploaded yet: run this command again when the server is back"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
