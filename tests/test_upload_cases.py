"""`python -m common.upload` when the spool is empty, unreadable, copied, or raced (issue 25).

On main: an empty spool returned before closing runs left RUNNING by dead processes; unreadable
entries beside good ones ended "uploaded 2 run(s); 0 left" with exit 0; a copy of a sent entry sent
again doubled every metric history of the run (`children_*` of a sweep parent); two uploads logging
the same new dataset at once hit `UNIQUE constraint failed: datasets.experiment_id, datasets.name,
datasets.digest`, exited 1 and left the run RUNNING.
"""

from __future__ import annotations

import shutil
import uuid

import mlflow

from common import schema
from common.run_record import dataset_input
from common.runs import STALE_REASON
from common.spool import spool_dir, spooled_runs
from common.tracking import RunSession
from common.upload import main as upload_main
from tests.helpers import dead_pid, use_uri


OFFLINE = "http://127.0.0.1:9"  # nothing listens on port 9


def spool_sweep(monkeypatch, children: int = 2, dataset: bool = False) -> str:
    """An offline sweep: a parent with `children_*` metrics and its train children; the experiment."""
    use_uri(monkeypatch, OFFLINE)
    exp = f"exp-{uuid.uuid4().hex[:8]}"
    with RunSession("sweep", run_name="p", experiment=exp) as parent:
        parent.log_params({"sweep_repeats": 1})
        for i in range(children):
            with RunSession("train", run_name=f"c{i}", experiment=exp, parent=parent) as c:
                c.log_params({"model": "resnet18"})
                c.log_metrics({"throughput_samples_per_s": 12.5 + i})
                c.log_series("step_time_s", [0.5, 0.25])
                if dataset:
                    c.log_input(
                        dataset_input(
                            "synthetic-32px-10cls", "0123456789abcdef", "code", {}, "train"
                        )
                    )
        parent.log_metrics({"children_finished": float(children), "children_planned": 2.0})
    return exp


def test_an_empty_spool_still_closes_runs_left_running_by_dead_processes(tracking):
    client = mlflow.tracking.MlflowClient()
    stale = client.create_run(
        "0", tags={schema.TAG_PROCESS: f"{schema.host_name()}:{dead_pid()}:1.0"}
    ).info.run_id
    assert spooled_runs() == []
    assert upload_main([]) == 0
    run = client.get_run(stale)
    assert run.info.status == "FAILED" and run.data.tags[schema.TAG_ERROR] == STALE_REASON


def test_unreadable_entries_are_never_counted_as_uploaded(tracking, monkeypatch, capsys):
    exp = spool_sweep(monkeypatch, children=1)
    for name in ("cut", "hand-edited"):
        (spool_dir() / name).mkdir()
    (spool_dir() / "cut" / "run.json").write_text('{"local_id": "cut", "rec')
    (spool_dir() / "hand-edited" / "run.json").write_text("[1, 2]")
    use_uri(monkeypatch, tracking)
    capsys.readouterr()
    assert upload_main([]) == 1
    out, err = capsys.readouterr()
    assert f"uploaded 2 run(s); 0 left in {spool_dir()}; 2 spool entries cannot be read" in out
    assert (
        err.strip()
        .splitlines()[-1]
        .startswith(
            f"error: 2 spool entries cannot be read and were not uploaded ({spool_dir() / 'cut'}"
        )
    )
    assert len(mlflow.search_runs(experiment_names=[exp], output_format="list")) == 2


def test_only_unreadable_entries_is_an_error_not_an_empty_spool(tracking, capsys):
    (spool_dir() / "cut").mkdir(parents=True)
    (spool_dir() / "cut" / "run.json").write_text("{")
    assert upload_main([]) == 1
    assert "1 spool entry cannot be read" in capsys.readouterr().out


def test_a_copy_of_a_sent_entry_sent_again_doubles_no_metric_history(
    tracking, monkeypatch, tmp_path
):
    exp = spool_sweep(monkeypatch, children=1)
    (parent_entry,) = [e for e in spooled_runs() if e["record"]["run_kind"] == "sweep"]
    folder = spool_dir() / parent_entry["local_id"]
    shutil.copytree(folder, tmp_path / "copy")
    use_uri(monkeypatch, tracking)
    assert upload_main([]) == 0
    shutil.copytree(tmp_path / "copy", folder)  # the copy put back, sent again
    assert upload_main([]) == 0
    client = mlflow.tracking.MlflowClient()
    (parent,) = [
        r
        for r in mlflow.search_runs(experiment_names=[exp], output_format="list")
        if r.data.tags[schema.TAG_RUN_KIND] == "sweep"
    ]
    for key in ("children_finished", "children_planned"):
        assert len(client.get_metric_history(parent.info.run_id, key)) == 1, key
    assert parent.info.status == "FINISHED" and spooled_runs() == []


def test_two_uploads_creating_one_dataset_at_once_both_finish(tracking, monkeypatch):
    """The race, made certain: the first log_inputs meets the row the other upload inserted."""
    from mlflow.exceptions import MlflowException

    exp = spool_sweep(monkeypatch, children=1, dataset=True)
    use_uri(monkeypatch, tracking)
    real = mlflow.tracking.MlflowClient.log_inputs
    calls = []

    def raced(self, *a, **k):
        calls.append(1)
        if len(calls) == 1:
            raise MlflowException(
                "(sqlite3.IntegrityError) UNIQUE constraint failed: datasets.experiment_id, "
                "datasets.name, datasets.digest"
            )
        return real(self, *a, **k)

    monkeypatch.setattr(mlflow.tracking.MlflowClient, "log_inputs", raced)
    assert upload_main([]) == 0
    runs = mlflow.search_runs(experiment_names=[exp], output_format="list")
    assert sorted(r.info.status for r in runs) == ["FINISHED", "FINISHED"] and len(calls) == 2
    (child,) = [r for r in runs if r.data.tags[schema.TAG_RUN_KIND] == "train"]
    assert [d.dataset.name for d in child.inputs.dataset_inputs] == ["synthetic-32px-10cls"]


def test_other_store_errors_are_not_retried(tracking, monkeypatch):
    from mlflow.exceptions import MlflowException

    spool_sweep(monkeypatch, children=1, dataset=True)
    use_uri(monkeypatch, tracking)
    calls = []

    def broken(self, *a, **k):
        calls.append(1)
        raise MlflowException("INTERNAL_ERROR: disk I/O error")

    monkeypatch.setattr(mlflow.tracking.MlflowClient, "log_inputs", broken)
    assert upload_main([]) == 1 and len(calls) == 1


def test_four_sessions_logging_one_new_dataset_at_once_all_succeed(tracking):
    """The race itself, in four threads released together against the test's store, ten times
    (main: 16 of 20 such rounds had a log_inputs fail with `UNIQUE constraint failed: datasets...`)."""
    import threading

    from common.run_record import RunRecord

    client = mlflow.tracking.MlflowClient()
    failures = []
    for i in range(10):
        exp = client.create_experiment(f"race-{i}")
        sessions = []
        for _ in range(4):
            s = RunSession("train", source_tags=False)
            s.create_run(exp, None, mlflow.tracking.MlflowClient())
            sessions.append(s)
        barrier = threading.Barrier(len(sessions))

        def send(s):
            rec = RunRecord("train")
            rec.inputs.append(
                dataset_input("synthetic-32px-10cls", "0123456789abcdef", "code", {}, "train")
            )
            barrier.wait()
            try:
                s.send(rec)
            except Exception as exc:  # noqa: BLE001 - counted below
                failures.append(str(exc)[:200])

        threads = [threading.Thread(target=send, args=(s,)) for s in sessions]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert failures == []


def test_an_experiment_another_process_created_in_between_is_used(tracking, monkeypatch):
    """Two uploads of one new experiment's entries: both found no experiment, the other created it
    first (main: `RESOURCE_ALREADY_EXISTS`, the upload exited 1)."""
    from common.runs import experiment_id_for

    client = mlflow.tracking.MlflowClient()
    real = client.get_experiment_by_name
    calls = []

    def not_yet(name):  # the first look happens before the other process creates it
        calls.append(name)
        if len(calls) == 1:
            client.create_experiment(name)  # ... which it does right after
            return None
        return real(name)

    client.get_experiment_by_name = not_yet
    exp_id = experiment_id_for("born-twice", create=True, client=client)
    assert exp_id == real("born-twice").experiment_id and len(calls) == 2


def test_a_mistyped_spool_dir_is_an_error_not_zero_runs(tracking, tmp_path, capsys):
    """Issue 32: `--spool-dir` naming no folder uploaded 0 runs and exited 0."""
    from common import upload

    assert upload.main(["--spool-dir", str(tmp_path / "sppol")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith(
        f"error: --spool-dir {tmp_path / 'sppol'} is not a folder: give the folder a command "
        "spooled into"
    )
