"""Measured roofline ceilings on the device at hand: GEMM FLOP/s per dtype, STREAM DRAM and L2 bandwidth.

`python -m profiling.peaks` (CLI in profiling/peaks_cli.py) measures and logs a `peaks` run; this
module is the measurement core: it times, counts and returns plain data; it never imports mlflow,
writes files or prints.

Compute ceiling: `torch.mm` of two n x n matrices into a preallocated output, 2 n^3 FLOPs per call
(one multiply and one add per inner-product term). Repeated `repeats` times after a warmup; every
sample is (calls x FLOPs) / seconds between two device syncs.

Bandwidth ceiling, the way STREAM does it: three preallocated float32 arrays of `array_bytes` each,
touched once before timing (so page faults are not measured), then, sample by sample, alternately
    copy   c = a            counted as 2 arrays moved  (read a, write c)
    triad  a = b + s * c    counted as 3 arrays moved  (read b, read c, write a)
with all threads torch uses. STREAM counts bytes this way and so do we: the write-allocate read
of the destination that plain stores cause on CPUs is real traffic but is not counted, so the
numbers compare with published STREAM results. `peak_dram_bytes_per_s` is the better of the two
kernels' best samples; which one is recorded alongside. The same code on arrays that together fill
half of the L2 (many calls per short sample; run first) gives `peak_l2_bytes_per_s`, withheld when
it comes out below the DRAM figure (disturbed samples).

Time budget: run_peaks splits `time_budget_s` over its steps (plan()) by weight as it goes; a step
stops sampling when its share is spent, after at least MIN_SAMPLES samples unless the whole budget
is already gone. Allocation, first touch and warmup count against the step's share.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

from common import schema
from common.errors import UsageError
from profiling.peak_table import DTYPES

DEVICE_TYPES = ("cpu", "cuda", "mps")
DEFAULT_MATRIX_SIZE = {"cpu": 4096, "cuda": 8192, "mps": 4096}
DEFAULT_WARMUP_S = {"cpu": 0.0, "cuda": 0.25, "mps": 0.25}  # GPU clocks need a moment to ramp up
MIN_SAMPLE_S = 0.05  # fast calls are batched so one timed sample lasts at least this long
L2_MIN_SAMPLE_S = 0.002  # L2 samples are short: on a shared CPU a clean 2 ms window is common, a clean 50 ms one is not
L2_WARMUP_S = 0.05  # L2 kernels warm up this long, so the fastest warmup call (the calibration) is likely undisturbed
L2_REPEATS_FACTOR = (
    3  # L2 samples per kernel: 3 x bandwidth_repeats (short samples: more chances of a clean one)
)
SAMPLE_CAP_FACTOR = (
    10  # a sample stops issuing calls after 10x its expected length (a descheduled thread)
)
MIN_SAMPLES = (
    3  # the time budget never cuts a step below this many samples while any budget is left
)
DEFAULT_TIME_BUDGET_S = (
    30.0  # measuring time of a default run; see docs/peaks.md for the whole command
)
STEP_WEIGHTS = {
    "gemm": 1.0,
    "stream dram": 2.0,
    "stream l2": 0.5,
}  # shares of the time budget per step
STREAM_KERNELS = {"copy": 2, "triad": 3}  # arrays moved per element, as STREAM counts them
STREAM_ELEMENT_BYTES = 4  # float32: MPS has no float64; bytes moved do not depend on the dtype
TRIAD_SCALAR = 0.5  # keeps repeated c = a; a = b + s*c bounded (no inf, no denormals)
MIB = 2**20
DRAM_MIN_ARRAY_BYTES = 512 * MIB  # automatic STREAM array size: at least this ...
DRAM_LLC_FACTOR = 4  # ... and at least 4x the last-level cache (STREAM's rule) ...
DRAM_MEMORY_FRACTION = (
    0.5  # ... but the three arrays take at most this fraction of available memory
)
L2_FILL_FRACTION = 0.5  # the three L2 STREAM arrays together fill this fraction of the L2
CPU_PROBED_DTYPES = (
    "fp16",
    "bf16",
)  # CPU dtypes that join the defaults only when a probe shows them fast
CPU_PROBE_SIZE = 512
CPU_PROBE_MIN_RATIO = (
    0.25  # a probed dtype is a CPU default when it runs at >= 1/4 of the fp32 rate
)


# --------------------------------------------------------------------------- dtype availability
@dataclass(frozen=True)
class DtypeStatus:
    """Whether a dtype can be measured on a device, and whether it is by default."""

    measurable: bool
    default: bool
    reason: str = ""  # why it is not measurable, or not a default


def dtype_availability(
    device_type: str,
    capability: tuple[int, int] | None = None,
    bf16_supported: bool = False,
    cpu_probe_ratios: dict[str, float] | None = None,
) -> dict[str, DtypeStatus]:
    """Which dtypes a GEMM ceiling can be measured for. Pure: the caller supplies the facts.

    device_type: cpu | cuda | mps.
    capability: CUDA compute capability (major, minor); tf32 tensor cores need (8, 0) or newer.
    bf16_supported: CUDA: torch.cuda.is_bf16_supported(including_emulation=False) (native bf16,
        sm_80+); MPS: macOS 14 or newer. Ignored on CPU, where bf16 always runs (fast with
        AMX/AVX512-BF16, very slowly without) and the probe decides.
    cpu_probe_ratios: {dtype: its matmul throughput / fp32's} from a short probe (probe_cpu_ratios)
        for the dtypes in CPU_PROBED_DTYPES (fp16, bf16). CPUs without a native GEMM path for a
        dtype run it tens of times slower than fp32 (a 4096^3 matmul then takes minutes); such a
        dtype is a default only when the probe shows it at CPU_PROBE_MIN_RATIO of fp32 or better.
        A dtype left out of the mapping (not probed) is measurable but not a default.
    fp64 is measurable wherever the backend has it, but never a default (1/32 to 1/64 rate on most
    GPUs and slow to measure): ask for it with --dtypes.
    """
    if device_type not in DEVICE_TYPES:
        raise ValueError(
            f"device_type must be one of {', '.join(DEVICE_TYPES)}, got {device_type!r}"
        )
    opt_in_fp64 = DtypeStatus(
        True, False, "fp64 is opt-in (slow on most devices): add it to --dtypes"
    )
    yes = DtypeStatus(True, True)
    if device_type == "cuda":
        cap = tuple(capability) if capability else (0, 0)
        cap_text = f"sm_{cap[0]}{cap[1]}" if capability else "unknown capability"
        return {
            "fp64": opt_in_fp64,
            "fp32": yes,
            "tf32": yes
            if cap >= (8, 0)
            else DtypeStatus(False, False, f"tf32 tensor cores need sm_80+ (this GPU: {cap_text})"),
            "fp16": yes,
            "bf16": yes
            if bf16_supported
            else DtypeStatus(
                False, False, f"no native bf16 on this GPU ({cap_text}; needs sm_80+)"
            ),
        }
    if device_type == "mps":
        return {
            "fp64": DtypeStatus(False, False, "MPS has no float64"),
            "fp32": yes,
            "tf32": DtypeStatus(False, False, "tf32 is a CUDA tensor-core mode"),
            "fp16": yes,
            "bf16": yes
            if bf16_supported
            else DtypeStatus(False, False, "bf16 on MPS needs macOS 14 or newer"),
        }
    ratios = cpu_probe_ratios or {}
    out = {
        "fp64": opt_in_fp64,
        "fp32": yes,
        "tf32": DtypeStatus(
            False, False, "tf32 is a CUDA tensor-core mode (sm_80+), not available on CPU"
        ),
    }
    for dtype in CPU_PROBED_DTYPES:
        ratio = ratios.get(dtype)
        if ratio is None:
            out[dtype] = DtypeStatus(
                True, False, f"{dtype} on CPU was not probed: add it to --dtypes to measure it"
            )
        elif ratio >= CPU_PROBE_MIN_RATIO:
            out[dtype] = yes
        else:
            out[dtype] = DtypeStatus(
                True,
                False,
                f"{dtype} matmul ran at {ratio:.0%} of the fp32 rate in a {CPU_PROBE_SIZE}^3 probe "
                f"(no fast {dtype} path on this CPU): add it to --dtypes to measure it anyway",
            )
    return {d: out[d] for d in DTYPES}


def select_dtypes(
    requested: Sequence[str] | None, availability: dict[str, DtypeStatus]
) -> tuple[list[str], dict[str, str]]:
    """(dtypes to measure, {dtype: why skipped}). `requested` None means the device's defaults.

    Raises UsageError when a requested dtype cannot be measured on this device.
    """
    if requested is None:
        chosen = [d for d in DTYPES if availability[d].default]
    else:
        bad = [d for d in requested if not availability[d].measurable]
        if bad:
            raise UsageError("; ".join(f"--dtypes {d}: {availability[d].reason}" for d in bad))
        chosen = [d for d in DTYPES if d in requested]
    skipped = {d: availability[d].reason for d in DTYPES if d not in chosen}
    return chosen, skipped


# --------------------------------------------------------------------------- configuration
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
    """timed samples per dtype (after warmup), at most; best and median are reported."""
    bandwidth_repeats: int = 10
    """timed samples per STREAM kernel (copy, triad; DRAM and L2), at most."""
    time_budget_s: float = DEFAULT_TIME_BUDGET_S
    """seconds of measuring, split over the steps; a step stops sampling when its share is spent
    (after MIN_SAMPLES samples while any budget is left). 0: no budget, take every repeat."""
    env_label: str = field(default_factory=schema.default_env_label)
    """your name for this environment (default: host name); analysis groups by it."""
    experiment: str | None = None
    """MLflow experiment name (default: $MLFLOW_EXPERIMENT_NAME, else the default experiment)."""
    peaks_file: str | None = None
    """JSON/YAML file with vendor-peak entries to add or override (default: $ROOFLINE_PEAKS_FILE)."""
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
                f"bandwidth_mib must be 0 (automatic) or a positive number of MiB, got {self.bandwidth_mib}"
            )
        for name in ("repeats", "bandwidth_repeats"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)}")
        budget = float(self.time_budget_s)
        if not math.isfinite(budget) or budget < 0:
            raise ValueError(
                f"time_budget_s must be 0 (no budget) or a positive number of seconds, got {self.time_budget_s}"
            )
        self.time_budget_s = budget
        if not self.env_label:
            self.env_label = schema.default_env_label()

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


# --------------------------------------------------------------------------- array sizes
def dram_array_bytes(llc_bytes: int | None, available_bytes: int | None) -> tuple[int, str | None]:
    """(bytes per DRAM STREAM array, warning or None): the automatic size, in whole MiB.

    max(DRAM_MIN_ARRAY_BYTES, DRAM_LLC_FACTOR x the last-level cache), so the arrays are "far
    larger than the last-level cache" on any host; capped so the three arrays take at most
    DRAM_MEMORY_FRACTION of the available memory, with a warning saying what the cap costs.
    """
    want = max(DRAM_MIN_ARRAY_BYTES, DRAM_LLC_FACTOR * int(llc_bytes or 0))
    want = -(-want // MIB) * MIB
    if available_bytes:
        cap = max(MIB, int(DRAM_MEMORY_FRACTION * available_bytes / 3) // MIB * MIB)
        if want > cap:
            why = (
                f"4x the {llc_bytes / MIB:.0f} MiB last-level cache"
                if llc_bytes and want > DRAM_MIN_ARRAY_BYTES
                else "the minimum"
            )
            return cap, (
                f"warning: STREAM arrays capped at {cap / MIB:.0f} MiB each instead of {want / MIB:.0f} MiB ({why}): "
                f"three arrays may take at most {DRAM_MEMORY_FRACTION:.0%} of the {available_bytes / 2**30:.1f} GiB "
                "available; the DRAM figure may be partly cache bandwidth (free memory or set --bandwidth-mib)"
            )
    return want, None


def l2_array_bytes(l2_bytes: int | None) -> int:
    """Bytes per L2 STREAM array: the three together fill L2_FILL_FRACTION of `l2_bytes`, in whole
    4 KiB pages (at least one); 0 (no L2 step) when the L2 size is unknown."""
    if not l2_bytes or l2_bytes <= 0:
        return 0
    return max(4096, int(l2_bytes * L2_FILL_FRACTION / 3) // 4096 * 4096)


# --------------------------------------------------------------------------- timing
@dataclass
class Measurement:
    """Timed samples of one kernel. `work` is FLOPs (compute) or bytes (bandwidth) per call."""

    name: str
    unit: str  # "flops" | "bytes"
    work: float
    calls_per_sample: int
    samples_s: list[float]
    requested: int = 0  # samples asked for; fewer were taken when the time budget cut the step
    sample_calls: list[int] = field(
        default_factory=list
    )  # calls each sample made (empty: calls_per_sample each)
    warmup_s: list[float] = field(default_factory=list)  # untimed warmup calls, seconds each

    @property
    def calls(self) -> list[int]:
        """Calls made by every sample: calls_per_sample, or fewer when SAMPLE_CAP_FACTOR cut a sample."""
        return self.sample_calls or [self.calls_per_sample] * len(self.samples_s)

    @property
    def rates(self) -> list[float]:
        """work per second of every sample (FLOP/s or byte/s)."""
        return [self.work * k / t for k, t in zip(self.calls, self.samples_s)]

    @property
    def best(self) -> float:
        return max(self.rates)

    @property
    def median(self) -> float:
        return statistics.median(self.rates)

    @property
    def cut(self) -> bool:
        """True when the time budget stopped sampling before `requested` samples."""
        return len(self.samples_s) < self.requested

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "unit": f"{self.unit}_per_s",
            f"{self.unit}_per_call": self.work,
            "calls_per_sample": self.calls_per_sample,
            "sample_calls": self.calls,
            "samples_requested": self.requested or len(self.samples_s),
            "warmup_s": self.warmup_s,
            "samples_s": self.samples_s,
            "rates_per_s": self.rates,
            "best_per_s": self.best,
            "median_per_s": self.median,
        }


Sync = Callable[[], None]
Clock = Callable[[], float]


def device_sync(device: str) -> Sync:
    """A function that waits for all queued work on `device` (no-op on CPU)."""
    import torch

    from train.device import synchronize

    dev = torch.device(device)
    return lambda: synchronize(dev)


class Budget:
    """The measuring time budget, handed out step by step.

    Each step may use its weight's share of what is left when it starts, so time that a quick step
    leaves over goes to the later ones. `total_s` None or 0: no budget (every deadline is inf).
    """

    def __init__(
        self, total_s: float | None, weights: Sequence[float], clock: Clock = time.perf_counter
    ):
        self.total_s = float(total_s) if total_s else None
        self.clock = clock
        self.start = clock()
        self.end = self.start + self.total_s if self.total_s else math.inf
        self._pending = [float(w) for w in weights]

    def next_step(self) -> float:
        """Clock time by which the next step (in plan order) should be done; call once per step."""
        if not self._pending:
            raise RuntimeError("Budget.next_step called more often than there are steps")
        weight = self._pending.pop(0)
        if self.end == math.inf:
            return math.inf
        now = self.clock()
        return now + max(0.0, self.end - now) * weight / (weight + sum(self._pending))


def _timed(fn: Callable[[], object], calls: int, sync: Sync, clock: Clock) -> float:
    sync()
    t0 = clock()
    for _ in range(calls):
        fn()
    sync()
    return clock() - t0


def _timed_until(
    fn: Callable[[], object], calls: int, sync: Sync, clock: Clock, stop_after_s: float
) -> tuple[float, int]:
    """(seconds, calls made): `calls` calls, or fewer (at least one) once stop_after_s has passed.

    On a GPU the clock sees only the enqueueing; the calls already queued finish before the sync,
    and the time includes them, so seconds / calls made stays a true rate.
    """
    sync()
    t0 = clock()
    done = 0
    while done < calls:
        fn()
        done += 1
        if done < calls and clock() - t0 > stop_after_s:
            break
    sync()
    return clock() - t0, done


Kernel = tuple[str, float, Callable[[], object]]  # (unit, work per call, the call)


def _sample_kernels(
    kernels: dict[str, Kernel],
    repeats: int,
    sync: Sync,
    clock: Clock,
    warmup_s: float,
    min_sample_s: float,
    *,
    deadline: float = math.inf,
    budget_end: float = math.inf,
    min_samples: int = MIN_SAMPLES,
) -> dict[str, Measurement]:
    """Warm up and calibrate each kernel, then take up to `repeats` rounds of one sample per kernel.

    Warmup: one call, more until warmup_s has passed; the fastest warmup call says how many calls
    make one sample of at least min_sample_s (on a shared CPU a single call can be 1000x slower than
    the rest; on a GPU the clocks ramp up during warmup). Kernels alternate sample by sample (round i
    samples every kernel once), so interference from other processes spreads over all of them.
    A round is not started when it would end (predicted from the previous round) after `deadline`
    once min(min_samples, repeats) rounds are done, nor after `budget_end` once one round is done.
    A sample stops making calls once it has run SAMPLE_CAP_FACTOR times its expected length (the
    calls it made count): on a shared CPU a descheduled thread can make a call 1000x slower, and a
    sample of thousands of such calls would otherwise blow any budget.
    """
    calls: dict[str, int] = {}
    cap_s: dict[str, float] = {}
    warm: dict[str, list[float]] = {name: [] for name in kernels}
    for name, (_unit, _work, fn) in kernels.items():
        start = clock()
        warm[name].append(_timed(fn, 1, sync, clock))
        while clock() - start < warmup_s:
            warm[name].append(_timed(fn, 1, sync, clock))
        one = min(warm[name])
        calls[name] = max(1, math.ceil(min_sample_s / one)) if one > 0 else 1
        cap_s[name] = SAMPLE_CAP_FACTOR * max(min_sample_s, one)
    samples: dict[str, list[float]] = {name: [] for name in kernels}
    made: dict[str, list[int]] = {name: [] for name in kernels}
    keep = min(min_samples, repeats)
    round_s = 0.0
    for i in range(repeats):
        now = clock()
        if i >= keep and now + round_s > deadline:
            break
        if i >= 1 and now + round_s > budget_end:
            break
        for name, (_unit, _work, fn) in kernels.items():
            seconds, done = _timed_until(fn, calls[name], sync, clock, cap_s[name])
            samples[name].append(seconds)
            made[name].append(done)
        round_s = clock() - now
    out = {}
    for name, (unit, work, _fn) in kernels.items():
        bad = [t for t in samples[name] if not t > 0]
        if bad:
            raise RuntimeError(f"{name}: the clock did not advance during a sample ({bad[0]!r} s)")
        cut_calls = made[name] if any(k != calls[name] for k in made[name]) else []
        out[name] = Measurement(
            name,
            unit,
            float(work),
            calls[name],
            samples[name],
            requested=repeats,
            sample_calls=cut_calls,
            warmup_s=warm[name],
        )
    return out


def _sample(
    name: str,
    unit: str,
    work: float,
    fn: Callable[[], object],
    repeats: int,
    sync: Sync,
    clock: Clock,
    warmup_s: float,
    min_sample_s: float,
    *,
    deadline: float = math.inf,
    budget_end: float = math.inf,
) -> Measurement:
    """_sample_kernels for one kernel."""
    return _sample_kernels(
        {name: (unit, work, fn)},
        repeats,
        sync,
        clock,
        warmup_s,
        min_sample_s,
        deadline=deadline,
        budget_end=budget_end,
    )[name]


@contextmanager
def _matmul_precision(dtype: str) -> Iterator[None]:
    """tf32 = fp32 tensors with TF32 tensor-core math allowed; fp32 = full-precision fp32 math."""
    import torch

    if dtype not in ("fp32", "tf32"):
        yield
        return
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high" if dtype == "tf32" else "highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


def torch_dtype(dtype: str):
    import torch

    return {
        "fp64": torch.float64,
        "fp32": torch.float32,
        "tf32": torch.float32,
        "fp16": torch.float16,
        "bf16": torch.bfloat16,
    }[dtype]


def measure_matmul(
    dtype: str,
    n: int,
    repeats: int,
    device: str = "cpu",
    *,
    sync: Sync | None = None,
    clock: Clock = time.perf_counter,
    warmup_s: float = 0.0,
    min_sample_s: float = MIN_SAMPLE_S,
    deadline: float = math.inf,
    budget_end: float = math.inf,
) -> Measurement:
    """FLOP/s of `torch.mm(a, b, out=c)` with n x n operands of `dtype` (2 n^3 FLOPs per call)."""
    import torch

    sync = sync or device_sync(device)
    td = torch_dtype(dtype)
    a = torch.empty(n, n, dtype=td, device=device).uniform_(-1, 1)
    b = torch.empty(n, n, dtype=td, device=device).uniform_(-1, 1)
    c = torch.empty(n, n, dtype=td, device=device)
    with _matmul_precision(dtype):  # the operands are freed when this returns
        return _sample(
            dtype,
            "flops",
            2.0 * n**3,
            lambda: torch.mm(a, b, out=c),
            repeats,
            sync,
            clock,
            warmup_s,
            min_sample_s,
            deadline=deadline,
            budget_end=budget_end,
        )


def probe_cpu_ratios(
    dtypes: Sequence[str] = CPU_PROBED_DTYPES,
    n: int = CPU_PROBE_SIZE,
    rounds: int = 3,
    clock: Clock = time.perf_counter,
    mm: Callable | None = None,
) -> dict[str, float]:
    """{dtype: best fp32 time / best dtype time} of an n^3 CPU matmul (equal work, so the time
    ratio is the throughput ratio), fp32 and `dtypes` interleaved for `rounds` rounds.

    Interleaving exposes every dtype to the same interference from other processes; the decision
    it feeds (>= CPU_PROBE_MIN_RATIO or not) separates ~1 or more (a native GEMM path: AMX,
    AVX512-BF16/FP16) from a few percent (oneDNN's generic fallback). `mm` is torch.mm (injectable
    for tests).
    """
    import torch

    mm = mm or torch.mm
    ops = {}
    with _matmul_precision("fp32"):
        for dtype in ("fp32", *dtypes):
            a = torch.empty(n, n, dtype=torch_dtype(dtype)).uniform_(-1, 1)
            b = torch.empty(n, n, dtype=torch_dtype(dtype)).uniform_(-1, 1)
            c = torch.empty(n, n, dtype=torch_dtype(dtype))
            ops[dtype] = lambda a=a, b=b, c=c: mm(a, b, out=c)
            ops[dtype]()  # warmup
        best = {dtype: math.inf for dtype in ops}
        for _ in range(rounds):
            for dtype, op in ops.items():
                best[dtype] = min(best[dtype], _timed(op, 1, lambda: None, clock))
    bad = [d for d, t in best.items() if not t > 0]
    if bad:
        raise RuntimeError(f"probe {bad[0]}: the clock did not advance during a matmul")
    return {dtype: best["fp32"] / best[dtype] for dtype in dtypes}


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
    return _sample_kernels(
        kernels,
        repeats,
        sync,
        clock,
        warmup_s,
        min_sample_s,
        deadline=deadline,
        budget_end=budget_end,
    )


# --------------------------------------------------------------------------- the whole measurement
def _better(stream: dict[str, Measurement]) -> str:
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
        return _better(self.stream)

    @property
    def l2_kernel(self) -> str | None:
        return _better(self.l2) if self.l2 else None

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
                f"the L2 figure ({format_rate(self.l2[self.l2_kernel].best, 'B/s')}) is below the DRAM figure "
                f"({format_rate(self.stream[self.dram_kernel].best, 'B/s')}): other processes disturbed every "
                "L2 sample; peak_l2_bytes_per_s not reported (rerun on a quieter machine)"
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

    def metrics(self) -> dict[str, float]:
        m: dict[str, float] = {}
        for dtype, meas in self.compute.items():
            m[f"peak_flops_per_s_{dtype}"] = meas.best
            m[f"peak_flops_per_s_{dtype}_median"] = meas.median
        for level, stream in (("dram", self.stream), ("l2", self.l2)):
            for name, meas in stream.items():
                m[f"peak_{level}_{name}_bytes_per_s"] = meas.best
                m[f"peak_{level}_{name}_bytes_per_s_median"] = meas.median
            if stream and not (level == "l2" and self.l2_withheld):
                best = stream[_better(stream)]
                m[f"peak_{level}_bytes_per_s"] = best.best
                m[f"peak_{level}_bytes_per_s_median"] = best.median
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
            "step_s": self.step_s,
            "metrics": self.metrics(),
        }


def format_rate(value: float, unit: str) -> str:
    """Display only: 1.234e11 FLOP/s -> '123 GFLOP/s' (SI prefixes, 1 G = 1e9)."""
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def plan(dtypes: Sequence[str], l2: bool = True) -> list[str]:
    """The steps run_peaks reports through `on_step`, in order (for a progress bar).

    The L2 step comes first: it is short (well under a second) and its samples are the ones other
    processes disturb most, so it must not be left with the one sample a spent budget allows.
    """
    return (["stream l2"] if l2 else []) + [f"gemm {d}" for d in dtypes] + ["stream dram"]


def step_weight(step: str) -> float:
    """The step's weight in the split of the time budget (STEP_WEIGHTS)."""
    return STEP_WEIGHTS["gemm"] if step.startswith("gemm ") else STEP_WEIGHTS[step]


def run_peaks(
    device: str,
    dtypes: Sequence[str],
    matrix_size: int,
    array_bytes: int,
    repeats: int,
    bandwidth_repeats: int,
    *,
    l2_array_bytes: int = 0,
    time_budget_s: float | None = None,
    skipped: dict[str, str] | None = None,
    cpu_probe_ratios: dict[str, float] | None = None,
    clock: Clock = time.perf_counter,
    warmup_s: float | None = None,
    min_sample_s: float = MIN_SAMPLE_S,
    on_step: Callable[[str, Measurement], None] | None = None,
) -> PeaksResult:
    """Measure STREAM on L2-resident arrays (when l2_array_bytes > 0), the GEMM ceiling of every
    dtype, then STREAM on DRAM-sized arrays, within `time_budget_s` (None or 0: no budget).

    `on_step(label, measurement)` is called after each step of plan(), in that order; for a STREAM
    step the measurement is the better kernel's.
    """
    import torch

    device_type = torch.device(device).type
    warm = DEFAULT_WARMUP_S[device_type] if warmup_s is None else warmup_s
    sync = device_sync(device)
    steps = plan(dtypes, l2=l2_array_bytes > 0)
    budget = Budget(time_budget_s, [step_weight(s) for s in steps], clock)
    result = PeaksResult(
        device_type,
        matrix_size,
        array_bytes,
        l2_array_bytes,
        skipped=dict(skipped or {}),
        cpu_probe_ratios=dict(cpu_probe_ratios or {}),
        time_budget_s=budget.total_s,
    )
    timing = {"sync": sync, "clock": clock, "warmup_s": warm, "budget_end": budget.end}

    def done(label: str, started: float, meas: Measurement) -> None:
        _release(device_type)
        result.step_s[label] = clock() - started
        if on_step:
            on_step(label, meas)

    if l2_array_bytes > 0:
        started = clock()
        result.l2 = measure_stream(
            l2_array_bytes,
            L2_REPEATS_FACTOR * bandwidth_repeats,
            device,
            deadline=budget.next_step(),
            min_sample_s=min(min_sample_s, L2_MIN_SAMPLE_S),
            **{**timing, "warmup_s": max(warm, L2_WARMUP_S)},
        )
        done("stream l2", started, result.l2[result.l2_kernel])
    for dtype in dtypes:
        started = clock()
        result.compute[dtype] = measure_matmul(
            dtype,
            matrix_size,
            repeats,
            device,
            deadline=budget.next_step(),
            min_sample_s=min_sample_s,
            **timing,
        )
        done(f"gemm {dtype}", started, result.compute[dtype])
    started = clock()
    result.stream = measure_stream(
        array_bytes,
        bandwidth_repeats,
        device,
        deadline=budget.next_step(),
        min_sample_s=min_sample_s,
        **timing,
    )
    done("stream dram", started, result.stream[result.dram_kernel])
    result.wall_s = clock() - budget.start
    return result


def _release(device_type: str) -> None:
    import torch

    if device_type == "cuda":
        torch.cuda.empty_cache()
    elif device_type == "mps":
        torch.mps.empty_cache()


if __name__ == "__main__":
    from profiling.peaks_cli import main

    sys.exit(main())
