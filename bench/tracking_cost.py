"""Cost of logging per-step times into a temporary sqlite store, measured side by side:

* what python -m train does: one batched call for the metric history (at most 1,000 points, every
  k-th step beyond that) plus every value exactly in the artifact timing/step_times.csv;
* one batched call with every step as a metric row (MLflow's SQL store: ~0.2 ms CPU per row);
* one log_metric call per step (extrapolated from a sample).

    python -m bench.tracking_cost [--steps 10000 --per-call-sample 200]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m bench.tracking_cost",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument(
        "--per-call-sample", type=int, default=200, help="steps logged one call each (extrapolated)"
    )
    return ap.parse_args()


def main() -> None:
    args = parse()
    import logging

    import mlflow

    logging.getLogger("mlflow").setLevel(logging.WARNING)
    from common.tracking import RunSession

    values = [0.1 + random.random() * 0.01 for _ in range(args.steps)]
    with tempfile.TemporaryDirectory() as tmp:
        mlflow.set_tracking_uri(f"sqlite:///{tmp}/bench.db")
        with RunSession("train", run_name="warm-up") as s:  # create tables outside the timing
            s.log_metrics({"x": 1.0})
        ours, n_history, csv_rows = ours_s(values)
        every_row, per_call = mlflow_ways_s(values, args.per_call_sample)
        mlflow.set_tracking_uri(None)

    print(
        f"python -m train's way: {args.steps} step times in {ours:.3f} s "
        f"({csv_rows} in the CSV artifact, {n_history} in the metric history); goal <= 1 s"
    )
    print(
        f"every step as a metric row, one batched call: {every_row:.3f} s ({every_row / ours:.1f}x ours)"
    )
    print(
        f"one log_metric call per step: {per_call * 1e3:.2f} ms each -> {per_call * args.steps:.1f} s "
        f"({per_call * args.steps / ours:.0f}x ours)"
    )


def ours_s(values: list[float]) -> tuple[float, int, int]:
    """Seconds python -m train's way takes to log `values`, and the points in the metric history
    and rows in the CSV artifact that it wrote."""
    import mlflow

    from common.tracking import RunSession
    from train.bench import step_times_csv

    with RunSession("train", run_name="ours") as s:
        s.flush()
        t0 = time.perf_counter()
        s.log_series("step_time_s", values)
        s.log_text("timing/step_times.csv", step_times_csv(values))
        s.flush()
        ours = time.perf_counter() - t0
    n_history = len(mlflow.tracking.MlflowClient().get_metric_history(s.run_id, "step_time_s"))
    csv_text = mlflow.artifacts.load_text(f"runs:/{s.run_id}/timing/step_times.csv")
    return ours, n_history, len(csv_text.splitlines()) - 1


def mlflow_ways_s(values: list[float], per_call_sample: int) -> tuple[float, float]:
    """Seconds to log every value as a metric row in one batched call, and seconds per
    log_metric call (from the first `per_call_sample` values)."""
    import mlflow
    from mlflow.entities import Metric

    client = mlflow.tracking.MlflowClient()
    run_id = client.create_run("0").info.run_id
    t0 = time.perf_counter()
    client.log_batch(run_id, metrics=[Metric("step_time_s", v, 0, i) for i, v in enumerate(values)])
    every_row = time.perf_counter() - t0

    run_id = client.create_run("0").info.run_id
    t0 = time.perf_counter()
    for i, v in enumerate(values[:per_call_sample]):
        client.log_metric(run_id, "step_time_s", v, step=i)
    return every_row, (time.perf_counter() - t0) / per_call_sample


if __name__ == "__main__":
    main()
