"""analysis.join / core / roofline.vendor's lookup / config validation on hand-made frames (mlflow.search_runs layout)."""

from __future__ import annotations

import math
import re

import pandas as pd
import pytest

from analysis import app, core, fetch, join, markdown, plots, report, roofs, tables
from common import schema
from common.errors import UsageError
from roofline import ceilings, vendor


def train(
    run_id,
    env,
    dev,
    batch,
    precision,
    thr,
    thr_sd=None,
    achieved=None,
    intensity=None,
    start=0,
    flops=None,
    mean=None,
    model="resnet18",
    num_classes=1000,
):
    p = dict(
        model=model,
        batch_size=str(batch),
        precision=precision,
        image_size="224",
        channels_last="false",
        compile="false",
        optimizer="sgd",
        num_classes=str(num_classes),
    )
    row = {
        "run_id": run_id,
        "status": "FINISHED",
        "start_time": start,
        "tags.run_kind": "train",
        "tags.env_label": env,
        "tags.device_name": dev,
        "tags.config_key": schema.config_key(p),
        "metrics.throughput_samples_per_s": thr,
    }
    row.update({f"params.{k}": v for k, v in p.items()})
    for key, val in (
        ("throughput_std_samples_per_s", thr_sd),
        ("achieved_flops_per_s", achieved),
        ("modeled_intensity_flops_per_byte", intensity),
        ("train_flops_per_step", flops),
        ("step_time_mean_s", mean),
    ):
        if val is not None:
            row[f"metrics.{key}"] = val
    return row


def test_repeats_mean_sd_across_runs_single_run_within():
    runs = pd.DataFrame(
        [
            train("a", "e", "d", 32, "fp32", 100, thr_sd=5, achieved=1e12, intensity=10),
            train("b", "e", "d", 32, "fp32", 110, thr_sd=6, achieved=2e12, intensity=10),
            train("c", "e", "d", 32, "fp32", 120, thr_sd=7, achieved=3e12, intensity=10),
            train("d", "e", "d", 64, "fp32", 200, thr_sd=9, achieved=4e12, intensity=20),
        ]
    )
    pts = join.aggregate_repeats(join.train_runs(runs)).set_index("batch_size")
    # the steps are pooled (no measured_iters: each run alike): mean step = mean(32/100, 32/110,
    # 32/120); samples/s = 32 / that = the harmonic mean of the run rates, never their mean (110)
    step = (32 / 100 + 32 / 110 + 32 / 120) / 3
    assert pts.loc[32, "n_runs"] == 3 and pts.loc[32, "step_time_mean_s"] == pytest.approx(step)
    assert pts.loc[32, "throughput_mean_samples_per_s"] == pytest.approx(
        3 / (1 / 100 + 1 / 110 + 1 / 120)
    )
    assert pts.loc[32, "throughput_mean_samples_per_s"] * step / 32 == pytest.approx(1, abs=1e-12)
    assert pts.loc[32, "throughput_sd_samples_per_s"] == pytest.approx(
        10
    )  # SD of 100, 110, 120 (ddof 1): the spread of the runs
    assert pts.loc[32, "throughput_sd_kind"] == "across 3 runs"
    assert pts.loc[32, "throughput_min_run_samples_per_s"] == pytest.approx(100)
    assert pts.loc[32, "throughput_spread_ratio"] == pytest.approx(1.2)
    # FLOPs per step from achieved x step time (no train_flops_per_step logged), over the pooled step
    flops = (1e12 * 32 / 100 + 2e12 * 32 / 110 + 3e12 * 32 / 120) / 3
    assert pts.loc[32, "achieved_flops_per_s"] == pytest.approx(flops / step)
    assert (
        pts.loc[64, "throughput_sd_samples_per_s"] == 9
        and pts.loc[64, "throughput_sd_kind"] == "within run"
    )
    # one run: exactly its own numbers
    assert pts.loc[64, "throughput_mean_samples_per_s"] == 200.0
    assert pts.loc[64, "achieved_flops_per_s"] == 4e12


def test_steps_are_pooled_by_measured_iters():
    # 10 steps at 1 s and 30 steps at 3 s: 100 s over 40 steps = 2.5 s/step, 4 / 2.5 = 1.6
    # samples/s, where the mean of the run rates (4, 1.33) would say 2.67
    rows = [
        train("a", "e", "d", 4, "fp32", 4.0, mean=1.0),
        train("b", "e", "d", 4, "fp32", 4 / 3, mean=3.0),
    ]
    rows[0]["metrics.measured_iters"], rows[1]["metrics.measured_iters"] = 10, 30
    rows[0]["metrics.train_flops_per_step"] = rows[1]["metrics.train_flops_per_step"] = 1e9
    p = join.aggregate_repeats(join.train_runs(pd.DataFrame(rows))).iloc[0]
    assert p["step_time_mean_s"] == pytest.approx(2.5) and p["measured_steps"] == 40
    assert p["throughput_mean_samples_per_s"] == pytest.approx(1.6)
    assert p["achieved_flops_per_s"] == pytest.approx(1e9 / 2.5)
    assert p["throughput_spread_ratio"] == pytest.approx(3.0)
    # the CI over the two runs' means (1 s, 3 s): t(1) x SD / sqrt(2) / mean(2 s)
    assert p["step_time_ci95_rel"] == pytest.approx(
        12.706 * math.sqrt(2) / math.sqrt(2) / 2, rel=1e-3
    )


def test_missing_achieved_is_derived_and_missing_metrics_are_noted():
    # derived over the MEAN step time, as train logs it (it was the median: docs/schema.md, Definitions)
    runs = pd.DataFrame([train("a", "e", "d", 32, "fp32", 100, flops=1e12, mean=0.5)])
    t = join.train_runs(runs)
    pts = join.aggregate_repeats(t)
    assert pts.iloc[0]["achieved_flops_per_s"] == pytest.approx(2e12)  # 1e12 / 0.5 s
    notes = " | ".join(join.train_notes(t))
    assert "1 train run(s) lack metric modeled_intensity_flops_per_byte" in notes
    assert "lack metric achieved_flops_per_s" in notes


def test_profile_gives_measured_intensity_for_its_device_only():
    runs = pd.DataFrame(
        [
            train("t1", "l4", "NVIDIA L4", 64, "fp32", 700, achieved=1.5e13, intensity=60),
            train("t2", "t4", "Tesla T4", 64, "fp32", 300, achieved=5e12, intensity=60),
        ]
    )
    key = runs.loc[0, "tags.config_key"]
    prof = pd.DataFrame(
        [
            {
                "run_id": "p1",
                "status": "FINISHED",
                "start_time": 1,
                "tags.run_kind": "profile",
                "tags.config_key": key,
                "tags.device_name": "NVIDIA L4",
                "metrics.ncu_flops_total": 3e12,
                "metrics.ncu_dram_bytes": 1.5e10,
                "metrics.ncu_l1_bytes": 6e10,
            }
        ]
    )
    all_runs = pd.concat([runs, prof], ignore_index=True)
    pts = roofs.attach_intensity(
        join.aggregate_repeats(join.train_runs(all_runs)), roofs.profile_intensities(all_runs)
    )
    pts = pts.set_index("env_label")
    assert (
        pts.loc["l4", "intensity_source"] == "measured"
        and pts.loc["l4", "intensity_flops_per_byte"] == 200
    )
    assert pts.loc["l4", "intensity_l1_flops_per_byte"] == 50 and math.isnan(
        pts.loc["l4", "intensity_l2_flops_per_byte"]
    )
    assert (
        pts.loc["t4", "intensity_source"] == "modeled"
        and pts.loc["t4", "intensity_flops_per_byte"] == 60
    )
    assert pts.loc["l4", "profile_run_id"] == "p1" and pts.loc["t4", "profile_run_id"] == ""


def test_train_run_without_config_key_tag_still_joins_by_params():
    row = train("t1", "l4", "NVIDIA L4", 64, "fp32", 700, achieved=1.5e13, intensity=60)
    key = row.pop("tags.config_key")
    prof = {
        "run_id": "p1",
        "status": "FINISHED",
        "tags.run_kind": "profile",
        "tags.config_key": key,
        "tags.device_name": "NVIDIA L4",
        "metrics.ncu_flops_total": 2e12,
        "metrics.ncu_dram_bytes": 1e10,
    }
    runs = pd.DataFrame([row, prof])
    pts = roofs.attach_intensity(
        join.aggregate_repeats(join.train_runs(runs)), roofs.profile_intensities(runs)
    )
    assert (
        pts.iloc[0]["intensity_source"] == "measured"
        and pts.iloc[0]["intensity_flops_per_byte"] == 200
    )


def peaks(run_id, env, dev, start, **metrics):
    return {
        "run_id": run_id,
        "status": "FINISHED",
        "start_time": start,
        "tags.run_kind": "peaks",
        "tags.env_label": env,
        "tags.device_name": dev,
        **{f"metrics.{k}": v for k, v in metrics.items()},
    }


def test_roof_precedence_latest_measured_then_other_env_then_vendor():
    runs = pd.DataFrame(
        [
            peaks("old", "a", "GPU", 1, peak_flops_per_s_fp32=10e12, peak_dram_bytes_per_s=100e9),
            peaks("new", "a", "GPU", 2, peak_flops_per_s_fp32=12e12, peak_dram_bytes_per_s=120e9),
        ]
    )
    vendor_calls = []

    def lookup(name):
        vendor_calls.append(name)
        return (
            {
                "flops_per_s": {"fp32": 15e12, "bf16": 60e12},
                "dram_bytes_per_s": 150e9,
                "source": "datasheet",
            }
            if name in ("GPU", "VendorOnly")
            else None
        )

    chosen, notes = roofs.choose_roofs(
        [("a", "GPU"), ("b", "GPU"), ("d", "VendorOnly"), ("e", "None")], runs, lookup
    )
    a = chosen[("a", "GPU")]["roof"]
    assert (
        a.flops_per_s == {"fp32": 12e12, "bf16": 60e12} and a.dram_bytes_per_s == 120e9
    )  # latest run; bf16 from vendor
    assert (
        a.sources["flops:fp32"] == "measured: peaks run new"
        and a.sources["flops:bf16"] == "vendor: datasheet"
    )
    assert chosen[("a", "GPU")]["vendor"].peak("fp32") == 15e12  # kept for the dashed vendor lines
    assert (
        chosen[("b", "GPU")]["roof"].flops_per_s["fp32"] == 12e12
    )  # same device, other env's peaks
    assert any("b: no peaks run of its own; using the measured peaks of 'a'" in n for n in notes)
    assert (
        chosen[("d", "VendorOnly")]["measured"] is None
        and chosen[("d", "VendorOnly")]["roof"].peak("fp32") == 15e12
    )
    assert chosen[("e", "None")]["roof"] is None
    assert any(n.startswith("no peaks for None (env e)") for n in notes)
    assert vendor_calls == ["GPU", "VendorOnly", "None"]  # one lookup per device


def test_vendor_entry_with_l2_l1_bandwidths_gives_those_ceilings():
    entry = {
        "flops_per_s": {"fp32": 20e12},
        "dram_bytes_per_s": 250e9,
        "l2_bytes_per_s": 1e12,
        "l1_bytes_per_s": 5e12,
        "source": "file",
    }
    roof = ceilings.roof_from_vendor(entry, "GPU")
    assert (
        roof.bytes_per_s == {"dram": 250e9, "l2": 1e12, "l1": 5e12}
        and roof.sources["bytes:l2"] == "vendor: file"
    )


def _ci(row: dict, rel: float) -> dict:
    """`row` with a logged relative 95 % step-time CI."""
    return {**row, "metrics.step_time_ci95_rel": rel}


def test_speedups_and_failed_runs():
    runs = pd.DataFrame(
        [
            _ci(train("a", "e", "d", 64, "fp32", 100, thr_sd=4), 0.04),
            _ci(train("b", "e", "d", 64, "bf16", 250, thr_sd=5), 0.03),
            train("c", "e", "d", 32, "fp16", 90, thr_sd=5),  # no fp32 partner: no speed-up
            {
                "run_id": "f",
                "status": "FAILED",
                "tags.run_kind": "train",
                "tags.error": "boom",
                "tags.env_label": "e",
                "tags.device_name": "d",
            },
            {
                "run_id": "g",
                "status": "FAILED",
                "tags.run_kind": "analysis",
                "tags.error": "not listed",
            },
        ]
    )
    pts = join.aggregate_repeats(join.train_runs(runs))
    sp, notes = tables.speedups(pts)
    assert len(sp) == 1 and notes == [] and sp.iloc[0]["precision"] == "bf16"
    assert sp.iloc[0]["speedup"] == pytest.approx(2.5)
    # log scale: 2.5 x e^(±sqrt(0.03² + 0.04²)) = 2.5 x e^(±0.05)
    assert sp.iloc[0]["speedup_ci95_low"] == pytest.approx(2.5 * math.exp(-0.05))
    assert sp.iloc[0]["speedup_ci95_high"] == pytest.approx(2.5 * math.exp(0.05))
    failed = tables.failed_runs(runs)
    assert list(failed["run_id"]) == ["f"] and list(failed["error"]) == ["boom"]


def test_num_classes_separates_points_speedup_pairs_labels_and_rows():
    runs = pd.DataFrame(
        [
            _ci(train("a", "e", "d", 64, "fp32", 100, thr_sd=4), 0.04),
            _ci(train("b", "e", "d", 64, "bf16", 250, thr_sd=5), 0.03),
            _ci(train("c", "e", "d", 64, "fp32", 200, thr_sd=2, num_classes=10), 0.3),
            _ci(train("f", "e", "d", 64, "bf16", 300, thr_sd=3, num_classes=10), 0.4),
        ]
    )
    a = core.build(runs)
    assert sorted(a.points["label"]) == [
        "resnet18/b64/bf16",
        "resnet18/b64/bf16/10cls",
        "resnet18/b64/fp32",
        "resnet18/b64/fp32/10cls",
    ]
    sp = a.speedups.set_index("num_classes")
    assert len(sp) == 2  # one pair per head size, never 10 classes against 1000
    assert sp.loc[1000, "speedup"] == pytest.approx(2.5)  # 250 / 100
    assert sp.loc[1000, "speedup_ci95_low"] == pytest.approx(2.5 * math.exp(-0.05))
    assert sp.loc[10, "speedup"] == pytest.approx(1.5)  # 300 / 200
    # 1.5 x e^(±sqrt(0.3² + 0.4²)) = 1.5 x e^(±0.5): [0.91, 2.47], which holds 1
    assert sp.loc[10, "speedup_ci95_low"] == pytest.approx(1.5 * math.exp(-0.5))
    assert sp.loc[10, "speedup_ci95_high"] == pytest.approx(1.5 * math.exp(0.5))
    assert sp.loc[10, "label"] == "resnet18/b64/bf16/10cls"
    md = markdown.md_table(markdown.summary_table(a.points))
    # one run: its 95% CI, named as every page names it (the table's classes column: they differ)
    assert "| e | d | resnet18 | fp32 | 64 | 10 | one process | 1 | 200 (1 run, 95% CI ±" in md
    assert (
        "| e | d | resnet18 | fp32 | 64 | 1000 | one process | 1 | 100 (1 run, 95% CI ±4%) |" in md
    )
    assert sorted(markdown.summary_frame(a.points)["num_classes"]) == [10, 10, 1000, 1000]
    md = markdown.md_table(markdown.speedups_table(a.speedups))
    assert (
        "| e | d | resnet18 | 64 | 10 | bf16 | 1.50× (95 % CI 0.91–2.47; interval includes 1) |"
        in md
    )
    assert "| e | d | resnet18 | 64 | 1000 | bf16 | 2.50× (95 % CI 2.38–2.63) |" in md


def test_a_speedup_interval_never_leaves_its_domain():
    """Step-time CIs of ±150 % and ±200 %: a first-order ± would reach below 0; the log-scale
    interval stays positive, holds 1 and says so; a point without a CI gets none."""
    runs = pd.DataFrame(
        [
            _ci(train("a", "e", "d", 64, "fp32", 100), 1.5),
            _ci(train("b", "e", "d", 64, "bf16", 300), 2.0),
            train("c", "e", "d", 32, "fp32", 100),  # no step-time CI
            _ci(train("f", "e", "d", 32, "bf16", 200), 0.1),
        ]
    )
    sp = tables.speedups(join.aggregate_repeats(join.train_runs(runs)))[0].set_index("batch_size")
    lo, hi = sp.loc[64, "speedup_ci95_low"], sp.loc[64, "speedup_ci95_high"]
    assert lo == pytest.approx(3 * math.exp(-2.5)) and 0 < lo < 1 < hi
    assert math.isnan(sp.loc[32, "speedup_ci95_low"]) and sp.loc[32, "speedup"] == pytest.approx(2)
    md = markdown.md_table(markdown.speedups_table(sp.reset_index()))
    assert "3.00× (95 % CI 0.25–36.55; interval includes 1)" in md
    assert "2.00× (no CI: a point lacks its step-time CI)" in md


def _ddp(run_id, precision, thr, backend):
    """A 2-process ddp train run of resnet18/b64 over `backend`, keyed as train keys it."""
    row = train(run_id, "e", "d", 64, precision, thr, thr_sd=1)
    dist = dict(distributed="ddp", zero_stage="0", world_size="2", backend=backend)
    row.update({f"params.{k}": v for k, v in dist.items()})
    params = {k[len("params.") :]: v for k, v in row.items() if k.startswith("params.")}
    row["tags.config_key"] = schema.config_key(params)
    return row


def test_speedups_pair_only_points_of_the_same_backend():
    """Every configuration field but the precision pairs a speed-up, the backend too: bf16 over
    gloo is never divided by fp32 over nccl; single-process points still pair (backend "none")."""
    runs = pd.DataFrame(
        [
            _ddp("a", "fp32", 100, "nccl"),
            _ddp("b", "bf16", 300, "nccl"),
            _ddp("c", "fp32", 50, "gloo"),
            _ddp("f", "bf16", 60, "gloo"),
            train("g", "e", "d", 64, "fp32", 10, thr_sd=1),
            train("h", "e", "d", 64, "bf16", 40, thr_sd=1),
        ]
    )
    sp, notes = tables.speedups(join.aggregate_repeats(join.train_runs(runs)))
    got = {(r["backend"], r["distributed"]): r["speedup"] for r in sp.to_dict("records")}
    assert notes == [] and got == {
        ("nccl", "ddp"): pytest.approx(3.0),
        ("gloo", "ddp"): pytest.approx(1.2),
        ("none", "none"): pytest.approx(4.0),
    }


def test_runs_without_batch_size_get_no_speedup_and_a_note(tmp_path):
    rows = [
        train("a", "e", "d", 64, "fp32", 100, thr_sd=4),
        train("b", "e", "d", 64, "bf16", 250, thr_sd=5),
        train("c", "e", "d", 32, "fp32", 80, thr_sd=4),
        train("f", "e", "d", 32, "bf16", 160, thr_sd=4),
    ]
    for r in rows[2:]:  # an older logger: config_key tag, but no batch_size param
        del r["params.batch_size"]
    a = core.build(pd.DataFrame(rows))
    # only the b64 pair: the two runs without a batch size are not merged as "equal NaN batches"
    assert list(a.speedups["batch_size"]) == [64] and a.speedups.iloc[0][
        "speedup"
    ] == pytest.approx(2.5)
    assert any(
        n.startswith("2 point(s) left out of the fp16/bf16 speed-ups: their runs lack batch_size")
        and "e: resnet18/b?/fp32" in n
        for n in a.notes
    )
    # the tables and the figure draw (no int(NaN)) even when only such rows are there
    only = a.speedups.assign(batch_size=float("nan"))
    assert "| e | d | resnet18 |  | 1000 | bf16 | 2.50×" in markdown.md_table(
        markdown.speedups_table(only)
    )
    assert plots.speedup_vs_batch(only, tmp_path / "sp.png").is_file()
    assert "| e | d | resnet18 | fp32 |  | one process | 1 | 80 (1 run" in markdown.md_table(
        markdown.summary_table(a.points)
    )


def test_runs_without_config_key_are_never_merged():
    old = [
        train("o1", "e", "d", 8, "fp32", 100, thr_sd=3, achieved=1e12, intensity=10),
        train("o2", "e", "d", 64, "fp32", 20, thr_sd=1, achieved=4e12, intensity=30, model="vgg16"),
        train("o3", "e", "d", 8, "bf16", 150, thr_sd=3, achieved=2e12, intensity=10),
    ]
    for r in old:  # logged before num_classes existed: no tag, incomplete params
        del r["tags.config_key"], r["params.num_classes"]
    a = core.build(
        pd.DataFrame(
            [*old, train("n", "e", "d", 8, "fp32", 90, thr_sd=2, achieved=1e12, intensity=10)]
        )
    )
    pts = a.points.set_index("run_ids", drop=False)
    assert len(pts) == 4 and list(pts["n_runs"]) == [1, 1, 1, 1]
    by_run = {r[0]: p for r, p in zip(pts["run_ids"], pts.to_dict("records"))}
    assert (
        by_run["o1"]["throughput_mean_samples_per_s"] == 100 and by_run["o1"]["model"] == "resnet18"
    )
    assert by_run["o2"]["throughput_mean_samples_per_s"] == 20 and by_run["o2"]["model"] == "vgg16"
    assert by_run["o2"]["achieved_flops_per_s"] == 4e12 and by_run["o2"]["config_key"] == ""
    assert by_run["n"]["throughput_mean_samples_per_s"] == 90 and by_run["n"]["config_key"] != ""
    assert a.speedups.empty  # o3 (bf16) is not paired with o1: neither says how many classes it had
    text = " | ".join(a.notes)
    assert (
        "3 train run(s) have no config_key tag and incomplete config params: each is its own point"
        in text
    )
    assert "left out of the fp16/bf16 speed-ups: their runs lack num_classes" in text
    assert core.variability_config(a) == by_run["n"]["config_key"]


def test_complexity_table_skips_tables_without_the_documented_columns():
    good = (
        "model,image_size,precision,optimizer,num_classes,params,fwd_flops_per_sample,fwd_macs_per_sample,"
        "train_flops_per_sample,activation_bytes_per_sample,device_memory_bytes,max_batch_fit\n"
        "resnet18,224,fp32,sgd,1000,11689512,3.64e9,1.82e9,1.065e10,2.219e7,1.7e10,768\n"
    )
    bad = "model,params\nresnet18,11689512\n"
    entries = [
        {
            "run_id": "c1" * 8,
            "env_label": "a",
            "device_name": "d",
            "device_memory_source": "s",
            "csv": good,
        },
        {
            "run_id": "c2" * 8,
            "env_label": "b",
            "device_name": "d",
            "device_memory_source": "s",
            "csv": bad,
        },
    ]
    table, notes = tables.complexity_table(entries, {"resnet18"})
    assert list(table["env_label"]) == ["a"] and table.iloc[0]["max_batch_fit"] == 768
    assert notes == [
        "complexity run c2c2c2c2: models.csv lacks image_size, precision, optimizer, num_classes, "
        "fwd_flops_per_sample, fwd_macs_per_sample, train_flops_per_sample, activation_bytes_per_sample, "
        "device_memory_bytes, max_batch_fit; not in the report"
    ]


def test_build_marks_missing_intensity_and_bf16_fallback():
    runs = pd.DataFrame(
        [
            train("a", "e", "GPU", 64, "bf16", 100, achieved=1e12),  # no intensity at all
            train("b", "e", "GPU", 32, "bf16", 100, achieved=1e12, intensity=10),
            peaks("p", "e", "GPU", 1, peak_flops_per_s_fp32=10e12, peak_dram_bytes_per_s=100e9),
        ]
    )
    a = core.build(runs, None)
    text = " | ".join(a.notes)
    assert "1 point(s) have no intensity" in text and "resnet18/b64/bf16" in text
    assert "e: no bf16 ceiling for GPU; those points are held against the fp32 ceiling" in text
    b = a.points.set_index("batch_size").loc[32]
    assert b["ceiling_dtype"] == "fp32" and b["fraction_of_roof"] == pytest.approx(
        1.0
    )  # 1e12 / (10 * 100e9)


def test_tf32_points_meet_the_peaks_run_tf32_ceiling_and_say_when_there_is_none():
    runs = pd.DataFrame(
        [
            train("a", "e", "A100", 32, "tf32", 100, achieved=50e12, intensity=100),
            train("b", "f", "A100", 32, "tf32", 100, achieved=5e12, intensity=100),
            peaks(
                "p",
                "e",
                "A100",
                1,
                peak_flops_per_s_fp32=19e12,
                peak_flops_per_s_tf32=140e12,
                peak_dram_bytes_per_s=1.9e12,
            ),
            peaks("q", "f", "A100", 2, peak_flops_per_s_fp32=19e12, peak_dram_bytes_per_s=1.9e12),
        ]
    )
    a = core.build(runs, None)
    pts = a.points.set_index("env_label")
    assert pts.loc["e", "ceiling_dtype"] == "tf32" and pts.loc["e", "peak_flops_per_s"] == 140e12
    assert pts.loc["f", "ceiling_dtype"] == "fp32"
    assert "f: no tf32 ceiling for A100; those points are held against the fp32 ceiling" in a.notes


def test_variability_config_prefers_most_environments():
    runs = pd.DataFrame(
        [
            train("a", "e1", "d", 64, "fp32", 1),
            train("b", "e1", "d", 64, "fp32", 1),
            train("c", "e1", "d", 64, "fp32", 1),
            train("x", "e1", "d", 32, "fp32", 1),
            train("y", "e2", "d2", 32, "fp32", 1),
        ]
    )
    a = core.build(runs)
    key32 = runs.loc[3, "tags.config_key"]
    assert core.variability_config(a) == key32  # in 2 environments beats 3 runs in one
    assert core.variability_config(a, "nope") is None
    assert list(core.variability_runs(a, runs.loc[0, "tags.config_key"], per_env=2)["run_id"]) == [
        "b",
        "c",
    ]


def test_bad_peaks_file_is_one_line_before_any_run_is_read(tmp_path):
    f = tmp_path / "peaks.json"
    f.write_text('[{"device_name": "GPU", "dram_bytes_per_sec": 1e9}]')
    with pytest.raises(UsageError, match=re.escape("unknown field(s) dram_bytes_per_sec")):
        vendor.load_vendor_lookup(str(f))
    with pytest.raises(UsageError, match="does not exist"):
        vendor.load_vendor_lookup(str(tmp_path / "missing.json"))


def test_peaks_file_entry_is_found_by_the_real_table(tmp_path, monkeypatch):
    monkeypatch.delenv(vendor.PEAKS_FILE_ENV, raising=False)
    f = tmp_path / "peaks.yaml"
    f.write_text(
        "devices:\n  - device_name: My CPU\n    aliases: [cpu0]\n    flops_per_s: {fp32: 30.3e12}\n"
        "    dram_bytes_per_s: 300e9\n    source: s\n"
    )
    lookup = vendor.load_vendor_lookup(str(f))
    entry = lookup("my cpu")
    assert (
        entry.flops_per_s["fp32"] == 30.3e12
        and entry.dram_bytes_per_s == 300e9
        and entry.source == "s"
    )
    assert lookup("Other CPU") is None
    assert vendor.load_vendor_lookup("")("NVIDIA L4").device_name == "NVIDIA L4"


def test_peaks_file_is_passed_through_to_the_peak_table(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(
        vendor,
        "find",
        lambda device_name, overrides=None: calls.append((device_name, overrides)) or "entry",
    )
    monkeypatch.setattr(vendor, "load_overrides", lambda path: calls.append(("validated", path)))
    monkeypatch.delenv(vendor.PEAKS_FILE_ENV, raising=False)
    lookup = vendor.load_vendor_lookup("my.json")
    assert lookup("NVIDIA L4") == "entry"
    assert calls == [("validated", "my.json"), ("NVIDIA L4", "my.json")]
    monkeypatch.setenv(vendor.PEAKS_FILE_ENV, "env.json")  # the variable when no flag is given
    calls.clear()
    vendor.load_vendor_lookup("")("T4")
    assert calls == [("validated", "env.json"), ("T4", "env.json")]


def test_config_validation_names_the_field():
    with pytest.raises(ValueError, match="max_runs"):
        app.AnalysisConfig(max_runs=0)
    with pytest.raises(ValueError, match="out"):
        app.AnalysisConfig(out=" ")
    with pytest.raises(ValueError, match="max_runs"):
        fetch.Query(max_runs=-1)
    with pytest.raises(UsageError, match="max_runs must be a positive integer"):
        app.config_from_args(app.build_parser().parse_args(["--max-runs", "0"]))


def test_cli_lists_accept_commas_and_repeats_and_string_booleans():
    args = app.build_parser().parse_args(
        ["--experiment", "a,b", "--experiment", "c", "--env-label", "x, y", "--track", "false"]
    )
    cfg = app.config_from_args(args)
    assert (
        cfg.experiments == ["a", "b", "c"] and cfg.env_labels == ["x", "y"] and cfg.track is False
    )
    assert app.config_from_args(app.build_parser().parse_args(["--no-track"])).track is False
    assert app.config_from_args(app.build_parser().parse_args([])).track is True
    q = fetch.Query(["e"], " params.model = 'a' ", ["l"], 5)
    assert q.describe() == "e; filter \"params.model = 'a'\"; env label(s) l"


def test_hierarchical_limiter_and_point_above_roof_are_reported():
    t = train("t", "e", "GPU", 64, "fp32", 100, achieved=12e12, intensity=10)
    prof = {
        "run_id": "p",
        "status": "FINISHED",
        "tags.run_kind": "profile",
        "tags.config_key": t["tags.config_key"],
        "tags.device_name": "GPU",
        "metrics.ncu_flops_total": 4e12,
        "metrics.ncu_dram_bytes": 1e10,
        "metrics.ncu_l2_bytes": 4e11,
    }
    pk = peaks(
        "k",
        "e",
        "GPU",
        1,
        peak_flops_per_s_fp32=20e12,
        peak_dram_bytes_per_s=100e9,
        peak_l2_bytes_per_s=1e12,
    )
    bad_prof = {
        "run_id": "q",
        "status": "FINISHED",
        "tags.run_kind": "profile",
        "tags.config_key": "x",
        "tags.device_name": "GPU",
        "metrics.ncu_kernels": 3,
    }
    a = core.build(pd.DataFrame([t, prof, pk, bad_prof]))
    p = a.points.iloc[0]
    # DRAM: 400 FLOP/B * 100e9 = 40e12 -> capped at 20e12 (compute-bound, ridge 200);
    # L2: 4e12 / 4e11 = 10 FLOP/B * 1e12 = 10e12 < 20e12 -> L2 is the limiter
    assert p["intensity_flops_per_byte"] == 400 and p["bound"] == "compute-bound"
    assert p["hier_limiter"] == "l2" and p["fraction_of_roof"] == pytest.approx(
        0.6
    )  # 12e12 / 20e12 (DRAM roofline)
    text = " | ".join(a.notes)
    assert "1 profile run(s) lack ncu_flops_total/ncu_dram_bytes (e.g. q)" in text
    above = core.build(
        pd.DataFrame([train("t", "e", "GPU", 64, "fp32", 100, achieved=30e12, intensity=1000), pk])
    )
    (flag,) = above.flags  # the words of common.plausible, as a train run's description has them
    assert flag.startswith("e: resnet18/b64/fp32: ") and "of roof is over 100%" in flag


def test_mlproject_analyze_entry_point_maps_onto_the_flags():
    """The `analyze` entry point of the project's own MLproject yields a command our parser reads."""
    import shlex

    import yaml
    from mlflow.projects._project_spec import EntryPoint

    from tests.conftest import ROOT

    spec = yaml.safe_load((ROOT / "MLproject").read_text())["entry_points"]["analyze"]
    entry = EntryPoint("analyze", spec["parameters"], spec["command"])

    def parse(params):
        argv = shlex.split(entry.compute_command(params, storage_dir=None))
        assert argv[:3] == ["python", "-m", "analysis"]
        return app.config_from_args(app.build_parser().parse_args(argv[3:]))

    default = parse({})
    assert default == app.AnalysisConfig()
    cfg = parse(
        {
            "experiment": "bench,cloud",
            "filter": "params.model = 'resnet18'",
            "env_label": "l4",
            "max_runs": "500.0",
            "track": "false",
            "jobs": "2",
            "peaks_file": "my peaks.yaml",
            "variability_config": "abc123",
            "out": "reports/x",
        }
    )
    assert cfg.experiments == ["bench", "cloud"] and cfg.filter == "params.model = 'resnet18'"
    assert cfg.env_labels == ["l4"] and cfg.max_runs == 500 and cfg.track is False and cfg.jobs == 2
    assert (
        cfg.peaks_file == "my peaks.yaml"
        and cfg.variability_config == "abc123"
        and cfg.out == "reports/x"
    )


def profile(run_id, key, dev, env="", start=1, **tags):
    return {
        "run_id": run_id,
        "status": "FINISHED",
        "start_time": start,
        "tags.run_kind": "profile",
        "tags.config_key": key,
        "tags.device_name": dev,
        "tags.env_label": env,
        "metrics.ncu_flops_total": 3e12,
        "metrics.ncu_dram_bytes": 1.5e10,
        **{f"tags.{k}": v for k, v in tags.items()},
    }


def test_a_truncated_profile_gives_no_intensity_and_is_named():
    """An import of a cut ncu CSV logged with --allow-truncated carries totals of part of the
    profile: its FLOPs / bytes (200 here) must not become the point's measured intensity."""
    t = train("t1", "l4", "NVIDIA L4", 64, "fp32", 700, achieved=1.5e13, intensity=60)
    cut = profile("p1", t["tags.config_key"], "NVIDIA L4", ncu_truncated="its last row has 15 of")
    a = core.build(pd.DataFrame([t, cut]))
    assert a.points.iloc[0]["intensity_source"] == "modeled"
    assert a.points.iloc[0]["intensity_flops_per_byte"] == 60
    notes = " | ".join(a.notes)
    assert "1 profile run(s) were imported from a truncated ncu file" in notes and "p1" in notes
    assert "lack ncu_flops_total" not in notes


def test_profile_and_peaks_runs_that_place_nothing_are_listed_with_what_would_place_them():
    """Issue 15: an imported L4 profile (resnet18/b64/fp32/32px) and an L4 peaks run with only a
    T4 train run in the store made no point, and the report said "What is missing: Nothing"."""
    t = train("t1", "t4", "Tesla T4", 64, "fp32", 300, achieved=5e12, intensity=60)
    params = {k.removeprefix("params."): v for k, v in t.items() if k.startswith("params.")}
    params["image_size"] = "32"
    p = profile("p1abcdef9", schema.config_key(params), "NVIDIA L4", env="l4box")
    p.update({f"params.{k}": v for k, v in params.items()})
    pk = peaks("k1abcdef9", "l4box", "NVIDIA L4", 2, peak_flops_per_s_fp32=3e13)
    a = core.build(pd.DataFrame([t, p, pk]))
    assert len(a.points) == 1 and a.points.iloc[0]["intensity_source"] == "modeled"
    assert (
        "profile run p1abcdef (resnet18/b64/fp32/32px on NVIDIA L4, env l4box) placed no point: no "
        "finished train run of that config on that device; time it there (python -m train "
        "--model resnet18 --batch 64 --precision fp32 --image-size 32 --num-classes 1000 "
        "--optimizer sgd --env-label l4box)"
    ) in a.notes
    assert any(
        n.startswith("peaks run k1abcdef (NVIDIA L4, env l4box) gave no roof") for n in a.notes
    )
    md = report.markdown_text(
        report.report_blocks(report.Report(a, {}, "sqlite:///x.db", "all", "now"))
    )
    assert "placed no point" in md and "Nothing: every point" not in md


def test_html_from_a_label_is_escaped_in_the_report():
    """Issue 15: raw HTML in an env label (which train accepts) passed into report.md."""
    bad = "<img src=x onerror=alert(1)>"
    t = train("t1", bad, "NVIDIA L4", 64, "fp32", 700, achieved=1.5e13, intensity=60)
    t["tags.host"] = "<b>host</b>"
    a = core.build(pd.DataFrame([t, peaks("k1", bad, "Tesla T4", 2, peak_flops_per_s_fp32=3e13)]))
    figs = {"roofline": [(f"Roofline, {bad} (NVIDIA L4)", "figures/roofline_x.png")]}
    md = report.markdown_text(
        report.report_blocks(report.Report(a, figs, "sqlite:///x.db", f"env label(s) {bad}", "now"))
    )
    assert "<img" not in md and "<b>" not in md
    assert md.count("&lt;img src=x onerror=alert(1)&gt;") >= 4  # query, note, tables, figure
    assert "&lt;b&gt;host&lt;/b&gt;" in md


def test_a_profile_missing_a_phase_stays_off_the_training_point_unless_asked():
    """Issue 22, item 3: a forward-only capture (tag ncu_missing_phase, set by python -m profiling
    when a phase reads below a quarter of its counted FLOPs) would put a forward pass's intensity
    (200 here) on the training point; by default the point keeps its modeled one and a note names
    the profile; --use-incomplete-profiles uses it, and a note says so."""
    t = train("t1", "l4", "NVIDIA L4", 64, "fp32", 700, achieved=1.5e13, intensity=60)
    fwd = profile("p1", t["tags.config_key"], "NVIDIA L4", ncu_missing_phase="backward")
    runs = pd.DataFrame([t, fwd])
    a = core.build(runs)
    assert a.points.iloc[0]["intensity_source"] == "modeled"
    assert a.points.iloc[0]["intensity_flops_per_byte"] == 60
    assert (
        "1 profile run(s) missed a training phase (tag ncu_missing_phase: backward; e.g. p1): "
        "their intensity is left off the training point (python -m analysis "
        "--use-incomplete-profiles uses it)" in a.notes
    )
    used = core.build(runs, use_incomplete_profiles=True)
    assert used.points.iloc[0]["intensity_source"] == "measured"
    assert used.points.iloc[0]["intensity_flops_per_byte"] == 200
    assert (
        "1 profile run(s) missed a training phase (tag ncu_missing_phase: backward; e.g. p1): "
        "their intensity is used, as --use-incomplete-profiles asks" in used.notes
    )
    assert roofs.profile_intensities(runs).empty
