"""`python -m analysis --out` on a full disk (issue 25): one line, and the analysis run FAILED with
it. On main, ENOSPC from a figure process surfaced as a traceback (analysis/figures.py:136)."""

from __future__ import annotations

import errno

import mlflow
import pytest
from matplotlib.figure import Figure

from analysis import app
from common import schema
from common.tracking import RunSession


def log_train() -> None:
    tags = {schema.TAG_ENV_LABEL: "box", schema.TAG_DEVICE_NAME: "Test CPU", "device_type": "cpu"}
    with RunSession("train", run_name="t", tags=tags) as s:
        s.log_params(dict(model="resnet18", batch_size=2, precision="fp32", image_size=32))
        s.log_metrics(
            {
                "throughput_samples_per_s": 10.0,
                "step_time_median_s": 0.2,
                "step_time_mean_s": 0.2,
                "train_flops_per_step": 1e9,
                "achieved_flops_per_s": 5e9,
                "modeled_intensity_flops_per_byte": 10.0,
            }
        )
        s.log_series("step_time_s", [0.2, 0.21])


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_full_disk_under_out_is_one_line_and_a_failed_run(
    tracking, tmp_path, monkeypatch, capsys, jobs
):
    log_train()

    def full(self, path, *a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(Figure, "savefig", full)  # forked figure processes inherit it
    out = tmp_path / "report"
    assert app.cli(["--out", str(out), "--jobs", jobs]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"error: cannot write the report into --out {out}: {out / 'figures'}")
    assert last.endswith(
        "No space left on device; free space there (or a quota) or pass another --out"
    )
    (run,) = mlflow.search_runs(filter_string="tags.run_kind = 'analysis'", output_format="list")
    assert run.info.status == "FAILED" and run.data.tags["error"] == last[len("error: ") :]
