"""common.tracking: runs end FINISHED or FAILED with the reason; nothing is lost when offline."""

from __future__ import annotations

import json

import mlflow
import pytest

from common import console, schema
from common.spool import spooled_runs
from common.tracking import RunSession
from common.upload import upload_spooled


def test_finished_run_has_params_metrics_series_and_text(tracking):
    with RunSession("train", run_name="r", experiment="e") as s:
        s.log_params({"batch_size": 2, "channels_last": False})
        s.flush()
        s.log_metrics({"step_time_median_s": 0.25})
        s.log_series("step_time_s", [0.1, 0.2, 0.3])
        s.log_text("reports/a.txt", "hello")
    client = mlflow.tracking.MlflowClient()
    run = client.get_run(s.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params == {"batch_size": "2", "channels_last": "false"}
    assert run.data.metrics["step_time_median_s"] == 0.25
    assert run.data.tags[schema.TAG_RUN_KIND] == "train"
    hist = client.get_metric_history(s.run_id, "step_time_s")
    assert [(m.step, m.value) for m in sorted(hist, key=lambda m: m.step)] == [
        (0, 0.1),
        (1, 0.2),
        (2, 0.3),
    ]
    assert [f.path for f in client.list_artifacts(s.run_id, "reports")] == ["reports/a.txt"]


@pytest.mark.parametrize(
    "status, error",
    [("FAILED", "rank 1 on h failed: out of memory"), ("KILLED", "interrupted by the user")],
)
def test_end_from_outside_the_block_ends_the_run_once_with_the_reason(tracking, status, error):
    """RunSession.end: how a distributed run's SIGTERM watcher ends the run while the main thread
    is blocked inside the `with` block (the process exits right after)."""
    s = RunSession("train", run_name="watched", experiment="e")
    s.__enter__()
    s.log_metrics({"config_batch_size": 2.0})
    s.end(status, "rank 1 on h failed: out of memory")
    run = mlflow.tracking.MlflowClient().get_run(s.run_id)
    assert run.info.status == status and run.data.tags[schema.TAG_ERROR] == error
    assert run.data.metrics["config_batch_size"] == 2.0  # what was recorded is kept


def test_exception_ends_run_failed_with_last_line_as_error(tracking):
    with pytest.raises(RuntimeError):
        with RunSession("train", run_name="bad") as s:
            raise RuntimeError("worker traceback\n  File x\nValueError: corrupt image a.jpg")
    run = mlflow.tracking.MlflowClient().get_run(s.run_id)
    assert run.info.status == "FAILED"
    assert run.data.tags["error"] == "ValueError: corrupt image a.jpg"


def test_resumes_run_created_by_mlflow_run(tracking, monkeypatch):
    client = mlflow.tracking.MlflowClient()
    pre = client.create_run("0", tags={}).info.run_id
    client.log_param(pre, "batch", "02")  # what `mlflow run -P batch=02` logs
    monkeypatch.setenv("MLFLOW_RUN_ID", pre)
    with RunSession("train") as s:
        s.log_params({"batch": 2, "model": "resnet18"})  # same key, different string: not re-logged
    assert s.run_id == pre
    run = client.get_run(pre)
    assert run.info.status == "FINISHED" and run.data.params == {"batch": "02", "model": "resnet18"}


def test_invalid_key_is_rejected():
    s = RunSession("train")
    with pytest.raises(ValueError, match="invalid MLflow key"):
        s.log_metrics({"bad:key": 1.0})


def test_unreachable_server_spools_and_upload_sends_later(tmp_path, monkeypatch, tracking):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")  # nothing listens on port 9
    mlflow.set_tracking_uri("http://127.0.0.1:9")
    art = tmp_path / "table.csv"
    art.write_text("a,b\n1,2\n")
    with RunSession("train", run_name="offline", experiment="exp-off") as s:
        s.log_params({"model": "resnet18"})
        s.log_metrics({"throughput_samples_per_s": 12.5})
        s.log_series("step_time_s", [0.5, 0.25])
        s.log_file("tables/table.csv", art)
    assert s.offline and s.spool_path is not None and s.spool_path.exists()
    art.unlink()  # the spool keeps its own copy
    entry = json.loads(s.spool_path.read_text())
    assert entry["status"] == "FINISHED" and entry["record"]["metrics"] == {
        "throughput_samples_per_s": 12.5,
        "samples_per_s": 12.5,  # as the pages print it (common.ui.with_percents)
    }

    mlflow.set_tracking_uri(tracking)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking)
    sent, left = upload_spooled()
    assert (sent, left) == (1, 0) and spooled_runs() == []
    runs = mlflow.search_runs(experiment_names=["exp-off"], output_format="list")
    assert len(runs) == 1
    run = runs[0]
    assert run.info.status == "FINISHED"
    assert run.data.params == {"model": "resnet18"}
    assert run.data.metrics["throughput_samples_per_s"] == 12.5
    client = mlflow.tracking.MlflowClient()
    assert len(client.get_metric_history(run.info.run_id, "step_time_s")) == 2
    assert [f.path for f in client.list_artifacts(run.info.run_id, "tables")] == [
        "tables/table.csv"
    ]


@pytest.mark.parametrize("quiet", [False, True])
def test_offline_messages_go_through_the_console_and_quiet_keeps_only_the_warning(
    tracking, monkeypatch, capsys, quiet
):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")  # nothing listens on port 9
    mlflow.set_tracking_uri("http://127.0.0.1:9")
    with console.quiet(quiet):
        with RunSession("train", run_name="told", experiment="exp-told") as s:
            s.log_metrics({"throughput_samples_per_s": 1.0})
    out, err = capsys.readouterr()
    assert out == ""
    assert "warning: tracking server unreachable (" in err and "continuing offline" in err
    kept = f"tracking server unreachable: run kept in {s.spool_path}; send it later with"
    assert (kept in err) == (not quiet)

    mlflow.set_tracking_uri(tracking)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking)
    with console.quiet(quiet):
        assert upload_spooled() == (1, 0)
    out, err = capsys.readouterr()
    (run,) = mlflow.search_runs(experiment_names=["exp-told"], output_format="list")
    assert out == ""
    assert (f"uploaded train run told -> {run.info.run_id}" in err) == (not quiet)


def test_long_series_keeps_every_kth_step_in_history_and_says_so(tracking):
    values = [float(i) for i in range(2500)]
    with RunSession("train") as s:
        s.log_series("step_time_s", values)
    client = mlflow.tracking.MlflowClient()
    hist = sorted(client.get_metric_history(s.run_id, "step_time_s"), key=lambda m: m.step)
    assert [m.step for m in hist] == list(range(0, 2500, 3))  # ceil(2500 / 1000) = 3
    assert all(m.value == m.step for m in hist)
    assert client.get_run(s.run_id).data.tags["step_time_s_stride"] == "3"


def _refuse(method_name, when):
    """A MlflowClient method that raises ConnectionError (an outage) when `when(*args, **kw)` holds."""
    original = getattr(mlflow.tracking.MlflowClient, method_name)

    def patched(self, *args, **kw):
        if when(*args, **kw):
            raise ConnectionError("Connection refused (test outage)")
        return original(self, *args, **kw)

    return patched


def test_outage_mid_write_spools_full_record_and_only_the_unsent_part_is_uploaded(
    tracking, monkeypatch, capsys
):
    """The server went away after the metrics were sent but before the text artifact: the spool
    entry keeps the whole record (for resume) and exactly the unsent part (for upload)."""
    with monkeypatch.context() as m:
        m.setattr(
            mlflow.tracking.MlflowClient, "log_text", _refuse("log_text", lambda *a, **k: True)
        )
        with RunSession(
            "train", run_name="cut", experiment="exp-cut", tags={"sweep_name": "s"}
        ) as s:
            s.log_params({"model": "resnet18"})
            s.flush()
            s.log_metrics({"throughput_samples_per_s": 12.5})
            s.log_series("step_time_s", [0.5, 0.25, 0.75])
            s.log_text("timing/step_times.csv", "step,step_time_s\n")
    assert s.offline and s.run_id
    entry = json.loads(s.spool_path.read_text())
    assert entry["run_id"] == s.run_id and entry["status"] == "FINISHED"
    assert entry["record"]["tags"]["sweep_name"] == "s" and entry["record"]["params"] == {
        "model": "resnet18"
    }
    assert entry["record"]["metrics"] == {"throughput_samples_per_s": 12.5, "samples_per_s": 12.5}
    unsent = entry["unsent"]
    assert unsent["params"] == {} and unsent["metrics"] == {} and unsent["series"] == {}
    assert list(unsent["texts"]) == ["timing/step_times.csv"]
    client = mlflow.tracking.MlflowClient()
    assert client.get_run(s.run_id).info.status == "RUNNING"
    from common.upload import main as upload_main

    assert upload_main(["--list"]) == 0
    assert f"FINISHED  (completes run {s.run_id} on {tracking})" in capsys.readouterr().out

    assert upload_spooled() == (1, 0)
    runs = mlflow.search_runs(experiment_names=["exp-cut"], output_format="list")
    assert [r.info.run_id for r in runs] == [s.run_id]  # completed in place, not a second copy
    assert runs[0].info.status == "FINISHED"
    assert len(client.get_metric_history(s.run_id, "step_time_s")) == 3  # not sent twice
    assert [f.path for f in client.list_artifacts(s.run_id, "timing")] == ["timing/step_times.csv"]


@pytest.mark.parametrize("fail_at", ["create_run", "log_batch"])
def test_interrupted_upload_then_second_upload_makes_one_linked_copy(
    tracking, monkeypatch, fail_at
):
    """An upload cut off at the child (before or after the server created it) and run again: one
    parent, one child, linked, both FINISHED; ids written back into the spool in between."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")  # nothing listens on port 9
    mlflow.set_tracking_uri("http://127.0.0.1:9")
    with RunSession("sweep", run_name="p", experiment="exp-up") as parent:
        parent.log_params({"sweep_repeats": 1})
        with RunSession("train", run_name="c", experiment="exp-up", parent=parent) as child:
            child.log_params({"model": "resnet18"})
            child.log_metrics({"throughput_samples_per_s": 3.0})
            child.log_series("step_time_s", [0.5, 0.25])
    assert parent.offline and child.offline
    mlflow.set_tracking_uri(tracking)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking)

    is_child = {
        "create_run": lambda *a, **k: k.get("tags", {}).get(schema.TAG_RUN_KIND) == "train",
        "log_batch": lambda *a, **k: any(p.key == "model" for p in k.get("params", [])),
    }[fail_at]
    with monkeypatch.context() as m:
        m.setattr(mlflow.tracking.MlflowClient, fail_at, _refuse(fail_at, is_child))
        assert upload_spooled() == (1, 1)
    parent_run = mlflow.search_runs(
        experiment_names=["exp-up"], filter_string="tags.run_kind = 'sweep'", output_format="list"
    )
    assert len(parent_run) == 1 and parent_run[0].info.status == "FINISHED"
    parent_id = parent_run[0].info.run_id
    (left,) = spooled_runs()
    assert (
        left["local_id"] == child.local_id and left["parent_run_id"] == parent_id
    )  # the link survives the call
    created = left["run_id"]
    assert (created is None) == (fail_at == "create_run")

    assert upload_spooled() == (1, 0)
    children = mlflow.search_runs(
        experiment_names=["exp-up"], filter_string="tags.run_kind = 'train'", output_format="list"
    )
    assert len(children) == 1
    run = children[0]
    assert run.info.status == "FINISHED" and run.data.tags["mlflow.parentRunId"] == parent_id
    if created:
        assert run.info.run_id == created
    assert run.data.metrics["throughput_samples_per_s"] == 3.0
    assert (
        len(mlflow.tracking.MlflowClient().get_metric_history(run.info.run_id, "step_time_s")) == 2
    )


def test_entries_spooled_before_unsent_existed_are_uploaded(tracking):
    """The spool format that shipped first (main at stop 8) had no "unsent": "record" held what the
    server lacked (the whole run when it had none of it). Such entries still upload."""
    import time

    from common.spool import save_entry, spool_dir

    client = mlflow.tracking.MlflowClient()
    exp_id = client.create_experiment("exp-old")
    cut = client.create_run(exp_id, run_name="cut", tags={schema.TAG_RUN_KIND: "train"})
    client.log_param(cut.info.run_id, "model", "resnet18")  # sent before the outage

    def record(run_name, **parts):
        return {
            "run_kind": "train",
            "run_name": run_name,
            "params": {},
            "tags": {},
            "metrics": {},
            "series": {},
            "texts": {},
            "files": {},
            **parts,
        }

    def old_entry(local_id, run_id, rec):
        folder = spool_dir() / local_id
        folder.mkdir(parents=True)
        save_entry(
            {
                "local_id": local_id,
                "run_id": run_id,
                "experiment_id": exp_id if run_id else None,
                "experiment": "exp-old",
                "parent_local_id": None,
                "parent_run_id": None,
                "status": "FINISHED",
                "tracking_uri": tracking,
                "created_s": time.time(),
                "record": rec,
            },
            folder / "run.json",
        )

    old_entry("a", cut.info.run_id, record("cut", metrics={"throughput_samples_per_s": 2.0}))
    old_entry(
        "b",
        None,
        record(
            "never-sent",
            params={"model": "vgg11"},
            tags={schema.TAG_RUN_KIND: "train"},
            series={"step_time_s": [0.5, 0.25]},
        ),
    )
    assert upload_spooled() == (2, 0)
    runs = {
        r.info.run_name: r
        for r in mlflow.search_runs(experiment_names=["exp-old"], output_format="list")
    }
    assert sorted(runs) == ["cut", "never-sent"]
    assert runs["cut"].info.run_id == cut.info.run_id and runs["cut"].info.status == "FINISHED"
    assert runs["cut"].data.params == {"model": "resnet18"}
    assert runs["cut"].data.metrics == {"throughput_samples_per_s": 2.0}
    assert runs["never-sent"].data.params == {"model": "vgg11"}
    assert len(client.get_metric_history(runs["never-sent"].info.run_id, "step_time_s")) == 2
