"""Runs that never end: SIGTERM/SIGHUP end a real `python -m train` KILLED with the reason and keep
the steps measured so far; a run whose process was killed with `kill -9` is ended FAILED by the next
command against the store, and only that one (not another host's, not a live process's)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict

import mlflow
import pytest

from common import schema
from common.run_record import RunRecord
from common.runs import STALE_REASON, close_stale_runs, process_tag
from common.tracking import RunSession
from tests.conftest import ROOT
from tests.helpers import TINY, dead_pid


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


def test_run_of_a_killed_process_is_failed_by_the_next_run_and_nothing_else(tracking):
    """`kill -9` cannot be caught: the next session against the store ends that run FAILED. Runs of
    another host, of a live process, of a process whose pid was reused, and without the tag stay."""
    script = (
        "import sys, time\n"
        "from common.tracking import RunSession\n"
        "with RunSession('train', run_name='victim') as s:\n"
        "    print(s.run_id, flush=True)\n"
        "    time.sleep(600)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], env=_env(), stdout=subprocess.PIPE, text=True
    )
    victim = proc.stdout.readline().strip()
    client = mlflow.tracking.MlflowClient()
    assert client.get_run(victim).info.status == "RUNNING"

    def running(tag: str | None) -> str:
        tags = {schema.TAG_RUN_KIND: "train"} | ({schema.TAG_PROCESS: tag} if tag else {})
        return client.create_run("0", tags=tags).info.run_id

    host = schema.host_name()
    others = {
        "another host": running(f"not-{host}:{dead_pid()}:0.00"),
        "a live process": running(process_tag(os.getpid())),
        "no process tag": running(None),
        "a malformed tag": running("garbage"),
    }
    # a pid that now belongs to a live process started later than the one that made the run
    reused = running(f"{host}:{os.getpid()}:1000.00")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert client.get_run(victim).info.status == "RUNNING"  # nothing could end it

    with RunSession("train", run_name="next"):
        pass
    for run_id in (victim, reused):
        run = client.get_run(run_id)
        assert run.info.status == "FAILED" and run.data.tags[schema.TAG_ERROR] == STALE_REASON
    for what, run_id in others.items():
        assert client.get_run(run_id).info.status == "RUNNING", what
    assert close_stale_runs() == []  # done once


def _stale_run_spooled(tracking: str, folder=None) -> str:
    """The id of a RUNNING run whose process is gone, its spool entry (to be completed FINISHED
    by upload) written to `folder` (None: the default spool folder)."""
    from common.spool import write_entry

    client = mlflow.tracking.MlflowClient()
    tag = f"{schema.host_name()}:{dead_pid()}:0.00"
    run_id = client.create_run("0", tags={schema.TAG_PROCESS: tag}).info.run_id
    write_entry(
        "cut",
        record=asdict(RunRecord("train", run_name="cut")),
        unsent=None,
        run_id=run_id,
        experiment_id="0",
        experiment=None,
        parent_local_id=None,
        parent_run_id=None,
        status="FINISHED",
        tracking_uri=tracking,
        **({} if folder is None else {"folder": folder}),
    )
    return run_id


def test_stale_run_that_the_spool_will_complete_is_left_to_upload(tracking):
    """A run cut off by an outage and spooled (its id in the spool entry) belongs to upload, which
    completes it FINISHED: the stale sweep must not fail it first."""
    run_id = _stale_run_spooled(tracking)
    assert close_stale_runs() == []
    assert mlflow.tracking.MlflowClient().get_run(run_id).info.status == "RUNNING"


def test_a_run_spooled_into_another_folder_is_left_to_upload_too(tracking, tmp_path):
    """Issue 32: a run spooled to a folder other than the default (ROOFLINE_SPOOL_DIR, or the
    ./roofline-spool fallback) was marked FAILED ("process is gone") by the next upload from the
    default folder while its entry was safe there. Every folder spooled into is remembered."""
    run_id = _stale_run_spooled(tracking, tmp_path / "elsewhere")
    assert close_stale_runs() == []  # the default folder (tracking's) holds nothing
    assert mlflow.tracking.MlflowClient().get_run(run_id).info.status == "RUNNING"
