"""analysis/scaling.py and its report section, figure and CSV on hand-made runs (mlflow.search_runs
layout): scaling efficiency against the right baseline, exposed communication, labels."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from analysis import core, figures, join, report, scaling
from common import schema

BASE = dict(
    model="resnet18",
    batch_size="32",
    precision="fp32",
    image_size="224",
    channels_last="false",
    compile="false",
    optimizer="sgd",
    num_classes="1000",
)


def run(run_id, thr, engine=None, ws=1, stage=0, batch="32", precision="fp32", comm=None, start=0):
    """A FINISHED train run; `engine` ddp|deepspeed makes it a data-parallel run of world size
    `ws`; comm = (step, compute-only step) means in seconds (the step time shown is the mean's:
    docs/schema.md, Definitions; these were medians before)."""
    p = dict(BASE, batch_size=batch, precision=precision)
    base_key = schema.config_key(p)
    if engine:
        p.update(world_size=str(ws), distributed=engine, zero_stage=str(stage), backend="nccl")
        p["nodes"] = "1"
    row = {
        "run_id": run_id,
        "status": "FINISHED",
        "start_time": start,
        "tags.run_kind": "train",
        "tags.env_label": "a100x8",
        "tags.device_name": "NVIDIA A100",
        "tags.config_key": schema.config_key(p),
        "metrics.throughput_samples_per_s": thr,
        **{f"params.{k}": v for k, v in p.items()},
    }
    if engine:
        row[f"tags.{schema.TAG_BASE_CONFIG_KEY}"] = base_key
    if comm:
        step, compute = comm
        row["metrics.step_time_mean_s"] = step
        row["metrics.compute_only_step_time_mean_s"] = compute
        row["metrics.exposed_comm_time_s"] = step - compute
        row["metrics.exposed_comm_time_share"] = (step - compute) / step
    return row


@pytest.fixture
def analysis():
    runs = pd.DataFrame(
        [
            run("single", 100.0),
            run("ddp2a", 170.0, "ddp", 2, comm=(0.4, 0.3)),
            run("ddp2b", 190.0, "ddp", 2, comm=(0.4, 0.36), start=1),
            run("ddp4", 320.0, "ddp", 4, comm=(0.5, 0.35)),
            run("z2w1", 90.0, "deepspeed", 1, stage=2),
            run("z2w2", 160.0, "deepspeed", 2, stage=2),
            run("lonely", 50.0, "ddp", 2, batch="64"),  # no baseline of its own config
            run("half2", 400.0, "ddp", 2, precision="fp16"),
        ]
    )
    return core.build(runs)


def rows_by_label(analysis) -> dict[str, dict]:
    return {r["label"]: r for r in analysis.scaling.to_dict("records")}


def test_efficiency_against_the_same_engine_else_the_single_process_run(analysis):
    rows = rows_by_label(analysis)
    ddp2 = rows["resnet18/b32/fp32/ddp×2"]
    # samples/s from the pooled mean step time (docs/schema.md, "Definitions"): both runs logged
    # 0.4 s per step, so 32 x 2 / 0.4 = 160, whatever rates (170, 190) they logged
    assert ddp2["n_runs"] == 2 and ddp2["throughput_mean_samples_per_s"] == pytest.approx(160.0)
    assert ddp2["baseline"] == scaling.BASE_SINGLE and ddp2["baseline_samples_per_s"] == 100.0
    assert ddp2["ideal_samples_per_s"] == pytest.approx(200.0)
    assert ddp2["scaling_efficiency"] == pytest.approx(0.8)
    # 32 x 4 / 0.5 s = 256 of the ideal 400
    assert rows["resnet18/b32/fp32/ddp×4"]["scaling_efficiency"] == pytest.approx(256 / 400)
    z2 = rows["resnet18/b32/fp32/zero2×2"]
    assert z2["baseline"] == scaling.BASE_SAME_ENGINE
    assert z2["scaling_efficiency"] == pytest.approx(160 / 180)
    assert rows["resnet18/b32/fp32/zero2×1"]["scaling_efficiency"] == pytest.approx(1.0)
    assert z2["series"] == "resnet18/b32/fp32/zero2" and ddp2["series"] == "resnet18/b32/fp32/ddp"


def test_exposed_communication_is_the_mean_over_runs_and_missing_without_compute_only(analysis):
    rows = rows_by_label(analysis)
    ddp2 = rows["resnet18/b32/fp32/ddp×2"]
    assert ddp2["compute_only_step_time_mean_s"] == pytest.approx(0.33)
    assert ddp2["exposed_comm_time_s"] == pytest.approx((0.1 + 0.04) / 2)
    assert ddp2["exposed_comm_time_share"] == pytest.approx((0.25 + 0.1) / 2)
    assert pd.isna(rows["resnet18/b32/fp32/zero2×2"]["exposed_comm_time_share"])
    assert any("no compute-only step time" in n and "zero2×2" in n for n in analysis.notes)


def test_a_series_without_any_baseline_has_no_efficiency_and_a_note(analysis):
    rows = rows_by_label(analysis)
    lonely = rows["resnet18/b64/fp32/ddp×2"]
    assert lonely["baseline"] == "none" and pd.isna(lonely["scaling_efficiency"])
    assert any("b64/fp32/ddp has no world-size-1 run" in n for n in analysis.notes)
    assert pd.isna(rows["resnet18/b32/fp16/ddp×2"]["scaling_efficiency"])


def test_points_keep_engines_apart_and_single_process_runs_unchanged(analysis):
    labels = set(analysis.points["label"])
    assert "resnet18/b32/fp32" in labels and "resnet18/b32/fp32/ddp×2" in labels
    single = analysis.points[analysis.points["label"] == "resnet18/b32/fp32"].iloc[0]
    assert single["distributed"] == "none" and single["world_size"] == 1
    # a data-parallel fp16 point pairs with the fp32 point of its engine and world size only
    (sp,) = analysis.speedups.to_dict("records")
    assert sp["label"] == "resnet18/b32/fp16/ddp×2" and sp["speedup"] == pytest.approx(
        400 / 160
    )  # over the pooled 160


def test_report_table_csv_and_figure(analysis, tmp_path):
    jobs = figures.plan(analysis, tmp_path / "figures")
    (job,) = [j for j in jobs if j.section == "scaling"]
    (section, title, path), *_ = figures.render([job], 1)
    assert path.name == "scaling_vs_world_size.png" and path.stat().st_size > 10_000
    text = report.markdown_text(
        report.report_blocks(
            report.Report(
                analysis, {"scaling": [(title, "figures/" + path.name)]}, "src", "q", "now"
            )
        )
    )
    assert "## Scaling with world size" in text and "figures/scaling_vs_world_size.png" in text
    line = next(x for x in text.splitlines() if "| resnet18/b32/fp32/ddp | 2 |" in x)
    assert "| 160 | 200 | 80.0% | single-process run |" in line and "| 25.0% |" not in line
    assert "| 17.5% |" in line  # mean exposed share (25% and 10%)
    written = report.write_tables(analysis, tmp_path / "tables")
    csv = pd.read_csv(tmp_path / "tables" / "scaling.csv")
    assert tmp_path / "tables" / "scaling.csv" in written and len(csv) == 6
    assert set(csv["run_ids"]) >= {"ddp2a;ddp2b", "ddp4"}


def test_no_distributed_runs_no_section():
    a = core.build(pd.DataFrame([run("single", 100.0)]))
    assert a.scaling.empty
    assert "Scaling with world size" not in report.markdown_text(
        report.report_blocks(report.Report(a, {}, "s", "q", "now"))
    )
    assert not [j for j in figures.plan(a, Path("/nonexistent")) if j.section == "scaling"]


def test_the_analysis_reads_the_distributed_keys():
    for key in ("world_size", "distributed", "zero_stage", "backend", "nodes"):
        assert key in join.READ_KEYS["params"]
    for key in (
        "compute_only_step_time_mean_s",
        "exposed_comm_time_s",
        "exposed_comm_time_share",
    ):
        assert key in join.READ_KEYS["metrics"]
    assert schema.TAG_BASE_CONFIG_KEY in join.READ_KEYS["tags"]


def test_a_distributed_run_without_a_config_key_tag_gets_its_own_key():
    r = run("d", 10.0, "ddp", 2)
    key = r.pop("tags.config_key")
    train = join.train_runs(pd.DataFrame([r]))
    assert train["config_key"].iloc[0] == key != schema.config_key(BASE)
