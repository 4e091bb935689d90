"""Step timing: a synchronising clock per device, the measured loop, and summary statistics."""

from __future__ import annotations

import math
import time
from typing import Callable, Iterator, Sequence

import numpy as np

from common import schema
from common.stats import mean_ci95_rel


def make_clock(synchronize: Callable[[], None]) -> Callable[[], float]:
    """A clock that waits for the device to finish queued work before reading perf_counter."""

    def now() -> float:
        synchronize()
        return time.perf_counter()

    return now


def timed_steps(step: Callable[[], object], clock: Callable[[], float]) -> Iterator[float]:
    """THE timed step: run `step` again and again, yielding each run's seconds between two
    synchronised clock reads. What the consumer does between two values (progress display, the
    stopping rule) happens outside the timed interval."""
    while True:
        t0 = clock()
        step()
        yield clock() - t0


def measure(
    step: Callable[[], object],
    iters: int,
    clock: Callable[[], float],
    on_step: Callable[[int, float], None] | None = None,
    times: list[float] | None = None,
) -> list[float]:
    """Run `step` `iters` times; return each step's seconds (`timed_steps`).

    `on_step(i, seconds)` (progress display) runs outside the timed interval. `times`: the list the
    step times are appended to (and returned), so that a caller keeps the steps measured before an
    interrupt.
    """
    times = [] if times is None else times
    for i, dt in zip(range(iters), timed_steps(step, clock)):
        times.append(dt)
        if on_step is not None:
            on_step(i, dt)
    return times


def measure_until(
    step: Callable[[], object],
    clock: Callable[[], float],
    *,
    target_rel: float = 0.02,
    min_iters: int = 10,
    max_iters: int = 1000,
    max_time_s: float = 300.0,
    on_step: Callable[[int, float, float], None] | None = None,
    times: list[float] | None = None,
) -> tuple[list[float], str]:
    """Adaptive measurement: run `step` until the 95 % CI half-width of the mean step time is within
    `target_rel` of the mean (after at least `min_iters` steps), or a cap is hit.

    Returns (step times, stop reason: "converged" | "max_iters" | "max_time").
    `on_step(i, seconds, ci95_rel)` runs outside the timed interval; `times` as in `measure`.
    """
    times = [] if times is None else times
    total = total_sq = 0.0
    start = time.perf_counter()
    for dt in timed_steps(step, clock):
        times.append(dt)
        total += dt
        total_sq += dt * dt
        n = len(times)
        rel = math.inf
        if n >= 2:
            mean = total / n
            rel = mean_ci95_rel(
                n, math.sqrt(max(0.0, (total_sq - n * mean * mean) / (n - 1))), mean
            )
        if on_step is not None:
            on_step(n - 1, dt, rel)
        if n >= min_iters and rel <= target_rel:
            return times, "converged"
        if n >= max_iters:
            return times, "max_iters"
        if time.perf_counter() - start >= max_time_s:
            return times, "max_time"
    raise AssertionError("timed_steps never ends")


def summarize(step_times_s: Sequence[float], batch_size: int) -> dict[str, float]:
    """Summary statistics of measured step times (seconds) and the throughput they imply: the
    rate from the mean step time (common.schema.rate_per_s); the median, min, p95 and SDs describe
    variability only."""
    t = np.asarray(step_times_s, dtype=float)
    if t.size == 0 or not np.all(np.isfinite(t)) or np.any(t <= 0):
        raise ValueError("step times must be a non-empty sequence of positive finite seconds")
    per_step_throughput = batch_size / t
    mean = float(t.mean())
    return {
        "step_time_median_s": float(np.median(t)),
        "step_time_mean_s": mean,
        "step_time_std_s": float(t.std(ddof=1)) if t.size > 1 else 0.0,
        "step_time_min_s": float(t.min()),
        "step_time_p95_s": float(np.percentile(t, 95)),
        "throughput_samples_per_s": schema.rate_per_s(batch_size, mean),
        "throughput_std_samples_per_s": float(per_step_throughput.std(ddof=1))
        if t.size > 1
        else 0.0,
    }


def ci95_half_width_rel(step_times_s: Sequence[float]) -> float:
    """Half-width of the 95 % confidence interval of the mean step time, relative to the mean
    (common.stats.mean_ci95_rel over the steps)."""
    t = np.asarray(step_times_s, dtype=float)
    if t.size < 2:
        return math.inf
    return float(mean_ci95_rel(t.size, float(t.std(ddof=1)), float(t.mean())))
