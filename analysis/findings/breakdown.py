"""Breakdown runs (run_kind `breakdown`: where a config's step time goes) as the findings read them:
the latest FINISHED one per (env_label, device_name, config_key), its parts (metrics
`breakdown_step_s`, `breakdown_<part>_s`, `breakdown_<part>_fraction`) and its `layers.csv` rows
(module, phase, time_s, flops, bytes, intensity_flops_per_byte, bound, share). Pure."""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field

import pandas as pd

from analysis import join
from analysis.findings.values import Clean
from common import schema

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

    def share(self, parts) -> float | None:
        known = [self.fractions[p] for p in parts if p in self.fractions]
        return sum(known) if known else None


def latest(
    runs: pd.DataFrame, layers_csv: dict[str, str], clean: Clean
) -> dict[tuple[str, str, str], Breakdown]:
    """(env_label, device_name, config_key) -> its latest FINISHED breakdown run."""
    br = join.of_kind(runs, "breakdown")
    if br.empty:
        return {}
    br = br.assign(_key=join._config_keys(br), _start=join._start(br)).sort_values("_start")
    out = {}
    for row in br.to_dict("records"):
        if not row["_key"]:
            continue
        env = str(row.get(f"tags.{schema.TAG_ENV_LABEL}") or "(no env_label)")
        dev = str(row.get(f"tags.{schema.TAG_DEVICE_NAME}") or "(unknown device)")
        out[(env, dev, row["_key"])] = _one(row, layers_csv.get(row["run_id"]), clean)
    return out


def _one(row: dict, csv_text: str | None, clean: Clean) -> Breakdown:
    rid = str(row["run_id"])
    where = f"breakdown run {rid[:8]}"
    b = Breakdown(rid, clean.value(row.get("metrics.breakdown_step_s"), "breakdown_step_s", where))
    for key, v in row.items():
        m = re.fullmatch(r"metrics\.breakdown_(\w+)_fraction", str(key))
        if m:
            f = clean.value(v, f"breakdown_{m.group(1)}_fraction", where)
            if f is not None and f <= 1.0:
                b.fractions[m.group(1)] = f
            elif f is not None:
                clean.say(f"{where}: breakdown_{m.group(1)}_fraction = {f} is over 1: left out")
    if csv_text:
        b.layers = parse_layers(csv_text, where, clean)
    return b


def parse_layers(text: str, where: str, clean: Clean) -> pd.DataFrame:
    """layers.csv rows with a usable module, phase and time (time_s and share finite, not
    negative); `share` derived from time_s when absent. Bad rows are dropped with one note."""
    try:
        df = pd.read_csv(io.StringIO(text))
    except (ValueError, pd.errors.ParserError) as exc:
        clean.say(f"{where}: layers.csv unreadable ({str(exc).splitlines()[0][:120]}): no layers")
        return pd.DataFrame(columns=LAYER_COLUMNS)
    missing = [c for c in ("module", "time_s") if c not in df.columns]
    if missing:
        clean.say(f"{where}: layers.csv lacks {', '.join(missing)}: no layers")
        return pd.DataFrame(columns=LAYER_COLUMNS)
    for c in ("phase", "bound"):
        df[c] = df[c].fillna("").astype(str) if c in df.columns else ""
    df["module"] = df["module"].fillna("").astype(str)
    df["time_s"] = pd.to_numeric(df["time_s"], errors="coerce")
    if "share" in df.columns:
        df["share"] = pd.to_numeric(df["share"], errors="coerce")
    else:
        total = df["time_s"].where(df["time_s"] >= 0).sum()
        df["share"] = df["time_s"] / total if total > 0 else float("nan")
    ok = df["time_s"].between(0, float("inf"), inclusive="left") & df["share"].between(0, 1)
    bad = int((~ok).sum())
    if bad:
        clean.say(
            f"{where}: {bad} layers.csv row(s) with a time or share that is not finite, negative "
            "or over 1: left out"
        )
    return df.loc[ok, list(LAYER_COLUMNS)].reset_index(drop=True)


def fusable_share(layers: pd.DataFrame) -> tuple[float, int]:
    """Share of the step in memory-bound normalisation/elementwise layer rows, and how many rows."""
    if layers.empty:
        return 0.0, 0
    mem = layers["bound"].str.lower().str.startswith("memory")
    fus = layers["module"].map(lambda m: bool(FUSABLE.search(m)))
    rows = layers[mem & fus]
    return float(rows["share"].sum()), len(rows)


def top_layers(layers: pd.DataFrame, n: int = 3) -> list[dict]:
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
