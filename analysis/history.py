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
from common.stats import ratio_interval
from common import fmt
from common.fmt import short_id

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
        ci = f" (95 % CI {fmt.num(iv[0])}-{fmt.num(iv[1])}x" if iv else " (no CI"
        ci += ", interval includes 1)" if iv and iv[0] <= 1 <= iv[1] else ")"
        why = [f"{c['name']} {c['before']} -> {c['after']}" for c in self.changed]
        text = (
            f"{'slower' if self.slower else 'faster'} from run {short_id(self.at_run_id)}: mean step time "
            f"{fmt.duration(self.before.step_time_mean_s)} -> "
            f"{fmt.duration(self.after.step_time_mean_s)}, {fmt.num(self.ratio)}x{ci}, "
            f"p = {fmt.num(self.p_value, 2)}; {len(self.before.run_ids)} runs before, "
            f"{len(self.after.run_ids)} after"
        )
        text += f"; changed: {', '.join(why)}" if why else "; no recorded tag changed"
        if self.modules:
            text += f"; breakdown runs either side: {history_diff.modules_sentence(self.modules)}"
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
    """the segments between the changes, oldest first (none without a change: its one level is
    the configuration's roofline point)"""

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
            return f"{self.name}: no change over {self.n_runs} runs"
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
    runs = runs[runs["run_step_time_s"].gt(0) & (runs["config_key"] != "")]
    if column != START:
        lacking = runs[column].isna() | (runs[column].astype(str) == "")
        if lacking.any():
            notes.append(
                f"{int(lacking.sum())} train run(s) lack tag {order_by}: left out of the history "
                f"ordered by it (e.g. {', '.join(short_id(r) for r in runs.loc[lacking, 'run_id'].head(3))})"
            )
        runs = runs[~lacking]
    runs = in_run_order(runs.reset_index(drop=True), column)
    codes = runs.groupby(SERIES_KEYS, sort=False).ngroup().to_numpy()
    edges = [0, *(np.flatnonzero(np.diff(codes)) + 1), len(runs)]
    spans = list(zip(edges, edges[1:])) if len(runs) else []
    y_all = np.log(runs["run_step_time_s"].to_numpy(float))
    own_all = cp.own_variance(
        runs["step_time_ci95_rel"].to_numpy(float), runs["run_measured_steps"].to_numpy(float)
    )
    ys = [y_all[a:b] for a, b in spans]
    first = cp.first_tests(ys, [own_all[a:b] for a, b in spans], min_side, n_perm)
    cuts = [
        cp.find(y_all[a:b], own_all[a:b], min_side, alpha, n_perm) if p < alpha else []
        for (a, b), p in zip(spans, first)
    ]
    cols = {
        c: runs[c].to_numpy(object)
        for c in ["run_id", "run_step_time_s", column, "config_label", *SERIES_KEYS]
    }
    out = [_series(cols, a, b, order_by, column, min_side) for a, b in spans]
    levels = _levels(runs, spans, cuts, [bool(c) for c in cuts])  # series with a change only
    diff = {c: runs[c].to_numpy(object) for c in history_diff.COLUMNS if c in runs}
    for s, (a, b), splits, lv in zip(out, spans, cuts, levels):
        if splits:
            _place(s, [{c: v[i] for c, v in diff.items()} for i in range(a, b)], splits, lv)
    return History(out, notes, order_by)


def in_run_order(runs: pd.DataFrame, column: str) -> pd.DataFrame:
    """The runs sorted by series, then in run order within each: start time, or the rank of
    their `column` value (value_rank, per series), then start time."""
    keys = [*SERIES_KEYS, START, "run_id"]
    if column == START:
        return runs.sort_values(keys, kind="stable").reset_index(drop=True)
    ranks = [
        value_rank(g[column].astype(str), g[START])
        for _, g in runs.groupby(SERIES_KEYS, sort=False)
    ]
    runs = runs.assign(_rank=pd.concat(ranks).reindex(runs.index))
    return runs.sort_values([*SERIES_KEYS, "_rank", START, "run_id"], kind="stable").reset_index(
        drop=True
    )


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


def _series(cols: dict, a: int, b: int, order_by: str, column: str, min_side: int) -> Series:
    """The series of runs [a, b) (`cols`: the runs' columns in run order), not yet tested."""
    last = b - 1
    return Series(
        str(cols["env_label"][last]),
        str(cols["device_name"][last]),
        str(cols["config_key"][last]),
        str(cols["config_label"][last] or "") or str(cols["config_key"][last]),
        STATUS_NONE if b - a >= cp.needed(min_side) else STATUS_SHORT,
        b - a,
        cp.needed(min_side),
        order_by,
        list(cols["run_id"][a:b]),
        [float(v) for v in cols["run_step_time_s"][a:b]],
        list(cols[column][a:b]),
    )


def _place(s: Series, rows: list[dict], splits: list[cp.Split], levels: list[Level]) -> None:
    """Series `s` (its runs `rows`, in run order) with its change points `splits` and the levels
    of its segments."""
    s.levels = levels
    loads = np.array([history_diff.per_cpu(r) for r in rows])
    s.changes = [change(rows, loads, sp, levels[i], levels[i + 1]) for i, sp in enumerate(splits)]
    s.status = STATUS_CHANGE if s.changes else STATUS_NONE


def _levels(runs: pd.DataFrame, spans: list, cuts: list[list[cp.Split]], tested: list[bool]):
    """The levels of every segment of every tested series, from one aggregate_repeats over all
    their runs (each segment a configuration of its own): per series, its levels oldest first."""
    seg = np.full(len(runs), -1)
    for n, ((a, b), splits, ok) in enumerate(zip(spans, cuts, tested)):
        if ok:
            seg[a:b] = np.searchsorted([sp.index for sp in splits], np.arange(b - a), side="right")
    keep = seg >= 0
    if not keep.any():
        return [[] for _ in spans]
    series = np.repeat(np.arange(len(spans)), [b - a for a, b in spans])
    t = runs.loc[keep].assign(config_key=[f"{n}#{k}" for n, k in zip(series[keep], seg[keep])])
    g = t.groupby("config_key", sort=False)
    span, ids = g[START].agg(["min", "max"]), g["run_id"].agg(list)
    points = join.aggregate_repeats(t.drop(columns=[c for c in t.columns if c.startswith("_")]))
    by_key = {r["config_key"]: r for r in points.to_dict("records")}
    out: list[list[Level]] = [[] for _ in spans]
    for n, splits in enumerate(cuts):
        for k in range(len(splits) + 1) if tested[n] else []:
            key, r = f"{n}#{k}", by_key[f"{n}#{k}"]
            out[n].append(
                Level(
                    ids[key],
                    float(r["step_time_mean_s"]),
                    float(r["step_time_ci95_rel"]),
                    float(r["throughput_mean_samples_per_s"]),
                    float(span.loc[key, "min"]),
                    float(span.loc[key, "max"]),
                )
            )
    return out


def change(rows: list[dict], loads, sp: cp.Split, before: Level, after: Level) -> Change:
    """The change at `sp` of the series whose runs are `rows` (their load per CPU `loads`)."""
    ratio = after.step_time_mean_s / before.step_time_mean_s
    ci = ratio_interval(
        ratio, _finite(after.step_time_ci95_rel), _finite(before.step_time_ci95_rel)
    )
    last, first = rows[sp.index - 1], rows[sp.index]
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
        load=history_diff.load(loads[sp.lo : sp.index], loads[sp.index : sp.hi], ratio),
    )


def _finite(v: float) -> float | None:
    return v if v is not None and np.isfinite(v) else None


# ----------------------------------------------------------------- breakdown runs on both sides
BD_KEYS = {
    "env_label": "tags.env_label",
    "device_name": "tags.device_name",
    "config_key": "tags.config_key",
}


def breakdown_pairs(h: History, bd: pd.DataFrame) -> dict[tuple[int, int], tuple[dict, dict]]:
    """(series index, change index) -> (the latest breakdown run of the series started in the
    segment before the change, the earliest started in the segment after), for the changes with
    a breakdown run on both sides; runs in time order only (a tag's order has no time span)."""
    if bd is None or bd.empty or h.order_by != START:
        return {}
    bd = bd.assign(_start=pd.to_numeric(bd["start_time"], errors="coerce"))
    by_series = {
        key: g.sort_values("_start")
        for key, g in bd.groupby([BD_KEYS[k] for k in SERIES_KEYS], sort=False)
    }
    out = {}
    for i, s in enumerate(h.series):
        g = by_series.get((s.env_label, s.device_name, s.config_key))
        if g is None:
            continue
        for j, c in enumerate(s.changes):
            nxt = s.levels[j + 2].first_start_ms if j + 2 < len(s.levels) else np.inf
            before = g[
                (g["_start"] >= c.before.first_start_ms) & (g["_start"] < c.after.first_start_ms)
            ]
            after = g[(g["_start"] >= c.after.first_start_ms) & (g["_start"] < nxt)]
            if len(before) and len(after):
                out[(i, j)] = (before.iloc[-1].to_dict(), after.iloc[0].to_dict())
    return out


def add_modules(h: History, pairs: dict, layers: dict[str, pd.DataFrame]) -> None:
    """Each paired change's `modules`: the modules whose time moved most between the two
    breakdown runs (`layers`: run id -> its layers.csv rows)."""
    for (i, j), (a, b) in pairs.items():
        la, lb = layers.get(a["run_id"]), layers.get(b["run_id"])
        if la is not None and lb is not None:
            h.series[i].changes[j].modules = history_diff.module_moves(la, lb)
