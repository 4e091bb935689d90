"""Analysis at a fleet's scale: the two readers, the local cache of runs, the bench's bulk writer.

The reference throughout is MLflow's own search (MlflowClient.search_runs) with the keys analysis
reads (analysis.join.READ_KEYS): each reader must return exactly that, and a search answered from
the cache must equal a fresh search after each kind of change a fleet makes to its runs (a run
finishing, deleted, restored, added), except for the changes docs/analysis.md says the cache
cannot see, which are pinned here too so that a change in what it sees is noticed.
"""

from __future__ import annotations

import math
import time
import uuid

import mlflow
import pandas as pd
import pytest
from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient

from analysis import app, core, fetch, join
from analysis.fetch import rows, segments
from analysis.fetch.api import ApiReader, OVERLAP_MS
from analysis.fetch.sql import SqliteReader, SqlReader
from bench import fleet_store

TRAIN = "tags.run_kind = 'train'"


# ------------------------------------------------------------------------ helpers
def new_run(
    client, exp, kind, name, status="FINISHED", tags=None, params=None, metrics=None, start=None
):
    start = start if start is not None else int(time.time() * 1000)
    r = client.create_run(
        exp, run_name=name, tags={"run_kind": kind, **(tags or {})}, start_time=start
    )
    client.log_batch(
        r.info.run_id,
        metrics=[Metric(k, v, start, 0) for k, v in (metrics or {}).items()],
        params=[Param(k, str(v)) for k, v in (params or {}).items()],
    )
    if status != "RUNNING":
        client.set_terminated(r.info.run_id, status, end_time=start + 1000)
    return r.info.run_id


def truth(exp_ids, filter_string="", max_results=None) -> list[dict]:
    """MLflow's own search, latest first, with only the keys analysis reads."""
    found = MlflowClient().search_runs(exp_ids, filter_string, max_results=max_results or 50000)
    out = []
    for r in found:
        rec = {
            "run_id": r.info.run_id,
            "status": r.info.status,
            "start_time": r.info.start_time,
            "end_time": r.info.end_time,
        }
        for kind, data in (
            ("tags", r.data.tags),
            ("params", r.data.params),
            ("metrics", r.data.metrics),
        ):
            rec.update({f"{kind}.{k}": v for k, v in data.items() if rows.keeps(kind, k)})
        out.append(_clean(rec))
    return out


def records(df: pd.DataFrame) -> list[dict]:
    out = []
    for rec in df.to_dict("records"):
        rec.pop("experiment_id")
        for t in ("start_time", "end_time"):
            rec[t] = None if pd.isna(rec[t]) else int(rec[t])
        out.append(_clean(rec))
    return out


def _clean(rec: dict) -> dict:
    """Drop absent values (NaN in a frame; a NaN metric reads as absent, as in search_runs)."""
    return {
        k: v
        for k, v in rec.items()
        if not (v is None and k not in ("end_time",))
        and not (isinstance(v, float) and math.isnan(v))
    }


def sql_reader():
    reader = SqlReader.for_current()
    assert reader is not None, "a sqlite tracking URI is read with the SQL reader"
    return reader


def api_reader():
    return ApiReader(jobs=3, page=2)  # tiny pages: the tests' handful of runs spans several


def fresh_experiment(client) -> str:
    return client.create_experiment(f"fleet-{uuid.uuid4().hex[:8]}")


# ------------------------------------------------------------------------ readers
def fleet_of_kinds(client) -> tuple[str, int, str]:
    """(experiment, t0, run a) with a finished, a NaN-metric, a FAILED, a RUNNING train run, a
    profile, a peaks and an analysis run, started at t0, t0 + 1, ..."""
    exp = fresh_experiment(client)
    t0 = int(time.time() * 1000) - 100_000
    a = new_run(
        client,
        exp,
        "train",
        "a",
        tags={"env_label": "l4", "host": "h", "mlflow.note.content": "not read"},
        params={"model": "resnet18", "batch_size": 32, "lr": 0.1},
        metrics={"throughput_samples_per_s": 10.0, "cpu_user_s": 3.0, "step_time_mean_s": 0.5},
        start=t0,
    )
    new_run(
        client,
        exp,
        "train",
        "nan",
        params={"model": "vgg16"},
        metrics={"throughput_samples_per_s": float("nan"), "achieved_flops_per_s": 1e12},
        start=t0 + 1,
    )
    new_run(client, exp, "train", "failed", status="FAILED", tags={"error": "OOM"}, start=t0 + 2)
    new_run(client, exp, "train", "running", status="RUNNING", start=t0 + 3)
    new_run(client, exp, "profile", "p", metrics={"ncu_dram_bytes": 1e9}, start=t0 + 4)
    new_run(
        client,
        exp,
        "peaks",
        "k",
        metrics={"peak_flops_per_s_fp32": 1e13, "peak_flops_per_s_fp32_median": 9e12},
        start=t0 + 5,
    )
    new_run(client, exp, "analysis", "x", start=t0 + 6)
    return exp, t0, a


def check_reader_reads_what_mlflow_reads(reader, client):
    exp, t0, a = fleet_of_kinds(client)
    filters = [
        "",
        TRAIN,
        "params.model LIKE 'res%'",
        "metrics.throughput_samples_per_s > 5",
        "attributes.status = 'FINISHED' AND tags.run_kind != 'analysis'",
    ]
    for f in filters:
        for cap in (None, 2):
            assert records(reader.search([exp], f, cap)) == truth([exp], f, cap), (f, cap)
    got = records(reader.search([exp], TRAIN, None))
    first = next(r for r in got if r["run_id"] == a)
    assert "params.lr" not in first and "metrics.cpu_user_s" not in first  # not read
    assert "tags.mlflow.note.content" not in first
    assert first["params.batch_size"] == "32" and first["metrics.step_time_mean_s"] == 0.5
    peaks = records(reader.search([exp], "tags.run_kind = 'peaks'", None))[0]
    assert peaks["metrics.peak_flops_per_s_fp32_median"] == 9e12  # peak_* by prefix
    # metric series: every step, by step then time, NaN kept; a run without the metric: []
    client.log_batch(
        a,
        metrics=[
            Metric("step_time_s", v, t0 + ts, step)
            for v, ts, step in [(0.3, 5, 2), (0.1, 1, 0), (float("nan"), 2, 1), (0.25, 9, 2)]
        ],
    )
    other = next(r["run_id"] for r in got if r["run_id"] != a)
    got_series = reader.series([a, other], "step_time_s")
    assert [str(v) for v in got_series[a]] == ["0.1", "nan", "0.3", "0.25"]
    assert got_series[other] == []


def test_sql_reader_reads_what_mlflow_reads(tracking):
    check_reader_reads_what_mlflow_reads(sql_reader(), MlflowClient())


def test_sql_reader_reads_a_postgresql_store_as_mlflow_does(tracking_postgres):
    """The same SELECTs with psycopg's `%s` placeholders, and the cache through them."""
    assert sql_reader().mark == "%s"
    check_reader_reads_what_mlflow_reads(sql_reader(), MlflowClient())
    check_cache_follows_a_fleet(sql_reader, "sql")


@pytest.mark.server
def test_api_reader_reads_what_mlflow_reads_paging_in_parallel(on_server):
    reader = api_reader()
    check_reader_reads_what_mlflow_reads(reader, MlflowClient())
    assert reader.parallel_pages > 0  # MLflow's offset tokens were recognised
    one = ApiReader(jobs=1, page=2)
    exp = MlflowClient().search_experiments(max_results=1)[0].experiment_id
    assert records(one.search([exp], "", None)) == truth([exp])
    assert one.parallel_pages == 0


def test_when_mlflow_internals_change_the_search_api_takes_over(tracking, monkeypatch, capsys):
    client = MlflowClient()
    exp = fresh_experiment(client)
    new_run(client, exp, "train", "a", params={"model": "m"})

    def changed(*args, **kwargs):
        raise TypeError("_get_sqlalchemy_filter_clauses() takes 2 positional arguments")

    monkeypatch.setattr(SqlReader, "search", changed)
    monkeypatch.setattr(SqliteReader, "for_uri", classmethod(lambda cls, uri: None))  # sql.py's
    source = fetch.Source("off")
    assert source.reader.kind == "sql"
    got = source.search([exp], TRAIN, 10)
    assert records(got) == truth([exp], TRAIN) and source.reader.kind == "api"
    assert "using MLflow's search" in capsys.readouterr().err


def test_an_http_server_is_read_through_the_search_api_and_a_database_directly(tracking):
    source = fetch.Source("off")
    assert isinstance(source.reader, SqliteReader)  # the filters analysis writes: sqlite3
    assert isinstance(source.full_reader(), SqlReader)  # others: MLflow's compiler
    mlflow.set_tracking_uri("http://127.0.0.1:9")  # nothing listens there; no request is made
    try:
        assert isinstance(fetch.Source("off").reader, ApiReader)
    finally:
        mlflow.set_tracking_uri(tracking)


# ------------------------------------------------------------------------ the cache
def search_through_cache(make_reader, exp, filter_string=TRAIN, cap=None, mode="auto"):
    stats = fetch.CacheStats()
    uri = mlflow.get_tracking_uri()
    return fetch.search_cached(make_reader(), uri, [exp], filter_string, cap, mode, stats), stats


def check_cache_follows_a_fleet(make_reader, kind):
    """Fill, then after each change the cached answer equals a fresh search. The runs are stamped
    older than the search API's refresh windows, so that each of its other mechanisms is used:
    runs that had not ended are fetched again by id, deleted runs are listed, a restored one is
    looked up by id."""
    client = MlflowClient()
    exp = fresh_experiment(client)
    old = int(time.time() * 1000) - 3 * OVERLAP_MS
    a = new_run(client, exp, "train", "a", tags={"env_label": "l4"}, start=old)
    b = new_run(client, exp, "train", "b", status="RUNNING", start=old + 1)
    c = new_run(client, exp, "train", "c", start=old + 2)
    new_run(client, exp, "profile", "p", start=old + 3)

    got, st = search_through_cache(make_reader, exp)
    assert records(got) == truth([exp], TRAIN) and len(got) == 3
    assert (st.filled, st.refreshed, st.fetched, st.from_cache) == (1, 0, 3, 0)

    # a run that was RUNNING finishes (with its summary metric), one is deleted, one is new
    client.log_metric(b, "throughput_samples_per_s", 42.0)
    client.set_terminated(b, "FINISHED", end_time=old + 5000)  # a clock far behind ours
    client.delete_run(c)
    d = new_run(client, exp, "train", "d")
    got, st = search_through_cache(make_reader, exp)
    assert records(got) == truth([exp], TRAIN)
    assert set(got["run_id"]) == {a, b, d}
    assert got.set_index("run_id").loc[b, "metrics.throughput_samples_per_s"] == 42.0
    assert st.filled == 0 and st.refreshed == 1
    if kind == "sql":  # the listing names exactly what changed: b (ended) and d (new)
        assert (st.fetched, st.from_cache) == (2, 1)

    # a deleted run restored comes back
    client.restore_run(c)
    got, st = search_through_cache(make_reader, exp)
    assert records(got) == truth([exp], TRAIN) and c in set(got["run_id"])

    # a run that no longer matches the filter's other clauses drops out when it changes status
    e = new_run(client, exp, "train", "e", status="RUNNING", tags={"env_label": "l4"})
    f = "tags.run_kind = 'train' AND tags.env_label = 'l4'"
    got, _ = search_through_cache(make_reader, exp, f)
    assert set(got["run_id"]) == {a, e}
    client.set_tag(e, "env_label", "moved")
    client.set_terminated(e, "FINISHED")
    got, _ = search_through_cache(make_reader, exp, f)
    assert records(got) == truth([exp], f) and set(got["run_id"]) == {a}

    # what the cache cannot see, pinned: a tag edited on a run that ended before the last refresh
    # (the search API refetches runs that ended within OVERLAP_MS, so use an old one there)
    g = new_run(client, exp, "train", "g", tags={"env_label": "l4"}, start=old)
    search_through_cache(make_reader, exp)  # SQL: listed, fetched; API: too old for its windows
    client.set_tag(g, "env_label", "edited")
    got, _ = search_through_cache(make_reader, exp)
    env = got.set_index("run_id")["tags.env_label"]
    if kind == "sql":
        assert env.loc[g] == "l4"  # blind spot on every backend: no change time for tags
    else:
        assert g not in env.index  # and on HTTP, a run stamped older than the overlap window
    segments.clear(mlflow.get_tracking_uri())  # what --cache refresh does first
    got, st = search_through_cache(make_reader, exp)
    assert records(got) == truth([exp], TRAIN) and st.filled == 1
    assert got.set_index("run_id").loc[g, "tags.env_label"] == "edited"


def test_cache_follows_a_fleet_on_sqlite(tracking):
    check_cache_follows_a_fleet(sql_reader, "sql")


@pytest.mark.server
def test_cache_follows_a_fleet_on_a_server(on_server):
    check_cache_follows_a_fleet(api_reader, "api")


def test_a_capped_cache_is_filled_again_when_deletions_leave_it_short(tracking):
    client = MlflowClient()
    exp = fresh_experiment(client)
    t0 = int(time.time() * 1000) - 10_000
    ids = [new_run(client, exp, "train", f"r{i}", start=t0 + i) for i in range(4)]
    got, st = search_through_cache(sql_reader, exp, cap=2)
    assert list(got["run_id"]) == [ids[3], ids[2]] and st.fetched == 2
    r4 = new_run(client, exp, "train", "r4", start=t0 + 4)
    got, st = search_through_cache(sql_reader, exp, cap=2)
    assert list(got["run_id"]) == [r4, ids[3]] and st.filled == 0  # refreshed, still serves
    got, st = search_through_cache(
        sql_reader, exp, cap=3
    )  # more than it was filled with: fill again
    assert records(got) == truth([exp], TRAIN, 3) and st.filled == 1
    client.delete_run(r4)
    client.delete_run(ids[3])
    got, st = search_through_cache(sql_reader, exp, cap=3)  # 3 cached - 2 deleted < 3: fill again
    assert records(got) == truth([exp], TRAIN, 3) and st.filled == 1
    assert list(got["run_id"]) == [ids[2], ids[1], ids[0]]


def test_segments_read_with_other_keys_or_format_are_not_used(tracking, monkeypatch):
    client = MlflowClient()
    exp = fresh_experiment(client)
    new_run(client, exp, "train", "a", params={"model": "m", "lr": 0.5})
    search_through_cache(sql_reader, exp)
    seg = segments.load(mlflow.get_tracking_uri(), exp, TRAIN)
    written = seg.path.stat().st_mtime_ns
    time.sleep(0.01)
    _, st = search_through_cache(sql_reader, exp)
    assert st.filled == 0 and st.refreshed == 1
    again = segments.load(mlflow.get_tracking_uri(), exp, TRAIN)
    assert again.refreshed_ms > seg.refreshed_ms  # the JSON records the refresh,
    assert seg.path.stat().st_mtime_ns == written  # the runs, unchanged, are not written again
    monkeypatch.setitem(join.READ_KEYS, "params", [*join.READ_KEYS["params"], "lr"])
    got, st = search_through_cache(
        sql_reader, exp
    )  # analysis reads lr now: the old segment lacks it
    assert st.filled == 1 and got.loc[0, "params.lr"] == "0.5"
    monkeypatch.setattr(segments, "FORMAT", segments.FORMAT + 1)
    assert search_through_cache(sql_reader, exp)[1].filled == 1


def test_cache_location_and_an_unwritable_cache(tracking, tmp_path, monkeypatch):
    monkeypatch.delenv(segments.CACHE_ENV)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert segments.root() == tmp_path / "home" / ".cache" / "roofline-bench"
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv(segments.CACHE_ENV, str(blocker))  # a file where the folder should be
    client = MlflowClient()
    exp = fresh_experiment(client)
    new_run(client, exp, "train", "a")
    got, st = search_through_cache(sql_reader, exp)
    assert len(got) == 1 and "NotADirectoryError" in st.unsaved


def test_cli_cache_modes_and_the_report_note(tracking, tmp_path, monkeypatch, capsys):
    client = MlflowClient()
    exp_id = fresh_experiment(client)
    name = client.get_experiment(exp_id).name
    new_run(
        client,
        exp_id,
        "train",
        "a",
        tags={"env_label": "l4", "device_name": "NVIDIA L4", "config_key": "k"},
        params={"model": "resnet18", "batch_size": 8, "precision": "fp32"},
        metrics={"throughput_samples_per_s": 10.0, "achieved_flops_per_s": 1e12},
        start=int(time.time() * 1000) - 3 * OVERLAP_MS,  # its metrics older than the refresh window
    )
    monkeypatch.setattr("roofline.vendor.load_vendor_lookup", lambda *_: lambda _: None)
    folder = segments.server_folder(tracking)
    argv = ["--no-track", "--experiment", name, "--jobs", "1", "--out"]
    assert app.main([*argv, str(tmp_path / "off"), "--cache", "off"]) == 0
    assert not folder.exists()
    assert "local cache" not in (tmp_path / "off" / "report.md").read_text()
    assert app.main([*argv, str(tmp_path / "a1")]) == 0
    assert app.main([*argv, str(tmp_path / "a2")]) == 0
    # one segment per search: train, profile, peaks, complexity, breakdown and what-if runs (empty
    # ones too)
    assert sorted(p.suffix for p in folder.rglob("*.*")) == [".json"] * 6 + [".parquet"] * 6
    md = (tmp_path / "a2" / "report.md").read_text()
    assert f"runs read through the local cache {folder}" in md
    assert "1 from the cache, 0 fetched now" in md  # train: 1 run; profile, peaks: none
    assert "a tag edited on a run after it ended is not" in md
    assert (tmp_path / "a2" / "summary.csv").read_text() == (
        tmp_path / "off" / "summary.csv"
    ).read_text()
    capsys.readouterr()
    assert app.cli([*argv, str(tmp_path / "x"), "--cache", "sometimes"]) == 2
    assert "invalid choice: 'sometimes'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="cache"):
        app.AnalysisConfig(cache="sometimes")


# ------------------------------------------------------------------------ bench/fleet_store.py
def test_bulk_writer_stores_what_log_batch_stores(tracking, tmp_path):
    specs = list(fleet_store.run_specs(60))
    assert fleet_store.counts(specs) == {"peaks": 4, "train": 47, "profile": 6, "failed": 3}
    by_client = fleet_store.write_client(specs, experiment="client")
    by_bulk = fleet_store.write_bulk(tracking, str(tmp_path / "art"), specs, experiment="bulk")
    client = MlflowClient()

    def runs(exp):
        out = {}
        for r in client.search_runs([exp], max_results=1000):
            rec = {
                "status": r.info.status,
                "ended": r.info.end_time is not None,
                "params": r.data.params,
                "metrics": r.data.metrics,
                "tags": {k: v for k, v in r.data.tags.items() if not k.startswith("mlflow.")},
                "series": [
                    m.value
                    for m in sorted(
                        client.get_metric_history(r.info.run_id, "step_time_s"),
                        key=lambda m: m.step,
                    )
                ],
            }
            out[r.data.tags["mlflow.runName"]] = rec
        return out

    assert runs(by_bulk) == runs(by_client)
    bulk = client.search_runs([by_bulk], order_by=["attributes.start_time ASC"], max_results=100)
    assert [r.info.run_name for r in bulk] == [s["name"] for s in specs]  # one minute apart


def test_reading_only_the_keys_analysis_reads_changes_no_result(tracking, tmp_path):
    """core.build on MLflow's whole search_runs frame and on the readers' frame agree."""
    specs = list(fleet_store.run_specs(300))
    exp = fleet_store.write_bulk(tracking, str(tmp_path / "art"), specs)
    full = mlflow.search_runs([exp], max_results=50000)
    mine, _ = fetch.fetch_runs(fetch.Query([fleet_store.EXPERIMENT]), fetch.Source("off"))
    assert len(full.columns) > len(mine.columns) + 10  # it did leave keys out

    def summary(runs):
        a = core.build(runs, lambda _: None)
        pts = a.points.drop(columns=["run_ids"]).sort_values(["env_label", "label"])
        return pts.reset_index(drop=True), a.counts, a.notes

    p1, c1, n1 = summary(full)
    p2, c2, n2 = summary(mine)
    pd.testing.assert_frame_equal(p1, p2)
    assert c1 == c2 and n1 == n2 and c1["points"] > 50 and c1["measured_points"] > 0


@pytest.mark.parametrize("reader", ["sql", "lite"])
def test_a_metric_logged_after_its_run_ended_is_seen_by_cache_auto(tracking, reader):
    """Issue 32: `log_metric` on a FINISHED run changes neither its status nor its end time, and
    `--cache auto` kept the old value (a poisoned value then also slipped past the screen); only
    `--cache refresh` saw it. The refresh now also fetches runs with a latest metric stamped since
    the last refresh (less the overlap)."""
    from tests.test_analysis_sqlite import lite_reader

    make = sql_reader if reader == "sql" else lite_reader
    client = MlflowClient()
    exp = fresh_experiment(client)
    old = int(time.time() * 1000) - 3 * OVERLAP_MS
    a = new_run(client, exp, "train", "a", metrics={"throughput_samples_per_s": 10.0}, start=old)
    b = new_run(client, exp, "train", "b", metrics={"throughput_samples_per_s": 20.0}, start=old)
    search_through_cache(make, exp)
    client.log_metric(a, "throughput_samples_per_s", 1e300)  # after the run ended
    got, st = search_through_cache(make, exp)
    assert got.set_index("run_id").loc[a, "metrics.throughput_samples_per_s"] == 1e300
    assert records(got) == truth([exp], TRAIN)
    assert (st.filled, st.refreshed, st.fetched, st.from_cache) == (0, 1, 1, 1)  # b from the cache
    assert b in set(got["run_id"])
