"""`mlflow run .` with --env-manager local: the MLproject maps onto python -m train."""

from __future__ import annotations

import os
import subprocess
import sys

import mlflow
import pytest

from tests.conftest import ROOT


def mlflow_run(
    tracking: str, tmp_path, *params: str, entry: str = "main"
) -> subprocess.CompletedProcess:
    env = dict(
        os.environ,
        MLFLOW_TRACKING_URI=tracking,
        PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
    )
    env.pop("MLFLOW_RUN_ID", None)
    args = [
        sys.executable,
        "-m",
        "mlflow",
        "run",
        str(ROOT),
        "--env-manager",
        "local",
        "--experiment-name",
        "mlproject-test",
        "-e",
        entry,
    ]
    for p in params:
        args += ["-P", p]
    return subprocess.run(args, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)


def test_mlflow_run_local_env_manager(tracking, tmp_path):
    done = mlflow_run(
        tracking,
        tmp_path,
        "batch=2",
        "image_size=32",
        "iters=3",
        "warmup_iters=1",
        "device=cpu",
        "env_label=ci-box",
        "channels_last=true",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    runs = mlflow.search_runs(experiment_names=["mlproject-test"], output_format="list")
    assert len(runs) == 1
    run = runs[0]
    assert run.info.status == "FINISHED"
    assert run.data.params["batch"] == "2"  # logged by mlflow run from -P
    assert run.data.params["batch_size"] == "2" and run.data.params["channels_last"] == "true"
    assert run.data.tags["env_label"] == "ci-box" and run.data.tags["run_kind"] == "train"
    assert run.data.metrics["throughput_samples_per_s"] > 0
    assert "samples/s" in done.stdout


def test_mlflow_run_with_bad_parameter_ends_failed_with_reason(tracking, tmp_path):
    done = mlflow_run(tracking, tmp_path, "batch=two", "device=cpu")
    assert done.returncode != 0
    assert "error: argument --batch/--batch-size: invalid int value: 'two'" in done.stderr
    run = mlflow.search_runs(experiment_names=["mlproject-test"], output_format="list")[0]
    assert run.info.status == "FAILED" and "invalid int value: 'two'" in run.data.tags["error"]


def test_mlflow_run_profile_entry_imports_ncu_output(tracking, tmp_path, ncu_dir):
    csv = ncu_dir / "l4_resnet18_bs64_train_step_details_nvtx.csv"
    done = mlflow_run(
        tracking,
        tmp_path,
        "batch=64",
        "image_size=32",
        f"import_file={csv}",
        "device_name=NVIDIA L4",
        "env_label=lab",
        entry="profile",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    run = mlflow.search_runs(experiment_names=["mlproject-test"], output_format="list")[0]
    assert run.info.status == "FINISHED" and run.data.tags["run_kind"] == "profile"
    assert run.data.tags["device_name"] == "NVIDIA L4"
    assert abs(run.data.metrics["ncu_intensity_dram_flops_per_byte"] - 6.94) < 0.007


def test_mlflow_run_breakdown_entry(tracking, tmp_path):
    done = mlflow_run(
        tracking,
        tmp_path,
        "batch=2",
        "image_size=32",
        "iters=1",
        "warmup_iters=0",
        "device=cpu",
        "num_classes=10",
        "env_label=ci-box",
        entry="breakdown",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (run,) = mlflow.search_runs(experiment_names=["mlproject-test"], output_format="list")
    assert run.info.status == "FINISHED" and run.data.tags["run_kind"] == "breakdown"
    assert run.data.params["batch"] == "2" and run.data.params["batch_size"] == "2"
    assert run.data.tags["mlflow.project.entryPoint"] == "breakdown"
    assert run.data.metrics["breakdown_step_s"] > 0 and "most time: " in done.stdout


@pytest.mark.skipif(
    os.environ.get("ROOFLINE_TEST_VIRTUALENV") != "1",
    reason="builds a 6 GB venv from conda.yaml (minutes): set ROOFLINE_TEST_VIRTUALENV=1 (.ci/run does)",
)
def test_mlflow_run_virtualenv_env_manager(tracking, tmp_path):
    """The conda.yaml pip list builds a working environment with mlflow's virtualenv manager."""
    import shutil

    if shutil.which("pyenv") is None and not os.path.exists(
        os.path.expanduser("~/.pyenv/bin/pyenv")
    ):
        pytest.skip("mlflow's virtualenv manager needs pyenv")
    env = dict(
        os.environ,
        MLFLOW_TRACKING_URI=tracking,
        PATH=os.pathsep.join(
            [
                os.path.dirname(sys.executable),
                os.path.expanduser("~/.pyenv/bin"),
                os.environ.get("PATH", ""),
            ]
        ),
    )
    env.pop("MLFLOW_RUN_ID", None)
    args = [
        sys.executable,
        "-m",
        "mlflow",
        "run",
        str(ROOT),
        "--env-manager",
        "virtualenv",
        "--experiment-name",
        "venv-test",
        "-P",
        "batch=2",
        "-P",
        "image_size=32",
        "-P",
        "iters=2",
        "-P",
        "warmup_iters=1",
        "-P",
        "device=cpu",
    ]
    done = subprocess.run(args, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=3600)
    assert done.returncode == 0, done.stderr[-3000:]
    run = mlflow.search_runs(experiment_names=["venv-test"], output_format="list")[0]
    assert run.info.status == "FINISHED" and run.data.metrics["throughput_samples_per_s"] > 0
