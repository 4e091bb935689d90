"""A poisoned store (issue 25), end to end: `python -m analysis` of a store holding what main's
`python -m profiling --import` stored for the L4 fixture with one ffma value edited to `inf` and to
`1e300` (the import now refuses both: tests/test_ncu_checks.py), a train run with throughput -5, one
with achieved FLOP/s 1e308, and a good run beside them. The analysis finishes, draws the good run and
names each bad one in the report's "What is missing" (analysis/screen.py). On main it ended in
`TypeError: ufunc 'isfinite' not supported for the input types` and a FAILED analysis run.
"""

from __future__ import annotations

import math

import mlflow
import pandas as pd

from analysis import app
from common import schema
from common.tracking import RunSession
from profiling import cli as profiling_cli

L4_CSV = "l4_resnet18_bs64_train_step_details_nvtx.csv"
CONFIG = ["--model", "resnet18", "--batch", "64", "--image-size", "32", "--env-label", "l4"]


def _import_l4(ncu_dir, batch: str) -> str:
    args = [*CONFIG, "--import", str(ncu_dir / L4_CSV), "--device-name", "NVIDIA L4"]
    args[args.index("--batch") + 1] = batch
    assert profiling_cli.main(args) == 0
    return mlflow.search_runs(filter_string=f"params.batch_size = '{batch}'", output_format="list")[
        0
    ].info.run_id


def _train(batch: int, thr: float, achieved: float, name: str, config_key: str) -> str:
    tags = {
        schema.TAG_ENV_LABEL: "l4",
        schema.TAG_DEVICE_NAME: "NVIDIA L4",
        schema.TAG_DEVICE_TYPE: "cuda",
        schema.TAG_CONFIG_KEY: config_key,
    }
    params = dict(model="resnet18", batch_size=batch, precision="fp32", image_size=32)
    with RunSession("train", run_name=name, tags=tags) as s:
        s.log_params(params)
        s.log_metrics(
            {
                "throughput_samples_per_s": thr,
                "throughput_std_samples_per_s": 3.0,
                "step_time_median_s": 0.05,
                "step_time_mean_s": 0.05,
                "train_flops_per_step": 1.1e11,
                "achieved_flops_per_s": achieved,
                "modeled_intensity_flops_per_byte": 40.0,
            }
        )
        s.log_series("step_time_s", [0.05, 0.051, 0.049])
    return s.run_id


def test_a_poisoned_store_is_analysed_without_its_bad_runs(tracking, ncu_dir, tmp_path):
    client = mlflow.tracking.MlflowClient()
    # what main's import stored for the fixture with one ffma value edited to inf and to 1e300
    inf_run, big_run = _import_l4(ncu_dir, "64"), _import_l4(ncu_dir, "65")
    client.log_metric(inf_run, "ncu_flops_total", math.inf)
    client.log_metric(inf_run, "ncu_intensity_dram_flops_per_byte", math.inf)
    client.log_metric(big_run, "ncu_flops_total", 2e300)
    client.log_metric(big_run, "ncu_intensity_dram_flops_per_byte", 2.8e291)
    keys = {
        r.info.run_id: r.data.tags[schema.TAG_CONFIG_KEY]
        for r in mlflow.search_runs(output_format="list")
    }
    good = _train(64, 1280.0, 2.2e12, "good", keys[inf_run])
    negative = _train(65, -5.0, 2.2e12, "negative", keys[big_run])
    huge = _train(66, 1280.0, 1e308, "huge", keys[big_run])

    out = tmp_path / "report"
    assert app.main(["--out", str(out), "--jobs", "1"]) == 0

    report = (out / "report.md").read_text()
    missing = report.split("## What is missing")[1].split("\n## ")[0]
    for run_id, key, value in (
        (inf_run, "ncu_flops_total", "1.79769e+308"),
        (big_run, "ncu_flops_total", "2e+300"),
        (negative, "throughput_samples_per_s", "-5"),
        (huge, "achieved_flops_per_s", "1e+308"),
    ):
        (line,) = [ln for ln in missing.splitlines() if run_id[:8] in ln]
        assert f"{key} = {value}" in line and line.count("left out") == 1
    summary = pd.read_csv(out / "summary.csv")
    assert len(summary) == 1 and good in summary["run_ids"].iloc[0]
    assert math.isclose(summary["achieved_flops_per_s"].iloc[0], 2.2e12)
    assert list(out.glob("figures/roofline*.png"))  # the good run drawn
    (analysis,) = mlflow.search_runs(
        filter_string="tags.run_kind = 'analysis'", output_format="list"
    )
    assert analysis.info.status == "FINISHED"
    assert analysis.data.metrics["n_train_runs"] == 1
