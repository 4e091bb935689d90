"""python -m train.sweep: the matrix, failure isolation, resume, and many machines on one server."""
from __future__ import annotations

import json
import uuid

import mlflow
import pytest

from common import schema
from common.tracking import spooled_runs, upload_spooled
from train import sweep as sw

TINY_BASE = {"image_size": 32, "iters": 2, "warmup_iters": 1, "device": "cpu"}


def spec(**kw) -> sw.SweepSpec:
    kw.setdefault("matrix", {"model": ["resnet18"], "batch_size": [2]})
    kw.setdefault("base", dict(TINY_BASE))
    return sw.SweepSpec(**kw)


def search(experiment: str, filt: str = "") -> list:
    return mlflow.search_runs(experiment_names=[experiment], filter_string=filt, output_format="list")


# ---------------------------------------------------------------- the spec (pure)
def test_plan_is_the_cross_product_in_repeat_major_order():
    s = spec(matrix={"model": ["resnet18", "resnet34"], "batch": [2, 4]}, repeats=2)
    plan = [(c.model, c.batch_size, r) for c, r in s.plan()]
    assert plan == [("resnet18", 2, 0), ("resnet18", 4, 0), ("resnet34", 2, 0), ("resnet34", 4, 0),
                    ("resnet18", 2, 1), ("resnet18", 4, 1), ("resnet34", 2, 1), ("resnet34", 4, 1)]


def test_default_name_is_stable_and_changes_with_the_spec():
    assert spec().name == spec().name and spec().name.startswith("sweep-")
    assert spec().name != spec(repeats=2).name
    assert spec(name="mine").name == "mine"


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"matrix": {"modle": ["resnet18"]}}, "unknown field 'modle'"),
        ({"matrix": {"model": []}}, "axis 'model' has no values"),
        ({"repeats": 0}, "repeats must be a positive integer"),
        ({"name": "a:b"}, "name 'a:b'"),
    ],
)
def test_spec_validation_names_the_problem(kwargs, message):
    with pytest.raises(ValueError, match=message):
        spec(**kwargs)


def test_bad_combination_is_named():
    with pytest.raises(ValueError, match="model=resnet18 batch_size=0 image_size=32: batch_size must be a positive integer"):
        spec(matrix={"model": ["resnet18"], "batch_size": [2, 0]}).plan()


def test_cli_matrix_file_and_flags(tmp_path):
    f = tmp_path / "sweep.yaml"
    f.write_text("name: nightly\nrepeats: 3\nmatrix:\n  model: [resnet18, mobilenet_v2]\n  batch_size: [8]\n"
                 "base:\n  image_size: 64\n  iters: auto\n")
    args = sw.build_parser().parse_args(["--matrix", str(f), "--batch-sizes", "16", "32", "--device", "cpu"])
    s = sw.spec_from_args(args)
    assert s.name == "nightly" and s.repeats == 3
    assert s.matrix == {"model": ["resnet18", "mobilenet_v2"], "batch_size": [16, 32]}  # flag overrides the file
    assert s.base == {"image_size": 64, "iters": "auto", "device": "cpu"}
    assert len(s.plan()) == 12


@pytest.mark.parametrize(
    "argv,message",
    [
        ([], "nothing to sweep"),
        (["--models", "resnet18", "--model", "resnet34"], "--model is a single value but model is a matrix axis"),
        (["--matrix", "/nonexistent.yaml"], "sweep file /nonexistent.yaml does not exist"),
        (["--models", "resnet18", "--repeats", "0"], "repeats must be a positive integer"),
        (["--models", "resnet18", "--batch", "-1"], "batch_size must be a positive integer"),
    ],
)
def test_cli_bad_input_is_one_line(capsys, argv, message):
    assert sw.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0]


def test_cli_matrix_file_that_is_not_yaml(tmp_path, capsys):
    f = tmp_path / "bad.yaml"
    f.write_text("matrix: [unclosed")
    assert sw.main(["--matrix", str(f)]) == 2
    assert "is not valid YAML/JSON" in capsys.readouterr().err


# ---------------------------------------------------------------- running against a local store
def test_failure_isolation_and_resume(tracking, capsys):
    exp = "sweep-local"
    s = spec(matrix={"model": ["resnet18"], "batch_size": [2], "precision": ["fp32", "fp16"]}, name="iso")
    out = sw.run_sweep(s, experiment=exp, env_label="box-a", progress=False, quiet=True)
    assert [(o.label, o.status) for o in out] == [("resnet18 b2 fp32 32px #0", "FINISHED"),
                                                   ("resnet18 b2 fp16 32px #0", "FAILED")]
    assert "fp16 autocast is not supported" in out[1].error

    parents = search(exp, "tags.run_kind = 'sweep'")
    assert len(parents) == 1
    parent = parents[0]
    assert parent.info.status == "FINISHED"
    assert parent.data.metrics["children_finished"] == 1 and parent.data.metrics["children_failed"] == 1
    children = search(exp, f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    by_status = {c.info.status: c for c in children}
    assert set(by_status) == {"FINISHED", "FAILED"} and len(children) == 2
    failed = by_status["FAILED"]
    assert "fp16 autocast is not supported" in failed.data.tags[schema.TAG_ERROR]
    assert failed.data.params["precision"] == "fp16" and failed.data.params["repeat"] == "0"
    assert by_status["FINISHED"].data.params["repeat"] == "0"
    assert by_status["FINISHED"].data.tags[sw.TAG_SWEEP_NAME] == "iso"

    # Same sweep again: the finished config is skipped, the failed one retried, under the same parent.
    again = sw.run_sweep(s, experiment=exp, env_label="box-a", progress=False, quiet=True)
    assert [o.status for o in again] == ["SKIPPED", "FAILED"]
    assert len(search(exp, "tags.run_kind = 'sweep'")) == 1
    assert len(search(exp, "attributes.status = 'FINISHED' and tags.run_kind = 'train'")) == 1
    # Another machine (env label) does not skip what box-a did.
    other = sw.run_sweep(spec(name="iso"), experiment=exp, env_label="box-b", progress=False, quiet=True)
    assert [o.status for o in other] == ["FINISHED"]


def test_runs_left_running_by_a_killed_sweep_are_failed_and_redone(tracking):
    exp = "sweep-stale"
    s = spec(name="stale")
    cfg = s.plan()[0][0]
    client = mlflow.tracking.MlflowClient()
    exp_id = client.create_experiment(exp)
    stale = client.create_run(exp_id, tags={schema.TAG_RUN_KIND: "train", sw.TAG_SWEEP_NAME: "stale",
                                            schema.TAG_ENV_LABEL: "box-a", schema.TAG_CONFIG_KEY: cfg.config_key()})
    client.log_param(stale.info.run_id, "repeat", "0")
    out = sw.run_sweep(s, experiment=exp, env_label="box-a", progress=False, quiet=True)
    assert [o.status for o in out] == ["FINISHED"]
    old = client.get_run(stale.info.run_id)
    assert old.info.status == "FAILED" and "interrupted" in old.data.tags[schema.TAG_ERROR]


def test_cli_end_to_end_prints_table_and_summary(tracking, capsys):
    argv = ["--models", "resnet18", "--batch-sizes", "2", "--image-size", "32", "--iters", "2",
            "--warmup-iters", "1", "--device", "cpu", "--env-label", "cli-box", "--no-progress", "--name", "cli"]
    assert sw.main(argv) == 0
    out = capsys.readouterr().out
    assert "| resnet18 b2 fp32 32px | 0 | FINISHED |" in out
    assert "sweep cli: 1 finished, 0 skipped (done before), 0 failed" in out
    assert sw.main(argv) == 0
    assert "sweep cli: 0 finished, 1 skipped (done before), 0 failed" in capsys.readouterr().out


# ---------------------------------------------------------------- a real server, over HTTP
@pytest.mark.server
def test_two_machines_sweep_and_analysis_on_one_server(on_server, tmp_path):
    exp = f"multi-{uuid.uuid4().hex[:8]}"
    s = spec(name="fleet")
    for label in ("machine-a", "machine-b"):
        out = sw.run_sweep(s, experiment=exp, env_label=label, progress=False, quiet=True)
        assert [o.status for o in out] == ["FINISHED"]
    children = search(exp, "tags.run_kind = 'train'")
    assert sorted(c.data.tags[schema.TAG_ENV_LABEL] for c in children) == ["machine-a", "machine-b"]
    assert all(c.info.status == "FINISHED" for c in children)
    # artifacts travel through the server's artifact proxy
    text = mlflow.artifacts.load_text(f"runs:/{children[0].info.run_id}/timing/step_times.csv")
    assert text.startswith("step,step_time_s\n") and len(text.splitlines()) == 3
    # resume over HTTP: nothing is redone
    assert [o.status for o in sw.run_sweep(s, experiment=exp, env_label="machine-a", progress=False, quiet=True)] == ["SKIPPED"]
    assert len(search(exp, "tags.run_kind = 'train'")) == 2
    # and the analysis reads both machines' runs over HTTP and logs its own run there
    from analysis.app import main as analyze

    out = tmp_path / "report"
    assert analyze(["--experiment", exp, "--out", str(out), "--jobs", "1"]) == 0
    summary = (out / "summary.csv").read_text()
    assert "machine-a" in summary and "machine-b" in summary
    assert (out / "report.md").is_file()
    done = search(exp, "tags.run_kind = 'analysis'")
    assert len(done) == 1 and done[0].info.status == "FINISHED"


@pytest.mark.server
def test_server_down_mid_sweep_keeps_measurements_and_upload_sends_them(tmp_path, monkeypatch):
    from tests.mlflow_server import MlflowServer

    server = MlflowServer(f"sqlite:///{tmp_path / 'down.db'}", tmp_path / "artifacts").start()
    try:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", server.url)
        monkeypatch.setenv("ROOFLINE_SPOOL_DIR", str(tmp_path / "spool"))
        monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
        mlflow.set_tracking_uri(server.url)
        s = spec(matrix={"model": ["resnet18"], "batch_size": [2, 4]}, name="outage")

        def kill_after_first(outcome):
            if outcome.status == "FINISHED":
                server.stop()

        out = sw.run_sweep(s, experiment="outage", env_label="box", progress=False, quiet=True,
                           on_child_done=kill_after_first)
        assert [o.status for o in out] == ["FINISHED", "OFFLINE"]
        entries = spooled_runs()
        assert sorted(e["record"]["run_kind"] for e in entries) == ["sweep", "train"]
        child = next(e for e in entries if e["record"]["run_kind"] == "train")
        assert child["status"] == "FINISHED" and child["record"]["metrics"]["throughput_samples_per_s"] > 0
        assert json.loads(json.dumps(child["record"]["params"]))["batch_size"] == "4"

        server.start()
        sent, left = upload_spooled(say=lambda *_: None)
        assert (sent, left) == (2, 0)
        parent = search("outage", "tags.run_kind = 'sweep'")
        assert len(parent) == 1 and parent[0].info.status == "FINISHED"
        assert parent[0].data.metrics["children_offline"] == 1
        children = search("outage", f"tags.mlflow.parentRunId = '{parent[0].info.run_id}'")
        assert sorted(c.data.params["batch_size"] for c in children) == ["2", "4"]
        assert all(c.info.status == "FINISHED" for c in children)
        uploaded = next(c for c in children if c.data.params["batch_size"] == "4")
        assert mlflow.artifacts.load_text(f"runs:/{uploaded.info.run_id}/timing/step_times.csv").count("\n") == 3

        again = sw.run_sweep(s, experiment="outage", env_label="box", progress=False, quiet=True)
        assert [o.status for o in again] == ["SKIPPED", "SKIPPED"]
        assert len(search("outage", "tags.run_kind = 'train'")) == 2
    finally:
        server.stop()
        mlflow.set_tracking_uri(None)


def test_cli_takes_mlproject_style_values():
    """mlflow run passes each -P value as one shell-quoted word; empty means not given."""
    argv = ["--models", "resnet18 mobilenet_v2", "--batch-sizes", "16,32", "--precisions", "fp32 bf16",
            "--image-sizes", "", "--repeats", "", "--matrix", "", "--name", "", "--device", "cpu",
            "--warmup-iters", "", "--iters", "auto", "--image-size", "", "--data", "", "--workers", "", "--env-label", ""]
    s = sw.spec_from_args(sw.build_parser().parse_args(argv))
    assert s.matrix == {"model": ["resnet18", "mobilenet_v2"], "batch_size": [16, 32], "precision": ["fp32", "bf16"]}
    assert s.base == {"device": "cpu", "iters": "auto"} and s.repeats == 1 and s.name.startswith("sweep-")
