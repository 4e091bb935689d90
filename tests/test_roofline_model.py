"""roofline.model and common.fmt: pure maths against hand-computed values."""

from __future__ import annotations

import math

import pytest

from roofline import model as rl
from common.fmt import num, si, slug
from roofline.model import Roof

# a device with 20 TFLOP/s fp32, 80 TFLOP/s bf16 and 250 GB/s: ridge fp32 = 80, bf16 = 320 FLOP/byte
P32, PBF, BW = 20e12, 80e12, 250e9


def test_attainable_is_min_of_slope_and_peak():
    assert rl.attainable_flops_per_s(10, P32, BW) == pytest.approx(2.5e12)  # 10 * 250e9
    assert rl.attainable_flops_per_s(80, P32, BW) == pytest.approx(20e12)  # exactly at the ridge
    assert rl.attainable_flops_per_s(1000, P32, BW) == P32


def test_ridge_and_bound():
    assert rl.ridge_intensity(P32, BW) == pytest.approx(80)
    assert rl.classify_bound(79.9, P32, BW) == rl.MEMORY_BOUND
    assert rl.classify_bound(80, P32, BW) == rl.COMPUTE_BOUND
    assert rl.classify_bound(100, PBF, BW) == rl.MEMORY_BOUND  # ridge 320


def test_fraction_of_roof_against_attainable_at_own_intensity():
    assert rl.fraction_of_roof(2e12, 10, P32, BW) == pytest.approx(0.8)  # 2e12 / 2.5e12
    assert rl.fraction_of_roof(15e12, 200, P32, BW) == pytest.approx(0.75)  # 15e12 / 20e12


@pytest.mark.parametrize("args", [(None, P32, BW), (10, math.nan, BW), (10, P32, 0), (-1, P32, BW)])
def test_missing_inputs_give_nan_never_a_number(args):
    assert math.isnan(rl.attainable_flops_per_s(*args))
    assert math.isnan(rl.fraction_of_roof(1e12, *args))
    assert rl.classify_bound(*args) == ""


def test_ceiling_dtype_choice():
    assert rl.ceiling_dtype("fp32", {"fp32", "bf16"}) == "fp32"
    assert rl.ceiling_dtype("bf16", {"fp32", "bf16"}) == "bf16"
    assert rl.ceiling_dtype("fp16", {"fp32", "bf16"}) == "fp32"  # no fp16 ceiling: fall back
    assert rl.ceiling_dtype("BF16", set()) == "fp32"


def test_tf32_runs_are_held_against_the_tf32_tensor_roof():
    """Issue 22, item 2: --precision tf32 meets the TF32 ceiling (vendor table or the peaks run's
    peak_flops_per_s_tf32); fp32 (IEEE FP32 now) keeps the CUDA-core fp32 ceiling."""
    assert rl.ceiling_dtype("tf32", {"fp32", "tf32", "fp16"}) == "tf32"
    assert rl.ceiling_dtype("fp32", {"fp32", "tf32"}) == "fp32"
    assert rl.ceiling_dtype("tf32", {"fp32"}) == "fp32"  # no tf32 figure: fall back, noted
    roof = rl.Roof("NVIDIA A100-SXM4-80GB", {"fp32": 19.5e12, "tf32": 156e12}, {"dram": 2.039e12})
    roof.sources = {"flops:tf32": "vendor: a100", "flops:fp32": "vendor: a100", "bytes:dram": "v"}
    ev = rl.evaluate_point("tf32", 50e12, {"dram": 200.0}, roof)
    assert ev.ceiling_dtype == "tf32" and ev.peak_flops_per_s == 156e12
    assert ev.fraction_of_roof == pytest.approx(50e12 / 156e12)
    assert rl.TENSOR_PRECISIONS == ("tf32", "fp16", "bf16")


def test_hierarchical_limiter_picks_lowest_level_bound():
    # DRAM: 200 * 250e9 = 50e12 (> peak), L2: 10 * 1e12 = 10e12 -> L2 limits at 10e12
    level, att = rl.hierarchical_limiter({"dram": 200, "l2": 10}, {"dram": BW, "l2": 1e12}, P32)
    assert level == "l2" and att == pytest.approx(10e12)
    level, att = rl.hierarchical_limiter({"dram": 200, "l2": 100}, {"dram": BW, "l2": 1e12}, P32)
    assert level == "compute" and att == P32
    assert rl.hierarchical_limiter({"dram": 200}, {}, P32)[0] == ""


def test_roof_merge_takes_measured_first_then_fallback():
    measured = Roof(
        "L4",
        {"fp32": P32},
        {"dram": BW},
        {"flops:fp32": "measured: a", "bytes:dram": "measured: a"},
    )
    vendor = Roof(
        "L4",
        {"fp32": 30.3e12, "bf16": 121e12},
        {"dram": 300e9},
        {"flops:fp32": "vendor: x", "flops:bf16": "vendor: x", "bytes:dram": "vendor: x"},
    )
    roof = measured.merged_over(vendor)
    assert roof.flops_per_s == {"fp32": P32, "bf16": 121e12} and roof.dram_bytes_per_s == BW
    assert roof.sources["flops:bf16"] == "vendor: x" and roof.sources["flops:fp32"] == "measured: a"


def test_evaluate_point_names_sources_and_survives_no_roof():
    roof = Roof(
        "L4",
        {"fp32": P32, "bf16": 121e12},
        {"dram": BW},
        {"flops:fp32": "measured: a", "flops:bf16": "vendor: x", "bytes:dram": "measured: a"},
    )
    ev = rl.evaluate_point("bf16", 20e12, {"dram": 100}, roof)
    # bf16 ceiling 121e12, ridge 484; attainable 100 * 250e9 = 25e12 -> 80 %
    assert ev.ceiling_dtype == "bf16" and ev.roof_source == "measured+vendor"
    assert ev.bound == rl.MEMORY_BOUND and ev.fraction_of_roof == pytest.approx(0.8)
    none = rl.evaluate_point("fp32", 1e12, {"dram": 10}, None)
    assert none.bound == "" and math.isnan(none.fraction_of_roof) and none.roof_source == ""


def test_display_formatting():
    assert si(30.3e12, "FLOP/s") == "30.3 TFLOP/s"
    assert si(250e9, "B/s") == "250 GB/s"  # decimal prefixes: k = 1000
    assert si(math.nan) == ""
    assert (
        num(11034) == "11000"
        and num(99.96) == "100"
        and num(0.01234) == "0.0123"
        and num(410.0, 4) == "410"
    )
    assert slug("NVIDIA L4 / cloud") == "NVIDIA_L4___cloud"
