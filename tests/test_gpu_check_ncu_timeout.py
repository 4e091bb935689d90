"""`--timeout-s` on every ncu run (issue 34 item 5): a hanging ncu is stopped with SIGINT, so it
writes what it has, then SIGKILL if it ignores that; the profile run is FAILED with the reason and
keeps the partial log. The ncu here is a stand-in script that hangs."""

from __future__ import annotations

import sys
import time

import mlflow
import pytest

from profiling import cli
from profiling.ncu.command import CaptureOptions, run_ncu
from profiling.ncu.gpu import GpuInfo

# Hangs until SIGINT; on SIGINT writes a partial log (to --log-file, or argv[1]) and exits 0, as
# ncu does on Ctrl-C. With IGNORE set it ignores SIGINT and hangs until killed.
HANGING = """#!{python}
import os, signal, sys, time
args = sys.argv[1:]
if args == ["--version"]:
    print("Version 0.0.0.0 (hanging stand-in)"); sys.exit(0)
if args == ["--help"]:
    print("no help"); sys.exit(0)
log = args[args.index("--log-file") + 1] if "--log-file" in args else args[0]
def on_int(*_):
    with open(log, "w") as fh:
        fh.write("partial: 3 kernels profiled before the stop\\n")
    sys.exit(0)
signal.signal(signal.SIGINT, signal.SIG_IGN if os.environ.get("IGNORE") else on_int)
print("==PROF== Connected to process 1", flush=True)
while True:
    time.sleep(0.05)
"""


@pytest.fixture
def hanging_ncu(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "ncu"
    exe.write_text(HANGING.format(python=sys.executable))
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return exe


def test_a_hanging_ncu_gets_sigint_and_writes_what_it_has(hanging_ncu, tmp_path):
    log = tmp_path / "log.csv"
    t0 = time.monotonic()
    ran = run_ncu([str(hanging_ncu), str(log)], log, poll_s=60, timeout_s=1.5, grace_s=20)
    assert ran.timed_out and not ran.killed and ran.returncode == 0
    assert log.read_text() == "partial: 3 kernels profiled before the stop\n"
    assert "==PROF== Connected to process 1" in ran.console
    assert time.monotonic() - t0 < 20  # stopped by the limit, not by the grace period


def test_an_ncu_that_ignores_sigint_is_killed_after_the_grace(hanging_ncu, tmp_path, monkeypatch):
    monkeypatch.setenv("IGNORE", "1")
    log = tmp_path / "log.csv"
    ran = run_ncu([str(hanging_ncu), str(log)], log, poll_s=60, timeout_s=1, grace_s=1)
    assert ran.timed_out and ran.killed and ran.returncode == -9
    assert not log.exists()


def test_without_a_limit_a_quick_ncu_is_not_timed_out(tmp_path):
    ran = run_ncu([sys.executable, "-c", "print('done')"], tmp_path / "l", poll_s=60, timeout_s=30)
    assert ran.returncode == 0 and not ran.timed_out and ran.console == "done"


def _gpu(device, env_label=None):
    return GpuInfo(True, "NVIDIA L4", (8, 9), {"driver_version": "555.42"})


def test_the_profile_run_fails_with_the_reason_and_keeps_the_partial_log(
    tracking, hanging_ncu, tmp_path, capsys
):
    argv = ["--model", "resnet18", "--batch", "2", "--image-size", "32", "--warmup-iters", "1"]
    argv += ["--timeout-s", "1.5", "--out", str(tmp_path / "o"), "--experiment", "prof"]
    assert cli.main(argv, probe=_gpu) == 1
    (run,) = mlflow.search_runs(experiment_names=["prof"], output_format="list")
    assert run.info.status == "FAILED"
    error = run.data.tags["error"]
    assert error.startswith("ncu ran past --timeout-s 1.5 s and was stopped (SIGINT)")
    assert "\n" not in error and run.data.params["ncu_timeout_s"] == "1.5"
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"error: {error}"
    client = mlflow.tracking.MlflowClient()
    (art,) = [
        a.path for a in client.list_artifacts(run.info.run_id, "ncu") if a.path.endswith("csv")
    ]
    local = client.download_artifacts(run.info.run_id, art, str(tmp_path / "dl"))
    assert open(local).read().startswith("partial: 3 kernels")


@pytest.mark.parametrize("value", [0, -1])
def test_a_limit_must_be_positive(value):
    with pytest.raises(ValueError, match="timeout_s must be > 0"):
        CaptureOptions(timeout_s=value)


def test_the_flag_refuses_zero_in_one_line(tracking, capsys):
    argv = ["--model", "resnet18", "--timeout-s", "0", "--experiment", "prof"]
    assert cli.main(argv, probe=_gpu) == 2
    err = capsys.readouterr().err
    assert err == "error: timeout_s must be > 0 (or unset), got 0.0\n"  # as --launch-count 0
    assert mlflow.search_runs(experiment_names=["prof"], output_format="list") == []
