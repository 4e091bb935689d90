"""How often the change-point test (analysis/changepoints.py) finds a step, and how often it
raises a false alarm, on generated series: the table of docs/analysis.md, "What changed over time".

    python -m bench.history_power                        # the table, as markdown
    python -m bench.history_power --noise-from sqlite:////tmp/hist/store.db --series hist-steady

A generated series has `side` runs at one level, then `side` runs at (1 + step) x that level;
each run's log mean step time has Gaussian noise of SD `noise` between runs, and its own CI says
OWN_SHARE of that SD (the rest is the run-to-run noise the test estimates from neighbouring runs).
A series counts as detected when the test of the whole series passes (p < ALPHA: then
changepoints.find reports at least one change; the same test on the same fixed shuffles); with
step 0 that is a false alarm. Seeded per cell: the same table on every machine.

--noise-from measures this machine's noise from a series of real runs without a change: the
run-to-run SD of their log mean step times (the median absolute difference of neighbouring runs,
as the test estimates it) and their own CIs' share of it, and adds that noise as a column.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from analysis import changepoints as cp

STEPS = (0.0, 0.02, 0.05, 0.10, 0.20)
SIDES = (4, 8, 16)
NOISES = (0.01, 0.02, 0.03, 0.05)
OWN_SHARE = 0.5
"""the share of a run's noise SD its own CI carries (this machine's runs: see --noise-from)"""
REPS = 1000


def rate(
    step: float, side: int, noise: float, reps: int = REPS, own_share: float = OWN_SHARE
) -> float:
    """The share of `reps` generated series (seeded by the cell) in which the test finds a change."""
    seed = [int(round(step * 1e4)), side, int(round(noise * 1e5)), reps]
    rng = np.random.default_rng(seed)
    y = rng.normal(0.0, noise, (reps, 2 * side))
    y[:, side:] += np.log1p(step)
    own = np.full_like(y, (own_share * noise) ** 2)
    p = cp.first_tests(list(y), list(own))
    return float(np.mean(p < cp.ALPHA))


def measured_noise(uri: str, env_label: str) -> dict:
    """This machine's noise from the train runs of `env_label` on `uri` (one series without a
    change): the run-to-run SD of log mean step time and its own CIs' share of it."""
    import os

    os.environ["MLFLOW_TRACKING_URI"] = uri
    from analysis import fetch, join, screen

    runs, _ = fetch.fetch_runs(fetch.Query(env_labels=[env_label]), fetch.Source("off"))
    runs, _ = screen.values(screen.runs(runs)[0])
    t = join.train_runs(runs).sort_values("start_time")
    y = np.log(t["step_time_mean_s"].to_numpy(float))
    own = cp.own_variance(t["step_time_ci95_rel"].to_numpy(float), t["measured_iters"].to_numpy())
    total = float(cp.run_noise(y, np.zeros_like(y)))  # the whole run-to-run variance
    sd = float(np.sqrt(total))
    return {
        "runs": len(t),
        "noise_sd": sd,
        "sd_of_logs": float(np.std(y, ddof=1)),
        "own_share": float(np.sqrt(np.median(own)) / sd) if sd > 0 else float("nan"),
    }


def table(noises: list[float], reps: int = REPS, own_share: float = OWN_SHARE) -> str:
    """The markdown table step x runs per side x noise -> detection rate."""
    head = "| step | runs per side | " + " | ".join(f"noise {n:.1%}" for n in noises) + " |"
    lines = [head, "|" + "---|" * (2 + len(noises))]
    for step in STEPS:
        for side in SIDES:
            cells = [f"{rate(step, side, n, reps, own_share):.1%}" for n in noises]
            what = "none (false alarms)" if step == 0 else f"{step:.0%}"
            lines.append(f"| {what} | {side} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.history_power", description=__doc__)
    p.add_argument("--reps", type=int, default=REPS, help="series per cell")
    p.add_argument("--noise-from", default="", help="a tracking URI holding a steady series")
    p.add_argument("--series", default="", help="its env label")
    p.add_argument("--noises", default="", help="comma-separated noise SDs instead of the default")
    args = p.parse_args(argv)
    noises, share = [float(n) for n in args.noises.split(",") if n] or list(NOISES), OWN_SHARE
    if args.noise_from:
        m = measured_noise(args.noise_from, args.series)
        print("measured: " + json.dumps(m))
        noises.append(round(m["noise_sd"], 3))
    print(table(noises, args.reps, share))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
