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
def tracking_postgres(request, tmp_path, monkeypatch):
    """The PostgreSQL database ROOFLINE_TEST_POSTGRES_URI names as the tracking store, read and
    written directly (no server); shared by the session's tests, so each makes its own experiment."""
    import mlflow

    uri = request.getfixturevalue("postgres_uri")
    _point_at(uri, tmp_path, monkeypatch)
    yield uri
    mlflow.set_tracking_uri(None)


@pytest.fixture(scope="session")
def postgres_uri(tmp_path_factory) -> str:
    """ROOFLINE_TEST_POSTGRES_URI with MLflow's tables in it, made once for every test process.

    `pytest -n N` (make test) runs N sessions against the one database: the first to take the
    lock creates the tables, the others find them (two creating them at once collide).
    """
    import fcntl

    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    uri = os.environ.get("ROOFLINE_TEST_POSTGRES_URI")
    if not uri:
        pytest.skip(
            "set ROOFLINE_TEST_POSTGRES_URI=postgresql://user:pass@host/db to test a PostgreSQL backend"
        )
    # under xdist the base temp is pytest-N/popen-gwK: its parent is shared by the workers
    lock = tmp_path_factory.getbasetemp().parent / "postgres-schema.lock"
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        SqlAlchemyStore(
            uri, str(tmp_path_factory.mktemp("postgres-artifacts"))
        ).search_experiments()
    return uri


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
        backend = request.getfixturevalue("postgres_uri")
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


# The files that take longest (make test's --durations), dispatched first: `make test` hands
# whole files to its two processes in collection order, and one of these started last would run
# on alone while the other process idles.
SLOW_FILES_FIRST = (
    "test_distributed.py",
    "test_sweep.py",
    "test_mlproject.py",
    "test_train.py",
    "test_complexity.py",
    "test_ui_browser.py",
    "test_gpu_check.py",
    "test_breakdown.py",
)


def _slow_first(item) -> int:
    name = item.path.name
    return SLOW_FILES_FIRST.index(name) if name in SLOW_FILES_FIRST else len(SLOW_FILES_FIRST)


def pytest_collection_modifyitems(config, items):
    items.sort(key=_slow_first)  # stable: a file's tests keep their order and stay together
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
