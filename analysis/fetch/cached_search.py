"""A search answered from the local cache (analysis/fetch/segments.py), brought up to date first.

`search(reader, uri, experiment_ids, filter, cap, mode, stats)` returns what `reader.search` would
return for the same arguments: the runs `filter` matches in the experiments, latest first, at most
`cap`. With mode "auto" each experiment's segment for that filter is

* filled by a full search the first time (or when it cannot serve `cap`, or analysis now reads
  other keys), capped at `cap` per experiment: the latest `cap` of a union of experiments are
  among the latest `cap` of each;
* else refreshed: `reader.changes` reports the runs that are new or changed since the segment's
  last refresh and those that are gone, and only those are fetched. analysis/fetch/sql.py lists
  every matching run (exact, cheap on a database); analysis/fetch/api.py asks the server for runs
  started or ended since the last refresh, runs that had not ended, and deleted runs.

Mode "off" searches without the cache; "refresh" (segments.clear first, by the caller) fills anew.
`stats` counts runs taken from the cache and fetched, for the report's note.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pandas as pd

from analysis.fetch import rows, segments

MODES = ("auto", "refresh", "off")


@dataclass
class Stats:
    """What the cached searches of one analysis did."""

    from_cache: int = 0
    fetched: int = 0
    filled: int = 0
    """segments filled by a full search."""
    refreshed: int = 0
    """segments brought up to date incrementally."""
    oldest_fill_ms: int | None = None
    unsaved: str = ""
    """why a segment could not be written (the analysis goes on without keeping it)."""

    def saw_fill(self, filled_ms: int) -> None:
        if self.oldest_fill_ms is None or filled_ms < self.oldest_fill_ms:
            self.oldest_fill_ms = filled_ms


def _save(seg: segments.Segment, stats: Stats, runs_changed: bool = True) -> None:
    try:
        segments.save(seg, runs_changed)
    except OSError as exc:  # a read-only or full disk: analyse anyway, say so in the note
        stats.unsaved = f"{type(exc).__name__}: {exc}"


def _now_ms() -> int:
    return int(time.time() * 1000)


def search(
    reader,
    uri: str,
    experiment_ids: list[str],
    filter_string: str,
    cap: int | None,
    mode: str,
    stats: Stats,
) -> pd.DataFrame:
    if mode == "off":
        out = reader.search(experiment_ids, filter_string, cap)
        stats.fetched += len(out)
        return out
    stored = {e: segments.load(uri, e, filter_string) for e in experiment_ids}
    usable = {e: s for e, s in stored.items() if s is not None and s.serves(cap)}
    parts = []
    if usable:
        parts += _refresh(reader, list(usable.values()), filter_string, cap, stats)
    for e in experiment_ids:
        if e in usable and usable[e].serves(cap):
            continue
        now = _now_ms()  # before the search: a run that ends during it is seen next time
        runs = reader.search([e], filter_string, cap)
        complete = cap is None or len(runs) < cap
        seg = segments.Segment(
            uri,
            e,
            filter_string,
            runs,
            cap,
            complete,
            None if complete else float(runs["start_time"].min()),
            now,
            now,
        )
        _save(seg, stats)
        stats.fetched += len(runs)
        stats.filled += 1
        stats.saw_fill(now)
        parts.append(runs)
    parts = [p for p in parts if not p.empty]
    out = rows.order(pd.concat(parts, ignore_index=True)) if parts else rows.empty()
    return out if cap is None else out.head(cap).reset_index(drop=True)


def _refresh(reader, segs: list, filter_string: str, cap, stats: Stats) -> list[pd.DataFrame]:
    """Bring `segs` (one filter, several experiments) up to date with one `reader.changes` call;
    returns the runs of those that still serve `cap`. A capped segment left with fewer than `cap`
    runs (some were deleted) does not: the caller fills it again."""
    now = _now_ms()
    cached = pd.concat([s.runs for s in segs], ignore_index=True)
    known = rows.Known(
        cached[["run_id", "status", "start_time", "end_time"]],
        min(s.refreshed_ms for s in segs),
        {str(s.experiment_id): None if s.complete else s.start_from for s in segs},
        {i for s in segs for i in s.deleted},
    )
    fresh, gone, deleted = reader.changes([s.experiment_id for s in segs], filter_string, known)
    out = []
    for s in segs:
        mine = fresh[fresh["experiment_id"] == str(s.experiment_id)]
        known = set(s.runs["run_id"]) | set(s.deleted)
        before = len(s.runs)
        kept = s.runs[~s.runs["run_id"].isin(gone | set(mine["run_id"]))]
        s.runs = rows.order(pd.concat([kept, mine], ignore_index=True) if len(mine) else kept)
        s.deleted = sorted(known & deleted)
        s.refreshed_ms = now
        if not s.serves(cap):
            continue  # filled again by the caller
        _save(s, stats, runs_changed=len(kept) < before or len(mine) > 0)
        stats.from_cache += len(kept)
        stats.fetched += len(mine)
        stats.refreshed += 1
        stats.saw_fill(s.filled_ms)
        out.append(s.runs)
    return out
