"""The bandwidth ceilings' kernels, the way STREAM does it.

Three preallocated float32 arrays of `array_bytes` each, touched once before timing (so page
faults are not measured), then, sample by sample, alternately
    copy   c = a            counted as 2 arrays moved  (read a, write c)
    triad  a = b + s * c    counted as 3 arrays moved  (read b, read c, write a)
with all threads torch uses. STREAM counts bytes this way and so do we: the write-allocate read
of the destination that plain stores cause on CPUs is real traffic but is not counted, so the
numbers compare with published STREAM results. On DRAM-sized arrays this gives
`peak_dram_bytes_per_s`; on arrays that together fill half of the L2, `peak_l2_bytes_per_s`.
"""

from __future__ import annotations

import math
import time
from typing import Callable

from profiling.peaks.sampling import (
    MIN_SAMPLE_S,
    Clock,
    Measurement,
    Sync,
    device_sync,
    sample_kernels,
)

STREAM_KERNELS = {"copy": 2, "triad": 3}  # arrays moved per element, as STREAM counts them
STREAM_ELEMENT_BYTES = 4  # float32: MPS has no float64; bytes moved do not depend on the dtype
TRIAD_SCALAR = 0.5  # keeps repeated c = a; a = b + s*c bounded (no inf, no denormals)


def stream_kernels(a, b, c) -> dict[str, Callable[[], object]]:
    """STREAM copy and triad on the preallocated arrays a, b, c (no allocation per call)."""
    import torch

    return {
        "copy": lambda: c.copy_(a),
        "triad": lambda: torch.add(b, c, alpha=TRIAD_SCALAR, out=a),
    }


def measure_stream(
    array_bytes: int,
    repeats: int,
    device: str = "cpu",
    *,
    sync: Sync | None = None,
    clock: Clock = time.perf_counter,
    warmup_s: float = 0.0,
    min_sample_s: float = MIN_SAMPLE_S,
    deadline: float = math.inf,
    budget_end: float = math.inf,
) -> dict[str, Measurement]:
    """STREAM copy and triad, samples alternating, on three preallocated float32 arrays of
    `array_bytes` each, allocated and first touched once (untimed) and reused by every call."""
    import torch

    sync = sync or device_sync(device)
    n = max(1, array_bytes // STREAM_ELEMENT_BYTES)
    a = torch.empty(n, dtype=torch.float32, device=device)
    b = torch.empty(n, dtype=torch.float32, device=device)
    c = torch.empty(n, dtype=torch.float32, device=device)
    a.fill_(1.0), b.fill_(2.0), c.fill_(0.0)  # first touch: page faults happen here, untimed
    sync()
    kernels = {
        name: ("bytes", float(STREAM_KERNELS[name] * n * STREAM_ELEMENT_BYTES), fn)
        for name, fn in stream_kernels(a, b, c).items()
    }
    return sample_kernels(
        kernels,
        repeats,
        sync,
        clock,
        warmup_s,
        min_sample_s,
        deadline=deadline,
        budget_end=budget_end,
    )
