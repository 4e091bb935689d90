"""What one `peaks` run measured, as plain data (raw SI values), and how it reads: MLflow metrics,
the `peaks/samples.json` artifact, the fractions of a vendor entry, the one-line summary."""

from __future__ import annotations

from dataclasses import dataclass, field

from common.fmt import si
from profiling.peaks.config import PeaksConfig
from profiling.peaks.sampling import Measurement
from profiling.peaks.stream import STREAM_ELEMENT_BYTES, STREAM_KERNELS
from roofline.vendor import VendorPeaks


def best_kernel(stream: dict[str, Measurement]) -> str:
    """The STREAM kernel with the highest best sample (copy or triad)."""
    return max(stream, key=lambda k: stream[k].best)


@dataclass
class PeaksResult:
    """Everything one run measured, as plain data (raw SI values)."""

    device_type: str
    matrix_size: int
    array_bytes: int
    l2_array_bytes: int = 0
    compute: dict[str, Measurement] = field(default_factory=dict)
    stream: dict[str, Measurement] = field(default_factory=dict)  # DRAM
    l2: dict[str, Measurement] = field(default_factory=dict)  # cache-resident STREAM
    skipped: dict[str, str] = field(default_factory=dict)
    cpu_probe_ratios: dict[str, float] = field(default_factory=dict)
    time_budget_s: float | None = None
    wall_s: float = 0.0
    step_s: dict[str, float] = field(default_factory=dict)  # wall time of every plan() step

    @property
    def dram_kernel(self) -> str:
        """The DRAM STREAM kernel with the highest best sample (copy or triad)."""
        return best_kernel(self.stream)

    @property
    def l2_kernel(self) -> str | None:
        return best_kernel(self.l2) if self.l2 else None

    @property
    def l2_withheld(self) -> str | None:
        """Why peak_l2_bytes_per_s is not reported, or None. A cache ceiling below the DRAM one is
        impossible (DRAM traffic passes through the L2): other processes disturbed every sample."""
        if (
            self.l2
            and self.stream
            and self.l2[self.l2_kernel].best < self.stream[self.dram_kernel].best
        ):
            return (
                f"the L2 figure ({si(self.l2[self.l2_kernel].best, 'B/s')}) is below the DRAM "
                f"figure ({si(self.stream[self.dram_kernel].best, 'B/s')}): other processes "
                "disturbed every L2 sample; peak_l2_bytes_per_s not reported (rerun on a quieter "
                "machine)"
            )
        return None

    def measurements(self) -> dict[str, Measurement]:
        """Every measurement by a step-like label: gemm <dtype>, dram <kernel>, l2 <kernel>."""
        out = {f"gemm {d}": m for d, m in self.compute.items()}
        out.update({f"dram {k}": m for k, m in self.stream.items()})
        out.update({f"l2 {k}": m for k, m in self.l2.items()})
        return out

    def budget_cuts(self) -> dict[str, tuple[int, int]]:
        """{label: (samples taken, samples asked)} of every measurement the time budget cut."""
        return {k: (len(m.samples_s), m.requested) for k, m in self.measurements().items() if m.cut}

    def bimodal(self) -> dict[str, Measurement]:
        """{label: measurement} of every measurement with samples near the best and far below it."""
        return {k: m for k, m in self.measurements().items() if m.bimodal}

    def headline(self) -> dict[str, Measurement]:
        """The measurements the summary line reports: gemm <dtype>, dram and l2 <better kernel>."""
        out = {f"gemm {d}": m for d, m in self.compute.items()}
        if self.stream:
            out[f"dram {self.dram_kernel}"] = self.stream[self.dram_kernel]
        if self.l2:
            out[f"l2 {self.l2_kernel}"] = self.l2[self.l2_kernel]
        return out

    def metrics(self) -> dict[str, float]:
        """Each ceiling is the best sample; `_p10` and `_near_best_fraction` say how typical it was
        (a median would fall in the disturbed group when samples are bimodal: docs/peaks.md)."""
        m: dict[str, float] = {}

        def ceiling(key: str, meas: Measurement) -> None:
            m[key] = meas.best
            m[f"{key}_p10"] = meas.p10
            m[f"{key}_near_best_fraction"] = meas.near_best_fraction

        for dtype, meas in self.compute.items():
            ceiling(f"peak_flops_per_s_{dtype}", meas)
        for level, stream in (("dram", self.stream), ("l2", self.l2)):
            for name, meas in stream.items():
                m[f"peak_{level}_{name}_bytes_per_s"] = meas.best
            if stream and not (level == "l2" and self.l2_withheld):
                ceiling(f"peak_{level}_bytes_per_s", stream[best_kernel(stream)])
        for label, meas in self.measurements().items():
            m[f"samples_{label.replace(' ', '_')}"] = float(len(meas.samples_s))
        for dtype, ratio in self.cpu_probe_ratios.items():
            m[f"cpu_{dtype}_probe_ratio"] = ratio
        m["wall_s"] = self.wall_s
        return m

    def to_dict(self) -> dict:
        return {
            "device_type": self.device_type,
            "matrix_size": self.matrix_size,
            "array_bytes": self.array_bytes,
            "l2_array_bytes": self.l2_array_bytes,
            "stream_counting": {
                k: f"{v} arrays x {STREAM_ELEMENT_BYTES} byte per element"
                for k, v in STREAM_KERNELS.items()
            },
            "compute": {k: v.to_dict() for k, v in self.compute.items()},
            "stream": {k: v.to_dict() for k, v in self.stream.items()},
            "l2": {k: v.to_dict() for k, v in self.l2.items()},
            "skipped": self.skipped,
            "cpu_probe_ratios": self.cpu_probe_ratios,
            "time_budget_s": self.time_budget_s,
            "budget_cuts": {
                k: {"taken": t, "asked": a} for k, (t, a) in self.budget_cuts().items()
            },
            "l2_withheld": self.l2_withheld,
            "bimodal": list(self.bimodal()),
            "step_s": self.step_s,
            "metrics": self.metrics(),
        }


def vendor_fields(vendor: VendorPeaks | None, result: PeaksResult) -> tuple[dict, dict, dict]:
    """(params, tags, metrics) describing the vendor entry and the measured fraction of it."""
    if vendor is None:
        return {}, {"vendor_peaks": "none"}, {}
    params = {f"vendor_peak_flops_per_s_{d}": v for d, v in vendor.flops_per_s.items()}
    params["vendor_peak_dram_bytes_per_s"] = vendor.dram_bytes_per_s
    for level in ("l2", "l1"):
        if getattr(vendor, f"{level}_bytes_per_s") is not None:
            params[f"vendor_peak_{level}_bytes_per_s"] = getattr(vendor, f"{level}_bytes_per_s")
    tags = {"vendor_peaks": vendor.device_name, "vendor_source": vendor.source[:5000]}
    metrics = {
        f"fraction_of_vendor_flops_{d}": m.best / vendor.flops_per_s[d]
        for d, m in result.compute.items()
        if d in vendor.flops_per_s
    }
    if result.stream:
        metrics["fraction_of_vendor_dram"] = (
            result.stream[result.dram_kernel].best / vendor.dram_bytes_per_s
        )
    if result.l2 and not result.l2_withheld and vendor.l2_bytes_per_s is not None:
        metrics["fraction_of_vendor_l2"] = result.l2[result.l2_kernel].best / vendor.l2_bytes_per_s
    return params, tags, metrics


def budget_text(result: PeaksResult, config: PeaksConfig) -> str:
    """How many samples were taken, and whether the time budget cut any step."""
    cuts = result.budget_cuts()
    if cuts:
        taken = ", ".join(f"{label} {t}/{a}" for label, (t, a) in cuts.items())
        return f"the {config.time_budget_s:g} s time budget cut sampling ({taken} samples)"
    budget = (
        f"within the {config.time_budget_s:g} s time budget"
        if config.time_budget_s
        else "no time budget"
    )
    return f"best of {config.repeats}/{config.bandwidth_repeats} samples, {budget}"


def summary_line(
    device: str,
    name: str,
    result: PeaksResult,
    vendor: VendorPeaks | None,
    config: PeaksConfig,
    where: str = "",
    total_s: float | None = None,
) -> str:
    """`peaks <device> [<name>]: <figures>; <samples and budget>; <time>; <where the run went>`
    (the run's description too, without `where`)."""
    parts = []
    for d, m in result.compute.items():
        text = f"{d} {si(m.best, 'FLOP/s')}"
        if vendor and d in vendor.flops_per_s:
            text += f" ({m.best / vendor.flops_per_s[d]:.0%} of datasheet)"
        parts.append(text + _bimodal_text(m))
    if result.stream:
        m = result.stream[result.dram_kernel]
        text = f"DRAM {si(m.best, 'B/s')} ({result.dram_kernel})"
        if vendor:
            text += f" ({m.best / vendor.dram_bytes_per_s:.0%} of datasheet)"
        parts.append(text + _bimodal_text(m))
    if result.l2:
        m = result.l2[result.l2_kernel]
        text = f"L2 {si(m.best, 'B/s')} ({result.l2_kernel})"
        if result.l2_withheld:
            text += " (below DRAM: disturbed, not reported as peak_l2)"
        elif vendor and vendor.l2_bytes_per_s is not None:
            text += f" ({m.best / vendor.l2_bytes_per_s:.0%} of datasheet)"
        parts.append(text + _bimodal_text(m))
    took = f"measured in {result.wall_s:.1f} s" + (
        f" ({total_s:.1f} s in all)" if total_s is not None else ""
    )
    tail = f"; {where}" if where else ""
    return (
        f"peaks {device} [{name}]: {', '.join(parts)}; {budget_text(result, config)}; {took}{tail}"
    )


def _bimodal_text(meas: Measurement) -> str:
    if not meas.bimodal:
        return ""
    n = len(meas.rates)
    return f" (bimodal: {round(meas.near_best_fraction * n)}/{n} samples near the best)"
