"""The sampling engine: warm up, calibrate, then time alternating samples within a time budget.

Every kernel is a call with a known amount of work (FLOPs or bytes); a sample is the time between
two device syncs around enough calls to last at least `min_sample_s`. The clock and the sync are
injected, so every rule here is tested on CPU with a fake clock (tests/test_peaks_sampling.py).
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from train.device import synchronize

MIN_SAMPLE_S = 0.05  # fast calls are batched so one timed sample lasts at least this long
# a sample stops issuing calls after 10x its expected length (a descheduled thread)
SAMPLE_CAP_FACTOR = 10
# the time budget never cuts a step below this many samples while any budget is left
MIN_SAMPLES = 3
# the spread of a measurement's samples (the best is the ceiling; these say how typical it was)
NEAR_BEST = 0.9  # a sample at >= 90 % of the best is "near the best"
FAR_BELOW = 0.5  # a sample below half the best is "far below" it (disturbed)

Sync = Callable[[], None]
Clock = Callable[[], float]
Kernel = tuple[str, float, Callable[[], object]]  # (unit, work per call, the call)


@dataclass
class Measurement:
    """Timed samples of one kernel. `work` is FLOPs (compute) or bytes (bandwidth) per call."""

    name: str
    unit: str  # "flops" | "bytes"
    work: float
    calls_per_sample: int
    samples_s: list[float]
    requested: int = 0  # samples asked for; fewer were taken when the time budget cut the step
    # calls each sample made (empty: calls_per_sample each)
    sample_calls: list[int] = field(default_factory=list)
    warmup_s: list[float] = field(default_factory=list)  # untimed warmup calls, seconds each
    copies_per_call: int = 1  # copies of the kernel one call runs (a CUDA graph); in `work` already

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
    def p10(self) -> float:
        """The 10th percentile of the rates (linear interpolation): 90 % of samples were faster."""
        rates = self.rates
        return (
            statistics.quantiles(rates, n=10, method="inclusive")[0] if len(rates) > 1 else rates[0]
        )

    @property
    def near_best_fraction(self) -> float:
        """Share of the samples at NEAR_BEST x the best or faster (1: every sample agrees)."""
        best = self.best
        return sum(r >= NEAR_BEST * best for r in self.rates) / len(self.rates)

    @property
    def far_below_fraction(self) -> float:
        """Share of the samples slower than FAR_BELOW x the best (disturbed ones)."""
        best = self.best
        return sum(r < FAR_BELOW * best for r in self.rates) / len(self.rates)

    @property
    def bimodal(self) -> bool:
        """Some samples near the best and some far below it: a median would describe neither."""
        return self.far_below_fraction > 0

    def spread_text(self) -> str:
        """'7/10 samples within 10% of the best, 3/10 below half of it' (counts, for notes)."""
        n = len(self.rates)
        text = f"{round(self.near_best_fraction * n)}/{n} samples within {1 - NEAR_BEST:.0%} of the best"
        if self.bimodal:
            text += f", {round(self.far_below_fraction * n)}/{n} below {FAR_BELOW:.0%} of it"
        return text

    @property
    def cut(self) -> bool:
        """True when the time budget stopped sampling before `requested` samples."""
        return len(self.samples_s) < self.requested

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "unit": f"{self.unit}_per_s",
            f"{self.unit}_per_call": self.work,
            "copies_per_call": self.copies_per_call,
            "calls_per_sample": self.calls_per_sample,
            "sample_calls": self.calls,
            "samples_requested": self.requested or len(self.samples_s),
            "warmup_s": self.warmup_s,
            "samples_s": self.samples_s,
            "rates_per_s": self.rates,
            "best_per_s": self.best,
            "p10_per_s": self.p10,
            "near_best_fraction": self.near_best_fraction,
            "far_below_fraction": self.far_below_fraction,
            "bimodal": self.bimodal,
        }


def device_sync(device: str) -> Sync:
    """A function that waits for all queued work on `device` (no-op on CPU)."""
    import torch

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


def timed(fn: Callable[[], object], calls: int, sync: Sync, clock: Clock) -> float:
    """Seconds of `calls` calls of `fn` between two syncs."""
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


def sample_kernels(
    kernels: dict[str, Kernel],
    repeats: int,
    sync: Sync,
    clock: Clock = time.perf_counter,
    warmup_s: float = 0.0,
    min_sample_s: float = MIN_SAMPLE_S,
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
    calls, cap_s, warm = _calibrate(kernels, sync, clock, warmup_s, min_sample_s)
    keep = min(min_samples, repeats)
    samples, made = _sample_rounds(
        kernels, calls, cap_s, repeats, sync, clock, keep, deadline, budget_end
    )
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


def _calibrate(kernels, sync: Sync, clock: Clock, warmup_s: float, min_sample_s: float):
    """Warm each kernel up; returns its calls per sample, the seconds a sample may run before it
    is cut, and its warmup calls' seconds (see sample_kernels)."""
    calls: dict[str, int] = {}
    cap_s: dict[str, float] = {}
    warm: dict[str, list[float]] = {name: [] for name in kernels}
    for name, (_unit, _work, fn) in kernels.items():
        start = clock()
        warm[name].append(timed(fn, 1, sync, clock))
        while clock() - start < warmup_s:
            warm[name].append(timed(fn, 1, sync, clock))
        one = min(warm[name])
        calls[name] = max(1, math.ceil(min_sample_s / one)) if one > 0 else 1
        cap_s[name] = SAMPLE_CAP_FACTOR * max(min_sample_s, one)
    return calls, cap_s, warm


def _sample_rounds(kernels, calls, cap_s, repeats, sync, clock, keep, deadline, budget_end):
    """Up to `repeats` rounds of one sample per kernel, stopped by the deadline after `keep` rounds
    and by the budget's end after one; returns each kernel's sample seconds and calls made."""
    samples: dict[str, list[float]] = {name: [] for name in kernels}
    made: dict[str, list[int]] = {name: [] for name in kernels}
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
    return samples, made
