"""The report's breakdown section: where the step's time goes, and how that shifts between configs.

From the latest `breakdown` run per environment and config (analysis/fetch/breakdowns.py): one
row per run with its parts (profiling.breakdown.names.PARTS) as shares of its step, the joined
`layers.csv` of every run (`breakdown_layers.csv` next to the report, for pandas users), and the
pairs of runs of one environment, device and model that differ in exactly one configuration field
(batch 8 vs 64, fp32 vs bf16, 1 vs 2 ranks, ...) side by side, with the module whose share moved
most.

Pure but for `write_files` (the edge that writes the two CSVs). Values read back are untrusted:
analysis/screen.py `breakdowns` has left out, with a line naming the run, a step time or share
that is not a measurement before they come here.
"""

from __future__ import annotations

import io
import math
from itertools import combinations
from pathlib import Path
from typing import NamedTuple

import pandas as pd

from analysis.markdown import Table
from common import schema
from common.fmt import csv_frame, num, pct, short_id
from profiling.breakdown.names import PARTS

# fields a comparison pairs runs on (two runs that differ in exactly one of them, and agree on the
# rest): the fields config_key hashes, the data-parallel ones included (absent: one process)
CONFIG_FIELDS = schema.CONFIG_FIELDS
PART_SHORT = {
    "data_wait": "data",
    "h2d_copy": "H2D",
    "forward": "fwd",
    "backward": "bwd",
    "optimizer": "opt",
    "exposed_comm": "comm",
    "host_overhead": "overhead",
}
INTRO = (
    "From the latest `breakdown` run per environment and configuration (`python -m profiling "
    "--breakdown`, docs/breakdown.md): each step cut into its parts, as shares of the recorded "
    "steps' mean time, and the three modules (by phase) that take the most time with their bound. "
    "Every module row of every run: `breakdown_layers.csv`, next to this report."
)


class Breakdowns(NamedTuple):
    runs: pd.DataFrame
    """one row per breakdown run: identity, config, step_s, <part>_fraction, top"""
    layers: pd.DataFrame
    """every run's layers.csv rows, with run_id, env_label, device_name, config_key, config_label"""
    shifts: pd.DataFrame
    """one row per pair of runs of one environment differing in one config field"""
    notes: list[str]


def _finite_nonneg(v) -> bool:
    try:
        v = float(v)
    except (TypeError, ValueError):
        return False
    return math.isfinite(v) and v >= 0


def _value(params: dict, name: str):
    v = params.get(name)
    if name == "world_size":
        return int(float(v)) if _finite_nonneg(v) else 1
    if name == "distributed":
        return str(v or schema.NOT_DISTRIBUTED).lower()
    if name == "zero_stage":
        return int(float(v)) if _finite_nonneg(v) else 0
    if name in ("batch_size", "image_size", "num_classes"):
        return int(float(v)) if _finite_nonneg(v) else None
    return str(v).lower() if v is not None else ""


def build(fetched: list[dict]) -> Breakdowns:
    """Runs, joined layers and shifts from fetch_breakdowns' list (see the module docstring)."""
    notes: list[str] = []
    run_rows, frames = [], []
    for f in fetched:  # as analysis/screen.py `breakdowns` passed them: measurements only
        s = f.get("summary") or {}
        m = s.get("metrics") or {}
        row = {
            "run_id": f["run_id"],
            "env_label": f.get("env_label", ""),
            "device_name": f.get("device_name", ""),
            "config_key": f.get("config_key", ""),
            "config_label": str(s.get("config_label") or f.get("config_key", "")),
            **{c: _value(f.get("params") or {}, c) for c in CONFIG_FIELDS},
            "step_s": float(m["breakdown_step_s"]),
            "top": "; ".join(_phrase(t) for t in s.get("top") or [] if isinstance(t, dict)),
        }
        for p in PARTS:
            v = m.get(f"breakdown_{p}_fraction", 0.0)
            row[f"{p}_fraction"] = float(v) if v is not None else math.nan
        run_rows.append(row)
        who = f"breakdown run {short_id(f['run_id'])} ({f.get('env_label') or 'no env_label'})"
        layers, bad = _layers(f.get("layers") or "", who)
        notes += bad
        if layers is not None:
            for i, c in enumerate(
                ("run_id", "env_label", "device_name", "config_key", "config_label")
            ):
                if c not in layers:
                    layers.insert(i, c, row[c])
            frames.append(layers)
    runs = pd.DataFrame(run_rows)
    layers = pd.concat(frames, ignore_index=True, sort=False) if frames else pd.DataFrame()
    return Breakdowns(runs, layers, shifts(runs, layers), notes)


def _layers(text: str, who: str) -> tuple[pd.DataFrame | None, list[str]]:
    """A layers.csv that analysis/screen.py passed (rows with a bad time or share already out)."""
    if not text:
        return None, []
    df = pd.read_csv(io.StringIO(text))
    need = {"module", "phase", "time_s", "share"}
    if not need <= set(df.columns):
        return None, [f"{who}: layers.csv lacks {', '.join(sorted(need - set(df.columns)))}"]
    return df, []


def _phrase(t: dict) -> str:
    ai = t.get("intensity_flops_per_byte")
    where = f" at {num(ai)} FLOP/B" if _finite_nonneg(ai) else ""
    return f"{t.get('module', '?')} {t.get('phase', '')} {pct(t.get('share'))} {t.get('bound', '')}{where}".strip()


def shifts(runs: pd.DataFrame, layers: pd.DataFrame) -> pd.DataFrame:
    """Pairs of runs of one environment, device and model that differ in exactly one other config
    field (two models' modules are not one another's: no shift is drawn between them)."""
    out = []
    if runs.empty:
        return pd.DataFrame()
    for _, g in runs.groupby(["env_label", "device_name", "model"], sort=True):
        recs = g.to_dict("records")
        for a, b in combinations(recs, 2):
            diff = [c for c in CONFIG_FIELDS if a[c] != b[c]]
            if len(diff) != 1:
                continue
            field = diff[0]
            if _order(a[field]) > _order(b[field]):
                a, b = b, a
            row = {
                "env_label": a["env_label"],
                "device_name": a["device_name"],
                "model": a["model"],
                "field": field,
                "from": a[field],
                "to": b[field],
                "from_run_id": a["run_id"],
                "to_run_id": b["run_id"],
                "from_step_s": a["step_s"],
                "to_step_s": b["step_s"],
            }
            for p in PARTS:
                row[f"from_{p}_fraction"] = a[f"{p}_fraction"]
                row[f"to_{p}_fraction"] = b[f"{p}_fraction"]
            row.update(_mover(layers, a["run_id"], b["run_id"]))
            out.append(row)
    return pd.DataFrame(out)


def _order(v):
    """Sort key putting the smaller batch, fp32 before bf16/fp16, fewer ranks first."""
    if isinstance(v, (int, float)):
        return (0, v, "")
    return (1, 0, {"fp32": "0"}.get(str(v), str(v)))


def _mover(layers: pd.DataFrame, a: str, b: str) -> dict:
    """The default-view module row whose share changed most between runs a and b."""
    if layers.empty or "view" not in layers:
        return {"mover": "", "mover_from_share": math.nan, "mover_to_share": math.nan}
    view = layers[(layers["view"].astype(str).str.lower() == "true") & (layers["kind"] == "module")]
    sa = view[view["run_id"] == a].set_index(["module", "phase"])["share"]
    sb = view[view["run_id"] == b].set_index(["module", "phase"])["share"]
    both = pd.concat([sa.rename("a"), sb.rename("b")], axis=1).fillna(0.0)
    if both.empty:
        return {"mover": "", "mover_from_share": math.nan, "mover_to_share": math.nan}
    delta = (both["b"] - both["a"]).abs()
    key = delta.idxmax()
    return {
        "mover": f"{key[0]} {key[1]}",
        "mover_from_share": float(both.loc[key, "a"]),
        "mover_to_share": float(both.loc[key, "b"]),
    }


# ------------------------------------------------------------------------------ the report
def runs_table(runs: pd.DataFrame) -> Table:
    headers = ["Environment", "Config", "ms/step", *(PART_SHORT[p] for p in PARTS), "Most time"]
    rows = []
    for r in runs.sort_values(["env_label", "config_label"]).to_dict("records"):
        rows.append(
            [
                r["env_label"],
                r["config_label"],
                num(r["step_s"] * 1e3),
                *(pct(r[f"{p}_fraction"]) for p in PARTS),
                r["top"],
            ]
        )
    return Table(headers, rows)


def shifts_table(sh: pd.DataFrame) -> Table:
    headers = [
        "Environment",
        "Model",
        "Change",
        "ms/step",
        "fwd",
        "bwd",
        "opt",
        "data",
        "comm",
        "overhead",
        "Biggest module shift",
    ]
    rows = []
    for r in sh.to_dict("records"):

        def arrow(p):
            return f"{pct(r[f'from_{p}_fraction'])} → {pct(r[f'to_{p}_fraction'])}"

        data = [
            r[f"{end}_data_wait_fraction"] + r[f"{end}_h2d_copy_fraction"] for end in ("from", "to")
        ]
        mover = (
            f"{r['mover']} {pct(r['mover_from_share'])} → {pct(r['mover_to_share'])}"
            if r.get("mover")
            else ""
        )
        rows.append(
            [
                r["env_label"],
                r["model"],
                f"{r['field']} {r['from']} → {r['to']}",
                f"{num(r['from_step_s'] * 1e3)} → {num(r['to_step_s'] * 1e3)}",
                arrow("forward"),
                arrow("backward"),
                arrow("optimizer"),
                f"{pct(data[0])} → {pct(data[1])}",
                arrow("exposed_comm"),
                arrow("host_overhead"),
                mover,
            ]
        )
    return Table(headers, rows)


def section(b: Breakdowns, figure: tuple[str, str] | None) -> list[tuple]:
    """The body of the report's section "Where the step's time goes" (analysis/report.py's Block
    format)."""
    out: list[tuple] = []
    if b.runs.empty:
        return out + [
            (
                "p",
                "No `breakdown` run in these experiments (`python -m profiling --breakdown` logs one).",
            )
        ]
    out += [("p", INTRO)]
    if figure is not None:
        out += [("figure", *figure)]
    out += [("table", runs_table(b.runs))]
    if b.shifts.empty:
        out += [
            (
                "p",
                "No two breakdown runs of one environment differ in exactly one configuration "
                "field (batch, precision, world size, ...): nothing to compare side by side.",
            )
        ]
    else:
        out += [
            (
                "p",
                "How the breakdown shifts between configurations: runs of one environment and model that "
                "differ in one field, the smaller value (or fp32, or fewer ranks) first.",
            ),
            ("table", shifts_table(b.shifts)),
        ]
    return out


def write_files(b: Breakdowns, out_dir: Path) -> list[Path]:
    """breakdown_runs.csv and breakdown_layers.csv (raw values) when there are breakdown runs."""
    if b.runs.empty:
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "breakdown_runs.csv", out_dir / "breakdown_layers.csv"]
    csv_frame(b.runs).to_csv(paths[0], index=False)
    csv_frame(b.layers).to_csv(paths[1], index=False)
    if not b.shifts.empty:
        paths.append(out_dir / "breakdown_shifts.csv")
        csv_frame(b.shifts).to_csv(paths[2], index=False)
    return paths
