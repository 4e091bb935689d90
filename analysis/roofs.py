"""Where each point sits on its roofline (pure DataFrame work on the runs layout of
analysis/join.py): its measured intensity from profile runs (the latest usable profile run per
config and device name; otherwise the train runs' modeled intensity holds), the roof it is held
against (per environment and device each ceiling the highest of the most trusted peaks runs,
roofline/ceilings.py, else of another environment with the same device, else the vendor table), and
the point evaluated under that roof (roofline/model.py).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import numpy as np
import pandas as pd

from analysis import join
from common import schema
from common.stats import as_float
from common.fmt import short_id
from roofline import ceilings
from roofline.model import PointEval, Roof, evaluate_point
from roofline.ceilings import highest

VendorLookup = Callable[[str], Any]


# ------------------------------------------------------------------------------- profile runs
def profile_intensities(runs: pd.DataFrame, use_incomplete: bool = False) -> pd.DataFrame:
    """Measured intensities per (config_key, device_name) from the latest FINISHED profile run;
    a profile that missed a training phase (tag ncu_missing_phase) only with `use_incomplete`.

    DRAM intensity = ncu_flops_total / ncu_dram_bytes (the logged ncu_intensity_dram_flops_per_byte
    when ncu_flops_total or ncu_dram_bytes is absent); L2 and L1 likewise where their bytes exist.
    The run's ncu_flops_total and profile_steps are kept beside (`profile_flops_total`,
    `profile_steps`) for the findings' check of its FLOPs against the train runs'.
    """
    cols = [
        "config_key",
        "device_name",
        "profile_run_id",
        "profile_env_label",
        "intensity_dram_flops_per_byte",
        "intensity_l2_flops_per_byte",
        "intensity_l1_flops_per_byte",
        "profile_flops_total",
        "profile_steps",
    ]
    pr = join.of_kind(runs, "profile")
    pr = pr[
        join.text(pr, f"tags.{schema.TAG_NCU_TRUNCATED}") == ""
    ]  # totals of part of a profile: no intensity
    if not use_incomplete:  # a forward-only capture's intensity is not the training step's
        pr = pr[join.text(pr, f"tags.{schema.TAG_NCU_MISSING_PHASE}") == ""]
    if pr.empty:
        return pd.DataFrame(columns=cols)
    flops = join.numeric(pr, "metrics.ncu_flops_total")

    def ratio(byte_col: str) -> pd.Series:
        b = join.numeric(pr, byte_col)
        return (flops / b).where((b > 0) & (flops > 0))

    dram = ratio("metrics.ncu_dram_bytes")
    dram = dram.where(dram.notna(), join.numeric(pr, "metrics.ncu_intensity_dram_flops_per_byte"))
    out = pd.DataFrame(
        {
            "config_key": join.config_keys(pr),
            "device_name": join.text(pr, f"tags.{schema.TAG_DEVICE_NAME}"),
            "profile_run_id": join.text(pr, "run_id"),
            "profile_env_label": join.text(pr, f"tags.{schema.TAG_ENV_LABEL}"),
            "intensity_dram_flops_per_byte": dram,
            "intensity_l2_flops_per_byte": ratio("metrics.ncu_l2_bytes"),
            "intensity_l1_flops_per_byte": ratio("metrics.ncu_l1_bytes"),
            "profile_flops_total": flops,  # against the train runs' FLOPs (findings/anomalies.py)
            "profile_steps": join.numeric(pr, "params.profile_steps"),
            "_start": join.start_ms(pr),
        }
    )
    out = out[(out["config_key"] != "") & out["intensity_dram_flops_per_byte"].gt(0)]
    out = out.sort_values("_start").groupby(["config_key", "device_name"], sort=False).tail(1)
    return out[cols].reset_index(drop=True)


def profile_notes(runs: pd.DataFrame, use_incomplete: bool = False) -> list[str]:
    """Profile runs that cannot give an intensity (or give one only as asked), and why."""
    pr = join.of_kind(runs, "profile")
    if pr.empty:
        return []
    phase_notes = _missing_phase_notes(pr, use_incomplete)
    flops, dram = (
        join.numeric(pr, "metrics.ncu_flops_total"),
        join.numeric(pr, "metrics.ncu_dram_bytes"),
    )
    logged = join.numeric(pr, "metrics.ncu_intensity_dram_flops_per_byte")
    unusable = pr[~(((flops > 0) & (dram > 0)) | (logged > 0))]
    notes = []
    cut = join.text(pr, f"tags.{schema.TAG_NCU_TRUNCATED}") != ""
    if cut.any():
        notes.append(
            f"{int(cut.sum())} profile run(s) were imported from a truncated ncu file "
            f"(--allow-truncated, tag {schema.TAG_NCU_TRUNCATED}; e.g. "
            f"{', '.join(short_id(r) for r in pr.loc[cut, 'run_id'].head(3))}): their totals cover only "
            "part of the profile, so they give no intensity; import the whole file to place them"
        )
    unusable = unusable[~cut.loc[unusable.index]]
    if len(unusable):
        notes.append(
            f"{len(unusable)} profile run(s) lack ncu_flops_total/ncu_dram_bytes (e.g. "
            f"{', '.join(short_id(r) for r in unusable['run_id'].head(3))}): their configs use the modeled intensity"
        )
    no_key = pr[join.config_keys(pr) == ""]
    if len(no_key):
        notes.append(
            f"{len(no_key)} profile run(s) have no config_key: not joined "
            f"(e.g. {', '.join(short_id(r) for r in no_key['run_id'].head(3))})"
        )
    return phase_notes + notes


def _missing_phase_notes(pr: pd.DataFrame, use_incomplete: bool) -> list[str]:
    """One note on the profile runs that missed a training phase (tag ncu_missing_phase)."""
    missed = join.text(pr, f"tags.{schema.TAG_NCU_MISSING_PHASE}")
    phased = pr[missed != ""]
    if not len(phased):
        return []
    what = ", ".join(sorted(set(missed[missed != ""])))
    return [
        f"{len(phased)} profile run(s) missed a training phase (tag "
        f"{schema.TAG_NCU_MISSING_PHASE}: {what}; e.g. "
        f"{', '.join(short_id(r) for r in phased['run_id'].head(3))}): their intensity is "
        + (
            "used, as --use-incomplete-profiles asks"
            if use_incomplete
            else "left off the training point (python -m analysis --use-incomplete-profiles uses it)"
        )
    ]


def attach_intensity(points: pd.DataFrame, profiles: pd.DataFrame) -> pd.DataFrame:
    """Add `intensity_flops_per_byte` and `intensity_source` (measured | modeled | missing)."""
    out = points.merge(profiles, on=["config_key", "device_name"], how="left")
    for c in (
        "intensity_dram_flops_per_byte",
        "intensity_l2_flops_per_byte",
        "intensity_l1_flops_per_byte",
        "modeled_intensity_flops_per_byte",
        "achieved_flops_per_s",
    ):
        out[c] = pd.to_numeric(out[c], errors="coerce").astype(
            float
        )  # an empty merge leaves object columns
    measured = out["intensity_dram_flops_per_byte"].notna()
    modeled = out["modeled_intensity_flops_per_byte"].gt(0)
    out["intensity_flops_per_byte"] = np.where(
        measured,
        out["intensity_dram_flops_per_byte"],
        np.where(modeled, out["modeled_intensity_flops_per_byte"], np.nan),
    )
    out["intensity_source"] = np.where(
        measured, "measured", np.where(modeled, "modeled", "missing")
    )
    out["profile_run_id"] = out["profile_run_id"].fillna("")
    return out


# ------------------------------------------------------------------------------- roofs
def peaks_load(row: dict) -> dict:
    """A peaks run's record for the ceilings it gives: run id, start (epoch ms), the load average
    it logged at the start and at most while measuring (common/load.py), the CPUs, and
    `trust`: quiet | busy | not recorded (roofline/ceilings.py, the rule a run's own roofline uses)."""
    return {
        "run_id": str(row["run_id"]),
        "start_time": as_float(row.get("_start")),
        "env_label": str(row.get(f"tags.{schema.TAG_ENV_LABEL}") or ""),
        **ceilings.load_metrics(row),
        "trust": ceilings.row_trust(row),
    }


def _trusted(rows: list[dict]) -> list[dict]:
    """The rows of the most trusted kind present (roofline/ceilings.py TRUST_ORDER)."""
    return ceilings.trusted(rows, lambda r: r["_load"]["trust"])


def measured_roofs(
    runs: pd.DataFrame,
) -> tuple[dict[tuple[str, str], Roof], dict[str, tuple[str, Roof]], dict[str, dict]]:
    """Roofs from FINISHED peaks runs: per (env_label, device_name), and per device_name alone
    (with the environments it came from) for environments that measured none; each ceiling the
    highest of the most trusted runs (TRUST_ORDER). Also every peaks run's load record
    (`peaks_load`) by its short run id, for the findings that name a ceiling's run."""
    pk = join.of_kind(runs, "peaks")
    if pk.empty:
        return {}, {}, {}
    pk = pk.assign(_start=join.start_ms(pk)).sort_values("_start")
    rows = [r for r in pk.to_dict("records") if not ceilings.roof_from_peaks_row(r, "").is_empty()]
    for r in rows:
        r["_load"] = peaks_load(r)
    by_key: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        env = str(r.get(f"tags.{schema.TAG_ENV_LABEL}") or "")
        by_key.setdefault((env, str(r.get(f"tags.{schema.TAG_DEVICE_NAME}") or "")), []).append(r)
    by_env = {(e, d): highest(_trusted(rs), d) for (e, d), rs in by_key.items()}
    by_dev: dict[str, tuple[str, Roof]] = {}
    for dev in sorted({d for _, d in by_key}):
        chosen = _trusted([r for (_, d), rs in by_key.items() if d == dev for r in rs])
        envs = ", ".join(sorted({str(r.get(f"tags.{schema.TAG_ENV_LABEL}") or "") for r in chosen}))
        by_dev[dev] = (envs, highest(chosen, dev))
    return by_env, by_dev, {short_id(r["run_id"]): r["_load"] for r in rows}


def choose_roofs(
    envs: Iterable[tuple[str, str]],
    runs: pd.DataFrame,
    vendor_lookup: VendorLookup | None,
) -> tuple[dict[tuple[str, str], dict[str, Any]], list[str]]:
    """Per (env_label, device_name): {'measured', 'vendor', 'roof', 'peaks_runs'} where 'roof'
    (used for the fraction of roof) takes each ceiling from the measured peaks runs when they have
    it (measured_roofs: the highest of the most trusted), else from the vendor lookup (the peak
    table with the user's --peaks-file); 'peaks_runs': the load records of every peaks run (short
    run id -> peaks_load). Returns (roofs, notes)."""
    by_env, by_dev, loads = measured_roofs(runs)
    out: dict[tuple[str, str], dict[str, Any]] = {}
    notes: list[str] = []
    vendor_cache: dict[str, Roof | None] = {}
    for env, dev in envs:
        measured = by_env.get((env, dev))
        if measured is None and dev in by_dev:
            other_env, measured = by_dev[dev]
            notes.append(
                f"{env}: no peaks run of its own; using the measured peaks of '{other_env}' (same device {dev})"
            )
        if dev not in vendor_cache:
            entry = vendor_lookup(dev) if vendor_lookup is not None else None
            vendor_cache[dev] = ceilings.roof_from_vendor(entry, dev)
        vendor = vendor_cache[dev]
        roof = ceilings.measured_over_vendor(measured, vendor)
        if roof is None:
            notes.append(
                f"no peaks for {dev} (env {env}): no peaks run and no vendor entry; fraction of roof and bound "
                "left empty (run `python -m profiling.peaks` there, or add the device with --peaks-file)"
            )
        out[(env, dev)] = {
            "measured": measured,
            "vendor": vendor,
            "roof": roof,
            "peaks_runs": loads,
        }
    return out, notes + busy_peaks_notes(loads, out)


def busy_peaks_notes(loads: dict[str, dict], roofs: dict) -> list[str]:
    """One line per peaks run measured on a busy machine whose ceilings are in use (no quiet or
    unrecorded run measured the device)."""
    used = {
        src.rsplit(" ", 1)[-1]
        for r in roofs.values()
        if r["roof"] is not None
        for src in r["roof"].sources.values()
        if src.startswith("measured")
    }
    return [
        f"peaks run {rid} ({r['env_label']}) measured while the machine was busy (1-minute load "
        f"average {r['load_average_1m_start']:.2f} at the start, up to {r['load_average_1m_max']:.2f}"
        f", on {r['cpu_count']:.0f} CPUs) and no quieter one measured the device: its ceilings may "
        "be low; rerun `python -m profiling.peaks` on a quiet machine"
        for rid, r in loads.items()
        if r["trust"] == "busy" and rid in used
    ]


def evaluate(
    points: pd.DataFrame, roofs: dict[tuple[str, str], dict[str, Roof | None]]
) -> pd.DataFrame:
    """Add ceiling_dtype, peak, bandwidth, ridge, attainable, bound, fraction_of_roof, roof_source."""
    evals = []
    for p in points.to_dict("records"):
        roof = roofs.get((p["env_label"], p["device_name"]), {}).get("roof")
        intens = {
            "dram": p.get("intensity_flops_per_byte"),
            "l2": p.get("intensity_l2_flops_per_byte"),
            "l1": p.get("intensity_l1_flops_per_byte"),
        }
        intens = {k: float(v) for k, v in intens.items() if v is not None and pd.notna(v)}
        ev = evaluate_point(p["precision"], p["achieved_flops_per_s"], intens, roof)
        evals.append(ev.__dict__)
    ev_df = pd.DataFrame(evals, index=points.index, columns=list(PointEval.__dataclass_fields__))
    return pd.concat([points, ev_df], axis=1)
