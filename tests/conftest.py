"""Shared test fixtures: temporary sqlite tracking stores, the recorded ncu fixtures."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Byte-exact copies of ../shared/fixtures/ncu (provenance in SOURCES.md there and here).
NCU_FIXTURES = ROOT / "tests" / "data" / "ncu"

os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@pytest.fixture
def ncu_dir() -> Path:
    return NCU_FIXTURES


@pytest.fixture(scope="session")
def template_db(tmp_path_factory) -> Path:
    """An empty sqlite store with MLflow's schema already created, once per test session."""
    import mlflow

    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    folder = tmp_path_factory.mktemp("mlflow-template")
    path = folder / "mlflow.db"
    # the Default experiment's artifact location is stored in the database: keep it out of the repo
    SqlAlchemyStore(f"sqlite:///{path}", str(folder / "artifacts")).search_experiments()
    mlflow.tracking.MlflowClient(tracking_uri=f"sqlite:///{path}").search_experiments()
    return path


@pytest.fixture
def tracking(template_db, tmp_path, monkeypatch):
    """A fresh sqlite tracking store for one test; returns its URI. Also isolates the spool dir.

    Made from a copy of `template_db`: creating MLflow's schema takes ~5 s here, copying ~0.2 s.
    The test runs in `tmp_path`, where MLflow puts the artifacts of experiments it creates
    (`./mlruns`), so no test writes into the working tree.
    """
    import shutil

    import mlflow

    db = tmp_path / "mlflow.db"
    shutil.copyfile(template_db, db)
    uri = f"sqlite:///{db}"
    _point_at(uri, tmp_path, monkeypatch)
    yield uri
    mlflow.set_tracking_uri(None)


@pytest.fixture
def tracking_postgres(tmp_path, monkeypatch):
    """The PostgreSQL database ROOFLINE_TEST_POSTGRES_URI names as the tracking store, read and
    written directly (no server); shared by the session's tests, so each makes its own experiment."""
    import mlflow

    uri = os.environ.get("ROOFLINE_TEST_POSTGRES_URI")
    if not uri:
        pytest.skip("set ROOFLINE_TEST_POSTGRES_URI=postgresql://user:pass@host/db to test it")
    _point_at(uri, tmp_path, monkeypatch)
    yield uri
    mlflow.set_tracking_uri(None)


def _point_at(uri: str, tmp_path: Path, monkeypatch) -> None:
    """MLflow at `uri`, run in `tmp_path`, with this test's own spool and run cache."""
    import mlflow

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("ROOFLINE_SPOOL_DIR", str(tmp_path / "spool"))
    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(tmp_path / "cache"))  # analysis's run cache
    for name in ("MLFLOW_RUN_ID", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_EXPERIMENT_ID"):
        monkeypatch.delenv(name, raising=False)
    mlflow.set_tracking_uri(uri)


SERVER_BACKENDS = ["sqlite", "postgresql"]


@pytest.fixture(scope="session", params=SERVER_BACKENDS)
def mlflow_server(request, tmp_path_factory):
    """One real `mlflow server` per backend for the whole session (starting one takes ~20-40 s here).

    postgresql runs when ROOFLINE_TEST_POSTGRES_URI names a database (.ci/run sets one up).
    """
    from tests.mlflow_server import MlflowServer

    root = tmp_path_factory.mktemp(f"server-{request.param}")
    if request.param == "postgresql":
        backend = os.environ.get("ROOFLINE_TEST_POSTGRES_URI")
        if not backend:
            pytest.skip(
                "set ROOFLINE_TEST_POSTGRES_URI=postgresql://user:pass@host/db to test a PostgreSQL backend"
            )
    else:
        backend = f"sqlite:///{root / 'server.db'}"
    server = MlflowServer(backend, root / "artifacts").start()
    yield server
    server.stop()


@pytest.fixture
def on_server(mlflow_server, tmp_path, monkeypatch):
    """Point this test's MLflow client at the shared server; returns the server."""
    import mlflow

    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server.url)
    monkeypatch.setenv("ROOFLINE_SPOOL_DIR", str(tmp_path / "spool"))
    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(tmp_path / "cache"))  # analysis's run cache
    for name in ("MLFLOW_RUN_ID", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_EXPERIMENT_ID"):
        monkeypatch.delenv(name, raising=False)
    mlflow.set_tracking_uri(mlflow_server.url)
    yield mlflow_server
    mlflow.set_tracking_uri(None)


def gpu_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001
        return False


def pytest_collection_modifyitems(config, items):
    if gpu_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def not_mlflow(tmp_path):
    """An HTTP server that is not MLflow (python's http.server), on a free port."""
    import http.server
    import threading

    handler = lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(tmp_path))  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
