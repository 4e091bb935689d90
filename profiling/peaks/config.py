"""PeaksConfig: one ceilings measurement as asked for, validated (ValueError naming the field)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from common import flags, schema
from profiling.peaks.dtypes import DEVICE_TYPES, DtypeStatus
from roofline.vendor import DTYPES

DEFAULT_MATRIX_SIZE = {"cpu": 4096, "cuda": 8192, "mps": 4096}
# measuring time of a default run; see docs/peaks.md for the whole command
DEFAULT_TIME_BUDGET_S = 30.0


def _dtypes(text: str) -> tuple[str, ...] | None:
    """The --dtypes text: auto (None), all, or a comma-separated list."""
    words = tuple(w for w in (t.strip() for t in str(text).lower().split(",")) if w)
    return None if words in ((), ("auto",)) else words


@dataclass
class PeaksConfig:
    """One ceilings measurement. Field names are the MLflow param names; each field is a flag of
    `python -m profiling.peaks` (common.flags)."""

    device: str = "auto"
    """auto (cuda, then mps, then cpu), cpu, cuda, cuda:N or mps."""
    dtypes: tuple[str, ...] | None = field(default=None, metadata={"parse": _dtypes})
    """GEMM dtypes, comma-separated among fp64, fp32, tf32, fp16, bf16; auto (default): what
    the device supports except fp64; all: every dtype the device can run."""
    matrix_size: int = 0
    """n of the n x n x n matmuls; 0: 4096 on CPU and MPS, 8192 on CUDA."""
    bandwidth_mib: int = 0
    """size of each of the three DRAM STREAM arrays in MiB; 0: automatic, max(512 MiB, 4x the
    last-level cache), capped so the three arrays take at most half of the available memory."""
    repeats: int = 5
    """timed samples per dtype (after warmup), at most; the best is the ceiling."""
    bandwidth_repeats: int = 10
    """timed samples per STREAM kernel (copy, triad; DRAM and L2), at most."""
    time_budget_s: float = DEFAULT_TIME_BUDGET_S
    """seconds of measuring, split over the steps; a step stops sampling when its share is spent
    (after its first few samples, sampling.MIN_SAMPLES, while any budget is left). 0: no budget,
    take every repeat."""
    env_label: str = flags.env_label()
    experiment: str | None = flags.experiment()
    peaks_file: str = flags.peaks_file()
    track: bool = flags.track()

    def __post_init__(self) -> None:
        self.device = str(self.device).strip().lower()
        if self.device not in ("auto", *DEVICE_TYPES) and not (
            self.device.startswith("cuda:") and self.device[5:].isdigit()
        ):
            raise ValueError(f"device must be auto, cpu, cuda, cuda:N or mps, got {self.device!r}")
        if self.dtypes is not None and tuple(self.dtypes) != ("all",):
            dtypes = tuple(str(d).strip().lower() for d in self.dtypes)
            unknown = [d for d in dtypes if d not in DTYPES]
            if unknown or not dtypes:
                raise ValueError(
                    f"dtypes must be among {', '.join(DTYPES)}, got {', '.join(unknown) or 'nothing'}"
                )
            if len(set(dtypes)) != len(dtypes):
                raise ValueError(f"dtypes lists a dtype twice: {', '.join(dtypes)}")
            self.dtypes = dtypes
        elif self.dtypes is not None:
            self.dtypes = ("all",)
        if int(self.matrix_size) < 0 or 0 < int(self.matrix_size) < 16:
            raise ValueError(
                f"matrix_size must be 0 (device default) or >= 16, got {self.matrix_size}"
            )
        if int(self.bandwidth_mib) < 0:
            raise ValueError(
                "bandwidth_mib must be 0 (automatic) or a positive number of MiB, "
                f"got {self.bandwidth_mib}"
            )
        for name in ("repeats", "bandwidth_repeats"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)}")
        budget = float(self.time_budget_s)
        if not math.isfinite(budget) or budget < 0:
            raise ValueError(
                "time_budget_s must be 0 (no budget) or a positive number of seconds, "
                f"got {self.time_budget_s}"
            )
        self.time_budget_s = budget
        self.env_label = schema.env_label(self.env_label)

    def requested_dtypes(self, availability: dict[str, DtypeStatus]) -> list[str] | None:
        """The dtypes asked for (None: the device's defaults), "all" expanded against `availability`."""
        if self.dtypes == ("all",):
            return [d for d in DTYPES if availability[d].measurable]
        return list(self.dtypes) if self.dtypes else None

    def matrix_size_for(self, device_type: str) -> int:
        return int(self.matrix_size) or DEFAULT_MATRIX_SIZE[device_type]

    def params(self) -> dict:
        """MLflow params (env_label is a tag; experiment, peaks_file and track are not measurement)."""
        return {
            "device": self.device,
            "dtypes": ",".join(self.dtypes) if self.dtypes else "auto",
            "matrix_size": self.matrix_size,
            "bandwidth_mib": self.bandwidth_mib,
            "repeats": self.repeats,
            "bandwidth_repeats": self.bandwidth_repeats,
            "time_budget_s": self.time_budget_s,
        }
