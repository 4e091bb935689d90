"""Breakdown runs (run_kind `breakdown`: where a config's step time goes, `python -m profiling
--breakdown`) as the findings read them: the latest FINISHED one per (env_label, device_name,
config_key) as analysis/fetch/breakdowns.py fetches it (the same list the report's breakdown
section is built from), its parts (`breakdown_<part>_fraction` in breakdown.json's metrics) and
its `layers.csv` rows (module, phase, kind, leaf, time_s, share, bound, ...). Pure."""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field

import pandas as pd

from common import schema
from common.stats import as_float
from profiling.breakdown.names import PARTS  # the step's parts

DATA_PARTS = ("data_wait", "h2d_copy")
HOST_PARTS = ("host_overhead",)
LAYER_COLUMNS = ("module", "phase", "time_s", "share", "bound")
# normalisation and elementwise layers by module name or type (resnet's bn1, downsample.1 is a
# BatchNorm too but is named by position: only names and types that say what they are count)
FUSABLE = re.compile(
    r"(^|[._])(bn\d*|\w*norm\w*|relu\d*|gelu|silu|swish|hardswish|sigmoid|tanh|dropout\d*|"
    r"softmax|add|mul|act\d*)($|[._])|batchnorm|layernorm|groupnorm|relu|gelu|silu|dropout",
    re.I,
)


@dataclass
class Breakdown:
    run_id: str
    step_s: float | None
    fractions: dict[str, float] = field(default_factory=dict)
    """part -> share of the step (0..1)."""
    layers: pd.DataFrame = field(default_factory=pd.DataFrame)
    """leaf module rows of layers.csv (modules without children: no time counted twice)."""
    uncounted_time_share: float | None = None
    """the step's share in the rows that ran ops with no FLOP formula (None: not recorded)."""
    data: str = ""
    """the breakdown run's `data` param: with `synthetic` data no loader ran, so no worker can
    remove its data wait."""
    top: list[dict] = field(default_factory=list)
    """the largest rows as the breakdown ranked them (breakdown.json `top`: leaf modules and the
    step's own rows such as the optimizer, by share): the one ranking every place shows"""
    clock: str = ""
    """the clock every share of the run is by, as the run says it (breakdown.json
    `share_clock_name`; '' for runs made before it said)"""
    above_roof: str = ""
    """the run's paragraph on rows above their roof ('' when none is)"""

    def share(self, parts) -> float | None:
        known = [self.fractions[p] for p in parts if p in self.fractions]
        return sum(known) if known else None


def latest(fetched: list[dict]) -> dict[tuple[str, str, str], Breakdown]:
    """(env_label, device_name, config_key) -> its breakdown, from fetch_breakdowns' list
    ({run_id, env_label, device_name, config_key, summary: breakdown.json, layers: csv text}) as
    analysis/screen.py `breakdowns` passed it."""
    out = {}
    for f in fetched or []:
        if not f.get("config_key"):
            continue
        env = str(f.get("env_label") or "(no env_label)")
        dev = str(f.get("device_name") or "(unknown device)")
        out[(env, dev, str(f["config_key"]))] = _one(f)
    return out


def _one(f: dict) -> Breakdown:
    summary = f.get("summary") if isinstance(f.get("summary"), dict) else {}
    metrics = summary.get("metrics") if isinstance(summary.get("metrics"), dict) else {}
    b = Breakdown(str(f["run_id"]), as_float(metrics.get("breakdown_step_s"), positive=True))
    params = f.get("params") if isinstance(f.get("params"), dict) else {}
    b.data = str(params.get("data") or "")
    for part in PARTS:
        v = as_float(metrics.get(f"breakdown_{part}_fraction"), nonnegative=True)
        if v is not None:
            b.fractions[part] = v
    b.uncounted_time_share = as_float(
        metrics.get(schema.METRIC_UNCOUNTED_TIME_SHARE), nonnegative=True
    )
    if f.get("layers"):
        b.layers = parse_layers(str(f["layers"]))
    b.top = [_top_row(t) for t in summary.get("top") or [] if isinstance(t, dict)]
    b.top = [t for t in b.top if t is not None]
    b.clock = str(summary.get("share_clock_name") or "")
    above = summary.get("above_roof")
    b.above_roof = str(above.get("sentence") or "") if isinstance(above, dict) else ""
    return b


def _top_row(t: dict) -> dict | None:
    """One row of breakdown.json's `top` as the findings keep it (a share that is no fraction of
    the step: left out)."""
    share = as_float(t.get("share"), nonnegative=True)
    if share is None or not 0 <= share <= 1:
        return None
    return {
        "module": str(t.get("module") or ""),
        "phase": str(t.get("phase") or ""),
        "share": share,
        "bound": str(t.get("bound") or ""),
    }


def parse_layers(text: str) -> pd.DataFrame:
    """The leaf module rows of a layers.csv that analysis/screen.py passed (its rows' times and
    shares are measurements); `share` derived from time_s when absent."""
    try:
        df = pd.read_csv(io.StringIO(text))
    except (ValueError, pd.errors.ParserError):
        return pd.DataFrame(columns=LAYER_COLUMNS)
    if not {"module", "time_s"} <= set(df.columns):
        return pd.DataFrame(columns=LAYER_COLUMNS)
    for c in ("phase", "bound"):
        df[c] = df[c].fillna("").astype(str) if c in df.columns else ""
    df["module"] = df["module"].fillna("").astype(str)
    df["time_s"] = pd.to_numeric(df["time_s"], errors="coerce")
    if "share" in df.columns:
        df["share"] = pd.to_numeric(df["share"], errors="coerce")
    else:
        total = df["time_s"].sum()
        df["share"] = df["time_s"] / total if total > 0 else float("nan")
    if "kind" in df.columns:  # module rows only: not the model, not data/loss/optimizer rows
        df = df[df["kind"].astype(str) == "module"]
    if "leaf" in df.columns:  # a module's time includes its children's: leaves only
        df = df[df["leaf"].astype(str).str.lower().isin(["true", "1"])]
    return df[list(LAYER_COLUMNS)].reset_index(drop=True)


def fusable_share(layers: pd.DataFrame) -> tuple[float, int]:
    """Share of the step in memory-bound normalisation/elementwise layer rows, and how many rows."""
    if layers.empty:
        return 0.0, 0
    mem = layers["bound"].str.lower().str.startswith("memory")
    fus = layers["module"].map(lambda m: bool(FUSABLE.search(m)))
    rows = layers[mem & fus]
    return float(rows["share"].sum()), len(rows)


def top_layers(b: Breakdown, n: int = 3) -> list[dict]:
    """The `n` largest rows in the breakdown's own order (its description's, its tags' and its
    figure's); a run made before breakdown.json ranked them: its leaf module rows by share."""
    if b.top:
        return b.top[:n]
    layers = b.layers
    if layers.empty:
        return []
    top = layers.sort_values("share", ascending=False).head(n)
    return [
        {
            "module": r["module"],
            "phase": r["phase"],
            "share": float(r["share"]),
            "bound": r["bound"],
        }
        for r in top.to_dict("records")
    ]
