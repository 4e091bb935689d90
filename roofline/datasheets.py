"""The vendor (datasheet) peaks this project knows: one entry per device, each with its source.

The numbers are the ceilings a roofline is drawn against when no measured ceiling exists (and the
reference a measured ceiling is compared with). Conventions, applied to every entry:

* raw SI units: FLOP/s and byte/s (1 GB/s = 1e9 byte/s, as datasheets count);
* dense figures, never the 2:4-sparsity ones (datasheets mark those with '*'; we halve them);
* `fp32` is the non-tensor (CUDA core) rate, `tf32`, `fp16`, `bf16` are tensor-core rates, `fp64`
  is the FP64 tensor-core rate where the part has one (A100, H100, H200) else the vector rate;
* GeForce cards run fp16 tensor ops at two rates: with fp16 accumulate and, at half of that, with
  fp32 accumulate. We list the fp32-accumulate rate because that is what cuBLAS uses for
  `torch.mm` on fp16/bf16 inputs and therefore what autocast training gets. Data-center parts
  (A100, H100, L4, ...) have one rate for both;
* a dtype a part has no datasheet figure for is left out (for example fp64 on GeForce, bf16 on
  Turing/Volta).

`VendorPeaks` is the record (validated); `BUILTIN` the table. Lookup by name, user entries and the
CLI are roofline/vendor.py. This module is that table: as entries are added it may pass ~400
lines, and stays one module (a table is read, not navigated).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from common import bounds
from roofline.model import DTYPES


@dataclass(frozen=True)
class VendorPeaks:
    """Vendor (datasheet) ceilings of one device."""

    device_name: str
    """canonical name as torch.cuda.get_device_name reports it, e.g. "NVIDIA L4"."""
    flops_per_s: dict[str, float]
    """dtype -> dense (not sparse) peak FLOP/s; dtypes among fp64, fp32, tf32, fp16, bf16."""
    dram_bytes_per_s: float
    """peak DRAM (HBM/GDDR) bandwidth in byte/s."""
    source: str
    """datasheet URL(s) the numbers come from."""
    l2_bytes_per_s: float | None = None
    """optional peak L2 cache bandwidth in byte/s (hierarchical roofline); None: not known."""
    l1_bytes_per_s: float | None = None
    """optional peak L1 (shared memory/L1) bandwidth in byte/s, all SMs together; None: not known."""

    def __post_init__(self) -> None:
        if not isinstance(self.device_name, str) or not self.device_name.strip():
            raise ValueError("device_name must be a non-empty string")
        if not isinstance(self.flops_per_s, dict) or not self.flops_per_s:
            raise ValueError("flops_per_s must be a non-empty mapping of dtype to FLOP/s")
        flops = {}
        for dtype, value in self.flops_per_s.items():
            if dtype not in DTYPES:
                raise ValueError(f"flops_per_s: unknown dtype {dtype!r} (use {', '.join(DTYPES)})")
            flops[dtype] = _positive(value, f"flops_per_s[{dtype}]", bounds.MAX_FLOPS_PER_S)
        object.__setattr__(self, "flops_per_s", flops)
        object.__setattr__(
            self,
            "dram_bytes_per_s",
            _positive(self.dram_bytes_per_s, "dram_bytes_per_s", bounds.MAX_DRAM_BYTES_PER_S),
        )
        for name in ("l2_bytes_per_s", "l1_bytes_per_s"):
            if getattr(self, name) is not None:
                high = bounds.MAX_CACHE_BYTES_PER_S
                object.__setattr__(self, name, _positive(getattr(self, name), name, high))
        if not isinstance(self.source, str) or not self.source.strip():
            raise ValueError("source must name the datasheet (URL) the numbers come from")
        object.__setattr__(self, "device_name", self.device_name.strip())


def _positive(value: Any, name: str, high: float) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    try:
        number = float(value)  # YAML reads 9.895e14 but leaves "989.5e12" a string: accept both
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a positive number, got {value!r}") from None
    if not math.isfinite(number) or number <= 0:
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    if not bounds.MIN_RATE_PER_S <= number <= high:  # a ridge point out of float range
        raise ValueError(
            f"{name} = {number:.3g} is not a device's peak: use a value from "
            f"{bounds.MIN_RATE_PER_S:.0e} to {high:.0e}"
        )
    return number


@dataclass(frozen=True)
class Entry:
    """A table entry: the peaks, the other names it answers to, and where it came from."""

    peaks: VendorPeaks
    aliases: tuple[str, ...] = ()
    origin: str = "built-in"

    @property
    def names(self) -> tuple[str, ...]:
        return (self.peaks.device_name, *self.aliases)


def _e(name: str, flops: dict[str, float], dram: float, source: str, *aliases: str) -> Entry:
    return Entry(VendorPeaks(name, flops, dram, source), tuple(aliases))


T = 1e12  # TFLOP/s
G = 1e9  # GB/s

_H100_SRC = (
    "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet "
    "(H100 datasheet; tensor figures there are with sparsity, halved here)"
)
_A100_SRC = (
    "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
    "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf (tf32/bf16/fp16 dense; fp64 = FP64 Tensor Core)"
)
_A100_FLOPS = {
    "fp64": 19.5 * T,
    "fp32": 19.5 * T,
    "tf32": 156 * T,
    "fp16": 312 * T,
    "bf16": 312 * T,
}
_V100_SRC = "https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf"

# Order matters only for display. Sparse datasheet figures are written as `x / 2`.
BUILTIN: tuple[Entry, ...] = (
    _e(
        "NVIDIA H100 80GB HBM3",
        {
            "fp64": 67 * T,
            "fp32": 67 * T,
            "tf32": 989 * T / 2,
            "fp16": 1979 * T / 2,
            "bf16": 1979 * T / 2,
        },
        3.35e12,
        _H100_SRC + "; https://www.nvidia.com/en-us/data-center/h100/",
        "NVIDIA H100 SXM",
        "NVIDIA H100 SXM5 80GB",
    ),
    _e(
        "NVIDIA H100 PCIe",
        {
            "fp64": 51 * T,
            "fp32": 51 * T,
            "tf32": 756 * T / 2,
            "fp16": 1513 * T / 2,
            "bf16": 1513 * T / 2,
        },
        2.0e12,
        _H100_SRC,
        "NVIDIA H100 PCIe 80GB",
    ),
    _e(
        "NVIDIA H200",
        {
            "fp64": 67 * T,
            "fp32": 67 * T,
            "tf32": 989 * T / 2,
            "fp16": 1979 * T / 2,
            "bf16": 1979 * T / 2,
        },
        4.8e12,
        "https://www.nvidia.com/en-us/data-center/h200/ (H200 SXM; tensor figures with sparsity, halved here)",
        "NVIDIA H200 SXM",
        "NVIDIA H200 141GB HBM3e",
    ),
    _e("NVIDIA A100-SXM4-80GB", _A100_FLOPS, 2039 * G, _A100_SRC, "NVIDIA A100 SXM 80GB"),
    _e("NVIDIA A100-SXM4-40GB", _A100_FLOPS, 1555 * G, _A100_SRC, "NVIDIA A100 SXM 40GB"),
    _e("NVIDIA A100 80GB PCIe", _A100_FLOPS, 1935 * G, _A100_SRC, "NVIDIA A100-PCIE-80GB"),
    _e("NVIDIA A100-PCIE-40GB", _A100_FLOPS, 1555 * G, _A100_SRC, "NVIDIA A100 40GB PCIe"),
    _e(
        "NVIDIA L4",
        {"fp32": 30.3 * T, "tf32": 120 * T / 2, "fp16": 242 * T / 2, "bf16": 242 * T / 2},
        300 * G,
        "https://resources.nvidia.com/en-us-data-center-overview/l4-gpu-datasheet (tensor figures with sparsity, halved here)",
    ),
    _e(
        "NVIDIA L40S",
        {"fp32": 91.6 * T, "tf32": 183 * T, "fp16": 362.05 * T, "bf16": 362.05 * T},
        864 * G,
        "https://resources.nvidia.com/en-us-l40s/l40s-datasheet-28413 (dense column)",
    ),
    _e(
        "NVIDIA A10",
        {"fp32": 31.2 * T, "tf32": 62.5 * T, "fp16": 125 * T, "bf16": 125 * T},
        600 * G,
        "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a10/pdf/a10-datasheet.pdf (dense column)",
    ),
    _e(
        # AWS-only part: NVIDIA publishes no datasheet. 80 SMs at 1.71 GHz boost; its tensor cores run
        # fp32-accumulate at the GeForce (half) rate, unlike the A10 above.
        "NVIDIA A10G",
        {"fp32": 35 * T, "tf32": 35 * T, "fp16": 70 * T, "bf16": 70 * T},
        600 * G,
        "https://aws.amazon.com/ec2/instance-types/g5/ (no NVIDIA datasheet exists); "
        "https://www.baseten.co/blog/nvidia-a10-vs-a10g-for-ml-model-inference/ (A10 vs A10G spec table)",
    ),
    _e(
        "Tesla T4",
        {"fp32": 8.1 * T, "fp16": 65 * T},
        320 * G,
        "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/tesla-t4/t4-tensor-core-datasheet-951643.pdf "
        "(fp16 = mixed precision FP16/FP32)",
        "NVIDIA T4",
    ),
    _e(
        "Tesla V100-SXM2-16GB",
        {"fp64": 7.8 * T, "fp32": 15.7 * T, "fp16": 125 * T},
        900 * G,
        _V100_SRC + " (V100 SXM2; fp16 = tensor performance)",
        "Tesla V100-SXM2-32GB",
    ),
    _e(
        "Tesla V100-PCIE-16GB",
        {"fp64": 7 * T, "fp32": 14 * T, "fp16": 112 * T},
        900 * G,
        _V100_SRC + " (V100 PCIe; fp16 = tensor performance)",
        "Tesla V100-PCIE-32GB",
    ),
    _e(
        "NVIDIA GeForce RTX 4090",
        {"fp32": 82.6 * T, "tf32": 82.6 * T, "fp16": 165.2 * T, "bf16": 165.2 * T},
        1008 * G,
        "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf "
        "(Appendix A; fp16/bf16 = Peak Tensor TFLOPS with FP32 Accumulate, dense)",
    ),
    _e(
        # Laptop GPUs have no whitepaper column: derived from NVIDIA's spec page at the top boost clock
        # (150 W TGP). fp32 = 7424 cores x 2 x 2.28 GHz; fp16/bf16 (fp32 accumulate, dense) = AI TOPS
        # (542, FP8 sparse) / 8, the same ratio as the RTX 4090's 1321 / 165.2; tf32 = half of fp16;
        # DRAM = 192 bit x 18 Gbit/s / 8. Lower-TGP laptops clock lower: override with --peaks-file.
        "NVIDIA GeForce RTX 4080 Laptop GPU",
        {"fp32": 7424 * 2 * 2.28e9, "tf32": 542 * T / 16, "fp16": 542 * T / 8, "bf16": 542 * T / 8},
        192 / 8 * 18e9,
        "https://www.nvidia.com/en-us/geforce/laptops/compare/ (CUDA cores, boost clock 1350-2280 MHz, AI TOPS); "
        "https://www.techpowerup.com/gpu-specs/geforce-rtx-4080-mobile.c3947 (192-bit GDDR6 at 18 Gbps)",
        "NVIDIA GeForce RTX 4080 Mobile",
    ),
    _e(
        "NVIDIA GeForce RTX 3090",
        {"fp32": 35.6 * T, "tf32": 35.6 * T, "fp16": 71 * T, "bf16": 71 * T},
        936 * G,
        "https://www.nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf "
        "(Appendix A; fp16/bf16 = Peak Tensor TFLOPS with FP32 Accumulate, dense)",
    ),
)
