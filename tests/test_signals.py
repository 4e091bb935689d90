"""Runs that never end: SIGTERM/SIGHUP end a real `python -m train` KILLED with the reason and keep
the steps measured so far."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import mlflow
import pytest

from common import schema
from tests.conftest import ROOT
from tests.helpers import TINY


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=str(ROOT))


def start_measuring_train() -> subprocess.Popen:
    """A real `python -m train` (tiny config, 100,000 steps) that has measured at least one step:
    the progress bar (on stderr) shows a step time once the first measured step is done."""
    argv = [a for a in TINY if a != "--no-progress"]
    argv[argv.index("--iters") + 1] = "100000"
    proc = subprocess.Popen(
        [sys.executable, "-m", "train", *argv],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    os.set_blocking(proc.stderr.fileno(), False)
    seen = b""
    deadline = time.monotonic() + 600
    while b"ms/step" not in seen:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"train ended before measuring: {seen.decode()[-2000:]}")
        seen += proc.stderr.read(65536) or b""
        time.sleep(0.1)
    os.set_blocking(proc.stderr.fileno(), True)
    return proc


def only_run():
    (run,) = mlflow.search_runs(search_all_experiments=True, output_format="list")
    return run


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP"])
def test_stop_signal_ends_a_real_train_run_killed_and_keeps_the_steps_measured(tracking, signame):
    proc = start_measuring_train()
    proc.send_signal(getattr(signal, signame))
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + getattr(signal, signame)
    assert f"error: terminated by {signame}" in err.decode()
    run = only_run()
    assert run.info.status == "KILLED"
    assert run.data.tags[schema.TAG_ERROR] == f"terminated by {signame}"
    client = mlflow.tracking.MlflowClient()
    csv = client.download_artifacts(run.info.run_id, "timing/step_times.csv")
    lines = open(csv).read().splitlines()
    assert (
        lines[0] == "step,step_time_s" and len(lines) >= 2
    )  # the steps measured before the signal
    assert all(float(line.split(",")[1]) > 0 for line in lines[1:])
