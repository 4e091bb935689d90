"""A tracking store analysis cannot open: one line saying what to do, no traceback, no --out made.

Before: `MLFLOW_TRACKING_URI=file://...` (a folder store, which MLflow 3.17 refuses: maintenance
mode) ended `python -m analysis` in MLflow's traceback and left an empty --out, while train, import
and peaks said one line; a truncated sqlite store ended it in `sqlite3.DatabaseError: database disk
image is malformed` and SQLAlchemy's traceback.
"""

from __future__ import annotations

import shutil

import pytest

from analysis import app
from tests.helpers import use_uri


def one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err and "sqlalche.me" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("track", [[], ["--no-track"]])
def test_a_folder_store_is_one_line_and_no_out(tracking, tmp_path, monkeypatch, capsys, track):
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    folder = tmp_path / "mlruns"
    folder.mkdir()
    use_uri(monkeypatch, f"file://{folder}")
    assert app.cli([*track, "--out", str(tmp_path / "o")]) == 1
    assert one_line(capsys) == (
        f"error: cannot use the tracking store file://{folder} is a folder store, which this "
        "MLflow keeps in maintenance mode: copy its runs into a database with `mlflow "
        "migrate-filestore` and point MLFLOW_TRACKING_URI at it, or set "
        "MLFLOW_ALLOW_FILE_STORE=true to use the folder as it is"
    )
    assert not (tmp_path / "o").exists()


def test_a_truncated_sqlite_store_is_one_line_and_no_out(
    tracking, template_db, tmp_path, monkeypatch, capsys
):
    db = tmp_path / "cut.db"
    shutil.copyfile(template_db, db)
    with open(db, "r+b") as fh:
        fh.truncate(db.stat().st_size // 2)
    use_uri(monkeypatch, f"sqlite:///{db}")
    assert app.cli(["--out", str(tmp_path / "o")]) == 1
    assert one_line(capsys) == (
        f"error: cannot use the tracking store sqlite:///{db} is not a readable sqlite database "
        "(DatabaseError: (sqlite3.DatabaseError) database disk image is malformed): move the "
        "file away or point MLFLOW_TRACKING_URI at another one"
    )
    assert not (tmp_path / "o").exists()
