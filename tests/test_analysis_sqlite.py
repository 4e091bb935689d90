"""SqliteReader (analysis/fetch/sql.py): an sqlite store read with sqlite3, MLflow not imported.

The reference is MLflow's own search (tests/test_analysis_fleet.py's `truth`): for every filter the
reader compiles it returns exactly that, the cache follows a fleet through it as through SqlReader,
Source hands other filters to MLflow's compiler and falls back when a query fails, and a whole
analysis of an sqlite store that only reads the cache never imports MLflow.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import mlflow
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

from analysis import fetch
from analysis.fetch.sql import SqliteReader, SqlReader, parse_filter
from tests.test_analysis_fleet import (
    TRAIN,
    check_cache_follows_a_fleet,
    fleet_of_kinds,
    fresh_experiment,
    new_run,
    records,
    truth,
)

ROOT = Path(__file__).resolve().parents[1]


def lite_reader() -> SqliteReader:
    reader = SqliteReader.for_uri(mlflow.get_tracking_uri())
    assert reader is not None, "an sqlite tracking URI is read with sqlite3"
    return reader


def test_the_filters_it_compiles_and_those_it_leaves_to_mlflow():
    assert parse_filter("tags.run_kind = 'train'") == [("tags", "run_kind", "train")]
    assert parse_filter(
        " tags.run_kind='complexity'  and attributes.status = 'FINISHED' AND params.model = 'a b'"
    ) == [("tags", "run_kind", "complexity"), ("attributes", "status", "FINISHED"),
          ("params", "model", "a b")]  # fmt: skip
    assert parse_filter("tags.env_label = 'x AND y'") == [("tags", "env_label", "x AND y")]
    for other in [
        "params.model LIKE 'res%'",
        "metrics.throughput_samples_per_s > 5",
        "tags.run_kind != 'analysis'",
        "attributes.start_time = '1'",
        "tags.a = 'x' OR tags.b = 'y'",
        'tags.a = "x"',
        "tags.a = 'it''s'",
        "tags.`my key` = 'x'",
        "tags.mlflow.runName = 'x'",
        "tags.a = 'x' AND",
        "tags.a = 'x'tags.b = 'y'",
    ]:
        assert parse_filter(other) is None, other
        assert not SqliteReader.understands(other)
    assert SqliteReader.understands("") and SqliteReader.understands(TRAIN)


def test_it_reads_what_mlflow_reads(tracking):
    assert SqliteReader.for_uri(tracking) is not None  # the file: common.server.sqlite_file
    assert SqliteReader.for_uri(tracking + "?timeout=5") is None  # query options: MLflow's engine
    client = MlflowClient()
    exp, t0, a = fleet_of_kinds(client)
    gone = new_run(client, exp, "train", "deleted", start=t0 + 7)
    client.delete_run(gone)
    other = fresh_experiment(client)
    new_run(client, other, "train", "elsewhere", start=t0 + 8)
    reader = lite_reader()
    for f in [
        "",
        TRAIN,
        "tags.run_kind = 'train' AND tags.env_label = 'l4'",
        "tags.run_kind = 'train' AND attributes.status = 'FAILED'",
        "params.model = 'vgg16'",
        "tags.run_kind = 'peaks'",
        "tags.run_kind = 'nothing'",
    ]:
        for cap in (None, 2):
            assert records(reader.search([exp], f, cap)) == truth([exp], f, cap), (f, cap)
    both = records(reader.search([exp, other], TRAIN, None))
    assert both == truth([exp, other], TRAIN) and len(both) == 5
    got = records(reader.search([exp], TRAIN, None))
    first = next(r for r in got if r["run_id"] == a)
    assert first["params.batch_size"] == "32" and "params.lr" not in first
    assert gone not in {r["run_id"] for r in got}
    full = SqlReader.for_current()
    steps = [(0.3, 5, 2), (0.1, 1, 0), (float("nan"), 2, 1), (0.25, 9, 2)]
    client.log_batch(a, metrics=[Metric("step_time_s", v, t0 + ts, i) for v, ts, i in steps])
    got_series = reader.series([a, gone], "step_time_s")
    assert [str(v) for v in got_series[a]] == ["0.1", "nan", "0.3", "0.25"]
    assert got_series[gone] == [] and str(got_series) == str(full.series([a, gone], "step_time_s"))
    name = client.get_experiment(exp).name
    assert reader.lookup_experiments([name]) == [exp]
    assert reader.lookup_experiments([name, "no such experiment"]) is None
    assert set(reader.lookup_experiments([])) >= {exp, other}


def test_the_cache_follows_a_fleet_through_it(tracking):
    check_cache_follows_a_fleet(lite_reader, "sql")


def test_source_reads_its_own_filters_with_sqlite3_and_a_users_with_mlflow(tracking, monkeypatch):
    client = MlflowClient()
    exp = fresh_experiment(client)
    new_run(client, exp, "train", "a", params={"model": "resnet18"})
    source = fetch.Source("off")
    assert isinstance(source.reader, SqliteReader) and source._full is None
    assert records(source.search([exp], TRAIN, 10)) == truth([exp], TRAIN)
    assert source._full is None  # MLflow's store not made
    users = "params.model LIKE 'res%'"
    assert records(source.search([exp], users, 10)) == truth([exp], users)
    assert isinstance(source._full, SqlReader)


def test_a_failing_query_hands_the_analysis_to_mlflows_store(tracking, monkeypatch, capsys):
    client = MlflowClient()
    exp = fresh_experiment(client)
    new_run(client, exp, "train", "a")

    def renamed(*args, **kwargs):
        raise sqlite3.OperationalError("no such table: runs")

    monkeypatch.setattr(SqliteReader, "_listing", renamed)
    source = fetch.Source("off")
    assert records(source.search([exp], TRAIN, 10)) == truth([exp], TRAIN)
    assert source.lite is None and isinstance(source.reader, SqlReader)
    assert "with sqlite3 failed (OperationalError: no such table: runs)" in capsys.readouterr().err


def test_no_reader_for_a_file_that_is_not_an_mlflow_store(tmp_path):
    assert SqliteReader.for_uri(f"sqlite:///{tmp_path / 'absent.db'}") is None
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE runs (x)").connection.commit()
    assert SqliteReader.for_uri(f"sqlite:///{other}") is None


def two_batch_sizes() -> str:
    """A new experiment with two train runs of one config at batch 8 and 16; its name."""
    client = MlflowClient()
    exp = fresh_experiment(client)
    for b, thr in ((8, 10.0), (16, 18.0)):
        new_run(
            client,
            exp,
            "train",
            f"b{b}",
            tags={"env_label": "l4", "device_name": "NVIDIA L4", "config_key": f"k{b}"},
            params={"model": "resnet18", "batch_size": b, "precision": "fp32"},
            metrics={"throughput_samples_per_s": thr, "achieved_flops_per_s": 1e12 * b,
                     "modeled_intensity_flops_per_byte": 20.0 * b},
        )  # fmt: skip
    return client.get_experiment(exp).name


def test_an_analysis_from_the_cache_imports_neither_mlflow_nor_matplotlib(tracking, tmp_path):
    """The first analysis fills the run and figure caches; the second, in a fresh process, reads
    the store with sqlite3 and copies every figure: neither MLflow nor matplotlib is imported."""
    name = two_batch_sizes()
    script = (
        "import sys\n"
        "from analysis import app\n"
        f"argv = ['--no-track', '--experiment', {name!r}, '--jobs', '1', '--out', sys.argv[1]]\n"
        "res = app.run(app.config_from_args(app.build_parser().parse_args(argv)))\n"
        "print('DRAWN', len(res.drawn_figures), 'OF', sum(p.suffix == '.png' for p in res.files))\n"
        "print('IMPORTED', 'mlflow' in sys.modules, 'matplotlib' in sys.modules)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    outs = []
    for out in ("first", "second"):
        done = subprocess.run(
            [sys.executable, "-c", script, str(tmp_path / out)],
            env=env,
            capture_output=True,
            text=True,
            cwd=tmp_path,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        outs.append(done.stdout)
    n = int(outs[0].split("DRAWN ")[1].split()[0])
    assert n >= 4 and f"DRAWN {n} OF {n}" in outs[0]
    assert f"DRAWN 0 OF {n}" in outs[1]
    assert "IMPORTED False False" in outs[1]
    for png in (tmp_path / "first" / "figures").glob("*.png"):
        assert (tmp_path / "second" / "figures" / png.name).read_bytes() == png.read_bytes()
