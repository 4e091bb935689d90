"""Every value analysis reads from the tracking store, checked once, where fetched runs enter.

Anyone who can reach an unauthenticated tracking server can log a run, and a run's numbers can be
absurd without malice (a hand-edited import, a unit read wrongly, MLflow storing `inf` as 1.8e308).
One such run would end every later analysis of the store in a traceback. `runs()` leaves out each
FINISHED train, profile or peaks run holding a value that is not a measurement: non-finite,
negative (or zero where only a positive figure means something), or beyond a physical bound
(common.bounds), alone or against the time it was measured in (FLOPs per step over the step time
faster than any device), or a name param (model, precision, optimizer) that is not one printable
line of at most 100 characters (a 5,000-character model name filled the notes). Each run left out gets one line naming it, the key, the value and why;
the lines go to the report's "What is missing". `series()` does the same for per-step series, and
`complexity()` for the rows of the complexity runs' `models.csv` artifacts.

Join, roofline, figures and tables see only what passed. Pure: no mlflow, no files, no plots.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from common import bounds, schema
from common.load import LOAD_BOUNDS
from common.stats import as_float
from common.fmt import short_id
from roofline.model import DTYPES

MLFLOW_INF = 1.7e308
"""MLflow stores +-inf as +-1.7976931348623157e308: a stored value this large is an infinity."""


@dataclass(frozen=True)
class Rule:
    """What a metric's value may be: finite, at least `low` (above it when `strict`), at most
    `high`; `what` says what the bound is, for the line naming a value outside it."""

    low: float = 0.0
    strict: bool = False
    high: float = math.inf
    what: str = ""


def _rate(high: float, what: str) -> Rule:
    return Rule(0.0, True, high, what)


_STEP = _rate(bounds.MAX_STEP_S, "a year per step")
_SAMPLES = f"{bounds.MAX_SAMPLES_PER_S:.3g} samples/s, more than any device's memory can feed"
_FLOPS = f"{bounds.MAX_FLOPS_PER_S:.0e} FLOP/s, faster than any device"
_DRAM = f"{bounds.MAX_DRAM_BYTES_PER_S:.0e} byte/s of DRAM bandwidth, more than any device has"
_CACHE = f"{bounds.MAX_CACHE_BYTES_PER_S:.0e} byte/s of cache bandwidth, more than any device has"
_AI = f"{bounds.MAX_INTENSITY_FLOPS_PER_BYTE:.0e} FLOP/byte, denser than any computation a device can hold"
_SIGNED_S = Rule(-bounds.MAX_STEP_S, False, bounds.MAX_STEP_S, "a year")

RULES: dict[str, Rule] = {
    # train runs
    "throughput_samples_per_s": _rate(bounds.MAX_SAMPLES_PER_S, _SAMPLES),
    "throughput_std_samples_per_s": Rule(high=bounds.MAX_SAMPLES_PER_S, what=_SAMPLES),
    "step_time_median_s": _STEP,
    "step_time_mean_s": _STEP,
    "step_time_std_s": Rule(high=bounds.MAX_STEP_S, what="a year"),
    "train_flops_per_step": Rule(),
    "achieved_flops_per_s": _rate(bounds.MAX_FLOPS_PER_S, _FLOPS),
    "modeled_intensity_flops_per_byte": _rate(bounds.MAX_INTENSITY_FLOPS_PER_BYTE, _AI),
    "compute_only_step_time_median_s": _STEP,
    "compute_only_step_time_mean_s": _STEP,
    # step time minus compute-only step time: noise makes it slightly negative at times
    "exposed_comm_time_s": _SIGNED_S,
    "exposed_comm_time_share": Rule(-1e6, False, 1e6, "a million times the step time"),
    # profile runs
    "ncu_flops_total": Rule(),
    "ncu_dram_bytes": Rule(),
    "ncu_l2_bytes": Rule(),
    "ncu_l1_bytes": Rule(),
    "ncu_kernel_time_s": _STEP,
    "ncu_intensity_dram_flops_per_byte": Rule(high=bounds.MAX_INTENSITY_FLOPS_PER_BYTE, what=_AI),
}
"""Per metric key. Peaks metrics go by prefix (`rule_for`)."""

RATIOS: tuple[tuple[str, str, float, str], ...] = (
    ("train_flops_per_step", "step_time_mean_s", bounds.MAX_FLOPS_PER_S, _FLOPS),
    ("ncu_flops_total", "ncu_kernel_time_s", bounds.MAX_FLOPS_PER_S, _FLOPS),
    ("ncu_dram_bytes", "ncu_kernel_time_s", bounds.MAX_DRAM_BYTES_PER_S, _DRAM),
    ("ncu_l2_bytes", "ncu_kernel_time_s", bounds.MAX_CACHE_BYTES_PER_S, _CACHE),
    ("ncu_l1_bytes", "ncu_kernel_time_s", bounds.MAX_CACHE_BYTES_PER_S, _CACHE),
)
"""(count, time it was measured in, highest rate, what): a count no device makes in that time."""

WHOLE_PARAMS = ("batch_size", "image_size", "world_size", "num_classes")
"""Params that are counts: where a run has one, it is a whole number >= 1."""

NAME_PARAMS = ("model", "precision", "optimizer")
"""Params that name what was measured (the point's label): one printable line of at most
schema.MAX_LABEL_CHARS characters, as every name this project writes is."""

NAME_TAGS = (schema.TAG_ENV_LABEL, schema.TAG_DEVICE_NAME)
"""Tags that name where it was measured, bounded as NAME_PARAMS (a 10,000-character env
label appeared whole 9 times in report.md; one with a line break forged console lines)."""

KINDS = ("train", "profile", "peaks")
"""The run kinds whose numbers analysis uses (only their FINISHED runs are checked)."""


_CEILING_KEYS = frozenset(
    [f"peak_flops_per_s_{d}" for d in DTYPES]
    + [f"peak_{level}_bytes_per_s" for level in ("dram", "l2", "l1")]
)


def _peak(high: float, what: str) -> Rule:
    """A peak (ceiling) rate: from bounds.MIN_RATE_PER_S (a ridge point stays finite) to `high`."""
    return Rule(bounds.MIN_RATE_PER_S, False, high, what)


def rule_for(key: str) -> Rule | None:
    """The rule of metric `key`, None for a key analysis does not read as a number."""
    if key in RULES:
        return RULES[key]
    if key.startswith("peak_") and key.endswith("_near_best_fraction"):  # how typical a peak was
        return Rule(0.0, False, 1.0, "a fraction of the samples")
    # the ceilings themselves (peak_flops_per_s_<dtype>, peak_<level>_bytes_per_s) from 1e6 up: a
    # ridge point stays finite; a peaks run's other figures (per kernel) keep the rule of a rate
    ceiling = key in _CEILING_KEYS
    if key.startswith("peak_flops_per_s_"):
        return (_peak if ceiling else _rate)(bounds.MAX_FLOPS_PER_S, _FLOPS)
    if key == "peak_dram_bytes_per_s":
        return _peak(bounds.MAX_DRAM_BYTES_PER_S, _DRAM)
    if key.startswith("peak_") and key.endswith("_bytes_per_s"):
        return (_peak if ceiling else _rate)(bounds.MAX_CACHE_BYTES_PER_S, _CACHE)
    return None


def problem(key: str, value: float) -> str | None:
    """Why metric `key` = `value` is no measurement, or None when it may be one (or is absent)."""
    rule = rule_for(key)
    if rule is None or value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    v = float(value)
    if not math.isfinite(v):
        return "not a finite number"
    if abs(v) >= MLFLOW_INF:
        return "infinite (as MLflow stores inf)"
    if v < rule.low or (rule.strict and v <= rule.low):
        if rule.low == 0.0:
            return "negative" if v < 0 else "zero, where only a positive figure is a measurement"
        return f"below {rule.low:.3g}"
    if v > rule.high:
        return f"above {rule.what}"
    return None


def _param_problem(text) -> str | None:
    if text is None or (isinstance(text, float) and math.isnan(text)) or str(text) == "":
        return None
    try:
        v = float(str(text))
    except ValueError:
        return "not a number"
    if not math.isfinite(v) or not v.is_integer() or v < 1 or v > 1e15:
        return "not a whole number from 1 to 1e15"
    return None


_name_problem = schema.name_problem  # the one name rule, which commands apply where names enter


def _param_why(name: str, value) -> str | None:
    if name in WHOLE_PARAMS:
        return _param_problem(value)
    return _name_problem(value) if name in NAME_PARAMS else None


def run_problems(row: dict) -> list[str]:
    """Every reason one run (a runs-frame row) holds no measurement: `metrics.<key> = value: why`."""
    out = []  # a count against its time first: it names the figure that made a ratio absurd
    for count, time_key, high, what in RATIOS:
        c, t = _stored(row.get(f"metrics.{count}")), _stored(row.get(f"metrics.{time_key}"))
        if c is not None and t is not None and t > 0 and c / t > high:
            out.append(
                f"{count} = {c:.3g} in {time_key} = {t:.3g}: {c / t:.3g} per second, above {what}"
            )
    for col, value in row.items():
        if col.startswith("metrics."):
            why = problem(col[8:], value)
            if why:
                out.append(f"{col[8:]} = {_show(value)}: {why}")
        elif col.startswith("params."):
            why = _param_why(col[7:], value)
            if why:
                out.append(f"param {col[7:]} = {str(value)[:40]!r}: {why}")
        elif col.startswith("tags.") and col[5:] in NAME_TAGS:
            why = _name_problem(value)
            if why:
                out.append(f"tag {col[5:]} = {str(value)[:40]!r}: {why}")
    return out


def _stored(value) -> float | None:
    """`value` as a float (common.stats.as_float), MLflow's stored infinity missing too."""
    v = as_float(value)
    return None if v is None or abs(v) >= MLFLOW_INF else v


def _show(value) -> str:
    v = float(value)
    return f"{v:.6g}" if math.isfinite(v) else str(v)


def _suspects(frame: pd.DataFrame) -> pd.Series:
    """Rows with a value some rule refuses, found column by column (vectorised: a fleet's store
    holds tens of thousands of runs); `run_problems` then says why, for those rows only."""
    bad = pd.Series(False, index=frame.index)
    for col in frame.columns:
        if col.startswith("metrics."):
            rule = rule_for(col[8:])
            if rule is None:
                continue
            v = pd.to_numeric(frame[col], errors="coerce").astype(float)
            present = v.notna()
            low = (v <= rule.low) if rule.strict else (v < rule.low)
            out = ~np.isfinite(v) | (v.abs() >= MLFLOW_INF) | low | (v > rule.high)
            bad |= present & out
        elif col.startswith("params.") and col[7:] in WHOLE_PARAMS + NAME_PARAMS:
            # few distinct values (batch sizes, model names): each checked once
            refused = [v for v in pd.unique(frame[col]) if _param_why(col[7:], v)]
            if refused:
                bad |= frame[col].isin(refused)
        elif col.startswith("tags.") and col[5:] in NAME_TAGS:
            refused = [v for v in pd.unique(frame[col]) if _name_problem(v)]
            if refused:
                bad |= frame[col].isin(refused)
    for count, time_key, high, _ in RATIOS:
        c, t = f"metrics.{count}", f"metrics.{time_key}"
        if c in frame.columns and t in frame.columns:
            cv, tv = frame[c].astype(float), frame[t].astype(float)
            with np.errstate(divide="ignore", invalid="ignore"):
                bad |= (tv > 0) & np.isfinite(cv) & np.isfinite(tv) & (cv / tv > high)
    return bad


def runs(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """(the runs frame without the FINISHED train/profile/peaks runs that hold a value that is not a
    measurement, one line per run left out). Other runs (FAILED, RUNNING, other kinds) pass as they
    are: analysis lists them, it does not compute with their numbers."""
    if frame.empty:
        return frame, []
    kind = frame.get(f"tags.{schema.TAG_RUN_KIND}", pd.Series("", index=frame.index))
    status = frame.get("status", pd.Series("", index=frame.index))
    checked = kind.isin(KINDS) & (status == "FINISHED")
    cols = [c for c in frame.columns if c.startswith(("metrics.", "params.")) or _name_tag(c)]
    suspects = checked & _suspects(frame[cols])
    drop, lines = [], []
    for idx, row in frame.loc[suspects, cols].iterrows():
        found = run_problems(row.to_dict())
        if not found:
            continue
        drop.append(idx)
        r = frame.loc[idx]
        env = r.get(f"tags.{schema.TAG_ENV_LABEL}")
        who = ", ".join(
            x
            for x in (
                f"env {_shown(env)}" if isinstance(env, str) and env else "",
                _shown(str(r.get("tags.mlflow.runName") or "")),
            )
            if x
        )
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        lines.append(
            f"left out {kind[idx]} run {short_id(r['run_id'])}"
            + (f" ({who})" if who else "")
            + f": {found[0]}{more}; it is not a measurement (a damaged or hand-made run?)"
        )
    return frame.drop(index=drop), lines


def _name_tag(col: str) -> bool:
    return col.startswith("tags.") and col[5:] in NAME_TAGS


def _shown(text: str) -> str:
    """A name as one line says it: itself, or its first 40 characters quoted when it is no name."""
    return f"{text[:40]!r}" if _name_problem(text) else text


def series(values_by_run: dict[str, list[float]], key: str = schema.STEP_SERIES):
    """(the per-step series without values that are not a step time, one line per run that had
    some). A step time is finite, > 0 and at most common.bounds.MAX_STEP_S."""
    clean, lines = {}, []
    for run_id, values in values_by_run.items():
        kept = [
            v
            for v in values
            if isinstance(v, (int, float)) and 0 < v <= bounds.MAX_STEP_S and math.isfinite(v)
        ]
        if len(kept) < len(values):
            bad = next(v for v in values if v not in kept)
            lines.append(
                f"left out {len(values) - len(kept)} of {len(values)} {key} values of run "
                f"{short_id(run_id)} (e.g. {_show(bad)}): a step time is positive, finite and under a year"
            )
        clean[run_id] = kept
    return clean, lines


COMPLEXITY_BOUNDS: dict[str, tuple[float, bool]] = {
    # column: (highest value, whole number); all finite and >= 0
    "image_size": (1e6, True),
    "num_classes": (1e12, True),
    "params": (1e13, True),  # 10 T parameters: 40 TB of fp32 weights, beyond any device's memory
    "fwd_flops_per_sample": (1e18, False),  # 1e18 FLOPs per sample: 100 s of a 10 EFLOP/s device
    "fwd_macs_per_sample": (1e18, False),
    "train_flops_per_sample": (1e18, False),
    "activation_bytes_per_sample": (1e15, False),  # 1 PB per sample
    "device_memory_bytes": (1e15, True),  # 1 PB: no device has that much memory
    "max_batch_fit": (1e15, True),
}
"""What a `complexity/models.csv` cell may hold (docs/complexity.md: counts and bytes)."""


def complexity(rows: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """(the complexity table without rows holding a value that is not a count or a size, one line
    per row left out)."""
    if rows.empty:
        return rows, []
    drop, lines = [], []
    for idx, row in rows.iterrows():
        for col, (high, whole) in COMPLEXITY_BOUNDS.items():
            value = row.get(col)
            if value is None or (isinstance(value, float) and math.isnan(value)):
                continue
            v = _stored(value)
            why = (
                "not a finite number"
                if v is None
                else "negative"
                if v < 0
                else f"above {high:.0e}"
                if v > high
                else "not a whole number"
                if whole and not float(v).is_integer()
                else None
            )
            if why:
                drop.append(idx)
                lines.append(
                    f"left out the complexity row of {str(row.get('model'))[:40]} "
                    f"(env {row.get('env_label')}, run {short_id(row.get('run_id'))}): "
                    f"{col} = {str(value)[:40]}: {why}"
                )
                break
    return rows.drop(index=drop), lines


# --------------------------------------------------------------------------- values left out alone
VALUE_RULES: dict[str, Rule] = {
    # what the findings read besides (analysis/join.py FINDINGS_METRICS); a bad one says nothing
    # about the run's step times and rates, so the run stays and only the value is left out
    "step_time_ci95_rel": Rule(),
    "measured_iters": Rule(),
    "energy_j_per_sample": Rule(),
    "device_peak_mem_bytes": Rule(),
    "device_mem_total_bytes": Rule(0.0, True),
    "gpu_nvml_samples": Rule(),
    "gpu_sm_clock_min_hz": Rule(),
    "gpu_sm_clock_median_hz": Rule(),
    "gpu_sm_clock_base_hz": Rule(),
    "gpu_temperature_max_c": Rule(-273.15, False, 1e4, "10,000 °C"),
    "gpu_temperature_slowdown_c": Rule(-273.15, False, 1e4, "10,000 °C"),
    "gpu_power_max_w": Rule(),
    "gpu_power_limit_w": Rule(),
    "gpu_throttled_sample_share": Rule(0.0, False, 1.0, "1 (a share)"),
    schema.METRIC_UNCOUNTED_BYTES_SHARE: Rule(0.0, False, 1.0, "1 (a share)"),
    # the load a peaks or train run measured under (common/load.py): which ceilings to trust, by
    # the rule a run's own roofline applies too (roofline/ceilings.py), and whether a step-time
    # change coincides with a change of load (analysis/history.py)
    **{
        key: Rule(low, strict, high, f"{high:g}")
        for key, (low, strict, high) in LOAD_BOUNDS.items()
    },
}
"""Per metric key whose bad value is left out on its own: the run is kept (the one value gate
decides per key: a key of RULES leaves its run out, a key here only its value), the value blanked
(NaN) with a line naming the run, the key and why. The findings then read plain numbers."""


def _why(rule: Rule, value) -> str | None:
    """Why `value` breaks `rule`, or None (also when it is absent)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        return "not a number"
    if not math.isfinite(v) or abs(v) >= MLFLOW_INF:
        return "not a finite number"
    if v < rule.low or (rule.strict and v <= rule.low):
        return "negative" if v < 0 else f"not above {rule.low:g}"
    return f"above {rule.what}" if v > rule.high else None


def values(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """(the runs frame with each VALUE_RULES value that is not a measurement blanked, one line per
    value left out) for the FINISHED runs of the kinds analysis computes with."""
    if frame.empty:
        return frame, []
    kind = frame.get(f"tags.{schema.TAG_RUN_KIND}", pd.Series("", index=frame.index))
    checked = kind.isin(KINDS) & (
        frame.get("status", pd.Series("", index=frame.index)) == "FINISHED"
    )
    out, lines = frame, []
    for key, rule in VALUE_RULES.items():
        col = f"metrics.{key}"
        if col not in frame.columns:
            continue
        v = pd.to_numeric(frame[col], errors="coerce").astype(float)
        low = (v <= rule.low) if rule.strict else (v < rule.low)
        bad = (
            checked
            & v.notna()
            & (~np.isfinite(v) | (v.abs() >= MLFLOW_INF) | low | (v > rule.high))
        )
        if not bad.any():
            continue
        out = out.copy() if out is frame else out
        for idx in frame.index[bad]:
            rid = short_id(frame.at[idx, "run_id"])
            lines.append(
                f"left out {key} = {_show(frame.at[idx, col])} of {kind[idx]} run {rid}: "
                f"{_why(rule, frame.at[idx, col])}; the run's other numbers are kept"
            )
        out.loc[bad, col] = np.nan
    return out, lines


PART_FRACTION = Rule(0.0, False, 1.0, "1 (a share of the step)")


def breakdowns(fetched: list[dict]) -> tuple[list[dict], list[str]]:
    """(the breakdown runs as analysis/fetch/breakdowns.py fetched them, each with what is not a
    measurement taken out, one line per thing left out): a run whose `breakdown_step_s` is not a
    positive step time is left out; a part's share outside [0, 1] is left out alone (None); the
    rows of its layers.csv with a time or share that is not finite, negative or a share over 1 are
    left out (the text rewritten without them; an unreadable file is dropped)."""
    kept, lines = [], []
    for f in fetched or []:
        who = f"breakdown run {short_id(f.get('run_id'))} ({f.get('env_label') or 'no env_label'})"
        summary = f.get("summary") if isinstance(f.get("summary"), dict) else {}
        metrics = dict(summary.get("metrics") if isinstance(summary.get("metrics"), dict) else {})
        why = _why(_STEP, metrics.get("breakdown_step_s")) or (
            "missing" if metrics.get("breakdown_step_s") is None else None
        )
        if why:
            lines.append(
                f"{who}: breakdown_step_s {metrics.get('breakdown_step_s')!r} is not a positive "
                f"step time ({why}): left out"
            )
            continue
        for key in [k for k in metrics if k.startswith("breakdown_") and k.endswith("_fraction")]:
            if (bad := _why(PART_FRACTION, metrics[key])) is not None:
                lines.append(f"{who}: {key} {metrics[key]!r} is {bad}: left blank")
                metrics[key] = None
        layers, more = _layers_text(f.get("layers") or "", who)
        lines += more
        kept.append({**f, "summary": {**summary, "metrics": metrics}, "layers": layers})
    return kept, lines


def _layers_text(text: str, who: str) -> tuple[str, list[str]]:
    """layers.csv without its rows whose time_s or share is not finite, negative, or (share) over
    1; '' when it does not parse or lacks those columns."""
    if not text:
        return "", []
    try:
        df = pd.read_csv(io.StringIO(text))
    except Exception as exc:  # noqa: BLE001 - a truncated or foreign file
        return "", [f"{who}: layers.csv does not parse ({type(exc).__name__}): left out"]
    need = {"module", "time_s", "share"}
    if not need <= set(df.columns):
        return "", [
            f"{who}: layers.csv lacks {', '.join(sorted(need - set(df.columns)))}: left out"
        ]
    t = pd.to_numeric(df["time_s"], errors="coerce")
    sh = pd.to_numeric(df["share"], errors="coerce")
    ok = t.between(0, bounds.MAX_STEP_S) & sh.between(0, 1)
    if ok.all():
        return text, []
    note = f"{who}: {int((~ok).sum())} layers.csv row(s) with a time or share that is not finite, negative or a share over 1: left out"
    return df[ok].to_csv(index=False), [note]


# --- prices: a --prices row is a user value like any other -------------------------
MAX_USD_PER_HOUR = 1e5
"""USD per device-hour: 100,000 is ~1,000x an 8-GPU machine's on-demand price; above it (1e308)
a cost per million samples or per epoch leaves float range or means nothing."""


def price_problem(usd: float) -> str | None:
    """Why `usd` is no price per device-hour, or None when it may be one."""
    if not math.isfinite(usd) or usd <= 0:
        return "is not a positive number of US dollars per hour"
    if usd > MAX_USD_PER_HOUR:
        return f"is above {MAX_USD_PER_HOUR:,.0f} US dollars per device-hour (a typo?)"
    return None


SPEEDUP = Rule(0.0, True, 1e6, "a million times faster")
"""a what-if's predicted or measured speed-up: a positive ratio of samples/s"""
WHATIF_NUMBERS = ("predicted_low", "predicted_high", "measured", "measured_low", "measured_high")


def whatifs(fetched: list[dict]) -> tuple[list[dict], list[str]]:
    """(the what-if runs as analysis/fetch/whatifs.py fetched them, one line per thing left out):
    a check row without a move, a knob or a known verdict is left out; a speed-up that is not a
    positive number in range, or an interval whose low end is above its high end, is blanked (the
    pair both) and the row kept."""
    from roofline.scoring import VERDICTS

    kept, lines = [], []
    for f in fetched or []:
        who = f"what-if run {short_id(f.get('run_id'))} ({f.get('env_label') or 'no env_label'})"
        rows = []
        for r in f.get("rows") or []:
            if not (isinstance(r, dict) and r.get("move") and r.get("knob")):
                lines.append(f"{who}: a check row without a move: left out")
                continue
            if r.get("verdict") not in VERDICTS:
                lines.append(f"{who}: {r['move']}'s verdict {r.get('verdict')!r} is none: left out")
                continue
            rows.append(_checked(dict(r), who, lines))
        kept.append({**f, "rows": rows})
    return kept, lines


def _checked(r: dict, who: str, lines: list[str]) -> dict:
    for key in WHATIF_NUMBERS:
        if (why := _why(SPEEDUP, r.get(key))) is not None:
            lines.append(f"{who}: {r['move']}'s {key} {r.get(key)!r} is {why}: left blank")
            r[key] = None
    for lo, hi in (("predicted_low", "predicted_high"), ("measured_low", "measured_high")):
        a, b = r.get(lo), r.get(hi)
        if (a is None) != (b is None) or (a is not None and float(a) > float(b)):
            if a is not None or b is not None:
                lines.append(
                    f"{who}: {r['move']}'s {lo}-{hi} {a!r}-{b!r} is no interval: left blank"
                )
            r[lo] = r[hi] = None
    return r
