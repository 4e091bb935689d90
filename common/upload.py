"""`python -m common.upload`: send runs kept offline (server unreachable) to the tracking server.

`upload_spooled` is also what a resumed sweep calls to send its own spooled runs first.
"""

from __future__ import annotations

import shutil
from dataclasses import asdict
from pathlib import Path

from common import console, schema
from common.cli import ArgumentParser, cli_entry
from common.errors import BenchError, UsageError, one_line
from common.run_record import RunRecord
from common.runs import close_stale_runs, experiment_id_for, mlflow_client
from common.server import check_reachable, is_unreachable, redact, store_problem
from common.spool import entry_lock, save_entry, spool_dir, spooled_runs, unreadable_entries
from common.tracking import RunSession


def upload_spooled(folder: Path | None = None, select=None) -> tuple[int, int]:
    """Send spooled runs to the current tracking server. Returns (sent, still_spooled), where
    still_spooled leaves out the runs another upload is sending (and the children waiting for it).

    `select(entry)` limits the upload to some entries (a resumed sweep sends its own). Safe to
    interrupt and repeat, and to run twice at once: each entry is locked while it is sent (another
    upload skips it), a run id is written back into its entry (and into its children's entries, as
    their parent) as soon as the server created it, a run the server created just before a kill (its
    id not yet saved) is found again by its `spool_local_id` tag, and what was sent is dropped from
    the entry, so a second upload completes the same run instead of creating another. Progress is
    told through common.console.info (silent inside console.quiet()).
    """
    client = mlflow_client()
    sent = 0
    elsewhere: set[str] = set()  # local ids another upload holds, and their waiting children
    every = spooled_runs(folder)
    entries = [e for e in every if select is None or select(e)]
    run_ids: dict[str, str] = {}
    waiting = 0
    for listed in entries:
        with entry_lock(listed) as entry:
            if entry is None:
                if Path(listed["_path"]).exists():  # else: another upload sent it
                    elsewhere.add(listed["local_id"])
                continue
            parent_local = entry.get("parent_local_id")
            parent_run = entry.get("parent_run_id") or run_ids.get(parent_local or "")
            if _waits_for_parent(entry, parent_run, every):
                if parent_local in elsewhere:
                    elsewhere.add(entry["local_id"])  # the upload sending the parent sends it
                else:
                    waiting += 1
                continue
            try:
                run_id = _send(client, entry, parent_run, every)
            except Exception as exc:  # noqa: BLE001
                if is_unreachable(exc):
                    console.info(f"server still unreachable: {redact(one_line(exc))[:200]}")
                    break
                raise BenchError(
                    f"spool entry {entry['_path']} could not be sent: {store_problem(exc)}"
                ) from exc
            run_ids[entry["local_id"]] = run_id
            _remove(entry, run_id)
            sent += 1
    if waiting:
        console.info(f"{waiting} run(s) wait for their parent run to be uploaded first")
    if elsewhere:
        console.info(f"{len(elsewhere)} run(s) are being sent by another upload")
    left = sum(Path(e["_path"]).exists() and e["local_id"] not in elsewhere for e in entries)
    return sent, left


def _waits_for_parent(entry: dict, parent_run: str | None, every: list[dict]) -> bool:
    """Whether the entry's parent run is still spooled, not created: creating the entry's run now
    would orphan it."""
    parent_local = entry.get("parent_local_id")
    return bool(
        parent_local
        and not parent_run
        and not entry.get("run_id")
        and any(e["local_id"] == parent_local for e in every if Path(e["_path"]).exists())
    )


def _remove(entry: dict, run_id: str) -> None:
    """Delete a sent entry, and say so. run.json goes first, while the lock is held: an upload that
    takes the lock later (on a .lock it recreated while rmtree ran) finds no entry instead of
    sending it again."""
    Path(entry["_path"]).unlink(missing_ok=True)
    shutil.rmtree(Path(entry["_path"]).parent, ignore_errors=True)
    rec = entry["record"]
    console.info(f"uploaded {rec['run_kind']} run {rec.get('run_name') or ''} -> {run_id}")


def _send(client, entry: dict, parent_run: str | None, every: list[dict]) -> str:
    """Create (or find, or continue) the entry's run on the server and send what it lacks; the entry
    on disk keeps what is still unsent if a call fails. Returns the run id."""
    rec = RunRecord(**entry["record"])
    # An entry without "unsent" (an earlier spool format, which may still be on disk) holds
    # only the unsent part, in "record".
    unsent = rec if entry.get("unsent") is None else RunRecord(**entry["unsent"])
    session = RunSession(
        rec.run_kind,
        run_name=rec.run_name,
        tags={**rec.tags, schema.TAG_SPOOL_ID: entry["local_id"]},
        source_tags=False,
    )
    try:
        if entry.get("run_id"):
            session.continue_run(entry["run_id"], client)
        else:
            exp_id = entry.get("experiment_id") or (
                experiment_id_for(entry["experiment"], create=True, client=client)
                if entry.get("experiment")
                else "0"
            )
            made = _created_before(client, exp_id, entry["local_id"])
            if made:  # an upload killed between creating the run and saving its id
                session.continue_run(made, client)
                unsent = rec  # the server has its creation tags only
            else:
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
    except Exception:
        if entry.get("run_id"):
            entry["unsent"] = asdict(unsent)  # what send has not sent yet
            save_entry(entry)
        raise
    _link_children(every, entry)
    return session.run_id


def _created_before(client, experiment_id: str, local_id: str) -> str | None:
    """The run an earlier upload of spool entry `local_id` created (found by its `spool_local_id`
    tag) but could not record in the entry before it was killed, if any."""
    runs = client.search_runs(
        [experiment_id],
        f"tags.{schema.TAG_SPOOL_ID} = '{local_id}'",
        order_by=["attributes.start_time ASC"],
        max_results=1,
    )
    return runs[0].info.run_id if runs else None


def _link_children(entries: list[dict], parent: dict) -> None:
    """Record `parent`'s server run id in its spooled children, so a later upload links them."""
    for listed in entries:
        if listed.get("parent_local_id") != parent["local_id"] or listed.get("parent_run_id"):
            continue
        with entry_lock(listed) as child:
            if child is not None and not child.get("parent_run_id"):
                child["parent_run_id"] = parent["run_id"]
                save_entry(child)
                listed["parent_run_id"] = parent["run_id"]


@cli_entry
def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m common.upload", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--spool-dir", default=None, help=f"where offline runs are kept (default {spool_dir()})"
    )
    parser.add_argument("--list", action="store_true", help="only list the spooled runs")
    args = parser.parse_args(argv)
    folder = Path(args.spool_dir) if args.spool_dir else spool_dir()
    if args.spool_dir and not folder.is_dir():  # a typo: main uploaded 0 runs and exited 0
        raise UsageError(
            f"--spool-dir {args.spool_dir} is not a folder: give the folder a command spooled "
            f"into (default {spool_dir()}; see `python -m common.upload --list`)"
        )
    entries = spooled_runs(folder)
    if args.list:
        for e in entries:
            rec = e["record"]
            # a run id: the server has the run (created before the outage) and upload completes it in place
            where = f"completes run {e['run_id']} on" if e.get("run_id") else "for"
            console.result(
                f"{e['local_id']}  {rec['run_kind']:8s} {rec.get('run_name') or '':40s} {e['status']}  ({where} {redact(e.get('tracking_uri') or '?')})"
            )
        console.result(f"{len(entries)} spooled run(s) in {folder}")
        return 0
    try:
        check_reachable()  # a server that is down: seconds, not MLflow's minutes of retries
    except ConnectionError as exc:
        if not entries and not unreadable_entries(folder):
            console.result(f"0 spooled run(s) in {folder}; nothing to upload")
            console.note(f"{exc}: runs left RUNNING by dead processes were not looked for")
            return 0
        raise BenchError(
            f"{exc}: {len(entries)} run(s) stay in {folder}; run this command again when "
            "the server is back"
        ) from None
    close_stale_runs()  # every upload, an empty spool too (docs/robustness.md)
    sent, left = upload_spooled(folder) if entries else (0, 0)
    # entries that cannot be read stay where they are: never counted as sent, nor as "0 left"
    bad = unreadable_entries(folder)
    console.result(
        f"uploaded {sent} run(s); {left} left in {folder}"
        + (
            f"; {len(bad)} spool entr{'y' if len(bad) == 1 else 'ies'} cannot be read"
            if bad
            else ""
        )
    )
    if bad:
        raise BenchError(
            f"{len(bad)} spool entr{'y' if len(bad) == 1 else 'ies'} cannot be read and "
            f"{'was' if len(bad) == 1 else 'were'} not uploaded ({', '.join(map(str, bad[:3]))}"
            f"{', ...' if len(bad) > 3 else ''}): look at {'it' if len(bad) == 1 else 'them'}, "
            "then move them out of the spool folder"
        )
    if left:
        raise BenchError(
            f"{left} run(s) could not be uploaded yet: run this command again when the server is back"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
