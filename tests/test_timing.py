"""Timing statistics and the adaptive stopping rule, with injected clocks."""

from __future__ import annotations

import math

import pytest

from train import timing


def fake_clock(step_times):
    """A clock whose successive (start, end) reads are 0 and step_times[i] apart."""
    state = {"t": 0.0, "i": 0, "started": False}

    def now():
        if state["started"]:
            state["t"] += step_times[state["i"] % len(step_times)]
            state["i"] += 1
        state["started"] = not state["started"]
        return state["t"]

    return now


def test_summarize_against_hand_values():
    s = timing.summarize([0.1, 0.2, 0.3, 0.4], batch_size=8)
    assert s["step_time_median_s"] == pytest.approx(0.25)
    assert s["step_time_mean_s"] == pytest.approx(0.25)
    assert s["step_time_std_s"] == pytest.approx(math.sqrt(((0.15**2) * 2 + (0.05**2) * 2) / 3))
    assert s["step_time_p95_s"] == pytest.approx(0.385)  # 0.3 + 0.85 * 0.1
    assert s["throughput_samples_per_s"] == pytest.approx(8 / 0.25)
    per_step = [80, 40, 80 / 3, 20]
    mean = sum(per_step) / 4
    sd = math.sqrt(sum((x - mean) ** 2 for x in per_step) / 3)
    assert s["throughput_std_samples_per_s"] == pytest.approx(sd)


def test_summarize_rejects_empty_and_nonpositive():
    with pytest.raises(ValueError):
        timing.summarize([], 2)
    with pytest.raises(ValueError):
        timing.summarize([0.1, 0.0], 2)


def test_ci95_half_width():
    # n = 4, mean 0.25, sd 0.1291; t(3) = 3.182 -> 3.182 * 0.1291 / 2 / 0.25
    assert timing.ci95_half_width_rel([0.1, 0.2, 0.3, 0.4]) == pytest.approx(
        3.182 * 0.129099 / 2 / 0.25, rel=1e-4
    )
    assert timing.ci95_half_width_rel([0.1]) == math.inf


def test_measure_times_each_step_between_clock_reads():
    calls = []
    times = timing.measure(lambda: calls.append(1), 3, fake_clock([0.5, 0.25]))
    assert times == [0.5, 0.25, 0.5] and len(calls) == 3


def test_both_loops_time_only_the_step_not_the_progress_callback():
    now = {"t": 0.0}

    def step():
        now["t"] += 1.0

    def slow_progress(*_):
        now["t"] += 100.0  # a progress bar that takes far longer than the step

    clock = lambda: now["t"]  # noqa: E731
    assert timing.measure(step, 3, clock, on_step=slow_progress) == [1.0, 1.0, 1.0]
    times, why = timing.measure_until(step, clock, min_iters=4, on_step=slow_progress)
    assert times == [1.0] * 4 and why == "converged"


def test_measure_until_converges_on_steady_steps():
    times, why = timing.measure_until(
        lambda: None, fake_clock([1.0, 1.01]), target_rel=0.02, min_iters=10
    )
    assert why == "converged" and len(times) == 10
    assert timing.ci95_half_width_rel(times) <= 0.02


def test_measure_until_keeps_going_while_noisy_and_stops_at_cap():
    times, why = timing.measure_until(
        lambda: None, fake_clock([1.0, 2.0, 0.5]), target_rel=0.02, max_iters=50
    )
    assert why == "max_iters" and len(times) == 50


def test_measure_until_stops_when_noise_averages_out():
    # alternating 1.0 / 1.2: sd ~0.1, mean 1.1; half-width 2 % of 1.1 needs n with 1.96*0.1/sqrt(n) <= 0.022
    times, why = timing.measure_until(
        lambda: None, fake_clock([1.0, 1.2]), target_rel=0.02, max_iters=10_000
    )
    assert why == "converged"
    assert 75 <= len(times) <= 85
    assert timing.ci95_half_width_rel(times) <= 0.02 < timing.ci95_half_width_rel(times[:-2])


def test_measure_until_time_cap(monkeypatch):
    ticks = iter(range(0, 10_000, 10))
    monkeypatch.setattr(timing.time, "perf_counter", lambda: float(next(ticks)))
    times, why = timing.measure_until(
        lambda: None, fake_clock([1.0, 3.0]), target_rel=1e-6, max_time_s=35
    )
    assert why == "max_time" and len(times) == 4  # 10 s of (fake) wall clock per step


def test_config_accepts_auto_and_rejects_bad_iters():
    from train.config import TrainConfig

    assert TrainConfig(iters="AUTO", env_label="x").iters == "auto"
    assert TrainConfig(iters="7", env_label="x").iters == 7
    with pytest.raises(ValueError, match="iters must be a positive integer or auto"):
        TrainConfig(iters="many", env_label="x")
    with pytest.raises(ValueError, match="ci_target must be between 0 and 1"):
        TrainConfig(iters="auto", ci_target=2, env_label="x")
