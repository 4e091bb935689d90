"""Runs that should not exist, and messages that misled (issue 25).

On main: analysis against a dead server spooled a FAILED `analysis-all` run; analysis of a sqlite
path that did not exist created a store holding a FAILED run; a usage error (`--env-label "a'b\\"c"`)
left a FAILED analysis run; analysis accepted a 9,000-character label that train, sweep and peaks
refuse; `--num-classes 100000000` ended "out of memory ... use a smaller --batch"; a tracking URI
`http://[::1` was spooled "to send later" though it can never work; `ftp://` answered about the model
registry.
"""

from __future__ import annotations

import mlflow
import pytest

from analysis import app
from common.spool import spool_dir, spooled_runs
from tests.helpers import TINY, use_uri
from train.__main__ import main as train_main


def no_runs() -> bool:
    return mlflow.search_runs(search_all_experiments=True, output_format="list") == []


def last_error(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.strip().splitlines()[-1]


def test_analysis_against_a_dead_server_keeps_no_run(tracking, monkeypatch, tmp_path, capsys):
    use_uri(monkeypatch, "http://127.0.0.1:9")  # nothing listens on port 9
    assert app.cli(["--out", str(tmp_path / "o")]) == 1
    assert last_error(capsys) == (
        "error: http://127.0.0.1:9 does not answer (ConnectionError): start it, or point "
        "MLFLOW_TRACKING_URI at a store that works"
    )
    assert spooled_runs() == [] and not spool_dir().exists()
    assert not (tmp_path / "o").exists()


def test_analysis_of_a_sqlite_file_that_does_not_exist_makes_no_store(
    tracking, monkeypatch, tmp_path, capsys
):
    db = tmp_path / "elsewhere" / "typo.db"
    use_uri(monkeypatch, f"sqlite:///{db}")
    assert app.cli(["--out", str(tmp_path / "o")]) == 2
    assert last_error(capsys).startswith(f"error: no tracking store at {db} (sqlite:///{db})")
    assert not db.exists() and not db.parent.exists()


@pytest.mark.parametrize(
    "label,says",
    [
        ("a'b\"c", "error: --env-label 'a\\'b\"c' contains both quote characters"),
        ("x" * 9000, "is 9000 characters long: use at most 100"),
    ],
)
def test_an_analysis_usage_error_leaves_no_run(tracking, tmp_path, capsys, label, says):
    assert app.cli(["--out", str(tmp_path / "o"), "--env-label", label]) == 2
    assert says in last_error(capsys)
    assert no_runs()


@pytest.mark.parametrize("experiments", ["typo", "real,typo"])
def test_analysis_of_an_experiment_that_does_not_exist_makes_none(
    tracking, tmp_path, capsys, experiments
):
    """A typo in --experiment: main created the experiment (the analysis run's home) with a FAILED
    analysis run in it, then said "no train runs match (typo)"; or, after a real one, left a FAILED
    run there saying what was wrong with the command line."""
    mlflow.tracking.MlflowClient().create_experiment("real")
    assert app.cli(["--out", str(tmp_path / "o"), "--experiment", experiments]) == 2
    line = last_error(capsys)
    assert line.startswith("error: no experiment named 'typo' on this tracking server; existing: ")
    assert "real" in line
    assert sorted(e.name for e in mlflow.search_experiments()) == ["Default", "real"]
    assert no_runs()


def test_too_many_classes_says_so_before_a_run_exists(tracking, capsys):
    assert train_main([*TINY, "--num-classes", "100000000"]) == 2
    line = last_error(capsys)
    assert line.startswith("error: resnet18 with 100000000 classes has 51.3 G parameters: ")
    assert "--num-classes 100000000 makes it 4,39" in line and "use fewer classes" in line
    assert "smaller --batch" not in line and no_runs()


@pytest.mark.parametrize(
    "uri,says",
    [
        (
            "http://[::1",
            "error: MLFLOW_TRACKING_URI 'http://[::1' is not a valid URI (Invalid IPv6 URL)",
        ),
        (
            "ftp://example.com/runs",
            "error: MLFLOW_TRACKING_URI 'ftp://example.com/runs': MLflow keeps no runs at ftp:// URIs",
        ),
    ],
)
def test_a_tracking_uri_that_can_never_work_is_said_and_nothing_is_spooled(
    tracking, monkeypatch, capsys, uri, says
):
    use_uri(monkeypatch, uri)
    assert train_main(TINY) == 2
    line = last_error(capsys)
    assert line.startswith(says) and "model registry" not in line.lower()
    assert spooled_runs() == []


@pytest.mark.parametrize(
    "argv,says",
    [
        (
            ["--peaks-file", "/nonexistent/peaks.json"],
            "error: peaks file /nonexistent/peaks.json does not exist",
        ),
        (
            ["--env-label", "no-such-box"],
            "error: no train runs match (all experiments; env label(s) no-such-box)",
        ),
        (
            ["--filter", "params.model = 'nope'"],
            "error: no train runs match (all experiments; filter",
        ),
    ],
)
def test_an_analysis_that_can_find_nothing_leaves_no_run(tracking, tmp_path, capsys, argv, says):
    """Issue 32: a missing --peaks-file, an env label or a filter matching nothing each left a FAILED
    analysis run (while `--experiment typo` did not)."""
    assert app.cli([*argv, "--out", str(tmp_path / "o")]) == 2
    assert last_error(capsys).startswith(says)
    assert no_runs()


@pytest.mark.parametrize(
    "uri,path",
    [
        ("sqlite:///rel/m.db", "rel/m.db"),  # relative to the working folder
        ("sqlite:////abs/m.db", "/abs/m.db"),
        ("sqlite:///m.db?mode=ro&timeout=5", "m.db"),  # the query is not part of the file
        ("sqlite+pysqlite:///m.db", "m.db"),  # a driver named
        ("sqlite://", None),  # in memory
        ("sqlite:///:memory:", None),
        ("sqlite:///", None),
        ("postgresql://h/db", None),
        ("http://h:5000", None),
        ("runs/folder", None),
    ],
)
def test_a_sqlite_uri_names_the_file_sqlalchemy_opens(uri, path):
    """One reading of an sqlite URI's file for analysis's store check, SqliteReader and the check
    that a database is MLflow's, as SQLAlchemy (which MLflow opens it with) reads it."""
    from sqlalchemy.engine import make_url

    from common.server import sqlite_file

    assert sqlite_file(uri) == path
    if uri.startswith("sqlite"):
        assert make_url(uri).database in (path, None, ":memory:", "")
