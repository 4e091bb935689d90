"""Tracebacks that became one line (issue 25): a sweep against an HTTP service that is not MLflow,
`--device cuda:-1` and `cuda:abc`. On main: a `RestException` traceback from mlflow.search_runs in
train/sweep/state.py, and `RuntimeError: Invalid device string: 'cuda:-1'` from torch.device."""

from __future__ import annotations

import mlflow
import pytest

from tests.helpers import use_uri
from train.__main__ import main as train_main
from train.config import TrainConfig
from train.sweep.__main__ import main as sweep_main

SWEEP = ["--models", "resnet18", "--batch-sizes", "2", "--image-size", "32", "--iters", "1"]
SWEEP += ["--warmup-iters", "1", "--device", "cpu", "--no-progress", "--env-label", "box"]


def test_sweep_against_a_service_that_is_not_mlflow_is_one_line(
    tracking, not_mlflow, monkeypatch, capsys
):
    use_uri(monkeypatch, not_mlflow)
    assert sweep_main(SWEEP) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == (
        f"error: cannot use {not_mlflow} answered HTTP 501 to the MLflow API: it is not an MLflow "
        "tracking server; check MLFLOW_TRACKING_URI (scheme, host, port and path)"
    )


@pytest.mark.parametrize("device", ["cuda:-1", "cuda:abc", "cuda:", "cuda:1.5"])
def test_a_device_that_is_no_device_is_a_usage_error(tracking, capsys, device):
    argv = ["--model", "resnet18", "--batch", "2", "--image-size", "32", "--device", device]
    assert train_main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.strip().splitlines()[-1] == (
        "error: device must be one of auto, cpu, cuda, mps or cuda:N (N = 0, 1, ...), got "
        f"'{device}'"
    )
    assert mlflow.search_runs(search_all_experiments=True, output_format="list") == []


def test_cuda_n_is_still_a_device():
    assert TrainConfig(device="cuda:0", env_label="x").device == "cuda:0"
    assert TrainConfig(device="CUDA:12", env_label="x").device == "cuda:12"
