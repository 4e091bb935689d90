"""python -m train.sweep: the matrix, failure isolation, resume, and many machines on one server."""

from __future__ import annotations

import os
import uuid

import mlflow
import pytest

from common import schema
from common.errors import UsageError
from common.spool import spooled_runs
from common.upload import upload_spooled
from train.sweep.__main__ import build_parser, main, spec_from_args
from train.sweep.runner import run_sweep
from train.sweep.spec import (
    SweepSpec,
    TAG_RESUME_OF,
    TAG_SWEEP_KEY,
    TAG_SWEEP_NAME,
    child_label,
    sweep_key,
)
from train.sweep.state import existing_state
from train.config import TrainConfig
from tests.helpers import dead_pid

TINY_BASE = {"image_size": 32, "iters": 2, "warmup_iters": 1, "device": "cpu"}


def spec(**kw) -> SweepSpec:
    kw.setdefault("matrix", {"model": ["resnet18"], "batch_size": [2]})
    kw.setdefault("base", dict(TINY_BASE))
    return SweepSpec(**kw)


def search(experiment: str, filt: str = "") -> list:
    return mlflow.search_runs(
        experiment_names=[experiment], filter_string=filt, output_format="list"
    )


# ---------------------------------------------------------------- the spec (pure)
def test_plan_is_the_cross_product_in_repeat_major_order():
    s = spec(matrix={"model": ["resnet18", "resnet34"], "batch": [2, 4]}, repeats=2)
    plan = [(c.model, c.batch_size, r) for c, r in s.plan()]
    assert plan == [
        ("resnet18", 2, 0),
        ("resnet18", 4, 0),
        ("resnet34", 2, 0),
        ("resnet34", 4, 0),
        ("resnet18", 2, 1),
        ("resnet18", 4, 1),
        ("resnet34", 2, 1),
        ("resnet34", 4, 1),
    ]


def test_repeated_axis_values_run_once_in_first_seen_order():
    s = spec(
        matrix={
            "model": ["resnet18", "resnet34", "resnet18"],
            "batch_size": [4, 2, 4],
            "precision": ["fp32", "FP32"],
        }
    )
    assert s.matrix["model"] == ["resnet18", "resnet34"] and s.matrix["batch_size"] == [4, 2]
    # "FP32" is a different axis value but the same configuration once TrainConfig normalises it
    assert [(c.model, c.batch_size, c.precision) for c, _ in s.plan()] == [
        ("resnet18", 4, "fp32"),
        ("resnet18", 2, "fp32"),
        ("resnet34", 4, "fp32"),
        ("resnet34", 2, "fp32"),
    ]
    args = build_parser().parse_args(["--models", "resnet18", "resnet18", "--batch-sizes", "2,2"])
    assert spec_from_args(args).matrix == {"model": ["resnet18"], "batch_size": [2]}


def test_sweep_key_covers_every_field_but_env_label_and_labels_show_other_axes():
    s = spec(
        matrix={
            "model": ["resnet18"],
            "batch_size": [2],
            "data": ["synthetic", "fake"],
            "seed": [0, 1],
        }
    )
    (a, _), (b, _), (c, _), (d, _) = s.plan()
    assert (
        a.config_key() == b.config_key() == c.config_key()
    )  # the analysis join ignores data and seed
    assert len({sweep_key(x) for x in (a, b, c, d)}) == 4  # resume does not
    assert sweep_key(a) == sweep_key(
        TrainConfig(
            **{**TINY_BASE, "model": "resnet18", "batch_size": "2", "env_label": "elsewhere"}
        )
    )
    assert child_label(c, 1, list(s.matrix)) == "resnet18 b2 fp32 32px data=fake seed=0 #1"


def test_env_label_is_not_part_of_the_default_name():
    assert (
        spec(base={**TINY_BASE, "env_label": "box-a"}).name
        == spec(base={**TINY_BASE, "env_label": "box-b"}).name
    )
    assert spec(base={**TINY_BASE, "env_label": "box-a"}).env_label == "box-a"


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
    with pytest.raises(
        ValueError,
        match="model=resnet18 batch_size=0 image_size=32: batch_size must be a positive integer",
    ):
        spec(matrix={"model": ["resnet18"], "batch_size": [2, 0]}).plan()


def test_cli_matrix_file_and_flags(tmp_path):
    f = tmp_path / "sweep.yaml"
    f.write_text(
        "name: nightly\nrepeats: 3\nmatrix:\n  model: [resnet18, mobilenet_v2]\n  batch_size: [8]\n"
        "base:\n  image_size: 64\n  iters: auto\n"
    )
    args = build_parser().parse_args(
        ["--matrix", str(f), "--batch-sizes", "16", "32", "--device", "cpu"]
    )
    s = spec_from_args(args)
    assert s.name == "nightly" and s.repeats == 3
    assert s.matrix == {
        "model": ["resnet18", "mobilenet_v2"],
        "batch_size": [16, 32],
    }  # flag overrides the file
    assert s.base == {"image_size": 64, "iters": "auto", "device": "cpu"}
    assert len(s.plan()) == 12


@pytest.mark.parametrize(
    "argv,message",
    [
        ([], "nothing to sweep"),
        (
            ["--models", "resnet18", "--model", "resnet34"],
            "--model is a single value but model is a matrix axis",
        ),
        (["--matrix", "/nonexistent.yaml"], "sweep file /nonexistent.yaml does not exist"),
        (["--models", "resnet18", "--repeats", "0"], "repeats must be a positive integer"),
        (["--models", "resnet18", "--batch", "-1"], "batch_size must be a positive integer"),
        (["--models", "resnet18", "resnet81"], "unknown model 'resnet81': did you mean resnet18"),
        (
            ["--models", "resnet18", "--env-label", 'it\'s "x"', "--dry-run"],
            "contains both quote characters ' and \"; rename it",
        ),
        (
            ["--models", "resnet18", "--env-label", "x" * 8001, "--dry-run"],
            "is 8001 characters long: use at most 100",
        ),
        (["--models", "resnet18", "--name", "s" * 300], "sweep name 'ssss"),
    ],
)
def test_cli_bad_input_is_one_line(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0]


def test_cli_matrix_file_that_is_not_yaml(tmp_path, capsys):
    f = tmp_path / "bad.yaml"
    f.write_text("matrix: [unclosed")
    assert main(["--matrix", str(f)]) == 2
    assert "is not valid YAML/JSON" in capsys.readouterr().err


@pytest.mark.parametrize(
    "text, problem",
    [
        (
            "matrix:\n  batch_size: [1, 2\n  model: resnet18\n",
            "expected ',' or ']', but got ':' at line 3, column 8 (while parsing a flow sequence at "
            "line 2, column 15)",
        ),
        (
            "matrix:\n\tbatch_size: [1]\n",
            "found character '\\t' that cannot start any token at line 2",
        ),
    ],
)
def test_malformed_yaml_names_the_problem_and_its_line(tmp_path, capsys, text, problem):
    """Issue 15: the line ended with YAML's caret (`...: ^`), the last line of its excerpt."""
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    assert main(["--matrix", str(f)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"error: sweep file {f} is not valid YAML/JSON: {problem}"
    )
    assert err[0].endswith("; fix that line (indent with spaces, close every [ and {)")


# ---------------------------------------------------------------- running against a local store
def test_failure_isolation_and_resume(tracking, capsys):
    exp = "sweep-local"
    s = spec(
        matrix={"model": ["resnet18"], "batch_size": [2], "precision": ["fp32", "fp16"]}, name="iso"
    )
    out = run_sweep(s, experiment=exp, env_label="box-a", progress=False)
    assert [(o.label, o.status) for o in out] == [
        ("resnet18 b2 fp32 32px #0", "FINISHED"),
        ("resnet18 b2 fp16 32px #0", "FAILED"),
    ]
    assert "fp16 autocast is not supported" in out[1].error

    parents = search(exp, "tags.run_kind = 'sweep'")
    assert len(parents) == 1
    parent = parents[0]
    assert parent.info.status == "FINISHED"
    assert (
        parent.data.metrics["children_finished"] == 1
        and parent.data.metrics["children_failed"] == 1
    )
    children = search(exp, f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    by_status = {c.info.status: c for c in children}
    assert set(by_status) == {"FINISHED", "FAILED"} and len(children) == 2
    failed = by_status["FAILED"]
    assert "fp16 autocast is not supported" in failed.data.tags[schema.TAG_ERROR]
    assert failed.data.params["precision"] == "fp16" and failed.data.params["repeat"] == "0"
    assert by_status["FINISHED"].data.params["repeat"] == "0"
    assert by_status["FINISHED"].data.tags[TAG_SWEEP_NAME] == "iso"
    # what the UI shows: names with the repeat, descriptions saying what happened
    assert by_status["FINISHED"].info.run_name == "b2-fp32-32px-resnet18-cpu-r0"
    assert failed.info.run_name == "b2-fp16-32px-resnet18-cpu-r0"
    assert failed.data.tags[schema.TAG_CONFIG_LABEL] == "b2/fp16/32px/resnet18"
    assert failed.data.tags[schema.TAG_NOTE].startswith("FAILED before measuring: fp16 autocast")
    assert (
        by_status["FINISHED"].data.tags[schema.TAG_NOTE].endswith("Repeat 0 of sweep iso (box-a).")
    )
    note = parent.data.tags[schema.TAG_NOTE].splitlines()
    assert note[0] == (
        "Sweep iso on box-a: 2 configuration(s) x 1 repeat(s) over model = resnet18; "
        "batch_size = 2; precision = fp32, fp16."
    )
    assert note[1].startswith("sweep iso: 1 finished, 0 skipped (done before), 1 failed")
    assert note[-1].startswith("Fastest: resnet18 b2 fp32 32px #0, ")

    # Same sweep again: the finished config is skipped, the failed one retried, under the same parent.
    again = run_sweep(s, experiment=exp, env_label="box-a", progress=False)
    assert [o.status for o in again] == ["SKIPPED", "FAILED"]
    assert len(search(exp, "tags.run_kind = 'sweep'")) == 1
    assert len(search(exp, "attributes.status = 'FINISHED' and tags.run_kind = 'train'")) == 1
    # Another machine (env label) does not skip what box-a did.
    other = run_sweep(spec(name="iso"), experiment=exp, env_label="box-b", progress=False)
    assert [o.status for o in other] == ["FINISHED"]


def test_failure_while_preparing_is_a_failed_child_and_the_sweep_goes_on(tracking, monkeypatch):
    """Out of memory while allocating the batch (inside the run) and an unexpected error before the
    run opened: both become FAILED children with a one-line reason; the next configuration runs."""
    import train.bench as bench
    import train.run

    real_open = bench.open_source

    def open_source(cfg, device):
        if cfg.batch_size == 3:
            raise RuntimeError(
                "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate "
                "memory: you tried to allocate 1228800000000 bytes. Error code 12"
            )
        return real_open(cfg, device)

    real_preflight = bench.preflight

    def preflight(cfg):
        if cfg.batch_size == 5:
            raise OSError("disk on fire")
        return real_preflight(cfg)

    monkeypatch.setattr(bench, "open_source", open_source)
    monkeypatch.setattr(train.run, "preflight", preflight)  # where the run calls it
    exp = "sweep-prep"
    out = run_sweep(
        spec(matrix={"model": ["resnet18"], "batch_size": [3, 5, 2]}, name="prep"),
        experiment=exp,
        env_label="oom-box",
        progress=False,
    )
    assert [o.status for o in out] == ["FAILED", "FAILED", "FINISHED"]
    assert out[0].error == (
        "out of memory on cpu at batch 3 (resnet18, 32px, fp32): use a smaller --batch or --image-size"
    )
    assert out[1].error == "OSError: disk on fire"
    client = mlflow.tracking.MlflowClient()
    for o, batch in zip(out[:2], ("3", "5")):
        run = client.get_run(o.run_id)
        assert run.info.status == "FAILED" and run.data.tags[schema.TAG_ERROR] == o.error
        assert run.data.params["batch_size"] == batch and run.data.params["repeat"] == "0"
        assert run.data.tags[TAG_SWEEP_KEY] == o.sweep_key
    (parent,) = search(exp, "tags.run_kind = 'sweep'")
    assert parent.info.status == "FINISHED" and parent.data.metrics["children_failed"] == 2
    assert len(search(exp, f"tags.mlflow.parentRunId = '{parent.info.run_id}'")) == 3


def test_every_run_failing_fails_the_parent_and_exits_1(tracking, capsys):
    argv = [
        "--models",
        "resnet18",
        "--precisions",
        "fp16",
        "--image-size",
        "32",
        "--iters",
        "2",
        "--warmup-iters",
        "1",
        "--device",
        "cpu",
        "--env-label",
        "box",
        "--no-progress",
        "--name",
        "allbad",
        "--experiment",
        "allbad",
    ]
    assert main(argv) == 1
    (parent,) = search("allbad", "tags.run_kind = 'sweep'")
    assert parent.info.status == "FAILED"
    assert parent.data.tags[schema.TAG_ERROR].startswith(
        "all 1 run(s) failed; first: fp16 autocast is not supported"
    )


def test_resume_tells_apart_configurations_equal_in_config_key(tracking):
    """data: [synthetic, fake] share config_key; an interrupted first attempt must not skip `fake`."""
    exp = "sweep-data"
    s = spec(
        matrix={"model": ["resnet18"], "batch_size": [2], "data": ["synthetic", "fake"]},
        base={**TINY_BASE, "workers": 0},
        name="data",
    )

    def interrupt(outcome):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sweep(s, experiment=exp, env_label="box", progress=False, on_child_done=interrupt)
    (parent,) = search(exp, "tags.run_kind = 'sweep'")
    assert parent.info.status == "KILLED" and parent.data.metrics["children_finished"] == 1

    again = run_sweep(s, experiment=exp, env_label="box", progress=False)
    assert [(o.label, o.status) for o in again] == [
        ("resnet18 b2 fp32 32px data=synthetic #0", "SKIPPED"),
        ("resnet18 b2 fp32 32px data=fake #0", "FINISHED"),
    ]
    assert again[0].config_key == again[1].config_key and again[0].sweep_key != again[1].sweep_key
    train = search(exp, "tags.run_kind = 'train'")
    assert sorted(r.data.params["data"] for r in train) == ["fake", "synthetic"]
    assert [r.info.run_id for r in search(exp, "tags.run_kind = 'sweep'")] == [parent.info.run_id]


def _cut_off_at_the_end_of(batch: str, monkeypatch):
    """The server "goes away" while the child of `batch` logs its results (its run already exists)."""
    real = mlflow.tracking.MlflowClient.log_batch

    def log_batch(self, run_id, metrics=(), params=(), tags=(), **kw):
        run = self.get_run(run_id)
        if run.data.params.get("batch_size") == batch and any(
            m.key == "step_time_median_s" for m in metrics
        ):
            raise ConnectionError("Connection refused (test outage)")
        return real(self, run_id, metrics=metrics, params=params, tags=tags, **kw)

    monkeypatch.setattr(mlflow.tracking.MlflowClient, "log_batch", log_batch)


def test_run_cut_off_mid_child_counts_as_done_and_is_completed_not_redone(tracking, monkeypatch):
    exp = "sweep-cut"
    s = spec(matrix={"model": ["resnet18"], "batch_size": [4, 2]}, name="cut")
    with monkeypatch.context() as m:
        _cut_off_at_the_end_of("4", m)
        out = run_sweep(s, experiment=exp, env_label="box", progress=False)
    assert [o.status for o in out] == ["OFFLINE", "OFFLINE"]  # the second went straight offline
    cut = out[0].run_id
    client = mlflow.tracking.MlflowClient()
    assert client.get_run(cut).info.status == "RUNNING"
    entry = next(e for e in spooled_runs() if e["run_id"] == cut)
    assert (
        entry["record"]["tags"][TAG_SWEEP_NAME] == "cut"
        and entry["record"]["params"]["repeat"] == "0"
    )
    assert entry["record"]["tags"][TAG_SWEEP_KEY] == out[0].sweep_key

    # What a resume sees before uploading: both done (spooled), and the cut run is not "stale".
    state = existing_state("cut", "box", exp, reachable=True)
    assert (
        state.done == {(out[0].sweep_key, 0), (out[1].sweep_key, 0)} and state.stale_running == []
    )
    # The resume itself uploads this sweep's spooled runs first: nothing is redone or duplicated.
    again = run_sweep(s, experiment=exp, env_label="box", progress=False)
    assert [o.status for o in again] == ["SKIPPED", "SKIPPED"] and spooled_runs() == []
    runs = search(exp, "tags.run_kind = 'train'")
    assert len(runs) == 2 and all(
        r.info.status == "FINISHED" and schema.TAG_ERROR not in r.data.tags for r in runs
    )
    assert cut in {r.info.run_id for r in runs}
    assert client.get_run(cut).data.metrics["step_time_median_s"] > 0
    (parent,) = search(exp, "tags.run_kind = 'sweep'")
    assert parent.info.status == "FINISHED" and parent.data.metrics["children_skipped"] == 2


def test_server_down_at_start_costs_one_health_check_and_spools(tmp_path, monkeypatch, capsys):
    """No MLflow call at all while the server does not answer /health (MLflow's own retries took
    ~4 minutes); FAILED + OFFLINE exits 0 because offline measurements are kept."""
    import requests

    from tests.mlflow_server import free_port

    url = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
    monkeypatch.setenv("ROOFLINE_SPOOL_DIR", str(tmp_path / "spool"))
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    mlflow.set_tracking_uri(url)
    health = []
    real_get = requests.get
    monkeypatch.setattr(
        requests,
        "get",
        lambda u, **kw: (health.append((u, kw.get("timeout"))), real_get(u, **kw))[1],
    )

    def no_mlflow(*a, **k):
        raise AssertionError("MLflow was called while the server was known to be down")

    monkeypatch.setattr(mlflow, "search_runs", no_mlflow)
    monkeypatch.setattr(mlflow.tracking.MlflowClient, "__init__", no_mlflow)
    try:
        argv = [
            "--models",
            "resnet18",
            "--precisions",
            "fp32",
            "fp16",
            "--image-size",
            "32",
            "--iters",
            "2",
            "--warmup-iters",
            "1",
            "--device",
            "cpu",
            "--env-label",
            "box",
            "--no-progress",
            "--name",
            "down",
        ]
        assert main(argv) == 0
    finally:
        mlflow.set_tracking_uri(None)
    assert health == [(url + "/health", 5.0)]
    out = capsys.readouterr()
    assert "sweep down: 0 finished, 0 skipped (done before), 1 failed, 1 kept offline" in out.out
    assert "tracking server unreachable" in out.err
    entries = {(e["record"]["run_kind"], e["status"]) for e in spooled_runs()}
    assert entries == {("sweep", "FINISHED"), ("train", "FINISHED"), ("train", "FAILED")}


def test_env_label_with_a_quote_resumes(tracking):
    s = spec(name="quote")
    assert [
        o.status for o in run_sweep(s, experiment="q", env_label="bob's box", progress=False)
    ] == ["FINISHED"]
    assert [
        o.status for o in run_sweep(s, experiment="q", env_label="bob's box", progress=False)
    ] == ["SKIPPED"]


def test_same_name_with_another_matrix_is_refused(tracking):
    run_sweep(spec(name="fixed"), experiment="m", env_label="box", progress=False)
    bigger = spec(matrix={"model": ["resnet18"], "batch_size": [2, 4]}, name="fixed")
    with pytest.raises(
        UsageError,
        match=r"sweep 'fixed' on box already exists with a different matrix \(was .*\[2\]",
    ):
        run_sweep(bigger, experiment="m", env_label="box", progress=False)
    with pytest.raises(UsageError, match="different repeats"):
        run_sweep(spec(name="fixed", repeats=2), experiment="m", env_label="box", progress=False)
    assert len(search("m", "tags.run_kind = 'train'")) == 1  # nothing ran
    assert [
        o.status
        for o in run_sweep(spec(name="fixed"), experiment="m", env_label="box", progress=False)
    ] == ["SKIPPED"]


def test_resume_under_mlflow_run_labels_the_new_run_instead_of_leaving_it_empty(
    tracking, monkeypatch
):
    s = spec(name="mlrun")
    run_sweep(s, experiment="mlrun", env_label="box", progress=False)
    (parent,) = search("mlrun", "tags.run_kind = 'sweep'")
    client = mlflow.tracking.MlflowClient()
    made = client.create_run(
        parent.info.experiment_id
    ).info.run_id  # what `mlflow run` does before starting us
    monkeypatch.setenv("MLFLOW_RUN_ID", made)
    assert [
        o.status for o in run_sweep(s, experiment="mlrun", env_label="box", progress=False)
    ] == ["SKIPPED"]
    pointer = client.get_run(made)
    assert (
        pointer.data.tags[schema.TAG_RUN_KIND] == "sweep"
        and pointer.data.tags[TAG_SWEEP_NAME] == "mlrun"
    )
    assert pointer.data.tags[TAG_RESUME_OF] == parent.info.run_id
    assert pointer.data.tags["mlflow.parentRunId"] == parent.info.run_id
    assert parent.info.run_id in pointer.data.tags["mlflow.note.content"]
    assert existing_state("mlrun", "box", "mlrun").parent_run_id == parent.info.run_id
    assert client.get_run(parent.info.run_id).data.metrics["children_skipped"] == 1


def test_runs_left_running_by_a_killed_sweep_are_failed_and_redone(tracking):
    """Children a killed sweep left RUNNING end FAILED (one from before runs carried the `process`
    tag too); another host's child of the same sweep and label is left alone."""
    exp = "sweep-stale"
    s = spec(name="stale")
    cfg = s.plan()[0][0]
    client = mlflow.tracking.MlflowClient()
    exp_id = client.create_experiment(exp)
    host = schema.host_name()

    def left_running(**tags):
        run = client.create_run(
            exp_id,
            tags={
                schema.TAG_RUN_KIND: "train",
                TAG_SWEEP_NAME: "stale",
                schema.TAG_ENV_LABEL: "box-a",
                schema.TAG_CONFIG_KEY: cfg.config_key(),
                **tags,
            },
        )
        client.log_param(run.info.run_id, "repeat", "0")
        return run.info.run_id

    killed = left_running(**{schema.TAG_HOST: host, schema.TAG_PROCESS: f"{host}:{dead_pid()}:0"})
    legacy = left_running()  # made by a version without the process tag
    elsewhere = left_running(**{schema.TAG_HOST: "other-box", schema.TAG_PROCESS: "other-box:1:0"})
    out = run_sweep(s, experiment=exp, env_label="box-a", progress=False)
    assert [o.status for o in out] == ["FINISHED"]
    for run_id in (killed, legacy):
        old = client.get_run(run_id)
        assert old.info.status == "FAILED" and "interrupted" in old.data.tags[schema.TAG_ERROR]
    assert client.get_run(elsewhere).info.status == "RUNNING"


def test_resumed_parent_finishes_clean_and_summarises_every_invocation(tracking):
    """Interrupted after its first child and resumed: the parent ends FINISHED without the
    interruption's error, and its summary.csv and children_finished count both children, the one
    of the first invocation with its run id and numbers."""
    import csv
    import io

    exp = "sweep-resumed"
    s = spec(matrix={"model": ["resnet18"], "batch_size": [2, 3]}, name="resumed")

    def interrupt(outcome):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sweep(s, experiment=exp, env_label="box", progress=False, on_child_done=interrupt)
    (parent,) = search(exp, "tags.run_kind = 'sweep'")
    assert parent.data.tags[schema.TAG_ERROR] == "interrupted by the user"
    (first,) = search(exp, "tags.run_kind = 'train'")

    again = run_sweep(s, experiment=exp, env_label="box", progress=False)
    assert [o.status for o in again] == ["SKIPPED", "FINISHED"]
    client = mlflow.tracking.MlflowClient()
    parent = client.get_run(parent.info.run_id)
    assert parent.info.status == "FINISHED" and schema.TAG_ERROR not in parent.data.tags
    assert parent.data.metrics["children_finished"] == 2
    assert parent.data.metrics["children_skipped"] == 1
    text = open(client.download_artifacts(parent.info.run_id, "sweep/summary.csv")).read()
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [r["status"] for r in rows] == ["SKIPPED", "FINISHED"]
    assert rows[0]["run_id"] == first.info.run_id
    assert (
        float(rows[0]["throughput_samples_per_s"]) == first.data.metrics["throughput_samples_per_s"]
    )
    assert rows[1]["run_id"] == again[1].run_id


def test_the_same_sweep_running_elsewhere_on_this_machine_is_refused_in_one_line(tracking, capsys):
    from train.sweep.state import sweep_lock

    argv = ["--models", "resnet18", "--batch-sizes", "2", "--image-size", "32", "--iters", "2"]
    argv += ["--warmup-iters", "1", "--device", "cpu", "--name", "twice", "--env-label", "box"]
    argv += ["--no-progress"]
    with sweep_lock("twice", "box"):  # what the first invocation holds while it runs
        assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        f"error: sweep 'twice' on box is already running on this machine (process {os.getpid()}): "
        "wait for it to end (running it again then resumes it), or give this one another --name"
    )
    assert mlflow.search_runs(search_all_experiments=True, output_format="list") == []
    assert main(argv) == 0  # once the first has ended


def test_corrupt_spool_entry_does_not_stop_a_sweep(tracking, capsys):
    from common.spool import spool_dir

    bad = spool_dir() / "bad" / "run.json"
    bad.parent.mkdir(parents=True)
    bad.write_text('{"local_id": "bad", "rec')
    out = run_sweep(spec(name="despite"), experiment="despite", env_label="box", progress=False)
    assert [o.status for o in out] == ["FINISHED"]
    assert f"warning: skipped spool entry {bad}: it cannot be read" in capsys.readouterr().err


def test_cli_end_to_end_prints_table_and_summary(tracking, capsys):
    argv = [
        "--models",
        "resnet18",
        "--batch-sizes",
        "2",
        "--image-size",
        "32",
        "--iters",
        "2",
        "--warmup-iters",
        "1",
        "--device",
        "cpu",
        "--env-label",
        "cli-box",
        "--no-progress",
        "--name",
        "cli",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "| resnet18 b2 fp32 32px | 0 | FINISHED |" in out
    assert "sweep cli: 1 finished, 0 skipped (done before), 0 failed" in out
    assert main(argv) == 0
    assert "sweep cli: 0 finished, 1 skipped (done before), 0 failed" in capsys.readouterr().out


# ---------------------------------------------------------------- a real server, over HTTP
@pytest.mark.server
def test_two_machines_sweep_and_analysis_on_one_server(on_server, tmp_path):
    exp = f"multi-{uuid.uuid4().hex[:8]}"
    s = spec(name="fleet")
    for label in ("machine-a", "machine-b"):
        out = run_sweep(s, experiment=exp, env_label=label, progress=False)
        assert [o.status for o in out] == ["FINISHED"]
    children = search(exp, "tags.run_kind = 'train'")
    assert sorted(c.data.tags[schema.TAG_ENV_LABEL] for c in children) == ["machine-a", "machine-b"]
    assert all(c.info.status == "FINISHED" for c in children)
    # artifacts travel through the server's artifact proxy
    text = mlflow.artifacts.load_text(f"runs:/{children[0].info.run_id}/timing/step_times.csv")
    assert text.startswith("step,step_time_s\n") and len(text.splitlines()) == 3
    # resume over HTTP: nothing is redone
    assert [
        o.status for o in run_sweep(s, experiment=exp, env_label="machine-a", progress=False)
    ] == ["SKIPPED"]
    assert len(search(exp, "tags.run_kind = 'train'")) == 2
    # and the analysis reads both machines' runs over HTTP and logs its own run there
    from analysis.app import main as analyze

    out = tmp_path / "report"
    assert analyze(["--experiment", exp, "--out", str(out), "--jobs", "1"]) == 0
    import pandas as pd

    summary = pd.read_csv(out / "summary.csv")
    by_label = {c.data.tags[schema.TAG_ENV_LABEL]: c.info.run_id for c in children}
    assert sorted(summary["env_label"]) == ["machine-a", "machine-b"]  # one group per machine
    for row in summary.to_dict("records"):
        assert row["n_runs"] == 1 and row["run_ids"] == by_label[row["env_label"]]
    assert (out / "report.md").is_file()
    done = search(exp, "tags.run_kind = 'analysis'")
    assert len(done) == 1 and done[0].info.status == "FINISHED"


@pytest.mark.server
def test_server_down_during_a_child_run_loses_nothing_and_duplicates_nothing(tmp_path, monkeypatch):
    """The server is stopped while the second child is running (its run exists, RUNNING). The
    measurement is spooled; a resume while the server is still down redoes nothing; upload completes
    the same run; a resume once it is back finds everything done: one FINISHED run per config."""
    import train.bench as bench
    from tests.mlflow_server import MlflowServer

    server = MlflowServer(f"sqlite:///{tmp_path / 'down.db'}", tmp_path / "artifacts").start()
    try:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", server.url)
        monkeypatch.setenv("ROOFLINE_SPOOL_DIR", str(tmp_path / "spool"))
        monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
        monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
        mlflow.set_tracking_uri(server.url)
        s = spec(matrix={"model": ["resnet18"], "batch_size": [2, 4]}, name="outage")

        real_step, steps_at_4 = bench.train_step, []

        def step_then_outage(parts, x, y):
            if x.shape[0] == 4:
                steps_at_4.append(1)
                if len(steps_at_4) == 3:  # counting took two steps; this is the warm-up step
                    server.stop()
            return real_step(parts, x, y)

        with monkeypatch.context() as m:
            m.setattr(bench, "train_step", step_then_outage)
            out = run_sweep(s, experiment="outage", env_label="box", progress=False)
        assert [o.status for o in out] == ["FINISHED", "OFFLINE"]
        cut = out[1].run_id
        assert cut is not None  # created on the server before it went down
        entries = spooled_runs()
        assert sorted(e["record"]["run_kind"] for e in entries) == ["sweep", "train"]
        child = next(e for e in entries if e["record"]["run_kind"] == "train")
        assert child["run_id"] == cut and child["status"] == "FINISHED"
        assert (
            child["record"]["tags"][TAG_SWEEP_NAME] == "outage"
            and child["record"]["params"]["batch_size"] == "4"
        )
        assert child["unsent"]["metrics"]["throughput_samples_per_s"] > 0

        # Resume while the server is still down: b2 is known from the ledger, b4 from the spool.
        offline = run_sweep(s, experiment="outage", env_label="box", progress=False)
        assert [o.status for o in offline] == ["SKIPPED", "SKIPPED"]
        assert len(spooled_runs()) == 2  # the parent's entry was continued, not doubled

        server.start()
        sent, left = upload_spooled()
        assert (sent, left) == (2, 0)
        (parent,) = search("outage", "tags.run_kind = 'sweep'")
        assert parent.info.status == "FINISHED" and parent.data.metrics["children_skipped"] == 2
        children = search("outage", f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
        assert sorted(c.data.params["batch_size"] for c in children) == ["2", "4"]
        assert all(
            c.info.status == "FINISHED" and schema.TAG_ERROR not in c.data.tags for c in children
        )
        uploaded = next(c for c in children if c.data.params["batch_size"] == "4")
        assert uploaded.info.run_id == cut
        assert mlflow.artifacts.load_text(f"runs:/{cut}/timing/step_times.csv").count("\n") == 3

        again = run_sweep(s, experiment="outage", env_label="box", progress=False)
        assert [o.status for o in again] == ["SKIPPED", "SKIPPED"]
        assert len(search("outage", "tags.run_kind = 'train'")) == 2
        assert len(search("outage", "tags.run_kind = 'sweep'")) == 1
    finally:
        server.stop()
        mlflow.set_tracking_uri(None)


def test_cli_takes_mlproject_style_values():
    """mlflow run passes each -P value as one shell-quoted word; empty means not given."""
    argv = [
        "--models",
        "resnet18 mobilenet_v2",
        "--batch-sizes",
        "16,32",
        "--precisions",
        "fp32 bf16",
        "--image-sizes",
        "",
        "--repeats",
        "",
        "--matrix",
        "",
        "--name",
        "",
        "--device",
        "cpu",
        "--warmup-iters",
        "",
        "--iters",
        "auto",
        "--image-size",
        "",
        "--data",
        "",
        "--workers",
        "",
        "--env-label",
        "",
        "--channels-last",
        "",
        "--compile",
        "",
        "--seed",
        "",
        "--lr",
        "",
        "--optimizer",
        "",
        "--num-classes",
        "",
        "--ci-target",
        "",
        "--max-iters",
        "",
        "--max-time-s",
        "",
    ]
    s = spec_from_args(build_parser().parse_args(argv))
    assert s.matrix == {
        "model": ["resnet18", "mobilenet_v2"],
        "batch_size": [16, 32],
        "precision": ["fp32", "bf16"],
    }
    assert (
        s.base == {"device": "cpu", "iters": "auto"}
        and s.repeats == 1
        and s.name.startswith("sweep-")
    )
    given = argv[: argv.index("--image-size")] + [
        "--channels-last",
        "true",
        "--compile",
        "false",
        "--seed",
        "3",
        "--lr",
        "0.1",
        "--optimizer",
        "adamw",
        "--num-classes",
        "10",
        "--ci-target",
        "0.05",
        "--max-iters",
        "200",
        "--max-time-s",
        "60",
        "--env-label",
        "lab",
    ]
    s = spec_from_args(build_parser().parse_args(given))
    assert s.base == {
        "device": "cpu",
        "iters": "auto",
        "channels_last": True,
        "compile": False,
        "seed": 3,
        "lr": 0.1,
        "optimizer": "adamw",
        "num_classes": 10,
        "ci_target": 0.05,
        "max_iters": 200,
        "max_time_s": 60.0,
    }
    assert s.env_label == "lab" and {c.max_iters for c, _ in s.plan()} == {200}


def test_compiled_children_each_compile_instead_of_falling_back_to_eager(tracking, monkeypatch):
    """Children share one process, and dynamo counts recompilations of one code object (ResNet.forward
    for every ResNet) across them: past torch._dynamo.config.recompile_limit a child would run eager
    while logged compile=true. Each compiled benchmark starts from a fresh dynamo cache instead.
    Made fast and certain: the limit is 1 (two configurations suffice to hit it) and the backend is
    dynamo's capture only (no Inductor), recording which child each graph was captured in."""
    import functools

    import torch
    import torch._dynamo

    captured, resets, child = [], [], {"n": 0}

    def record(gm, example_inputs):
        captured.append(child["n"])
        return gm.forward

    real_compile, real_reset = torch.compile, torch._dynamo.reset
    monkeypatch.setattr(torch, "compile", functools.partial(real_compile, backend=record))
    monkeypatch.setattr(torch._dynamo, "reset", lambda: (resets.append(child["n"]), real_reset()))
    monkeypatch.setattr(torch._dynamo.config, "recompile_limit", 1)
    outcomes = run_sweep(
        spec(
            matrix={"model": ["resnet18"], "batch_size": [2], "precision": ["fp32", "bf16"]},
            base={**TINY_BASE, "compile": True, "iters": 1},
            name="compiled",
        ),
        experiment="compiled",
        env_label="box",
        progress=False,
        on_child_done=lambda _o: child.update(n=child["n"] + 1),
    )
    assert [o.status for o in outcomes] == ["FINISHED", "FINISHED"]
    assert sorted(set(captured)) == [0, 1]  # the second child compiled too: no eager fallback
    assert resets == [0, 1]  # once per child, before it compiles
