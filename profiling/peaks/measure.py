"""run_peaks: every step of one ceilings measurement, in plan order, within the time budget.

Time budget: run_peaks splits `time_budget_s` over its steps (plan()) by weight as it goes; a step
stops sampling when its share is spent, after at least sampling.MIN_SAMPLES samples unless the
whole budget is already gone. Allocation, first touch and warmup count against the step's share.
"""

from __future__ import annotations

import contextlib
import time
from typing import Callable, Sequence

from profiling.peaks.gemm import measure_matmul
from profiling.peaks.results import PeaksResult, best_kernel
from profiling.peaks.sampling import MIN_SAMPLE_S, Budget, Clock, Measurement, device_sync
from profiling.peaks.stream import l2_copies_per_launch, measure_stream

DEFAULT_WARMUP_S = {"cpu": 0.0, "cuda": 0.25, "mps": 0.25}  # GPU clocks need a moment to ramp up
# L2 samples are short: on a shared CPU a clean 2 ms window is common, a clean 50 ms one is not
L2_MIN_SAMPLE_S = 0.002
# long enough that the fastest warmup call (the calibration) is likely undisturbed
L2_WARMUP_S = 0.05
L2_REPEATS_FACTOR = 3  # L2 samples per kernel: 3 x bandwidth_repeats (more chances of a clean one)
STEP_WEIGHTS = {"gemm": 1.0, "stream dram": 2.0, "stream l2": 0.5}  # shares of the time budget


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
    """Measure STREAM on L2-resident arrays (when l2_array_bytes > 0; on CUDA every call a CUDA
    graph of stream.l2_copies_per_launch copies), the GEMM ceiling of every dtype, then STREAM on
    DRAM-sized arrays, within `time_budget_s` (None or 0: no budget).

    `on_step(label, measurement)` is called after each step of plan(), in that order; for a STREAM
    step the measurement is the better kernel's. An exception leaves with `partial_peaks` set."""
    import torch

    device_type = torch.device(device).type
    warm = DEFAULT_WARMUP_S[device_type] if warmup_s is None else warmup_s
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
    timing = {"sync": device_sync(device), "clock": clock, "warmup_s": warm}
    step = _Steps(device, result, budget, timing, on_step)
    with _partial_on_error(result, clock, budget.start):
        if l2_array_bytes > 0:
            result.l2 = step.stream(
                "stream l2",
                l2_array_bytes,
                L2_REPEATS_FACTOR * bandwidth_repeats,
                min_sample_s=min(min_sample_s, L2_MIN_SAMPLE_S),
                copies_per_call=l2_copies_per_launch(l2_array_bytes, device_type),
                warmup_s=max(warm, L2_WARMUP_S),
            )
        for dtype in dtypes:
            result.compute[dtype] = step.gemm(
                dtype, matrix_size, repeats, min_sample_s=min_sample_s
            )
        result.stream = step.stream(
            "stream dram", array_bytes, bandwidth_repeats, min_sample_s=min_sample_s
        )
    result.wall_s = clock() - budget.start
    return result


@contextlib.contextmanager
def _partial_on_error(result: PeaksResult, clock: Clock, start: float):
    """An exception (an interrupt included) leaves with `result`, what was measured so far, as its
    `partial_peaks` attribute."""
    try:
        yield
    except BaseException as exc:  # noqa: BLE001 - re-raised with the partial result attached
        result.wall_s = clock() - start
        exc.partial_peaks = result
        raise


class _Steps:
    """The steps of one run_peaks: each gets the next share of the budget, is timed into
    `result.step_s`, frees its memory and is reported to `on_step`."""

    def __init__(self, device, result: PeaksResult, budget: Budget, timing: dict, on_step) -> None:
        self.device, self.result, self.budget, self.on_step = device, result, budget, on_step
        self.timing = {**timing, "budget_end": budget.end}

    def gemm(self, dtype: str, n: int, repeats: int, **timing) -> Measurement:
        """The GEMM ceiling of `dtype` (gemm.measure_matmul)."""
        started = self.timing["clock"]()
        meas = measure_matmul(dtype, n, repeats, self.device, **self._timing(timing))
        self._done(f"gemm {dtype}", started, meas)
        return meas

    def stream(self, label: str, array_bytes: int, repeats: int, **timing) -> dict:
        """STREAM's kernels on arrays of `array_bytes` (stream.measure_stream); `on_step` gets the
        better kernel's measurement."""
        started = self.timing["clock"]()
        by_kernel = measure_stream(array_bytes, repeats, self.device, **self._timing(timing))
        self._done(label, started, by_kernel[best_kernel(by_kernel)])
        return by_kernel

    def _timing(self, overrides: dict) -> dict:
        return {**self.timing, "deadline": self.budget.next_step(), **overrides}

    def _done(self, label: str, started: float, meas: Measurement) -> None:
        _release(self.result.device_type)
        self.result.step_s[label] = self.timing["clock"]() - started
        if self.on_step:
            self.on_step(label, meas)


def _release(device_type: str) -> None:
    import torch

    if device_type == "cuda":
        torch.cuda.empty_cache()
    elif device_type == "mps":
        torch.mps.empty_cache()
