"""What the MLflow UI shows of a run (issue 12): descriptions, names, config labels and numbers,
provenance and dataset tags, system-metric sampling, and a train run's own roofline figure."""

from __future__ import annotations

import json

import mlflow
import pytest

from roofline import run_plot as run_roofline
from roofline.store import measured_roof, peaks_rows
from analysis import roofs
from common.fmt import short_id
from roofline.model import Roof
from common import schema
from common.run_record import dataset_input, system_metrics_interval
from common.tracking import RunSession
from common.upload import upload_spooled
from tests.helpers import TINY, make_cifar10, make_image_folder, png_text
from train.config import TrainConfig
from train.data import dataset_fields


def test_system_metrics_interval_fits_the_expected_length():
    assert system_metrics_interval(None) == 1.0  # unknown: sample every second
    assert system_metrics_interval(1.9) is None  # under two 1-second samples: none
    assert system_metrics_interval(2.0) == 1.0
    assert system_metrics_interval(300.0) == 10.0  # 30 samples
    assert system_metrics_interval(36_000.0) == 60.0  # at most a minute apart


def test_config_label_names_what_differs_and_numbers_are_metrics():
    cfg = TrainConfig(model="resnet18", batch_size=8, image_size=64, env_label="x")
    assert cfg.config_label() == "b8/fp32/64px/resnet18"
    other = TrainConfig(
        model="resnet18",
        batch_size=8,
        image_size=64,
        precision="bf16",
        channels_last=True,
        optimizer="adam",
        num_classes=10,
        env_label="x",
    )
    assert other.config_label() == "b8/bf16/cl/64px/resnet18/adam/10cls"
    header = cfg.header("cpu")  # derived once for a run: what the run is created with
    assert header.metrics == {"config_batch_size": 8.0, "config_image_size": 64.0}
    assert header.params == {**cfg.params(), "device": "cpu"}
    assert (header.label, header.key) == (cfg.config_label(), cfg.config_key())
    assert header.run_name("cpu", 1) == cfg.run_name("cpu", 1)


def test_name_and_label_carry_every_knob_that_changes_the_numbers_and_nothing_else():
    """Issue 24 item 1: hand-written names of runs whose numbers differ."""
    base = dict(model="resnet18", batch_size=2, image_size=32, env_label="x")
    single = TrainConfig(**base)
    ddp = TrainConfig(**base, distributed="ddp", world_size=2, backend="gloo")
    assert single.run_name() == "b2-fp32-32px-resnet18"
    assert ddp.run_name() == "ddp-2proc-b2-fp32-32px-resnet18-gloo"
    assert ddp.config_label() == "ddp/2proc/b2/fp32/32px/resnet18/gloo"
    assert single.config_label() != ddp.config_label()
    bf16 = TrainConfig(**base, precision="bf16", channels_last=True, compile=True)
    assert bf16.run_name() == "b2-bf16-cl-compiled-32px-resnet18"
    ds = TrainConfig(**base, distributed="deepspeed", zero_stage=2, world_size=4)
    assert ds.config_label() == "zero2/4proc/b2/fp32/32px/resnet18"  # backend unresolved
    fake = TrainConfig(**base, data="fake", workers=4)
    assert fake.run_name() == "b2-fp32-32px-resnet18-fake-4workers"
    assert (
        TrainConfig(**base, data="/d/imagenette").config_label() == "b2/fp32/32px/resnet18/folder"
    )
    assert TrainConfig(**base, data="cifar10:/d/c").run_name() == "b2-fp32-32px-resnet18-cifar10"
    # workers only matter when a loader runs; seed, iterations, lr and env label never enter
    same = TrainConfig(
        **{**base, "env_label": "y"}, workers=0, seed=3, iters=7, warmup_iters=2, lr=0.1
    )
    assert same.run_name() == single.run_name() and same.config_label() == single.config_label()


def test_dataset_fields_of_each_source(tmp_path):
    syn = dataset_fields("synthetic", 32, 1000, 0)
    assert (syn["name"], syn["source_type"]) == ("synthetic-32px-1000cls", "code")
    assert syn["digest"] != dataset_fields("synthetic", 32, 1000, 1)["digest"]  # seed counts
    folder = make_image_folder(tmp_path / "imagenette")  # imagenette/train/<class>/
    f = dataset_fields(str(folder), 32, 2, 0)
    assert f["name"] == "imagenette" and f["source_type"] == "local"
    assert f["source"] == {"uri": str((folder / "train").resolve())}
    cifar = make_cifar10(tmp_path / "cifar-10-batches-py")
    c = dataset_fields(f"cifar10:{cifar}", 32, 10, 0)
    assert c["name"] == "cifar10" and c["source"] == {"uri": str(cifar.resolve())}


def test_new_run_gets_source_tags_note_and_dataset_and_a_spooled_one_keeps_them(
    tracking, monkeypatch
):
    ds = dataset_input("synthetic-32px-1000cls", "abc", "code", {"generator": "synthetic"}, "train")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")  # offline first
    mlflow.set_tracking_uri("http://127.0.0.1:9")
    with RunSession("peaks", run_name="p", experiment="ui") as s:
        s.set_note("peaks cpu: 1 TFLOP/s")
        s.log_input(ds)
    assert s.offline
    entry = json.loads(s.spool_path.read_text())
    assert entry["record"]["inputs"] == [ds]
    mlflow.set_tracking_uri(tracking)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking)
    assert upload_spooled() == (1, 0)
    (run,) = mlflow.search_runs(experiment_names=["ui"], output_format="list")
    t = run.data.tags
    assert t[schema.TAG_NOTE] == "peaks cpu: 1 TFLOP/s"
    assert t[schema.TAG_ENTRY_POINT] == "peaks"
    # the measuring process's source, not common/upload.py's
    assert t["mlflow.user"] and not t["mlflow.source.name"].endswith("upload.py")
    assert [(i.dataset.name, i.dataset.digest) for i in run.inputs.dataset_inputs] == [
        ("synthetic-32px-1000cls", "abc")
    ]


def test_run_continued_from_mlflow_run_keeps_its_source_tags(tracking, monkeypatch):
    client = mlflow.tracking.MlflowClient()
    made = client.create_run("0", tags={"mlflow.source.name": "file:///project"})
    monkeypatch.setenv("MLFLOW_RUN_ID", made.info.run_id)
    with RunSession("train", run_name="r") as s:
        pass
    assert s.run_id == made.info.run_id
    assert client.get_run(s.run_id).data.tags["mlflow.source.name"] == "file:///project"


def _peaks_run(env: str, device: str, flops: float, load: tuple | None = None) -> str:
    """A peaks run; `load` = (load average at the start, at most, CPUs) as profiling.peaks logs."""
    tags = {schema.TAG_ENV_LABEL: env, schema.TAG_DEVICE_NAME: device}
    with RunSession("peaks", run_name=f"peaks-{env}", tags=tags) as s:
        s.log_metrics({"peak_flops_per_s_fp32": flops, "peak_dram_bytes_per_s": 2e10})
        if load is not None:
            keys = ("load_average_1m_start", "load_average_1m_max", "cpu_count")
            s.log_metrics(dict(zip(keys, load)))
    return s.run_id


def test_measured_roof_prefers_the_same_environment(tracking):
    mine = _peaks_run("box", "CPU X", 1e11)
    _peaks_run("other", "CPU X", 3e11)  # higher, but another environment
    _peaks_run("box", "CPU Y", 5e11)  # another device
    assert [r["run_id"] for r in peaks_rows("CPU X", "box")] == [mine]
    roof = measured_roof("CPU X", "box")
    assert roof.flops_per_s == {"fp32": 1e11}
    assert roof.sources["flops:fp32"] == f"measured: peaks run {mine[:8]}"
    assert measured_roof("CPU X", "nowhere").flops_per_s == {"fp32": 3e11}  # every env's, highest
    assert measured_roof("CPU Z", "box") is None


def test_a_train_runs_page_and_the_analysis_take_the_same_ceiling(tracking, tmp_path):
    """A quiet older peaks run (load 1 of 8 CPUs) measured 4e11 FLOP/s; a busy newer one (load 12
    of 8 CPUs) only 1e11. The run's roofline.png and the analysis both take the quiet run's ceiling
    (roofline/ceilings.py), not the latest."""
    from train.roofline_figure import log_roofline

    quiet = _peaks_run("box", "CPU Q", 4e11, load=(1.0, 8.0, 8))
    busy = _peaks_run("box", "CPU Q", 1e11, load=(12.0, 14.0, 8))
    assert [r["run_id"] for r in peaks_rows("CPU Q", "box")] == [busy, quiet]  # newest first
    cfg = TrainConfig(model="resnet18", batch_size=8, image_size=64, env_label="box")
    metrics = {"achieved_flops_per_s": 5e10, "modeled_intensity_flops_per_byte": 8.0}
    tags = {  # what a train run's session holds when it draws its figure
        schema.TAG_ENV_LABEL: cfg.env_label,
        schema.TAG_DEVICE_NAME: "CPU Q",
        schema.TAG_CONFIG_LABEL: cfg.config_label(),
    }
    with RunSession("train", run_name="t", tags=tags) as s:
        line = log_roofline(s, cfg.precision, metrics, tmp_path)
    page = mlflow.tracking.MlflowClient().get_run(s.run_id).data
    src = f"measured: peaks run {quiet[:8]}"
    assert (
        line
        and src in page.tags[run_roofline.TAG_ROOF]
        and busy[:8] not in page.tags[run_roofline.TAG_ROOF]
    )
    by_env, _, loads = roofs.measured_roofs(mlflow.search_runs(search_all_experiments=True))
    analysed = by_env[("box", "CPU Q")]
    assert analysed.flops_per_s["fp32"] == 4e11 == measured_roof("CPU Q", "box").flops_per_s["fp32"]
    assert analysed.sources["flops:fp32"] == src
    assert loads[short_id(quiet)]["trust"] == "quiet" and loads[short_id(busy)]["trust"] == "busy"
    # roofline.png's fraction of roof: 5e10 against min(4e11, 8 x 2e10) = 1.6e11
    assert page.metrics[run_roofline.METRIC_FRACTION] == pytest.approx(5e10 / 1.6e11)


def test_run_roofline_figure_says_how_close_to_the_roof():
    roof = Roof("CPU X", {"fp32": 1e11}, {"dram": 2e10}, {"flops:fp32": "measured: peaks run a"})
    fig = run_roofline.draw(roof, "fp32", 2.5e10, 8.0, "resnet18/b2/fp32/32px on CPU X")
    ax = fig.axes[0]
    # right of the ridge (1e11 / 2e10 = 5 FLOP/B) the roof is the peak: 2.5e10 / 1e11
    assert (
        ax.get_title()
        == "compute-bound, 25.0% of roof at its modeled intensity (measured ceilings)"
    )
    # left of it the roof is I x B = 2 x 2e10: 1e10 / 4e10 = 25 %, where the flat peak says 10 %
    low = run_roofline.draw(roof, "fp32", 1e10, 2.0, "t").axes[0].get_title()
    assert low == "memory-bound, 25.0% of roof at its modeled intensity (measured ceilings)"
    fig = run_roofline.run_figure(roof, "fp32", 1e10, 2.0, "t")
    assert fig.tags == {"roofline_roof": "measured: peaks run a", "bound": "memory-bound"}
    assert fig.metrics == {"fraction_of_roof": pytest.approx(0.25)}
    assert fig.line == f"Roofline: {low}; see roofline.png."
    no_bw = Roof("CPU X", {"fp32": 1e11}, {}, {"flops:fp32": "vendor: sheet"})
    assert run_roofline.verdict(run_roofline.run_point(no_bw, "bf16", 1e10, 2.0)) == (
        "no bound: no DRAM bandwidth known (vendor ceilings)"
    )
    note = "summary\n\nConfiguration: x"
    assert run_roofline.with_line(note, "Roofline: a") == "summary\nRoofline: a\n\nConfiguration: x"
    assert run_roofline.with_line("s\nRoofline: a\nc", "Roofline: b") == "s\nRoofline: b\nc"
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "this run at modeled intensity 8 FLOP/B" in labels
    assert "achieved 25 GFLOP/s" in labels and any(lb.startswith("DRAM 20 GB/s") for lb in labels)
    image = run_roofline.png(roof, "fp32", 2.5e10, 8.0, "t")
    assert image[:8] == b"\x89PNG\r\n\x1a\n"
    said = png_text(image)  # what the figure says, read back (roofline.style.write_png)
    assert said["Title"] == f"t\n{ax.get_title()}"
    assert "achieved 25 GFLOP/s" in said["Description"].splitlines()
    # a peaks run without a DRAM figure takes the vendor's, and says where each came from
    vendor = {"flops_per_s": {"fp32": 9e11}, "dram_bytes_per_s": 5e10, "source": "datasheet"}
    measured = Roof("CPU X", {"fp32": 1e11}, sources={"flops:fp32": "measured: peaks run abcdef12"})
    merged = run_roofline.run_roof("CPU X", measured, vendor)
    assert merged.flops_per_s == {"fp32": 1e11} and merged.bytes_per_s == {"dram": 5e10}
    assert run_roofline.run_roof("CPU X", None, None) is None


def test_train_run_logs_its_roofline_against_the_peaks_run(tracking):
    from common.envinfo import device_name
    from train.__main__ import main

    peaks = _peaks_run(schema.default_env_label(), device_name("cpu"), 1e11)
    assert main(TINY) == 0
    (run,) = mlflow.search_runs(
        filter_string="tags.run_kind = 'train'", search_all_experiments=True, output_format="list"
    )
    assert run.data.tags["roofline_roof"] == f"measured: peaks run {short_id(peaks)}"
    # issue 21 item 4: the description's second line carries the bound and the fraction of roof
    m, t = run.data.metrics, run.data.tags
    truth = m["achieved_flops_per_s"] / min(m["modeled_intensity_flops_per_byte"] * 2e10, 1e11)
    assert m["fraction_of_roof"] == pytest.approx(truth)
    assert t["bound"] == (
        "memory-bound" if m["modeled_intensity_flops_per_byte"] < 5 else "compute-bound"
    )
    second = t[schema.TAG_NOTE].splitlines()[1]
    assert second.startswith(f"Roofline: {t['bound']}, ") and "% of roof at its modeled" in second
    png = mlflow.artifacts.download_artifacts(f"runs:/{run.info.run_id}/roofline.png")
    with open(png, "rb") as fh:
        assert fh.read(8) == b"\x89PNG\r\n\x1a\n"
    assert "system_metrics" not in run.data.tags  # TINY says --no-system-metrics


def test_system_metrics_start_at_the_chosen_interval(tracking):
    import time

    with RunSession("train", run_name="sys", system_metrics=True) as s:
        s.start_system_metrics(3.5)  # 3.5 s / 30 samples is under 1 s: every second
        assert s._monitor is not None and s._monitor.sampling_interval == 1.0
        time.sleep(2.5)
    client = mlflow.tracking.MlflowClient()
    assert client.get_run(s.run_id).data.tags["system_metrics"] == "every 1 s"
    assert len(client.get_metric_history(s.run_id, "system/cpu_utilization_percentage")) >= 2


def test_sweep_repeats_have_distinct_names_and_one_config_label(tracking):
    from train.sweep.runner import run_sweep
    from train.sweep.spec import SweepSpec

    base = {"image_size": 32, "iters": 2, "warmup_iters": 1, "device": "cpu"}
    spec = SweepSpec(matrix={"model": ["resnet18"], "batch_size": [2]}, base=base, repeats=2)
    run_sweep(spec, experiment="rep", env_label="box", progress=False)
    children = mlflow.search_runs(
        experiment_names=["rep"], filter_string="tags.run_kind = 'train'", output_format="list"
    )
    assert sorted(c.info.run_name for c in children) == [
        "b2-fp32-32px-resnet18-cpu-r0",
        "b2-fp32-32px-resnet18-cpu-r1",
    ]
    assert {c.data.tags[schema.TAG_CONFIG_LABEL] for c in children} == {"b2/fp32/32px/resnet18"}
    assert {c.data.tags[schema.TAG_ENTRY_POINT] for c in children} == {"sweep"}


def test_run_that_fails_before_its_summary_is_described_by_its_error(tracking):
    from common.errors import BenchError

    try:
        with RunSession("complexity", run_name="x") as s:
            raise BenchError("out of memory at batch 64")
    except BenchError:
        pass
    tags = mlflow.tracking.MlflowClient().get_run(s.run_id).data.tags
    assert tags[schema.TAG_NOTE] == "FAILED: out of memory at batch 64"


def _ddp_config(env_label: str) -> TrainConfig:
    """resnet18 b2 32px in a 2-process DDP job over gloo."""
    return TrainConfig(
        model="resnet18",
        batch_size=2,
        image_size=32,
        env_label=env_label,
        distributed="ddp",
        world_size=2,
        backend="gloo",
    )


def _result(**metrics):
    from train.bench import BenchResult

    base = {
        "throughput_samples_per_s": 16.0,
        "step_time_mean_s": 0.125,
        "achieved_flops_per_s": 1e10,
        "wall_s": 1.0,
        "train_flops_per_step": 1.25e9,
        "modeled_bytes_per_step": 1e8,
        "params": 1e7,
    }
    return BenchResult(metrics={**base, **metrics}, step_times_s=[0.125] * 8)


def test_description_flags_a_wide_confidence_interval_and_superlinear_scaling():
    """Issue 24 item 3: the same words as the report, right under the numbers they question."""
    from train.result_text import run_note

    def tags(c):  # the run's tags run_note reads: its device name and config label
        return {schema.TAG_DEVICE_NAME: "CPU X", schema.TAG_CONFIG_LABEL: c.config_label()}

    cfg = TrainConfig(model="resnet18", batch_size=2, image_size=32, env_label="x")
    quiet = run_note(cfg, tags(cfg), _result(step_time_ci95_rel=0.5), roofline="Roofline: r")
    assert "Check:" not in quiet  # ±50 % is the limit, not over it
    note = run_note(cfg, tags(cfg), _result(step_time_ci95_rel=2.86), roofline="Roofline: r")
    lines = note.splitlines()
    assert "(mean of 8, 95% CI ±286%)" in lines[0]  # the one way every page names it
    assert lines[1] == "Roofline: r"
    assert lines[2].startswith("Check: the mean step time's 95% CI ±286% is wider than ±50%")
    ddp = _ddp_config("x")
    res = _result(scaling_efficiency=1.684, scaling_baseline_n_runs=2.0)
    res.tags.update(scaling_baseline="single-process run", scaling_baseline_run_id="abc")
    text = run_note(ddp, tags(ddp), res)
    assert "Check: scaling efficiency 168% is over 100%" in text.splitlines()[1]
    assert (
        "scaling efficiency 168.4% against the mean samples/s of 2 single-process run(s), newest abc"
        in text
    )


def test_scaling_baseline_is_the_mean_of_the_world_size_1_runs(tracking):
    from types import SimpleNamespace

    from train.distributed.baseline import compare_scaling

    ddp = _ddp_config("box")
    tags = {schema.TAG_ENV_LABEL: "box", schema.TAG_DEVICE_NAME: "CPU X"}
    ids = []
    for thr in (3.0, 5.0, float("nan")):  # the nan one is left out, never averaged in
        t = {**tags, schema.TAG_CONFIG_KEY: ddp.single_process_key()}
        with RunSession("train", experiment="scale", tags=t) as s:
            s.log_metrics({"throughput_samples_per_s": thr})
        ids.append(s.run_id)
    session = SimpleNamespace(
        offline=False,
        experiment_id=mlflow.get_experiment_by_name("scale").experiment_id,
        record=SimpleNamespace(tags=tags),
    )
    result = _result(throughput_samples_per_s=16.0)
    compare_scaling(session, ddp, result)
    assert result.metrics["scaling_baseline_throughput_samples_per_s"] == pytest.approx(4.0)
    assert result.metrics["scaling_efficiency"] == pytest.approx(16.0 / (2 * 4.0))
    assert result.metrics["scaling_baseline_n_runs"] == 2
    assert result.tags["scaling_baseline"] == "single-process run"
    assert result.tags["scaling_baseline_run_id"] == ids[1]  # the newest usable one


def test_cpu_runs_carry_no_cuda_stack_tags_and_the_runs_view_link():
    from common.envinfo import environment_tags
    from common.ui import runs_view_path

    tags = environment_tags("cpu", "box")
    assert not {"cuda_version", "cudnn_version", "driver_version"} & set(tags)  # item 5
    assert tags["torch_version"] and tags[schema.TAG_DEVICE_TYPE] == "cpu"
    assert runs_view_path("7") == (
        "#/experiments/7/runs?viewStateShareKey=train-fastest&workflowType=machine_learning"
    )
    assert runs_view_path("7", saved_view=False) == (
        "#/experiments/7/runs?searchFilter=tags.run_kind+%3D+%27train%27"
        "&orderByKey=metrics.%60throughput_samples_per_s%60&workflowType=machine_learning"
        "&orderByAsc=false"
    )
