"""PeaksConfig: one ceilings measurement as asked for, validated (ValueError naming the field)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from common import schema
from roofline.vendor import DTYPES
from profiling.peaks.dtypes import DEVICE_TYPES, DtypeStatus

DEFAULT_MATRIX_SIZE = {"cpu": 4096, "cuda": 8192, "mps": 4096}
# measuring time of a default run; see docs/peaks.md for the whole command
DEFAULT_TIME_BUDGET_S = 30.0


@dataclass
class PeaksConfig:
    """One ceilings measurement. Field names are the MLflow param names."""

    device: str = "auto"
    """auto (cuda, then mps, then cpu), cpu, cuda, cuda:N or mps."""
    dtypes: tuple[str, ...] | None = None
    """GEMM dtypes among fp64, fp32, tf32, fp16, bf16; None: the device's defaults (all it supports
    except fp64); ("all",): every dtype the device can run."""
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
    (after sampling.MIN_SAMPLES samples while any budget is left). 0: no budget, take every repeat."""
    env_label: str = field(default_factory=schema.default_env_label)
    """your name for this environment (default: host name); analysis groups by it."""
    experiment: str | None = None
    """MLflow experiment name (default: $MLFLOW_EXPERIMENT_NAME, else the default experiment)."""
    peaks_file: str | None = None
    """JSON/YAML file with vendor-peak entries to add or override (default: the file named by
    $ROOFLINE_PEAKS_FILE, roofline.vendor.PEAKS_FILE_ENV)."""
    track: bool = True
    """log a `peaks` run to MLflow (false: measure and print only)."""

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
