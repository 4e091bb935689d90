"""Issue 32, writes where none belong: MLflow's tables inside an sqlite file that is not a store,
an --out that is a planted link."""

from __future__ import annotations

import sqlite3

import pytest

from analysis import app
from common import upload
from tests.helpers import use_uri


def _someone_elses_db(path) -> None:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE customers (name TEXT, card TEXT)")
    con.execute("INSERT INTO customers VALUES ('ann', '4111')")
    con.commit()
    con.close()


def _tables(path) -> set[str]:
    con = sqlite3.connect(path)
    try:
        return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        con.close()


@pytest.mark.parametrize("command", ["analysis", "upload"])
def test_a_sqlite_file_that_is_not_mlflow_gets_no_tables(
    tracking, monkeypatch, tmp_path, capsys, command
):
    """main: analysis and upload created MLflow's 66 tables inside it."""
    db = tmp_path / "shop.db"
    _someone_elses_db(db)
    use_uri(monkeypatch, f"sqlite:///{db}")
    if command == "analysis":
        code = app.cli(["--out", str(tmp_path / "o")])
    else:  # an existing spool folder: a missing one is refused first (its own test)
        (tmp_path / "spool").mkdir()
        code = upload.main(["--spool-dir", str(tmp_path / "spool")])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1] == (
        f"error: MLFLOW_TRACKING_URI 'sqlite:///{db}' is an sqlite database that is not an MLflow "
        "store (its tables: customers); nothing was written to it: point MLFLOW_TRACKING_URI at an "
        "MLflow store or a new file"
    )
    assert _tables(db) == {"customers"}


@pytest.mark.parametrize("name", ["summary.csv", "figures"])
def test_out_with_a_planted_link_is_refused_and_its_target_kept(tracking, tmp_path, capsys, name):
    """main: `--out` followed a planted link (out/summary.csv -> a file of the user's) and
    overwrote its target."""
    out, target = tmp_path / "o", tmp_path / "precious.txt"
    out.mkdir()
    target.write_text("keep me\n")
    (out / name).symlink_to(target)
    assert app.cli(["--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == (
        f"error: --out {out} holds a link {out / name} -> {target}: analysis writes only its own "
        "files there and never through a link (it would overwrite the link's target); remove the "
        "link or pass another --out"
    )
    assert target.read_text() == "keep me\n"


def test_a_read_only_artifact_folder_is_not_called_a_read_only_store(tracking):
    """Issue 32: main said "the tracking store ... is read-only" for an artifact folder on a
    read-only file system (the sqlite store itself was writable)."""
    import errno

    from common.server import store_problem

    path = "/data/mlruns/1/abc/artifacts/timing/step_times.csv"
    err = OSError(errno.EROFS, "Read-only file system", path)
    line = store_problem(err)
    assert line.startswith(f"the artifact folder of {tracking} cannot be written (")
    assert f"make {path} writable" in line and "is read-only" not in line
    db = OSError(errno.EROFS, "Read-only file system", tracking[len("sqlite:///") :])
    assert "is read-only" in store_problem(db)  # the database itself still is the store


def test_the_system_metrics_monitor_warns_in_one_line(capfd):
    """Issue 32: on a full disk MLflow's system-metrics monitor printed its whole SQL INSERT with
    every parameter."""
    import logging

    import common.tracking  # noqa: F401 - installs the filter
    import mlflow  # noqa: F401 - and MLflow its handler

    logging.getLogger("mlflow.system_metrics.system_metrics_monitor").warning(
        "Failed to log system metrics: (sqlite3.OperationalError) database or disk is full\n"
        "[SQL: INSERT INTO metrics (key, value) VALUES (?, ?)]\n[parameters: ('cpu', 1.0)]"
    )
    err = [ln for ln in capfd.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "database or disk is full" in err[0] and "INSERT" not in err[0]
