"""A batch whose activations cannot fit is refused before it runs (issue 25, train/memory_check.py).

On main, `--batch 1500` at 224 px on a CPU grew past 8 GB in 35 s before anything was said. The
activations autograd saves at the counted batches (2 and 4) now predict the real step's, and a step
needing more than the device has free is refused in one line, unless --no-memory-check.
"""

from __future__ import annotations

import mlflow
import pytest

from common.errors import BenchError
from tests.helpers import TINY
from train import memory_check
from train.__main__ import main as train_main


def only_run():
    (run,) = mlflow.search_runs(search_all_experiments=True, output_format="list")
    return run


def test_batch_1500_at_224px_is_refused_before_its_first_step(tracking, monkeypatch, capsys):
    monkeypatch.setattr(
        memory_check, "available_bytes", lambda device: (8 * 10**9, "RAM available")
    )
    argv = ["--model", "resnet18", "--batch", "1500", "--image-size", "224", "--device", "cpu"]
    argv += ["--iters", "2", "--warmup-iters", "1", "--no-progress", "--no-system-metrics"]
    assert train_main(argv) == 1
    run = only_run()
    error = run.data.tags["error"]
    assert run.info.status == "FAILED" and error.startswith(
        "batch 1500 of resnet18 at 224 px needs at least "
    )
    assert (
        "per sample, measured at batches 2 and 4), more than the 8 GB RAM available on cpu" in error
    )
    assert "use --batch " in error and "or pass --no-memory-check to try it anyway" in error
    assert "step_time_median_s" not in run.data.metrics
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"error: {error}"


def test_the_estimate_is_linear_in_the_batch_and_names_what_fits():
    saved = {2: 2_000_000 + 2 * 50_000_000, 4: 2_000_000 + 4 * 50_000_000}
    need, per_sample, fixed = memory_check.needed_bytes(saved, 1500)
    assert (per_sample, fixed) == (50_000_000, 2_000_000) and need == 2_000_000 + 1500 * 50_000_000

    class Cfg:
        model, batch_size, image_size = "resnet18", 1500, 224

    with pytest.raises(BenchError, match=r"use --batch 159 or less"):  # (8e9 - 2e6) // 5e7
        memory_check.check(Cfg, "cpu", saved, available=(8 * 10**9, "RAM available"))
    memory_check.check(Cfg, "cpu", saved, available=(10**12, "RAM available"))  # fits: no error


def test_a_tiny_step_that_does_not_fit_is_refused(tracking, monkeypatch):
    monkeypatch.setattr(memory_check, "available_bytes", lambda device: (1000, "RAM available"))
    # the weights' own check (test_no_stray_runs) would refuse 1 kB first, before the run exists
    monkeypatch.setattr(memory_check, "check_weights", lambda cfg, device: None)
    assert train_main([*TINY, "--batch", "8"]) == 1
    assert "not even batch 1 fits" in only_run().data.tags["error"]


def test_no_memory_check_tries_it_anyway(tracking, monkeypatch):
    monkeypatch.setattr(memory_check, "available_bytes", lambda device: (1000, "RAM available"))
    monkeypatch.setenv(memory_check.ENV, "on")  # restored after the test: main sets it off
    assert train_main([*TINY, "--batch", "8", "--no-memory-check"]) == 0
    assert only_run().info.status == "FINISHED"
