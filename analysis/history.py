"""What changed over time: each series' change points and what differed where they are.

A series is the FINISHED train runs of one env label, device name and config key (one roofline
point's runs), in run order: start time by default, or the order of a tag's values (`order_by`:
a version tag in version order, any other tag, such as the project's git commit, in the order
its values first appeared; runs within one value by start time). analysis/changepoints.py finds
the change points on the runs' mean step times with their own CIs; here each change gets its two
levels (the configuration's numbers of the runs on each side, docs/schema.md "Definitions":
pooled mean step time, samples/s, the 95 % CI over the runs), their ratio with its 95 % interval
on the log scale, the test's p-value, the runs on each side, and what differs between the last run
before and the first after (analysis/history_diff.py). A series of fewer runs than the test needs
is "insufficient data", never "no change".

Pure: a DataFrame of train runs (analysis.join.train_runs) in, plain records out.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analysis import changepoints as cp
from analysis import history_diff, join
from analysis.intervals import ratio_interval
from common import fmt

SERIES_KEYS = ["env_label", "device_name", "config_key"]
START = "start_time"
ORDER_TAGS = {
    "torch_version": "torch_version",
    "cuda_version": "cuda_version",
    "cudnn_version": "cudnn_version",
    "driver_version": "driver_version",
    "python_version": "python_version",
    "torch_threads": "torch_threads",
    "host": "host",
    "mlflow.source.git.commit": "git_commit",
    "git_commit": "git_commit",
}
"""what --order-by accepts besides start_time: tag name -> train_runs column"""
STATUS_CHANGE, STATUS_NONE, STATUS_SHORT = "change", "no change", "insufficient data"


@dataclass
class Level:
    """The configuration's numbers over the runs of one segment of a series."""

    run_ids: list[str]
    step_time_mean_s: float
    step_time_ci95_rel: float
    samples_per_s: float
    first_start_ms: float
    last_start_ms: float


@dataclass
class Change:
    """A change point: the first run after it is `at_run_id`."""

    index: int
    """position of the first run after, in run order (0-based)"""
    p_value: float
    before: Level
    after: Level
    ratio: float
    """after / before mean step time (> 1: slower)"""
    ratio_ci95: list[float] | None
    last_before_run_id: str
    at_run_id: str
    changed: list[dict] = field(default_factory=list)
    """every recorded environment tag that differs: {tag, name, before, after}"""
    machine: str = ""
    """a sentence when the change coincides with a change of machine"""
    load: str = ""
    """a sentence when it coincides with a change of load"""
    modules: list[dict] = field(default_factory=list)
    """breakdown modules whose time moved most (history_diff.module_moves)"""

    @property
    def slower(self) -> bool:
        return self.ratio > 1

    def sentence(self) -> str:
        """One line naming every number: ratio, interval, levels, p, runs, what changed."""
        iv = self.ratio_ci95
        ci = f" (95 % CI {fmt.num(iv[0])}-{fmt.num(iv[1])}x)" if iv else " (no CI)"
        why = [f"{c['name']} {c['before']} -> {c['after']}" for c in self.changed]
        text = (
            f"{'slower' if self.slower else 'faster'} from run {self.at_run_id[:8]}: mean step time "
            f"{fmt.duration(self.before.step_time_mean_s)} -> "
            f"{fmt.duration(self.after.step_time_mean_s)}, {fmt.num(self.ratio)}x{ci}, "
            f"p = {fmt.num(self.p_value, 2)}; {len(self.before.run_ids)} runs before, "
            f"{len(self.after.run_ids)} after"
        )
        text += f"; changed: {', '.join(why)}" if why else "; no recorded tag changed"
        return text + "".join(f"; {s}" for s in (self.machine, self.load) if s)


@dataclass
class Series:
    env_label: str
    device_name: str
    config_key: str
    label: str
    status: str
    """change | no change | insufficient data"""
    n_runs: int
    needs: int
    order_by: str
    run_ids: list[str]
    step_time_mean_s: list[float]
    """per run, in run order"""
    order_values: list
    """per run: its start time (epoch ms) or the value of the order_by tag"""
    changes: list[Change] = field(default_factory=list)
    levels: list[Level] = field(default_factory=list)
    """the segments between the changes, oldest first (one when none)"""

    @property
    def name(self) -> str:
        return f"{self.env_label}: {self.label}"

    def summary(self) -> str:
        if self.status == STATUS_SHORT:
            return (
                f"{self.name}: insufficient data: {self.n_runs} run(s); change-point detection "
                f"needs at least {self.needs} ({self.needs // 2} on each side of a change)"
            )
        if self.status == STATUS_NONE:
            lv = self.levels[0]
            ci = (
                f" ± {fmt.pct(lv.step_time_ci95_rel)}" if np.isfinite(lv.step_time_ci95_rel) else ""
            )
            return (
                f"{self.name}: no change over {self.n_runs} runs (mean step time "
                f"{fmt.duration(lv.step_time_mean_s)}{ci})"
            )
        return f"{self.name}: " + "; ".join(c.sentence() for c in self.changes)


@dataclass
class History:
    series: list[Series]
    notes: list[str] = field(default_factory=list)
    order_by: str = START


def order_column(order_by: str) -> str:
    """The train_runs column that orders the runs; ValueError naming the choices otherwise."""
    if order_by in (START, "start", "time"):
        return START
    if order_by in ORDER_TAGS:
        return ORDER_TAGS[order_by]
    raise ValueError(
        f"order_by must be start_time or one of {', '.join(sorted(set(ORDER_TAGS)))}, got {order_by!r}"
    )


def scan(
    train: pd.DataFrame,
    order_by: str = START,
    min_side: int = cp.MIN_SIDE,
    alpha: float = cp.ALPHA,
    n_perm: int = cp.N_PERM,
) -> History:
    """Every series of `train` (join.train_runs rows) tested for change points."""
    column = order_column(order_by)
    runs = join.run_rates(train) if not train.empty else train
    notes: list[str] = []
    if runs.empty:
        return History([], notes, order_by)
    runs = runs[runs["_step_s"].gt(0) & (runs["config_key"] != "")]
    if column != START:
        lacking = runs[column].isna() | (runs[column].astype(str) == "")
        if lacking.any():
            notes.append(
                f"{int(lacking.sum())} train run(s) lack tag {order_by}: left out of the history "
                f"ordered by it (e.g. {', '.join(join.short(r) for r in runs.loc[lacking, 'run_id'].head(3))})"
            )
        runs = runs[~lacking]
    groups = [
        (key, ordered(g, column).reset_index(drop=True))
        for key, g in runs.groupby(SERIES_KEYS, sort=True)
    ]
    ys = [np.log(g["_step_s"].to_numpy(float)) for _, g in groups]
    owns = [
        cp.own_variance(g["step_time_ci95_rel"].to_numpy(float), g["_steps"].to_numpy(float))
        for _, g in groups
    ]
    first = cp.first_tests(ys, owns, min_side, n_perm)  # every series at once, numpy only
    out = []
    for (key, g), y, own, p in zip(groups, ys, owns, first):
        s = _series(g, key, order_by, column, min_side)
        if s.status == STATUS_SHORT:
            pass
        elif p >= alpha:
            s.levels = [level(g)]
        else:
            _place(s, g, cp.find(y, own, min_side, alpha, n_perm))
        out.append(s)
    return History(out, notes, order_by)


def ordered(g: pd.DataFrame, column: str) -> pd.DataFrame:
    """The runs of one series in run order."""
    g = g.sort_values([START, "run_id"], kind="stable")
    if column == START:
        return g
    rank = value_rank(g[column].astype(str), g[START])
    return g.assign(_rank=rank).sort_values(["_rank", START, "run_id"], kind="stable")


def value_rank(values: pd.Series, start: pd.Series) -> pd.Series:
    """Each run's rank of its value: version order when every value reads as a version, else
    the order in which the values first appeared."""
    from packaging.version import InvalidVersion, Version

    distinct = list(dict.fromkeys(values))
    try:
        order = sorted(distinct, key=Version)
    except InvalidVersion:
        first = start.groupby(values).min()
        order = sorted(distinct, key=lambda v: (first[v], v))
    pos = {v: i for i, v in enumerate(order)}
    return values.map(pos)


def _series(g: pd.DataFrame, key, order_by: str, column: str, min_side: int) -> Series:
    """The series of runs `g` (in run order), not yet tested."""
    env, dev, config = key
    enough = len(g) >= cp.needed(min_side)
    return Series(
        env,
        dev,
        config,
        _label(g),
        STATUS_NONE if enough else STATUS_SHORT,
        len(g),
        cp.needed(min_side),
        order_by,
        list(g["run_id"]),
        list(g["_step_s"]),
        list(g[column]),
    )


def _place(s: Series, g: pd.DataFrame, splits: list[cp.Split]) -> None:
    """Series `s` with its change points `splits`: its levels and changes."""
    s.levels = segments(g, [sp.index for sp in splits])
    s.changes = [change(g, sp, s.levels[i], s.levels[i + 1]) for i, sp in enumerate(splits)]
    s.status = STATUS_CHANGE if s.changes else STATUS_NONE


def _label(g: pd.DataFrame) -> str:
    last = g.iloc[-1]
    return str(last.get("config_label") or "") or str(last["config_key"])


def segments(g: pd.DataFrame, cuts: list[int]) -> list[Level]:
    """The levels of the runs between consecutive cuts (positions in run order)."""
    edges = [0, *cuts, len(g)]
    return [level(g.iloc[a:b]) for a, b in zip(edges, edges[1:])]


def level(g: pd.DataFrame) -> Level:
    """The configuration's numbers of runs `g` (join.aggregate_repeats: the pooled mean step
    time, samples/s from it, the 95 % CI over the runs)."""
    p = join.aggregate_repeats(g.drop(columns=[c for c in g.columns if c.startswith("_")]))
    row = p.iloc[0]
    return Level(
        list(g["run_id"]),
        float(row["step_time_mean_s"]),
        float(row["step_time_ci95_rel"]),
        float(row["throughput_mean_samples_per_s"]),
        float(g[START].min()),
        float(g[START].max()),
    )


def change(g: pd.DataFrame, sp: cp.Split, before: Level, after: Level) -> Change:
    ratio = after.step_time_mean_s / before.step_time_mean_s
    ci = ratio_interval(
        ratio, _finite(after.step_time_ci95_rel), _finite(before.step_time_ci95_rel)
    )
    last, first = g.iloc[sp.index - 1], g.iloc[sp.index]
    side_a, side_b = g.iloc[sp.lo : sp.index], g.iloc[sp.index : sp.hi]
    return Change(
        sp.index,
        sp.p_value,
        before,
        after,
        ratio,
        ci,
        str(last["run_id"]),
        str(first["run_id"]),
        changed=history_diff.changed_tags(last, first),
        machine=history_diff.machine(last, first),
        load=history_diff.load(side_a, side_b, ratio),
    )


def _finite(v: float) -> float | None:
    return v if v is not None and np.isfinite(v) else None
