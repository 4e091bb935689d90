"""analysis/findings on hand-made runs (mlflow.search_runs layout): each rule against numbers
computed by hand here, prices and their CSV, hostile values, findings.json and the report section."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from analysis import core, report, screen
from analysis.findings import anomalies, build, prices, records
from analysis.findings import report as freport
from common import schema
from common.errors import UsageError

CPU, GPU = "Test CPU 9000", "NVIDIA L4"


def params(batch, precision, channels_last="false", image_size=224, model="resnet18") -> dict:
    return dict(
        model=model,
        batch_size=str(batch),
        precision=precision,
        image_size=str(image_size),
        channels_last=channels_last,
        compile="false",
        optimizer="sgd",
        num_classes="1000",
    )


def train(
    rid,
    env,
    dev,
    batch,
    precision,
    step_s,
    *,
    flops=1e12,
    intensity=50.0,
    start=0,
    ci=None,
    std=None,
    device_type="cpu",
    more=None,
    tags=None,
    **pkw,
) -> dict:
    """A FINISHED train run: samples/s = batch / step_s, achieved = flops / step_s."""
    p = {**params(batch, precision, **pkw)}
    row = {
        "run_id": rid,
        "status": "FINISHED",
        "start_time": start,
        "tags.run_kind": "train",
        "tags.env_label": env,
        "tags.device_name": dev,
        "tags.device_type": device_type,
        "tags.config_key": schema.config_key(p),
        "metrics.throughput_samples_per_s": batch / step_s,
        "metrics.step_time_mean_s": step_s,
        "metrics.step_time_median_s": step_s,
        "metrics.step_time_std_s": std if std is not None else 0.01 * step_s,
        "metrics.train_flops_per_step": flops,
        "metrics.achieved_flops_per_s": flops / step_s,
        "metrics.modeled_intensity_flops_per_byte": intensity,
        "metrics.measured_iters": 20,
        **({"metrics.step_time_ci95_rel": ci} if ci is not None else {}),
        **{f"metrics.{k}": v for k, v in (more or {}).items()},
        **{f"tags.{k}": v for k, v in (tags or {}).items()},
    }
    row.update({f"params.{k}": v for k, v in p.items()})
    return row


def peaks(rid, env, dev, fp32, bf16=None, dram=100e9, start=0) -> dict:
    row = {
        "run_id": rid,
        "status": "FINISHED",
        "start_time": start,
        "tags.run_kind": "peaks",
        "tags.env_label": env,
        "tags.device_name": dev,
        "metrics.peak_flops_per_s_fp32": fp32,
        "metrics.peak_dram_bytes_per_s": dram,
    }
    if bf16:
        row["metrics.peak_flops_per_s_bf16"] = bf16
    return row


def breakdown_run(rid, env, dev, batch, precision, fractions: dict, step_s=1.0, layers="") -> dict:
    """A breakdown run as analysis/fetch/breakdowns.py fetches it: breakdown.json and layers.csv."""
    metrics = {"breakdown_step_s": step_s, "breakdown_parts_sum_fraction": 1.0}
    for part, f in fractions.items():
        metrics[f"breakdown_{part}_fraction"] = f
        metrics[f"breakdown_{part}_s"] = f * step_s
    return {
        "run_id": rid,
        "env_label": env,
        "device_name": dev,
        "config_key": schema.config_key(params(batch, precision)),
        "params": params(batch, precision),
        "summary": {"metrics": metrics},
        "layers": layers,
    }


def analyse(rows, price_table=None, breakdowns=None, series=None):
    """core.build and the findings, the breakdown runs through analysis/screen.py as app does
    (its lines open the analysis' notes, as the fetch's do)."""
    breakdowns, lines = screen.breakdowns(breakdowns or [])
    a = core.build(pd.DataFrame(rows), None, notes=lines)
    return a, build(a, price_table, breakdowns, series)


def config(found, label, env="box"):
    return next(c for c in found.configs if c["label"] == label and c["env_label"] == env)


def kinds(c) -> list[str]:
    return [f.kind for f in c["findings"]]


def one(c, kind, **match):
    hits = [
        f
        for f in c["findings"]
        if f.kind == kind and all(f.values.get(k) == v for k, v in match.items())
    ]
    assert len(hits) == 1, (kind, match, [f.sentence() for f in c["findings"]])
    return hits[0]


# ------------------------------------------------------------------------------ the bound
def test_roof_side_fraction_and_headroom():
    # ridge = 1e12 / 100e9 = 10 FLOP/byte; intensity 50 -> compute-bound, attainable 1e12;
    # achieved 1e12 FLOP / 4 s = 0.25e12 -> 25 % of the roof, headroom x4
    _, found = analyse([train("a", "box", CPU, 8, "fp32", 4.0), peaks("p", "box", CPU, 1e12)])
    c = config(found, "resnet18/b8/fp32")
    assert c["bound"] == "compute" and c["roof_side"] == "compute"
    assert c["fraction_of_roof"] == pytest.approx(0.25) and c["headroom_factor"] == pytest.approx(4)
    assert c["ceiling"]["kind"] == "measured" and c["ceiling"]["dtype"] == "fp32"
    b = one(c, "bound")
    assert b.sentence() == (
        "compute-bound: at 50 FLOP/byte (modeled intensity) it sits at or right of the ridge "
        "(10 FLOP/byte); it reaches 25.0% of its measured fp32 roof (250 GFLOP/s of 1 TFLOP/s "
        "attainable), headroom ×4."
    )
    # intensity 5 < ridge 10: memory-bound, attainable 5 x 100e9 = 0.5e12 -> 0.25e12 / 0.5e12
    _, found = analyse(
        [train("a", "box", CPU, 8, "fp32", 4.0, intensity=5), peaks("p", "box", CPU, 1e12)]
    )
    c = config(found, "resnet18/b8/fp32")
    assert c["bound"] == "memory" and c["fraction_of_roof"] == pytest.approx(0.5)


def test_far_below_the_roof_and_above_it():
    # 1e12 / 20 s = 5e10 of 1e12: 5 % < 10 %
    _, found = analyse([train("a", "box", CPU, 8, "fp32", 20.0), peaks("p", "box", CPU, 1e12)])
    f = one(config(found, "resnet18/b8/fp32"), "roof_far")
    assert f.values["fraction_of_roof"] == pytest.approx(0.05) and "headroom ×20" in f.sentence()
    # 1e12 / 0.5 s = 2e12 FLOP/s over a 1e12 ceiling: the ceiling is too low, no 200 % is stated
    _, found = analyse([train("a", "box", CPU, 8, "fp32", 0.5), peaks("p", "box", CPU, 1e12)])
    c = config(found, "resnet18/b8/fp32")
    f = one(c, "ceiling_low")
    assert f.values["achieved"] == pytest.approx(2e12) and f.values["ceiling_value"] == 1e12
    assert f.values["peaks_run"] == "p" and f.values["trust"] == "not recorded"
    assert "fraction_of_roof" not in f.values and c["fraction_of_roof"] is None
    assert c["ceiling"]["too_low"] and one(c, "bound").values["fraction_of_roof"] is None
    assert f.sentence().startswith(
        "its fp32 compute ceiling is too low: it achieved 2 TFLOP/s where the ceiling says "
        "1 TFLOP/s (measured by peaks run p on 1970-01-01 00:00 UTC, its load not recorded)"
    )


def test_latency_bound_from_the_batch_series():
    # t(2) = 1.0 s, t(4) = 1.2 s, t(8) = 1.6 s: t = 0.8 + 0.1 b exactly (CI of the intercept 0);
    # fixed share 0.8 at b2, 0.8 / 1.2 at b4
    _, found = analyse(
        [
            train("a", "box", CPU, 2, "fp32", 1.0),
            train("b", "box", CPU, 4, "fp32", 1.2),
            train("c", "box", CPU, 8, "fp32", 1.6),
            peaks("p", "box", CPU, 1e12),
        ]
    )
    b2, b4 = config(found, "resnet18/b2/fp32"), config(found, "resnet18/b4/fp32")
    assert b2["bound"] == b4["bound"] == "latency"
    v = one(b2, "bound").values
    assert v["fixed_step_s"] == pytest.approx(0.8) and v["per_sample_s"] == pytest.approx(0.1)
    assert v["fixed_share"] == pytest.approx(0.8) and v["batches"] == [2, 4, 8]
    assert v["fixed_step_ci95_s"] == pytest.approx(0, abs=1e-9) and v["fit_runs"] == 3
    assert one(b4, "bound").values["fixed_share"] == pytest.approx(0.8 / 1.2)
    assert (
        one(b2, "bound")
        .sentence()
        .startswith(
            "latency/launch-bound: 80.0% of its 1000 ms step is fixed per-step time (800 ms"
        )
    )
    # a step time proportional to the batch has no fixed part: back to the roof side
    _, found = analyse(
        [
            train("a", "box", CPU, 2, "fp32", 1.0),
            train("b", "box", CPU, 4, "fp32", 2.0),
            train("c", "box", CPU, 8, "fp32", 4.0),
            peaks("p", "box", CPU, 1e12),
        ]
    )
    assert config(found, "resnet18/b2/fp32")["bound"] == "compute"
    # two runs give no interval for the intercept: no latency finding, one line saying why
    _, found = analyse(
        [
            train("a", "box", CPU, 2, "fp32", 1.0),
            train("b", "box", CPU, 4, "fp32", 1.2),
            peaks("p", "box", CPU, 1e12),
        ]
    )
    assert config(found, "resnet18/b2/fp32")["bound"] == "compute"
    assert any("2 runs are too few" in m for m in found.missing), found.missing
    # step time falling as the batch grows (a disturbed series): never latency
    _, found = analyse(
        [
            train("a", "box", CPU, 2, "fp32", 1.6),
            train("b", "box", CPU, 4, "fp32", 1.2),
            train("c", "box", CPU, 8, "fp32", 1.0),
            peaks("p", "box", CPU, 1e12),
        ]
    )
    assert {c["bound"] for c in found.configs} == {"compute"}
    assert any("step time falls as the batch grows" in m for m in found.missing)


def test_data_and_host_bound_from_a_breakdown_run():
    rows = [train("a", "box", CPU, 8, "fp32", 4.0), peaks("p", "box", CPU, 1e12)]
    parts = {"data_wait": 0.3, "h2d_copy": 0.05, "forward": 0.2, "backward": 0.45}
    _, found = analyse(rows, breakdowns=[breakdown_run("bd1", "box", CPU, 8, "fp32", parts)])
    c = config(found, "resnet18/b8/fp32")
    assert c["bound"] == "data" and one(c, "bound").values["data_share"] == pytest.approx(0.35)
    # the data wait more workers could remove: 35 % of the step, at most x1/0.65
    w = one(c, "data_wait")
    assert w.values["max_speedup"] == pytest.approx(1 / 0.65) and w.run_ids == ["bd1"]
    parts = one(c, "parts")
    # the step's parts only (breakdown_parts_sum_fraction is not a part)
    assert list(parts.values["parts"]) == ["backward", "data_wait", "forward", "h2d_copy"]
    host = breakdown_run("bd1", "box", CPU, 8, "fp32", {"host_overhead": 0.4, "data_wait": 0.1})
    _, found = analyse(rows, breakdowns=[host])
    assert config(found, "resnet18/b8/fp32")["bound"] == "host"


def test_no_ceiling_is_an_unknown_bound():
    _, found = analyse([train("a", "box", "Mystery chip", 8, "fp32", 4.0)])
    c = config(found, "resnet18/b8/fp32")
    assert c["bound"] == "unknown" and c["fraction_of_roof"] is None
    assert "no ceiling for Mystery chip" in one(c, "bound").sentence()


# ------------------------------------------------------------------------------ what would move it
def test_precision_speedup_is_measured_with_its_interval():
    # fp32 at 0.5 s/step (16 samples/s), bf16 at 0.4 s (20 samples/s): x1.25; CI from the two
    # runs' step-time CIs, sqrt(0.03² + 0.04²) = 0.05 on the log scale -> 1.25 / e^0.05 .. 1.25 e^0.05
    _, found = analyse(
        [
            train("f", "box", CPU, 8, "fp32", 0.5, ci=0.03),
            train("h", "box", CPU, 8, "bf16", 0.4, ci=0.04),
            peaks("p", "box", CPU, 1e12, bf16=4e12),
        ]
    )
    f = one(config(found, "resnet18/b8/fp32"), "speedup", knob="precision")
    assert f.values["speedup"] == pytest.approx(1.25) and f.run_ids == ["f", "h"]
    assert f.values["speedup_ci95"] == pytest.approx(
        [1.25 * math.exp(-0.05), 1.25 * math.exp(0.05)]
    )
    assert (
        f.sentence()
        == "bf16 instead of fp32: ×1.25 (95% CI ×1.19–1.31) samples/s (20 vs 16 samples/s, measured)."
    )
    back = one(config(found, "resnet18/b8/bf16"), "speedup", knob="precision")
    assert back.values["speedup"] == pytest.approx(0.8)
    # a measured run of bf16 exists: no peak-ratio guess for it
    assert "peak_ratio" not in kinds(config(found, "resnet18/b8/fp32"))


def test_peak_ratio_when_the_other_precision_was_not_run():
    _, found = analyse(
        [train("f", "box", CPU, 8, "fp32", 0.5), peaks("pk", "box", CPU, 1e12, bf16=3e12)]
    )
    f = one(config(found, "resnet18/b8/fp32"), "peak_ratio")
    assert f.values["ratio"] == pytest.approx(3.0) and f.values["to"] == "bf16"
    assert f.sentence().startswith(
        "no bf16 run of this config; the device's measured bf16/fp32 peak ratio is ×3"
    )
    # never fp16 on a CPU (torch does not train fp16 there), never from vendor ceilings
    assert [
        x.values["to"]
        for x in config(found, "resnet18/b8/fp32")["findings"]
        if x.kind == "peak_ratio"
    ] == ["bf16"]


def test_one_knob_siblings_only():
    rows = [
        train("a", "box", CPU, 8, "fp32", 0.5),
        train("b", "box", CPU, 8, "fp32", 0.4, channels_last="true"),
        train("c", "box", CPU, 16, "bf16", 0.2),  # two knobs differ: no pair with a
        peaks("p", "box", CPU, 1e12),
    ]
    _, found = analyse(rows)
    c = config(found, "resnet18/b8/fp32")
    f = one(c, "speedup", knob="channels_last")
    assert f.values["speedup"] == pytest.approx(1.25)
    assert "channels_last on instead of off: ×1.25" in f.sentence()
    assert [x.values["knob"] for x in c["findings"] if x.kind == "speedup"] == ["channels_last"]


def test_more_workers_within_a_config():
    rows = [
        train("a", "box", CPU, 8, "fp32", 0.5),
        train("b", "box", CPU, 8, "fp32", 0.25),
        peaks("p", "box", CPU, 1e12),
    ]
    rows[0]["params.workers"], rows[1]["params.workers"] = "0", "4"
    _, found = analyse(rows)
    f = one(config(found, "resnet18/b8/fp32"), "speedup", knob="workers")
    assert (
        f.values["speedup"] == pytest.approx(2.0) and f.values["from"] == 0 and f.values["to"] == 4
    )


def test_fusion_share_and_top_layers_from_layers_csv():
    # the model row and a container (layer1: its time includes its children's) and the data row
    # are not layers; only leaf module rows count
    layers = (
        "module,phase,kind,leaf,time_s,flops,bytes,intensity_flops_per_byte,bound,share\n"
        "resnet18,forward,model,False,0.9,1e9,1e8,10,memory-bound,0.9\n"
        "layer1,forward,module,False,0.25,1e8,1e8,1,memory-bound,0.25\n"
        "data,data,step,False,0.3,0,0,,,0.3\n"
        "conv1,forward,module,True,0.5,1e9,1e7,100,compute-bound,0.5\n"
        "bn1,forward,module,True,0.1,1e6,1e7,0.1,memory-bound,0.1\n"
        "layer1.0.relu,backward,module,True,0.05,1e5,1e7,0.01,memory-bound,0.05\n"
        "layer1.0.conv2,forward,module,True,0.1,1e8,1e8,1,memory-bound,0.1\n"
        "fc,forward,module,True,inf,1e5,1e5,1,memory-bound,0.01\n"
    )
    rows = [train("a", "box", CPU, 8, "fp32", 1.0), peaks("p", "box", CPU, 1e12)]
    bd = breakdown_run(
        "bd1", "box", CPU, 8, "fp32", {"forward": 0.4, "backward": 0.5}, layers=layers
    )
    a, found = analyse(rows, breakdowns=[bd])
    c = config(found, "resnet18/b8/fp32")
    f = one(c, "fusion")  # bn1 + relu: 0.15 of the step (the conv is memory-bound but not fusable)
    assert f.values["share"] == pytest.approx(0.15) and f.values["layers"] == 2
    assert f.values["max_speedup"] == pytest.approx(1 / 0.85)
    top = one(c, "top_layers").values["layers"]
    assert [r["module"] for r in top] == ["conv1", "bn1", "layer1.0.conv2"]
    assert top[0]["bound"] == "compute-bound"
    assert any("1 layers.csv row(s) with a time or share" in n for n in a.notes)


# ------------------------------------------------------------------------------ anomalies
def test_throughput_falling_as_batch_grows():
    # b32: 32 / 0.32 = 100 samples/s; b64: 64 / 0.8 = 80 samples/s: -20 %, CIs 1 % apart
    rows = [
        train("a", "box", CPU, 32, "fp32", 0.32, ci=0.01),
        train("b", "box", CPU, 64, "fp32", 0.8, ci=0.01),
        peaks("p", "box", CPU, 1e12),
    ]
    _, found = analyse(rows)
    f = one(config(found, "resnet18/b64/fp32"), "batch_drop")
    assert f.values["drop"] == pytest.approx(0.2)
    assert (
        f.sentence()
        == "throughput falls as batch grows: 100 samples/s at batch 32, 80 at batch 64 (-20.0%)."
    )
    # overlapping intervals are noise, not a drop
    rows[0]["metrics.step_time_ci95_rel"] = rows[1]["metrics.step_time_ci95_rel"] = 0.2
    _, found = analyse(rows)
    assert "batch_drop" not in kinds(config(found, "resnet18/b64/fp32"))


def test_a_device_far_below_its_peers():
    # two environments with the same device name: laptop: 1e12 / 10 s = 1e11 of 1.43e12 (7 %);
    # t4: 1e12 / 2 s = 5e11 of 2.38e12 (21 %)
    rows = [
        train("a", "laptop", "Tesla T4", 8, "fp32", 10.0),
        train("b", "t4", "Tesla T4", 8, "fp32", 2.0),
        peaks("p1", "laptop", "Tesla T4", 1e11 / 0.07, dram=1e12),
        peaks("p2", "t4", "Tesla T4", 5e11 / 0.21, dram=1e12),
    ]
    _, found = analyse(rows)
    f = one(config(found, "resnet18/b8/fp32", "laptop"), "peer_gap")
    assert f.values["fraction_of_roof"] == pytest.approx(0.07) and f.values[
        "peer_fraction"
    ] == pytest.approx(0.21)
    assert (
        f.sentence()
        == "far below its peers: 7.0% of its roof where t4 (Tesla T4) reaches 21.0% on the same config."
    )
    assert "peer_gap" not in kinds(config(found, "resnet18/b8/fp32", "t4"))
    # another device name is no peer
    rows[1]["tags.device_name"] = rows[3]["tags.device_name"] = "NVIDIA L4"
    _, found = analyse(rows)
    assert "peer_gap" not in kinds(config(found, "resnet18/b8/fp32", "laptop"))


def test_variable_and_bimodal_steps():
    steps = [0.1] * 14 + [0.3] * 6  # 30 % of the steps three times as long
    mean = sum(steps) / len(steps)
    std = pd.Series(steps).std()
    rows = [train("a", "box", CPU, 8, "fp32", mean, std=std), peaks("p", "box", CPU, 1e12)]
    a, found = analyse(rows, series={"a": steps})
    c = config(found, "resnet18/b8/fp32")
    assert one(c, "variability").values["cv"] == pytest.approx(std / mean)
    bi = one(c, "bimodal").values
    assert bi["slow_share"] == pytest.approx(0.3) and bi["fast_mean_s"] == pytest.approx(0.1)
    assert bi["slow_mean_s"] == pytest.approx(0.3)
    from analysis.findings import series_wanted

    assert series_wanted(a.train) == ["a"]


def test_bimodality_rule_on_its_own():
    rng = np.random.default_rng(0)
    assert anomalies.bimodality([0.1, 0.2] * 4) is None  # under 10 steps
    assert anomalies.bimodality([0.1] * 19 + [1.0]) is None  # an outlier is not a mode
    for _ in range(20):  # one mode, however spread: never two
        assert anomalies.bimodality(rng.normal(0.1, 0.005, 200)) is None
        assert anomalies.bimodality(rng.uniform(0.09, 0.11, 200)) is None
    two = anomalies.bimodality(np.r_[rng.normal(0.1, 0.003, 140), rng.normal(0.13, 0.003, 60)])
    assert two["slow_share"] == pytest.approx(0.3) and two["slow_mean_s"] == pytest.approx(
        0.13, rel=0.01
    )
    assert two["valley_depth"] < 0.05


def test_throttling_and_memory_near_capacity():
    more = {
        "gpu_sm_clock_median_hz": 1.2e9,
        "gpu_sm_clock_base_hz": 1.41e9,
        "gpu_throttled_sample_share": 0.4,
        "gpu_temperature_max_c": 83,
        "gpu_temperature_slowdown_c": 84,
        "device_peak_mem_bytes": 22e9,
        "device_mem_total_bytes": 24e9,
    }
    rows = [
        train(
            "a",
            "box",
            GPU,
            8,
            "fp32",
            0.5,
            device_type="cuda",
            more=more,
            tags={"gpu_throttle_reasons": "hw_thermal_slowdown"},
        ),
        peaks("p", "box", GPU, 30e12, dram=300e9),
    ]
    _, found = analyse(rows)
    c = config(found, "resnet18/b8/fp32")
    t = one(c, "throttle")
    assert t.sentence() == (
        "clock throttling during the measured steps (run a): SM clock median 1.2 GHz against a "
        "base of 1.41 GHz; a thermal/power clock-event reason in 40.0% of the NVML samples "
        "(hw_thermal_slowdown); temperature up to 83 °C (slowdown at 84 °C)."
    )
    m = one(c, "memory_near_capacity")
    assert m.values["share"] == pytest.approx(22 / 24)
    # a cool GPU at its clock: no throttle finding
    rows[0].update(
        {
            "metrics.gpu_sm_clock_median_hz": 1.5e9,
            "metrics.gpu_throttled_sample_share": 0.0,
            "metrics.gpu_temperature_max_c": 60,
        }
    )
    _, found = analyse(rows)
    assert "throttle" not in kinds(config(found, "resnet18/b8/fp32"))


def test_profile_and_train_runs_that_disagree():
    p = params(8, "fp32")
    prof = {
        "run_id": "prof1",
        "status": "FINISHED",
        "start_time": 1,
        "tags.run_kind": "profile",
        "tags.env_label": "box",
        "tags.device_name": GPU,
        "tags.config_key": schema.config_key(p),
        "metrics.ncu_flops_total": 2e12,  # over 2 profiled steps: 1e12 per step
        "metrics.ncu_dram_bytes": 1e10,
        "params.profile_steps": "2",
    }
    rows = [
        train("a", "box", GPU, 8, "fp32", 0.5, flops=3e12, device_type="cuda"),
        prof,
        peaks("p", "box", GPU, 30e12, dram=300e9),
    ]
    _, found = analyse(rows)
    f = one(config(found, "resnet18/b8/fp32"), "profile_disagrees")
    assert f.values["ratio"] == pytest.approx(1 / 3) and f.run_ids[0] == "prof1"
    rows[0]["metrics.train_flops_per_step"] = 1.1e12  # within 0.75..1.33: they agree
    _, found = analyse(rows)
    assert "profile_disagrees" not in kinds(config(found, "resnet18/b8/fp32"))


# ------------------------------------------------------------------------------ cost and energy
def test_usd_per_million_samples_and_per_epoch_with_the_interval():
    # 8 / 0.08 = 100 samples/s at USD 0.5/h: 0.5 / 3600 / 100 x 1e6 = 1.3889 per 1 M samples,
    # x 1,281,167 / 1e6 = 1.7794 per ImageNet epoch; step-time CI 2 % -> the same 2 %
    table = prices.PriceTable(prices.parse_prices("match,usd_per_hour\nbox,0.5\n", "p.csv"))
    _, found = analyse(
        [train("a", "box", CPU, 8, "fp32", 0.08, ci=0.02), peaks("p", "box", CPU, 1e12)], table
    )
    c = config(found, "resnet18/b8/fp32")
    assert c["usd_per_million_samples"] == pytest.approx(0.5 / 3600 / 100 * 1e6)
    assert c["usd_per_imagenet_epoch"] == pytest.approx(0.5 / 3600 / 100 * 1_281_167)
    assert c["usd_per_million_samples_ci95"] == pytest.approx(
        [1.3889 * math.exp(-0.02), 1.3889 * math.exp(0.02)], rel=1e-4
    )
    assert c["price_source"] == "--prices p.csv, line 2"
    assert one(c, "cost").sentence() == (
        "USD 1.39 per 1 M training samples (±2.0%), USD 1.78 per ImageNet-1k epoch, at USD 0.5/h "
        "(--prices p.csv, line 2)."
    )


def test_gpu_data_parallel_pays_per_device_and_default_prices_apply():
    rows = [
        train("a", "box", "NVIDIA L4", 8, "fp32", 0.08, device_type="cuda"),
        peaks("p", "box", "NVIDIA L4", 30e12),
    ]
    rows[0].update(
        {
            "params.distributed": "ddp",
            "params.world_size": "4",
            "params.zero_stage": "0",
            "params.backend": "nccl",
            # as a data-parallel run logs it: the global batch 8 x 4 over the step time
            "metrics.throughput_samples_per_s": 8 * 4 / 0.08,
        }
    )
    rows[0]["tags.config_key"] = schema.config_key(
        {
            **params(8, "fp32"),
            "distributed": "ddp",
            "world_size": "4",
            "zero_stage": "0",
            "backend": "nccl",
        }
    )
    _, found = analyse(rows)
    c = found.configs[0]
    assert c["usd_per_hour"] == pytest.approx(4 * 0.7992) and "Modal" in c["price_source"]
    assert c["usd_per_million_samples"] == pytest.approx(4 * 0.7992 / 3600 / 400 * 1e6)


def test_no_price_is_said_not_guessed():
    _, found = analyse([train("a", "box", CPU, 8, "fp32", 0.08), peaks("p", "box", CPU, 1e12)])
    c = found.configs[0]
    assert c["usd_per_million_samples"] is None and "give one with --prices" in c["price_note"]
    assert "cost" not in kinds(c)


def test_price_lookup_precedence_and_whole_words():
    t = prices.PriceTable(
        prices.parse_prices("match,usd_per_hour,source\nmy-lab,2.0,invoice\nA100,9.0,\n", "p.csv")
    )
    assert t.lookup("my-lab", "NVIDIA A100-SXM4-80GB").usd_per_hour == 2.0  # env label first
    assert t.lookup("other", "NVIDIA A100-SXM4-80GB").usd_per_hour == 9.0  # user row over default
    d = prices.PriceTable()
    assert d.lookup("x", "NVIDIA A100-SXM4-40GB").usd_per_hour == 1.99
    assert d.lookup("x", "NVIDIA A10").usd_per_hour == 1.29
    assert d.lookup("x", "NVIDIA A10G") is None  # another SKU: not the A10's price
    assert d.lookup("x", "NVIDIA L40S") is None and d.lookup("x", "Tesla T4").usd_per_hour == 0.5904
    assert d.lookup("x", "NVIDIA H100 80GB HBM3").usd_per_hour == 4.29
    assert d.lookup("x", CPU) is None
    assert all(p.source and "read 2026-11-25" in p.source for p in prices.DEFAULT_PRICES)


@pytest.mark.parametrize(
    "text, message",
    [
        ("env,price\nx,1\n", "needs the columns match,usd_per_hour (missing match, usd_per_hour"),
        ("match,usd_per_hour\nx,-1\n", "line 2: usd_per_hour '-1' is not a positive number"),
        ("match,usd_per_hour\nx,abc\n", "line 2: usd_per_hour 'abc' is not a positive number"),
        ("match,usd_per_hour\nx,inf\n", "line 2: usd_per_hour 'inf' is not a positive number"),
        ("match,usd_per_hour\n,1\n", "line 2: empty match"),
        ("match,usd_per_hour\n", "no price rows"),
    ],
)
def test_bad_prices_file_is_a_one_line_usage_error(text, message):
    with pytest.raises(UsageError, match=None) as exc:
        prices.parse_prices(text, "p.csv")
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_read_prices_missing_file(tmp_path):
    with pytest.raises(UsageError, match="--prices .*nope.csv: cannot read it"):
        prices.read_prices(str(tmp_path / "nope.csv"))


def test_energy_is_a_number_or_says_why_not():
    rows = [
        train(
            "a",
            "box",
            CPU,
            8,
            "fp32",
            0.5,
            more={"energy_j_per_sample": 0.3},
            tags={"energy_source": "rapl: intel-rapl:0"},
        ),
        train(
            "b",
            "box",
            CPU,
            8,
            "fp32",
            0.5,
            start=1,
            more={"energy_j_per_sample": 0.5},
            tags={"energy_source": "rapl: intel-rapl:0"},
        ),
        train(
            "c",
            "box",
            CPU,
            16,
            "fp32",
            0.5,
            tags={"energy_source": "none", "energy_note": "not measurable here: no RAPL"},
        ),
        train("d", "box", CPU, 32, "fp32", 0.5),
        peaks("p", "box", CPU, 1e12),
    ]
    _, found = analyse(rows)
    assert config(found, "resnet18/b8/fp32")["energy_j_per_sample"] == pytest.approx(0.4)
    c16 = config(found, "resnet18/b16/fp32")
    assert (
        c16["energy_j_per_sample"] is None and c16["energy_note"] == "not measurable here: no RAPL"
    )
    assert config(found, "resnet18/b32/fp32")["energy_note"].startswith(
        "not measured: these train runs record no energy"
    )


# ------------------------------------------------------------------------------ hostile values
def test_non_finite_and_negative_values_are_left_out_with_a_line():
    rows = [
        train(
            "a",
            "box",
            CPU,
            8,
            "fp32",
            0.5,
            ci=float("inf"),
            more={"energy_j_per_sample": -2.0, "device_mem_total_bytes": float("inf")},
        ),
        train(
            "b",
            "box",
            CPU,
            16,
            "fp32",
            0.5,
            more={"gpu_sm_clock_median_hz": -1.0, "gpu_sm_clock_base_hz": 1e9},
        ),
        train("c", "box", CPU, 32, "fp32", 0.5),
        peaks("p", "box", CPU, 1e12),
    ]
    rows[2]["metrics.throughput_samples_per_s"] = float("inf")  # a run that is no measurement
    a, found = analyse(
        rows, prices.PriceTable(prices.parse_prices("match,usd_per_hour\nbox,1\n", "p"))
    )
    # analysis/screen.py is the one gate: these keys leave their run in and only the value out,
    # with a line; the findings read plain numbers
    notes = "\n".join(a.notes)
    kept = "; the run's other numbers are kept"
    assert f"left out step_time_ci95_rel = inf of train run a: not a finite number{kept}" in notes
    assert f"left out energy_j_per_sample = -2 of train run a: negative{kept}" in notes
    assert "left out device_mem_total_bytes = inf of train run a" in notes
    assert f"left out gpu_sm_clock_median_hz = -1 of train run b: negative{kept}" in notes
    # run c never reaches the findings: a bad rate leaves the whole run out, with its line
    assert "left out train run c (env box): throughput_samples_per_s = inf: " in notes
    c = config(found, "resnet18/b8/fp32")  # priced; no energy
    assert c["usd_per_million_samples"] == pytest.approx(1 / 3600 / 16 * 1e6)
    # its CI is left out, so it comes from its SD (1 % over 20 steps, Student t): t19 x 0.01 / sqrt(20)
    rel = 2.093 * 0.01 / math.sqrt(20)
    assert c["usd_per_million_samples_ci95"] == pytest.approx(
        [1 / 3600 / 16 * 1e6 * math.exp(-rel), 1 / 3600 / 16 * 1e6 * math.exp(rel)], rel=1e-3
    )
    assert c["energy_j_per_sample"] is None
    assert "resnet18/b32/fp32" not in {c["label"] for c in found.configs}  # run c left out
    json.dumps(found.to_json(), allow_nan=False)  # nothing non-finite reaches findings.json


# ------------------------------------------------------------------------------ outputs
def test_findings_json_contract_and_report_section_first():
    rows = [
        train("f", "box", CPU, 8, "fp32", 0.5, ci=0.03, flops=0.2e12),
        train("h", "box", CPU, 8, "bf16", 0.4, ci=0.04, flops=0.2e12),
        peaks("p", "box", CPU, 1e12, bf16=4e12),
    ]
    a, found = analyse(
        rows, prices.PriceTable(prices.parse_prices("match,usd_per_hour\nbox,1\n", "p"))
    )
    doc = json.loads(json.dumps(found.to_json(), allow_nan=False))
    for c in doc["configs"]:
        for key in (
            "model",
            "batch_size",
            "precision",
            "image_size",
            "device_name",
            "env_label",
            "engine",
            "world_size",
            "bound",
            "fraction_of_roof",
            "usd_per_million_samples",
            "energy_j_per_sample",
            "energy_note",
            "findings",
        ):
            assert key in c, key
        assert 0 < c["fraction_of_roof"] <= 1 and c["batch_size"] == 8
        assert all({"kind", "sentence", "values", "run_ids"} <= set(f) for f in c["findings"])
    blocks = report.report_blocks(report.Report(a, {}, "sqlite:///x", "q", "now", findings=found))
    h2s = [b[1] for b in blocks if b[0] == "h2"]
    assert h2s[:3] == ["The answers", "What was read", "Findings"] and "What is missing" in h2s
    md = report.markdown_text(blocks)
    assert md.index("## The answers") < md.index("## Findings") < md.index("## What is missing")
    answer = md.split("## The answers")[1].split("## Findings")[0]
    assert "- **box**: **resnet18/b8/bf16**" in answer  # ×1.25 the fp32: the fastest
    assert h2s[1] == "What was read"
    assert "bf16 instead of fp32: ×1.25" in md
    assert freport.description_lines(found)[0].startswith(
        "- box (Test CPU 9000), resnet18/b8/fp32: bf16 instead of fp32: ×1.25"
    )


def test_every_sentence_renders():
    """Every finding kind has a sentence (records.SENTENCES), and topics are known ones."""
    assert set(records.SENTENCES) >= {
        "bound",
        "speedup",
        "peak_ratio",
        "fusion",
        "data_wait",
        "batch_drop",
        "peer_gap",
        "variability",
        "bimodal",
        "throttle",
        "memory_near_capacity",
        "profile_disagrees",
        "ceiling_low",
        "unstable",
        "cost",
        "energy",
        "parts",
        "top_layers",
        "breakdown_above_roof",
    }
    assert math.isclose(1.0, 1.0)
