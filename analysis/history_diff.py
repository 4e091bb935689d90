"""What differs across a change point (analysis/history.py): the environment tags of the last run
before and the first after, the machine, the load, and where breakdown runs exist on both sides
the modules whose time moved most. Pure: rows and frames in, records and sentences out.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from common import fmt

DIFF_TAGS = [
    ("torch_version", "torch"),
    ("cuda_version", "CUDA"),
    ("driver_version", "driver"),
    ("cudnn_version", "cuDNN"),
    ("git_commit", "commit"),
    ("host", "host"),
    ("cpu_model", "CPU model"),
    ("torch_threads", "threads"),
    ("python_version", "python"),
    ("os", "OS"),
]
"""train_runs column -> the name a change says (every recorded environment tag)"""
MACHINE_TAGS = ("host", "cpu_model")
LOAD_SHIFT_PER_CPU = 0.5
"""a change of load: the 1-minute load average per CPU (the highest while a run measured) moved
by at least this much (half the machine's CPUs kept busy, or freed, by other work)"""
TOP_MODULES = 3
COLUMNS = ["run_id", *(c for c, _ in DIFF_TAGS), "load_average_1m_max", "cpu_count"]
"""the train_runs columns a change reads of the runs either side of it"""


def _text(row: dict, col: str) -> str:
    v = row.get(col)
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    return str(v)


def per_cpu(row: dict) -> float:
    """A run's highest 1-minute load average while it measured, per logical CPU (NaN where it
    did not record it)."""
    try:
        top, cpus = float(row.get("load_average_1m_max")), float(row.get("cpu_count"))
    except (TypeError, ValueError):
        return math.nan
    return top / cpus if cpus > 0 else math.nan


def changed_tags(last: dict, first: dict) -> list[dict]:
    """Every recorded environment tag whose value differs between run `last` (before the change)
    and `first` (after), and their load when it moved by LOAD_SHIFT_PER_CPU or more."""
    out = []
    for col, name in DIFF_TAGS:
        a, b = _text(last, col), _text(first, col)
        if a != b:
            short = col == "git_commit"
            out.append(
                {
                    "tag": col,
                    "name": name,
                    "before": (a[:10] if short else a) or "(none)",
                    "after": (b[:10] if short else b) or "(none)",
                }
            )
    pair = np.array([per_cpu(last), per_cpu(first)])
    if np.isfinite(pair).all() and abs(pair[1] - pair[0]) >= LOAD_SHIFT_PER_CPU:
        out.append(
            {
                "tag": "load_average_1m_max",
                "name": "load average per CPU",
                "before": fmt.num(float(pair[0])),
                "after": fmt.num(float(pair[1])),
            }
        )
    return out


def machine(last: dict, first: dict) -> str:
    """A sentence when the change coincides with a change of machine (host or CPU model)."""
    moved = [
        f"{col.replace('_', ' ')} {_text(last, col) or '(none)'} -> {_text(first, col) or '(none)'}"
        for col in MACHINE_TAGS
        if _text(last, col) != _text(first, col)
    ]
    if not moved:
        return ""
    return f"it coincides with a change of machine ({', '.join(moved)}): compare like with like"


def load(before: np.ndarray, after: np.ndarray, ratio: float) -> str:
    """A sentence when the change coincides with a change of the machine's load: the median load
    per CPU (`per_cpu`) of each side's runs moved by LOAD_SHIFT_PER_CPU or more. When it moved the
    way the step time did (busier and slower, or quieter and faster), the change may be the load's."""
    a, b = before[np.isfinite(before)], after[np.isfinite(after)]
    if not len(a) or not len(b):
        return ""
    ma, mb = float(np.median(a)), float(np.median(b))
    if abs(mb - ma) < LOAD_SHIFT_PER_CPU:
        return ""
    text = (
        f"the machine's load {'rose' if mb > ma else 'fell'} with it (1-minute load average per "
        f"CPU while measuring, median of each side's runs: {fmt.num(ma)} -> {fmt.num(mb)})"
    )
    if (mb > ma) == (ratio > 1):
        text += ": the change may be the load's, not the code's"
    return text


def module_moves(before: pd.DataFrame, after: pd.DataFrame, top: int = TOP_MODULES) -> list[dict]:
    """The modules (by phase) of two breakdown runs' layers.csv rows whose time moved most: the
    default view's module rows, largest absolute change in ms first, with their shares."""

    def rows(layers: pd.DataFrame) -> pd.DataFrame:
        if layers is None or layers.empty or not {"module", "phase", "time_s"} <= set(layers):
            return pd.DataFrame(columns=["time_s", "share"])
        v = layers
        if "view" in v:
            v = v[v["view"].astype(str).str.lower() == "true"]
        if "kind" in v:
            v = v[v["kind"] == "module"]
        share = v["share"] if "share" in v else np.nan
        return v.assign(share=share).groupby(["module", "phase"])[["time_s", "share"]].sum()

    a, b = rows(before), rows(after)
    both = a.join(b, how="outer", lsuffix="_a", rsuffix="_b").fillna(0.0)
    if both.empty:
        return []
    both["delta"] = both["time_s_b"] - both["time_s_a"]
    both = both.reindex(both["delta"].abs().sort_values(ascending=False).index).head(top)
    return [
        {
            "module": str(mod),
            "phase": str(phase),
            "before_ms": 1e3 * float(r["time_s_a"]),
            "after_ms": 1e3 * float(r["time_s_b"]),
            "delta_ms": 1e3 * float(r["delta"]),
            "before_share": float(r["share_a"]),
            "after_share": float(r["share_b"]),
        }
        for (mod, phase), r in both.iterrows()
    ]


def modules_sentence(moves: list[dict]) -> str:
    return "; ".join(
        f"{m['module']} {m['phase']} {fmt.num(m['before_ms'])} -> {fmt.num(m['after_ms'])} ms "
        f"({fmt.pct(m['before_share'])} -> {fmt.pct(m['after_share'])} of the step)"
        for m in moves
    )
