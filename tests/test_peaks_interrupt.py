"""An interrupted `python -m profiling.peaks` keeps what it measured (issue 25).

On main, SIGTERM after the L2 and fp32 figures were printed ended the run KILLED with 0 metrics;
`python -m train` keeps the steps it measured, so peaks now keeps the ceilings it measured.
"""

from __future__ import annotations

import signal

import mlflow

from common import schema
from common.errors import Terminated
from profiling.peaks import __main__ as cli
from profiling.peaks import measure

TINY = ["--device", "cpu", "--matrix-size", "64", "--bandwidth-mib", "1", "--repeats", "2"]
TINY += ["--bandwidth-repeats", "3", "--dtypes", "fp32", "--experiment", "peaks-term"]


def test_sigterm_during_gemm_keeps_the_l2_ceiling_measured_before_it(monkeypatch, tracking, capsys):
    def terminated(*a, **k):  # what common.cli's SIGTERM handler raises in the main thread
        raise Terminated(signal.SIGTERM)

    monkeypatch.setattr(measure, "measure_matmul", terminated)
    assert cli.main(TINY) == 143
    (run,) = mlflow.search_runs(experiment_names=["peaks-term"], output_format="list")
    assert run.info.status == "KILLED"
    assert run.data.tags[schema.TAG_ERROR] == "terminated by SIGTERM"
    assert run.data.metrics["peak_l2_bytes_per_s"] > 0
    assert "peak_flops_per_s_fp32" not in run.data.metrics
    assert run.data.tags["peaks_partial"] == "measured before it stopped: stream l2"
    files = [
        f.path for f in mlflow.tracking.MlflowClient().list_artifacts(run.info.run_id, "peaks")
    ]
    assert files == ["peaks/samples.json"]


def test_an_interrupt_before_any_step_ended_logs_no_metric(monkeypatch, tracking):
    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(measure, "measure_stream", interrupted)
    assert cli.main(TINY) == 130
    (run,) = mlflow.search_runs(experiment_names=["peaks-term"], output_format="list")
    assert run.info.status == "KILLED" and "peaks_partial" not in run.data.tags
    assert not [k for k in run.data.metrics if k.startswith("peak_")]
