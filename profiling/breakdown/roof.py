"""The device's ceilings for the breakdown's bounds, and the roofline maths it uses.

The one place the breakdown reaches the roofline model: the FINISHED peaks runs of the
device on the tracking server (the same env label first), chosen as analysis chooses them
(roofline/ceilings.py: each ceiling the highest of the most trusted runs), each ceiling it lacks from the vendor
table, as a train run's own `roofline.png` does; where neither knows the device (a CPU without a
peaks run), no ceilings, and the reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from common.errors import one_line
from common.fmt import short_id
from roofline import ceilings, run_plot, store, vendor
from roofline.model import MEMORY_BOUND, Roof, ceiling_dtype, classify_bound, fraction_of_roof
from roofline.model import is_finite_positive as _ok


@dataclass
class Ceilings:
    """The compute ceiling of the run's dtype and the DRAM bandwidth, with where they came from;
    NaN and `why` when unknown."""

    dtype: str = "fp32"
    peak_flops_per_s: float = math.nan
    dram_bytes_per_s: float = math.nan
    source: str = ""
    """e.g. `measured: peaks run 1a2b3c4d` or `vendor: <datasheet>` (both `;`-separated)"""
    why: str = ""
    """why there are none (empty when known)"""
    flops_per_s: dict[str, float] = field(default_factory=dict)
    """every dtype's compute ceiling the roof has (the figure draws fp32 and the run's)"""

    @property
    def known(self) -> bool:
        return _ok(self.peak_flops_per_s) and _ok(self.dram_bytes_per_s)

    @property
    def ridge_flops_per_byte(self) -> float:
        return self.peak_flops_per_s / self.dram_bytes_per_s if self.known else math.nan

    roof: Roof | None = None
    """the roofline package's roof these ceilings were read from (None: made here, `as_roof`)"""
    peaks_load: dict[str, float] = field(default_factory=dict)
    """the peaks run that measured the compute ceiling: its load while it measured
    (roofline.ceilings.PEAKS_LOAD_METRICS) and `trust` (quiet | busy | not recorded) via
    `load_phrase`; empty for a vendor ceiling"""
    vendor_flops_per_s: float = math.nan
    """the vendor table's figure for the same compute ceiling (NaN: none, or the ceiling is it)"""

    def load_phrase(self) -> str:
        """`busy: 1-minute load average 2.03 at its start, up to 2.35, on 2 CPUs`, '' when the
        compute ceiling was not measured."""
        m = self.peaks_load
        if not m:
            return ""
        kind = ceilings.load_trust(
            m.get("load_average_1m_start", math.nan),
            m.get("load_average_1m_max", math.nan),
            m.get("cpu_count", math.nan),
        )
        if kind == "not recorded":
            return "its load not recorded"
        return (
            f"{kind}: 1-minute load average {m['load_average_1m_start']:.2f} at its start, up to "
            f"{m['load_average_1m_max']:.2f}, on {int(m['cpu_count'])} CPUs"
        )

    def as_roof(self) -> Roof:
        """The ceilings as the roofline package's one roof type (what its drawer draws)."""
        if self.roof is not None:
            return self.roof
        flops = dict(self.flops_per_s) or {self.dtype: self.peak_flops_per_s}
        sources = {f"flops:{d}": self.source for d in flops}
        return Roof(
            "", flops, {"dram": self.dram_bytes_per_s}, {**sources, "bytes:dram": self.source}
        )


def bound(intensity_flops_per_byte: float, ceilings: Ceilings) -> str:
    """memory-bound | compute-bound (the roofline package's classification), `unknown` without
    ceilings."""
    if not ceilings.known:
        return "unknown"
    if intensity_flops_per_byte == 0:  # no counted FLOPs: left of any ridge
        return MEMORY_BOUND
    return (
        classify_bound(
            intensity_flops_per_byte, ceilings.peak_flops_per_s, ceilings.dram_bytes_per_s
        )
        or "unknown"
    )


def roof_fraction(achieved_flops_per_s: float, intensity: float, ceilings: Ceilings) -> float:
    """Achieved / attainable FLOP/s at the row's intensity (roofline.model.fraction_of_roof, the
    project's one efficiency)."""
    if not ceilings.known:
        return math.nan
    return fraction_of_roof(
        achieved_flops_per_s, intensity, ceilings.peak_flops_per_s, ceilings.dram_bytes_per_s
    )


def device_ceilings(
    device_name: str, env_label: str, precision: str, *, online: bool, peaks_file: str = ""
) -> Ceilings:
    """The ceilings of `device_name` for a run of `precision` (see the module docstring); a
    failure to read them is a Ceilings with `why`, never an exception."""
    try:
        rows = store.peaks_rows(device_name, env_label) if online else []
        peaks = ceilings.best_roof(rows, device_name) if rows else None
        listed = vendor.load_vendor_lookup(peaks_file)(device_name)
        roof = run_plot.run_roof(device_name, peaks, listed)
    except Exception as exc:  # noqa: BLE001 - the breakdown stands without bounds
        return Ceilings(why=f"the ceilings could not be read: {one_line(exc)[:200]}")
    if roof is None:
        return Ceilings(
            why=f"no peaks run of {device_name} on this tracking server and no vendor entry for "
            "it: run `python -m profiling.peaks` on this machine for measured ceilings"
        )
    dtype = ceiling_dtype(precision, {d for d, v in roof.flops_per_s.items() if _ok(v)})
    out = Ceilings(
        dtype=dtype,
        peak_flops_per_s=roof.peak(dtype),
        dram_bytes_per_s=roof.dram_bytes_per_s,
        flops_per_s={d: v for d, v in roof.flops_per_s.items() if _ok(v)},
        roof=roof,
    )
    keys = (f"flops:{dtype}", "bytes:dram")
    out.source = "; ".join(sorted({roof.sources[k] for k in keys if roof.sources.get(k)}))
    out.peaks_load, out.vendor_flops_per_s = _evidence(roof, dtype, rows, listed)
    if not out.known:
        missing = [
            k
            for k, v in (
                (f"{dtype} FLOP/s", out.peak_flops_per_s),
                ("DRAM bandwidth", out.dram_bytes_per_s),
            )
            if not _ok(v)
        ]
        out.why = f"the ceilings of {device_name} lack {' and '.join(missing)}"
    return out


def _evidence(roof: Roof, dtype: str, rows: list[dict], listed) -> tuple[dict, float]:
    """What says whether the compute ceiling of `dtype` could be too low: the load of the peaks
    run that measured it (ceilings.PEAKS_LOAD_METRICS, from its analysis row) and the vendor table's
    figure for it (NaN: none, or it is the ceiling)."""
    src = roof.sources.get(f"flops:{dtype}", "")
    load: dict[str, float] = {}
    for row in rows:
        if src == f"measured: peaks run {short_id(row['run_id'])}":
            load = ceilings.load_metrics(row)
            break
    entry = getattr(listed, "flops_per_s", None) or {}
    v = entry.get(dtype, math.nan) if isinstance(entry, dict) else math.nan
    vendor_v = float(v) if _ok(v) and src.startswith("measured") else math.nan
    return load, vendor_v
