"""The runs frame every reader returns: one row per run, only the keys analysis reads.

Columns: `run_id`, `experiment_id`, `status`, `start_time` and `end_time` (epoch milliseconds, as
MLflow stores them; NaN while a run has not ended), then `tags.<key>`, `params.<key>` and
`metrics.<key>` (the run's latest value) for the keys analysis.join.READ_KEYS and READ_PREFIXES
name. Rows are in MLflow's natural search order: latest start first, ties by run id.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from analysis import join

INFO = ["run_id", "experiment_id", "status", "start_time", "end_time"]
TERMINAL = ("FINISHED", "FAILED", "KILLED")


@dataclass
class Known:
    """What the cache holds, for a reader's `changes` (analysis/fetch/__init__.py search_cached)."""

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


def frame(info: list[tuple], columns: dict[str, list]) -> pd.DataFrame:
    """Runs frame from `info` rows (the INFO fields, in order) and `columns`: name -> values in
    the order of `info` (None where a run lacks the key)."""
    cols: dict[str, Any] = {
        "run_id": [i[0] for i in info],
        "experiment_id": [str(i[1]) for i in info],
        "status": [i[2] for i in info],
        "start_time": np.array([_num(i[3]) for i in info], dtype=float),
        "end_time": np.array([_num(i[4]) for i in info], dtype=float),
    }
    for name in sorted(columns):
        values = columns[name]
        if name.startswith("metrics."):
            cols[name] = np.array(values, dtype=float)  # None (absent): NaN
        else:
            cols[name] = pd.Series(values, dtype=object)
    return order(pd.DataFrame(cols, columns=list(cols)))


class Columns(dict):
    """name -> values aligned with a list of run ids, filled one value at a time."""

    def __init__(self, ids: list[str]):
        super().__init__()
        self.pos = {rid: i for i, rid in enumerate(ids)}
        self.n = len(ids)

    def put(self, name: str, run_id: str, value) -> None:
        i = self.pos.get(run_id)
        if i is None:
            return  # a run not listed (a scan reads every run's rows)
        col = self.get(name)
        if col is None:
            col = self[name] = [None] * self.n
        col[i] = value

    def fill(self, kind: str, result: list[tuple]) -> None:
        """put() for every (run_id, key, value[, is_nan]) row of a query, as `kind`.`key` (the
        same, in one loop: this runs once per row of a scan, millions of times)."""
        pos, n = self.pos, self.n
        for row in result:
            i = pos.get(row[0])
            if i is None:
                continue
            name = f"{kind}.{row[1]}"
            col = self.get(name)
            if col is None:
                col = self[name] = [None] * n
            col[i] = metric(row[2], row[3]) if kind == "metrics" else row[2]


def metric(value, is_nan=False) -> float:
    """A metric's value as a float, the one place a reader turns one into a number: NaN where
    MLflow flagged it NaN (its SQL store keeps NaN as 0 with is_nan set) or it is absent (None);
    a string as the REST API may send one ("NaN", "Infinity") read by float(). Whether the number
    is plausible is analysis/screen.py's to say."""
    return _NAN if is_nan or value is None else float(value)


_NAN = float("nan")


def _num(value) -> float:
    """A time from MLflow (int, numeric string, None) as a float, NaN when absent."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return np.nan


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
