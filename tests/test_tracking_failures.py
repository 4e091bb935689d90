"""common.tracking, common.spool and common.upload when things go wrong: stores that fail or are
not what they should be, spools that cannot be written or hold a corrupt entry, credentials in the
tracking URI, uploads run twice at once or killed mid-way. Nothing measured is lost, nothing is sent
twice, and the user reads one line saying what to do, never a traceback."""

from __future__ import annotations

import http.server
import os
import threading

import mlflow
import pytest
import sqlalchemy

from common import schema
from common.errors import BenchError
from common.tracking import RunSession
from common.upload import main as upload_main


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


@pytest.fixture
def not_mlflow(tmp_path):
    """An HTTP server that is not MLflow (python's http.server), on a free port."""
    handler = lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(tmp_path))  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


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


# ------------------------------------------------------------------ credentials
def test_credentials_in_the_tracking_uri_are_never_printed_or_stored(tracking, monkeypatch, capsys):
    from common.server import ui_hint

    secret = "http://alice:s3cr3t-pw@127.0.0.1:9"
    go_offline(monkeypatch, secret)
    assert ui_hint("r1", "0") == "see http://***@127.0.0.1:9/#/experiments/0/runs/r1"
    with RunSession("train", run_name="leak", experiment="exp-leak") as s:
        record_a_run(s)
        s.fail(f"could not reach {secret}/api")  # an error naming the URI
    assert upload_main(["--list"]) == 0
    out, err = capsys.readouterr()
    assert "s3cr3t" not in out + err and "http://***@127.0.0.1:9" in out
    stored = "".join(p.read_text() for p in s.spool_path.parent.rglob("*") if p.is_file())
    assert "s3cr3t" not in stored
    assert s.record.tags[schema.TAG_ERROR] == "could not reach http://***@127.0.0.1:9/api"
