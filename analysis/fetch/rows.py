"""The runs frame every reader returns: one row per run, only the keys analysis reads.

Columns: `run_id`, `experiment_id`, `status`, `start_time` and `end_time` (epoch milliseconds, as
MLflow stores them; NaN while a run has not ended), then `tags.<key>`, `params.<key>` and
`metrics.<key>` (the run's latest value) for the keys analysis.join.READ_KEYS and READ_PREFIXES
name. Rows are in MLflow's natural search order: latest start first, ties by run id.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import pandas as pd

from analysis import join

INFO = ["run_id", "experiment_id", "status", "start_time", "end_time"]
TERMINAL = ("FINISHED", "FAILED", "KILLED")


@dataclass
class Known:
    """What the cache holds, for a reader's `changes` (analysis/fetch/cached.py)."""

    runs: pd.DataFrame
    """run_id, status, start_time and end_time of the cached runs."""
    since_ms: float
    """their last refresh (epoch ms, this machine's clock; the oldest of the segments)."""
    start_from: dict[str, float | None]
    """per experiment id: only runs started at or after this (ms) are cached (None: all)."""
    deleted: set[str]
    """ids of cached runs seen deleted before."""


def keeps(kind: str, key: str) -> bool:
    """Whether analysis reads key `key` of `kind` (tags, params or metrics)."""
    return key in _KEYS[kind] or any(key.startswith(p) for p in join.READ_PREFIXES[kind])


_KEYS = {kind: frozenset(keys) for kind, keys in join.READ_KEYS.items()}


def frame(info: Iterable[tuple], values: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """Runs frame from `info` rows (the INFO fields, in order) and `values`: column -> {run_id: v}."""
    out = pd.DataFrame(list(info), columns=INFO)
    out["experiment_id"] = out["experiment_id"].astype(str)
    for c in ("start_time", "end_time"):
        out[c] = pd.to_numeric(out[c], errors="coerce").astype(float)
    ids = out["run_id"]
    cols = {}
    for name in sorted(values):
        by_id = values[name]
        cols[name] = ids.map(by_id) if by_id else pd.Series(index=out.index, dtype=object)
        if name.startswith("metrics."):
            cols[name] = cols[name].astype(float)
    if cols:
        out = pd.concat([out, pd.DataFrame(cols, index=out.index)], axis=1)
    return order(out)


def order(runs: pd.DataFrame) -> pd.DataFrame:
    """MLflow's natural search order: start_time descending, then run_id."""
    if runs.empty:
        return runs.reset_index(drop=True)
    return runs.sort_values(
        ["start_time", "run_id"], ascending=[False, True], kind="stable"
    ).reset_index(drop=True)


def within(experiment_id, start_time, start_from: dict[str, float | None]) -> bool:
    """Whether a run of `experiment_id` started at `start_time` is at or after that experiment's
    bound in `start_from` (None: no bound)."""
    bound = start_from.get(str(experiment_id))
    return bound is None or (start_time is not None and start_time >= bound)


def empty() -> pd.DataFrame:
    return frame([], {})
