"""A poisoned store (issue 25): every value analysis fetches is untrusted (analysis/screen.py).

The rules, one value at a time; a whole store end to end: tests/test_analysis_poisoned.py.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest

from analysis import screen
from common import bounds
from roofline.datasheets import BUILTIN


# --------------------------------------------------------------------------- the rules, pure
def test_bounds_are_at_least_ten_times_the_fastest_vendor_figure():
    """The bounds' stated source: every figure of the vendor table, times 10, stays under them."""
    fastest_flops = max(v for e in BUILTIN for v in e.peaks.flops_per_s.values())
    fastest_dram = max(e.peaks.dram_bytes_per_s for e in BUILTIN)
    assert fastest_flops == pytest.approx(989.5e12)  # H100 / H200 dense bf16, as the docstring says
    assert fastest_dram == pytest.approx(4.8e12)  # H200
    assert bounds.MAX_FLOPS_PER_S >= 10 * fastest_flops
    assert bounds.MAX_DRAM_BYTES_PER_S >= 10 * fastest_dram
    assert bounds.MAX_CACHE_BYTES_PER_S >= bounds.MAX_DRAM_BYTES_PER_S


@pytest.mark.parametrize(
    "key,value,why",
    [
        ("throughput_samples_per_s", -5.0, "negative"),
        ("throughput_samples_per_s", 0.0, "zero"),
        ("throughput_std_samples_per_s", -1.0, "negative"),
        ("achieved_flops_per_s", 1e308, "above 1e+19 FLOP/s"),
        ("achieved_flops_per_s", math.inf, "not a finite number"),
        ("ncu_flops_total", 1.7976931348623157e308, "infinite"),  # inf as MLflow stores it
        ("ncu_dram_bytes", -1.95e11, "negative"),
        ("ncu_kernel_time_s", -9.5e-3, "negative"),
        ("step_time_median_s", 0.0, "zero"),
        ("peak_flops_per_s_fp32", 2e19, "above"),
        ("peak_dram_bytes_per_s", 2e14, "above"),
        ("ncu_intensity_dram_flops_per_byte", 2.8e291, "above 1e+06 FLOP/byte"),
    ],
)
def test_problem_names_why(key, value, why):
    assert why in screen.problem(key, value)


@pytest.mark.parametrize(
    "key,value",
    [
        ("throughput_samples_per_s", 1234.5),
        ("achieved_flops_per_s", 3.1e14),
        ("ncu_flops_total", 0.0),  # a profile of kernels without float work
        ("exposed_comm_time_s", -0.002),  # noise: the compute-only step was slower
        ("peak_l1_bytes_per_s", 9e13),  # a CPU's L1 summed over its cores
        # how typical a peak was: a fraction, not a rate (the rate floor left real peaks runs out)
        ("peak_flops_per_s_bf16_near_best_fraction", 1.0),
        ("peak_dram_bytes_per_s_near_best_fraction", 0.5),
        ("peak_flops_per_s_fp32_p10", 2.5e10),
        ("throughput_samples_per_s", math.nan),  # absent: train_notes says what that costs
        ("some_other_metric", -1.0),  # not read by analysis
    ],
)
def test_real_figures_pass(key, value):
    assert screen.problem(key, value) is None


def test_counts_faster_than_any_device_in_their_time():
    row = {"metrics.ncu_flops_total": 2e300, "metrics.ncu_kernel_time_s": 7.376e-3}
    (line,) = screen.run_problems(row)
    assert line.startswith("ncu_flops_total = 2e+300 in ncu_kernel_time_s = 0.00738")
    ok = {"metrics.ncu_flops_total": 1.2e11, "metrics.ncu_kernel_time_s": 7.376e-3}
    assert screen.run_problems(ok) == []
    # a train run's FLOPs per step against its mean step time (the one step-time statistic)
    train = {"metrics.train_flops_per_step": 1e30, "metrics.step_time_mean_s": 0.1}
    (line,) = screen.run_problems(train)
    assert line.startswith("train_flops_per_step = 1e+30 in step_time_mean_s = 0.1")


def test_runs_leaves_out_only_finished_runs_of_the_kinds_analysis_computes_with():
    frame = pd.DataFrame(
        {
            "run_id": ["a" * 32, "b" * 32, "c" * 32, "d" * 32],
            "status": ["FINISHED", "FINISHED", "FAILED", "FINISHED"],
            "tags.run_kind": ["train", "train", "train", "analysis"],
            "tags.env_label": ["l4", "l4", "l4", "l4"],
            "metrics.throughput_samples_per_s": [100.0, -5.0, -5.0, -5.0],
            "params.batch_size": ["8", "8", "8", "8"],
        }
    )
    kept, lines = screen.runs(frame)
    assert list(kept["run_id"]) == ["a" * 32, "c" * 32, "d" * 32]
    assert lines == [
        "left out train run bbbbbbbb (env l4): throughput_samples_per_s = -5: negative; it is not "
        "a measurement (a damaged or hand-made run?)"
    ]


def test_a_name_param_that_is_no_name_leaves_its_run_out():
    """A 5,000-character model name (a hand-made run) was drawn and printed whole in every note."""
    frame = pd.DataFrame(
        {
            "run_id": ["a" * 32, "b" * 32, "c" * 32],
            "status": ["FINISHED"] * 3,
            "tags.run_kind": ["train"] * 3,
            "metrics.throughput_samples_per_s": [100.0, 100.0, 100.0],
            "params.model": ["resnet18", "x" * 5000, "resnet18"],
            "params.precision": ["fp32", "fp32", "fp32\nfp16"],
        }
    )
    kept, lines = screen.runs(frame)
    assert list(kept["run_id"]) == ["a" * 32]
    assert lines == [
        f"left out train run bbbbbbbb: param model = {'x' * 40!r}: 5000 characters long, where a "
        "name is at most 100; it is not a measurement (a damaged or hand-made run?)",
        "left out train run cccccccc: param precision = 'fp32\\nfp16': holds a character that is "
        "not printable (a line break, a control character); it is not a measurement (a damaged or "
        "hand-made run?)",
    ]


def test_series_keeps_step_times_only():
    clean, lines = screen.series({"r" * 32: [0.1, -1.0, math.inf, 1.7976931348623157e308, 0.2]})
    assert clean == {"r" * 32: [0.1, 0.2]}
    assert lines and "3 of 5 steps/step_time_s values of run rrrrrrrr" in lines[0]


def test_complexity_rows_that_are_not_counts_are_left_out():
    from analysis import tables

    head = "model,image_size,precision,optimizer,num_classes,params,fwd_flops_per_sample,"
    head += "fwd_macs_per_sample,train_flops_per_sample,activation_bytes_per_sample,"
    head += "device_memory_bytes,max_batch_fit\n"
    bad = "resnet18,224,fp32,sgd,1000,11689512,-5,1e308,abc,nan,1e300,-3\n"
    good = "resnet50,224,fp32,sgd,1000,25557032,4.1e9,2.05e9,1.2e10,1.1e8,1.6e10,140\n"
    entry = {"run_id": "r" * 32, "env_label": "e", "device_name": "d", "csv": head + bad + good}
    rows, _ = tables.complexity_table([entry], ["resnet18", "resnet50"])
    kept, lines = screen.complexity(rows)
    assert list(kept["model"]) == ["resnet50"]
    assert lines == [
        "left out the complexity row of resnet18 (env e, run rrrrrrrr): "
        "fwd_flops_per_sample = -5.0: negative"
    ]


def test_an_env_label_that_is_no_name_leaves_its_run_out():
    """Issue 32: a 10,000-character env label appeared whole 9 times in report.md, and one with a
    line break forged console lines; the env label is screened as the model param is."""
    frame = pd.DataFrame(
        {
            "run_id": ["a" * 32, "b" * 32, "c" * 32],
            "status": ["FINISHED"] * 3,
            "tags.run_kind": ["train", "peaks", "train"],
            "tags.env_label": ["box", "y" * 10_000, "box\nerror: forged"],
            "metrics.throughput_samples_per_s": [100.0, 100.0, 100.0],
        }
    )
    kept, lines = screen.runs(frame)
    assert list(kept["run_id"]) == ["a" * 32]
    assert lines == [
        f"left out peaks run bbbbbbbb (env {'y' * 40!r}): tag env_label = {'y' * 40!r}: 10000 "
        "characters long, where a name is at most 100; it is not a measurement (a damaged or "
        "hand-made run?)",
        "left out train run cccccccc (env 'box\\nerror: forged'): tag env_label = 'box\\nerror: "
        "forged': holds a character that is not printable (a line break, a control character); it "
        "is not a measurement (a damaged or hand-made run?)",
    ]
