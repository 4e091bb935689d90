"""Where fetched runs are kept between analyses: one Parquet file per (tracking URI, experiment,
search filter), with a JSON file beside it saying what the Parquet file holds.

    $ROOFLINE_CACHE_DIR (default ~/.cache/roofline-bench)/analysis/<sha1 of the URI>/<experiment id>/
        <sha1 of the filter>.parquet   the runs frame (analysis/fetch/rows.py), latest first
        <sha1 of the filter>.json      uri, experiment_id, filter, cap, complete, start_from,
                                       filled_ms, refreshed_ms, deleted, keys, format

A segment holds every run the filter matches in that experiment (`complete`) or the latest `cap` of
them and every later one (runs started at or after `start_from`). `keys` is a digest of the keys
analysis reads (analysis.join.READ_KEYS): a segment written when analysis read other keys is not
used. Files are replaced atomically, so a reader never sees half a segment. Nothing here talks to
MLflow: search_cached (analysis/fetch/__init__.py) decides what to fetch and keeps the segments
current.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from analysis import join
from common.server import redact

CACHE_ENV = "ROOFLINE_CACHE_DIR"
FORMAT = 1  # the layout of the files; a segment of another format is not used


def root() -> Path:
    """The cache folder: $ROOFLINE_CACHE_DIR, else ~/.cache/roofline-bench."""
    env = os.environ.get(CACHE_ENV, "").strip()
    return Path(env).expanduser() if env else Path.home() / ".cache" / "roofline-bench"


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


def keys_digest() -> str:
    """Which keys a segment's frame was read with (a change to READ_KEYS invalidates segments)."""
    return _digest(json.dumps([join.READ_KEYS, join.READ_PREFIXES], sort_keys=True))


def server_folder(uri: str) -> Path:
    return root() / "analysis" / _digest(uri.rstrip("/"))


@dataclass
class Segment:
    """The cached runs of one search in one experiment."""

    uri: str
    experiment_id: str
    filter: str
    runs: pd.DataFrame
    cap: int | None
    """the max_results it was filled with (None: no cap)."""
    complete: bool
    """it holds every run the filter matched when filled (fewer than `cap` existed)."""
    start_from: float | None
    """when not complete: it holds every matching run started at or after this (ms)."""
    filled_ms: int
    """when it was last filled by a full search (epoch ms, this machine's clock)."""
    refreshed_ms: int
    """when it was last brought up to date (epoch ms, this machine's clock)."""
    deleted: list[str] = field(default_factory=list)
    """ids of its runs seen deleted (a restored one is then fetched again)."""

    @property
    def path(self) -> Path:
        return server_folder(self.uri) / str(self.experiment_id) / f"{_digest(self.filter)}.parquet"

    def serves(self, cap: int | None) -> bool:
        """Whether it can answer a search for the latest `cap` runs (None: all)."""
        if self.complete:
            return True
        if cap is None or self.cap is None or cap > self.cap:
            return False
        return int((self.runs["start_time"] >= (self.start_from or 0)).sum()) >= cap


def load(uri: str, experiment_id: str, filter_string: str) -> Segment | None:
    """The segment, or None when there is none or it cannot be used (other format or keys,
    unreadable: it is then filled again)."""
    probe = Segment(uri, experiment_id, filter_string, pd.DataFrame(), None, False, None, 0, 0)
    meta_path = probe.path.with_suffix(".json")
    try:
        meta = json.loads(meta_path.read_text())
        if (
            meta.get("format") != FORMAT
            or meta.get("keys") != keys_digest()
            or meta.get("uri") != redact(uri)
            or meta.get("filter") != filter_string
        ):
            return None
        runs = pd.read_parquet(probe.path)
    except (OSError, ValueError, KeyError):
        return None
    return Segment(
        uri,
        str(experiment_id),
        filter_string,
        runs,
        meta["cap"],
        bool(meta["complete"]),
        meta["start_from"],
        int(meta["filled_ms"]),
        int(meta["refreshed_ms"]),
        list(meta.get("deleted", [])),
    )


def save(seg: Segment, runs_changed: bool = True) -> None:
    """Write the segment (Parquet, then its JSON: a JSON file always describes its Parquet file);
    only the JSON when its runs are as loaded (`runs_changed` False: a refresh that found nothing)."""
    path = seg.path
    path.parent.mkdir(parents=True, exist_ok=True)
    if runs_changed or not path.exists():
        tmp = path.with_suffix(f".parquet.{os.getpid()}.tmp")
        seg.runs.reset_index(drop=True).to_parquet(tmp, index=False)
        os.replace(tmp, path)
    meta = {
        "format": FORMAT,
        "keys": keys_digest(),
        "uri": redact(seg.uri),  # the folder is the digest of the whole URI; no password here
        "experiment_id": str(seg.experiment_id),
        "filter": seg.filter,
        "cap": seg.cap,
        "complete": seg.complete,
        "start_from": seg.start_from,
        "filled_ms": seg.filled_ms,
        "refreshed_ms": seg.refreshed_ms,
        "deleted": sorted(seg.deleted),
        "n_runs": len(seg.runs),
    }
    tmp = path.with_suffix(f".json.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(meta, indent=1))
    os.replace(tmp, path.with_suffix(".json"))


def clear(uri: str) -> None:
    """Forget everything cached for tracking URI `uri`."""
    shutil.rmtree(server_folder(uri), ignore_errors=True)
