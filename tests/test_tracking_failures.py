"""common.tracking, common.spool and common.upload when things go wrong: stores that fail or are
not what they should be, spools that cannot be written or hold a corrupt entry, credentials in the
tracking URI, uploads run twice at once or killed mid-way. Nothing measured is lost, nothing is sent
twice, and the user reads one line saying what to do, never a traceback."""

from __future__ import annotations

import json
import os
import uuid
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest
import sqlalchemy

from common import schema
from common.errors import BenchError
from common.spool import entry_lock, spooled_runs
from common.tracking import RESCUE_DIR, RunSession
from common.upload import main as upload_main
from common.upload import upload_spooled
from tests.conftest import ROOT


def _store():
    return mlflow.tracking.MlflowClient()._tracking_client.store


def _query_only(dbapi_connection, _record):
    dbapi_connection.execute("PRAGMA query_only = ON")


def make_sqlite_read_only() -> None:
    """Every later connection to the test's sqlite store refuses writes, as a read-only file does
    ("attempt to write a readonly database"); works as root too, where file modes do not."""
    store = _store()
    sqlalchemy.event.listen(store.engine, "connect", _query_only)
    store.engine.dispose()


def make_sqlite_writable() -> None:
    store = _store()
    sqlalchemy.event.remove(store.engine, "connect", _query_only)
    store.engine.dispose()


def go_offline(monkeypatch, uri: str = "http://127.0.0.1:9") -> None:  # nothing listens on port 9
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    mlflow.set_tracking_uri(uri)


def come_back(monkeypatch, uri: str) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    mlflow.set_tracking_uri(uri)


def record_a_run(session: RunSession) -> None:
    session.log_params({"model": "resnet18"})
    session.flush()
    session.log_metrics({"throughput_samples_per_s": 12.5})
    session.log_series("step_time_s", [0.5, 0.25])
    session.log_text("timing/step_times.csv", "step,step_time_s\n0,0.5\n1,0.25\n")


# ------------------------------------------------------------------ stores that fail mid-run
def test_sqlite_read_only_mid_run_keeps_the_run_in_the_spool_then_upload_completes_it(
    tracking, capfd
):
    client = mlflow.tracking.MlflowClient()
    with RunSession("train", run_name="ro", experiment="exp-ro") as s:
        s.log_params({"model": "resnet18"})
        s.flush()
        make_sqlite_read_only()
        s.log_metrics({"throughput_samples_per_s": 12.5})
        s.log_series("step_time_s", [0.5, 0.25])
        s.log_text("timing/step_times.csv", "step,step_time_s\n")
    err = capfd.readouterr().err
    assert "Traceback" not in err and "sqlalche.me" not in err
    (warning,) = [line for line in err.splitlines() if line.startswith("warning:")]
    assert f"could not record the run in the tracking store {tracking} is read-only" in warning
    assert "python -m common.upload" in warning
    assert s.offline and s.spool_path.exists()
    entry = json.loads(s.spool_path.read_text())
    assert entry["run_id"] == s.run_id and entry["status"] == "FINISHED"
    # the rate and, beside it, the rate as the pages print it (common.ui.SHOWN)
    assert entry["unsent"]["metrics"] == {"throughput_samples_per_s": 12.5, "samples_per_s": 12.5}

    make_sqlite_writable()
    assert upload_spooled() == (1, 0)
    run = client.get_run(s.run_id)
    assert run.info.status == "FINISHED" and run.data.metrics["throughput_samples_per_s"] == 12.5
    assert len(client.get_metric_history(s.run_id, "step_time_s")) == 2


def test_artifact_store_that_cannot_be_written_keeps_the_run_in_the_spool(tracking, tmp_path):
    blocker = tmp_path / "blocker"  # a file where the artifact folder should be: mkdir fails
    blocker.write_text("")
    client = mlflow.tracking.MlflowClient()
    exp = client.create_experiment("exp-art", artifact_location=str(blocker / "artifacts"))
    with RunSession("train", run_name="art", experiment="exp-art") as s:
        record_a_run(s)
    assert s.offline
    run = client.get_run(s.run_id)
    assert run.info.experiment_id == exp and run.info.status == "RUNNING"
    assert run.data.metrics["throughput_samples_per_s"] == 12.5  # sent before the artifact failed
    assert list(json.loads(s.spool_path.read_text())["unsent"]["texts"]) == [
        "timing/step_times.csv"
    ]

    blocker.unlink()
    assert upload_spooled() == (1, 0)
    assert client.get_run(s.run_id).info.status == "FINISHED"
    assert [f.path for f in client.list_artifacts(s.run_id, "timing")] == ["timing/step_times.csv"]


def test_spool_that_cannot_be_written_either_keeps_the_run_in_the_working_folder(
    tracking, tmp_path, monkeypatch, capsys
):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("ROOFLINE_SPOOL_DIR", str(blocker / "spool"))
    go_offline(monkeypatch)
    with RunSession("train", run_name="rescued", experiment="exp-rescue") as s:
        record_a_run(s)
    rescue = Path(RESCUE_DIR).resolve()
    assert s.spool_path == rescue / s.local_id / "run.json" and s.spool_path.exists()
    err = capsys.readouterr().err
    assert f"could not write the spool folder {blocker / 'spool'}" in err
    assert f"run kept in {s.spool_path}" in err and f"--spool-dir {rescue}" in err

    come_back(monkeypatch, tracking)
    assert upload_main(["--spool-dir", str(rescue)]) == 0
    (run,) = mlflow.search_runs(experiment_names=["exp-rescue"], output_format="list")
    assert run.info.status == "FINISHED" and run.data.metrics["throughput_samples_per_s"] == 12.5


def test_corrupt_spool_entry_is_skipped_with_a_line_naming_it_and_the_rest_is_sent(
    tracking, monkeypatch, capsys
):
    go_offline(monkeypatch)
    with RunSession("train", run_name="good", experiment="exp-corrupt") as s:
        record_a_run(s)
    spool = s.spool_path.parent.parent
    bad = [spool / "truncated" / "run.json", spool / "not-an-entry" / "run.json"]
    for path in bad:
        path.parent.mkdir()
    bad[0].write_text(s.spool_path.read_text()[:100])  # cut mid-way
    bad[1].write_text("[1, 2]")
    capsys.readouterr()

    assert upload_main(["--list"]) == 0
    out, err = capsys.readouterr()
    assert "1 spooled run(s)" in out and s.local_id in out
    for path in bad:
        assert f"warning: skipped spool entry {path}: it cannot be read" in err

    come_back(monkeypatch, tracking)
    # the good one is sent; the unreadable ones stay, and the upload says so (exit 1)
    assert upload_main([]) == 1
    out, err = capsys.readouterr()
    assert "uploaded 1 run(s); 0 left" in out and "2 spool entries cannot be read" in out
    assert "Traceback" not in err
    assert all(f"skipped spool entry {path}" in err for path in bad)
    (run,) = mlflow.search_runs(experiment_names=["exp-corrupt"], output_format="list")
    assert run.info.status == "FINISHED"


# ------------------------------------------------------------------ one line, not a traceback
def test_read_only_sqlite_store_is_one_line_saying_what_to_do(tracking, capfd):
    make_sqlite_read_only()
    with pytest.raises(BenchError) as err:
        with RunSession("train", run_name="never"):
            pass
    message = str(err.value)
    assert message.startswith(f"cannot use the tracking store {tracking} is read-only")
    assert "make the file and its folder writable" in message and "sqlalche.me" not in message
    assert "Traceback" not in capfd.readouterr().err


def test_corrupt_sqlite_store_is_one_line_saying_what_to_do(tmp_path, monkeypatch, capfd):
    db = tmp_path / "corrupt.db"
    db.write_bytes(os.urandom(8192))
    uri = f"sqlite:///{db}"
    monkeypatch.setenv("ROOFLINE_SPOOL_DIR", str(tmp_path / "spool"))
    come_back(monkeypatch, uri)
    try:
        with pytest.raises(BenchError) as err:
            with RunSession("train"):
                pass
    finally:
        mlflow.set_tracking_uri(None)
    message = str(err.value)
    assert f"the tracking store {uri} is not a readable sqlite database" in message
    assert "sqlalche.me" not in message and "Traceback" not in capfd.readouterr().err


def test_http_service_that_is_not_mlflow_is_one_line(tracking, not_mlflow, monkeypatch):
    go_offline(monkeypatch, not_mlflow)
    with pytest.raises(BenchError) as err:
        with RunSession("train"):
            pass
    message = str(err.value)
    assert message.startswith(f"cannot use {not_mlflow} answered HTTP 501 to the MLflow API: ")
    assert message.endswith(
        "it is not an MLflow tracking server; check MLFLOW_TRACKING_URI (scheme, host, port and path)"
    )


def test_upload_to_a_server_that_is_down_fails_on_the_health_check(tracking, monkeypatch, capsys):
    go_offline(monkeypatch)
    with RunSession("train", run_name="waiting") as s:
        record_a_run(s)
    capsys.readouterr()
    calls = []
    monkeypatch.setattr(
        mlflow.tracking.MlflowClient, "__init__", lambda *a, **k: calls.append(a) or None
    )
    assert upload_main([]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "error: http://127.0.0.1:9 does not answer (ConnectionError): 1 run(s) stay in "
        f"{s.spool_path.parent.parent}; run this command again when the server is back"
    ]
    assert calls == []  # no MLflow call, so none of its minutes of retries
    assert s.spool_path.exists()


def test_analysis_against_a_server_that_is_down_fails_on_the_health_check(
    tracking, monkeypatch, tmp_path, capsys
):
    """analysis read through MLflow's retry schedule (249 s) before it said the server was down."""
    go_offline(monkeypatch)

    def no_mlflow(*a, **k):
        raise AssertionError("MLflow was called while the server was known to be down")

    monkeypatch.setattr("mlflow.utils.rest_utils.http_request", no_mlflow)  # every MLflow request
    from analysis import app

    assert app.cli(["--no-track", "--out", str(tmp_path / "o")]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: http://127.0.0.1:9 does not answer (ConnectionError): start it, or point "
        "MLFLOW_TRACKING_URI at a store that works"
    ]


# ------------------------------------------------------------------ credentials
def test_credentials_in_the_tracking_uri_are_never_printed_or_stored(tracking, monkeypatch, capsys):
    from common.ui import ui_hint

    secret = "http://alice:s3cr3t-pw@127.0.0.1:9"
    go_offline(monkeypatch, secret)
    assert ui_hint("r1", "0") == (
        "see http://***@127.0.0.1:9/#/experiments/0/runs/r1?workflowType=machine_learning"
    )
    with RunSession("train", run_name="leak", experiment="exp-leak") as s:
        record_a_run(s)
        s.fail(f"could not reach {secret}/api")  # an error naming the URI
    assert upload_main(["--list"]) == 0
    out, err = capsys.readouterr()
    assert "s3cr3t" not in out + err and "http://***@127.0.0.1:9" in out
    stored = "".join(p.read_text() for p in s.spool_path.parent.rglob("*") if p.is_file())
    assert "s3cr3t" not in stored
    assert s.record.tags[schema.TAG_ERROR] == "could not reach http://***@127.0.0.1:9/api"


def test_credentials_are_not_printed_by_mlflow_either(on_server, monkeypatch, capfd):
    """MLflow prints "View run ... at: <URI>" when a run on a server ends, password included."""
    secret = on_server.url.replace("http://", "http://alice:s3cr3t-pw@")
    come_back(monkeypatch, secret)
    with RunSession("train", run_name="leak") as s:
        record_a_run(s)
    out, err = capfd.readouterr()
    assert "s3cr3t" not in out + err
    run = mlflow.tracking.MlflowClient().get_run(s.run_id)
    assert run.info.status == "FINISHED"
    assert "s3cr3t" not in json.dumps(run.data.tags) + json.dumps(run.data.params)


@pytest.mark.server
def test_analysis_writes_no_credentials_into_its_report_or_its_cache(
    on_server, monkeypatch, tmp_path, capfd
):
    """report.md ("Generated ... from `<URI>`") and the fetch cache held the password."""
    from analysis import app
    from tests.test_analysis_end_to_end import L4, log_train, vendor_stub

    come_back(monkeypatch, on_server.url.replace("http://", "http://alice:s3cr3t-pw@"))
    exp = f"leak-{os.getpid()}-{tmp_path.name}"
    log_train("l4", L4, 64, "fp32", thr=700, thr_sd=20, flops_step=1.5e12, median_s=0.1,
              intensity=60, exp=exp)  # fmt: skip
    monkeypatch.setattr("roofline.vendor.load_vendor_lookup", lambda *_: vendor_stub)
    out = tmp_path / "report"
    assert app.main(["--experiment", exp, "--out", str(out), "--jobs", "1"]) == 0
    written = {
        p: p.read_bytes()
        for folder in (out, tmp_path / "cache")
        for p in folder.rglob("*")
        if p.is_file()
    }
    assert any(p.suffix == ".json" for p in written)  # the cache was written
    assert not [p for p, data in written.items() if b"s3cr3t" in data]
    assert "http://***@127.0.0.1" in (out / "report.md").read_text()
    printed = "".join(capfd.readouterr())
    assert "s3cr3t" not in printed


# ------------------------------------------------------------------ resumed runs
def test_resumed_run_that_finishes_loses_the_error_of_the_interrupted_attempt(tracking):
    with pytest.raises(KeyboardInterrupt):
        with RunSession("sweep", run_name="p") as first:
            raise KeyboardInterrupt
    client = mlflow.tracking.MlflowClient()
    assert client.get_run(first.run_id).data.tags[schema.TAG_ERROR] == "interrupted by the user"
    with RunSession("sweep", run_id=first.run_id):
        pass
    run = client.get_run(first.run_id)
    assert run.info.status == "FINISHED" and schema.TAG_ERROR not in run.data.tags


# ------------------------------------------------------------------ no duplicates
def spool_a_sweep(monkeypatch, children: int = 4) -> str:
    """Spool a sweep of `children` runs in a new experiment (a PostgreSQL store is shared by the
    whole session); returns the experiment's name."""
    go_offline(monkeypatch)
    exp = f"exp-dup-{uuid.uuid4().hex[:8]}"
    with RunSession("sweep", run_name="p", experiment=exp) as parent:
        parent.log_params({"sweep_repeats": 1})
        for i in range(children):
            with RunSession("train", run_name=f"c{i}", experiment=exp, parent=parent) as c:
                record_a_run(c)
    return exp


def runs_of(experiment: str) -> list:
    return mlflow.search_runs(experiment_names=[experiment], output_format="list")


def test_upload_skips_an_entry_another_upload_holds(tracking, monkeypatch):
    exp = spool_a_sweep(monkeypatch, children=1)
    come_back(monkeypatch, tracking)
    parent = next(e for e in spooled_runs() if e["record"]["run_kind"] == "sweep")
    with entry_lock(parent) as held:
        assert held is not None
        # the parent is being sent "elsewhere", its child waits for it: none left for this upload
        assert upload_spooled() == (0, 0)
        assert len(spooled_runs()) == 2
    assert runs_of(exp) == []
    assert upload_spooled() == (2, 0)


def test_upload_killed_between_creating_a_run_and_saving_its_id_reuses_that_run(
    tracking, monkeypatch
):
    import common.upload as up

    exp = spool_a_sweep(monkeypatch, children=0)
    come_back(monkeypatch, tracking)
    with monkeypatch.context() as m:

        def killed(*a, **k):
            raise KeyboardInterrupt  # the upload process dies here

        m.setattr(up, "save_entry", killed)
        with pytest.raises(KeyboardInterrupt):
            upload_spooled()
    (made,) = runs_of(exp)
    assert made.info.status == "RUNNING" and not made.data.params
    assert upload_spooled() == (1, 0)
    (run,) = runs_of(exp)
    assert run.info.run_id == made.info.run_id and run.info.status == "FINISHED"
    assert run.data.params == {"sweep_repeats": "1"}


def test_two_uploads_at_once_send_every_run_once(on_server, monkeypatch, tmp_path):
    exp = spool_a_sweep(monkeypatch, children=4)
    come_back(monkeypatch, on_server.url)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "common.upload"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    # runs one upload found the other sending are not "left": both succeed, nothing stays
    assert [p.returncode for p in procs] == [0, 0], outputs
    assert spooled_runs() == []
    runs = runs_of(exp)
    kinds = sorted(r.data.tags[schema.TAG_RUN_KIND] for r in runs)
    assert kinds == ["sweep"] + ["train"] * 4, outputs
    parent = next(r for r in runs if r.data.tags[schema.TAG_RUN_KIND] == "sweep")
    assert all(
        r.data.tags.get("mlflow.parentRunId") == parent.info.run_id
        for r in runs
        if r.data.tags[schema.TAG_RUN_KIND] == "train"
    )
    assert {r.info.status for r in runs} == {"FINISHED"}
