"""profiling.ncu: plan, counting, summary (+ .ncu-rep import): FLOPs, bytes, time and
intensities against known truths."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from common.errors import BenchError
from common.schema import check_key
from profiling.ncu.chips.counters import counters_for
from profiling.ncu.counting import (
    chip_id_from_report,
    device_from_report,
    kernel_quantities,
    tensor_inst_caution,
    tensor_inst_flops,
)
from profiling.ncu.names import is_relevant, op_counter
from profiling.ncu.parse import NcuKernel, NcuReport, read_ncu_csv
from profiling.ncu.plan import plan_metrics, tensor_counters_for
from profiling.ncu.report_import import load_ncu_rep
from profiling.ncu.totals import (
    require_counters,
    roofline_warning,
    summarize,
    top_kernels,
    top_kernels_text,
)

MESSAGES = Path(__file__).resolve().parent / "data" / "ncu_messages"
REL = 1e-3  # the issue's +-0.1 %


def _report(*metric_dicts, nvtx=None) -> NcuReport:
    kernels = [
        NcuKernel(id=i, name=f"k{i}", metrics=dict(m), nvtx_start_end=(nvtx[i],) if nvtx else ())
        for i, m in enumerate(metric_dicts)
    ]
    return NcuReport(kernels=kernels, page="details", has_nvtx=bool(nvtx), source="synthetic")


# ---------------------------------------------------------------- known truths (SOURCES.md)
def test_l4_fixture_truths(ncu_dir):
    s = summarize(
        read_ncu_csv(ncu_dir / "l4_resnet18_bs64_train_step_details_nvtx.csv", keep=is_relevant)
    )
    m = s.mlflow_metrics()
    assert m["ncu_kernels"] == 98
    assert m["ncu_flops_fp32"] == pytest.approx(4.928e9, rel=REL)
    assert m["ncu_dram_bytes"] == pytest.approx(7.099e8, rel=REL)
    assert m["ncu_kernel_time_s"] == pytest.approx(7.376e-3, rel=REL)
    assert m["ncu_intensity_dram_flops_per_byte"] == pytest.approx(6.94, rel=REL)
    # only fp32 counters were captured there: the other precisions are absent, not zero
    assert m["ncu_flops_total"] == m["ncu_flops_fp32"]
    assert "ncu_flops_fp16" not in m and "ncu_flops_tensor" not in m and "ncu_l2_bytes" not in m
    assert s.missing == ["flops_fp64", "flops_fp16", "flops_tensor", "l2_bytes", "l1_bytes"]


@pytest.mark.parametrize(
    "fixture, chip, truths",
    [
        (
            "l4_resnet18_bs64_train_step_details_nvtx.csv",
            "AD104",
            {"flops_fp32": 4.928e9, "dram_bytes": 7.099e8, "time_s": 7.376e-3},
        ),
        (
            "t4_matrix_add_1000x1000_set_full.ncu-rep",
            "TU104",
            {"flops_fp32": 1.000e6, "dram_bytes": 9_612_288 + 4_189_344, "time_s": 52_576e-9},
        ),
    ],
)
def test_fixture_truths_with_the_chip_s_counters(ncu_dir, fixture, chip, truths):
    """The chip-aware rules (profiling.ncu.chips) give the same totals as the generic ones."""
    from profiling.ncu.chips.counters import counters_for
    from profiling.ncu.chips.devices import resolve_chip

    path = ncu_dir / fixture
    report = (
        load_ncu_rep(path) if fixture.endswith(".ncu-rep") else read_ncu_csv(path, keep=is_relevant)
    )
    name, cap = device_from_report(report)
    choice = resolve_chip(name or "NVIDIA L4", cap, chip_id_from_report(report))
    assert choice.chip == chip
    s = summarize(report, cap, counters_for(chip))
    for q, truth in truths.items():
        assert s.totals[q] == pytest.approx(truth, rel=REL)
    assert s.totals == summarize(report, cap).totals


def test_l4_phase_shares_show_the_missing_backward_pass(ncu_dir):
    s = summarize(
        read_ncu_csv(ncu_dir / "l4_resnet18_bs64_train_step_details_nvtx.csv", keep=is_relevant)
    )
    ph = s.phases
    assert list(ph.index) == ["forward", "loss", "backward", "optimizer_step"]
    assert ph["kernels"].tolist() == [89, 2, 1, 6]
    for col in ("time_share", "flops_share", "dram_bytes_share"):
        assert ph[col].sum() == pytest.approx(1.0, rel=1e-12)
    assert ph.loc["backward", "flops_share"] == 0.0  # push/pop ranges lost autograd's kernels
    assert ph.loc["forward", "flops_share"] > 0.97
    m = s.mlflow_metrics()
    assert m["ncu_phase_optimizer_step_kernels"] == 6
    for key in m:
        check_key(key)


def test_saxpy_dram_read_bytes(ncu_dir):
    s = summarize(read_ncu_csv(ncu_dir / "rtx5070_saxpy_n16777216_details.csv", keep=is_relevant))
    assert s.totals["dram_read_bytes"] == 134_221_568  # ~ 2 * n * 4 bytes, n = 16,777,216
    assert s.totals["dram_bytes"] == 134_221_568 + 43_631_104
    assert s.mlflow_metrics()["ncu_dram_read_bytes"] == 134_221_568
    assert s.roofline_missing == ["FLOP counters"]
    assert roofline_warning(s, "saxpy.csv").startswith(
        "saxpy.csv has no FLOP counters (found: dram_bytes, time_s): logged as an incomplete profile"
    )
    tags = s.mlflow_tags()
    assert tags["ncu_roofline"] == "incomplete" and tags["ncu_roofline_missing"] == "FLOP counters"
    require_counters(s, "saxpy.csv")  # what it holds is logged


def test_t4_ncu_rep_flops_from_rates_times_cycles(ncu_dir):
    report = load_ncu_rep(ncu_dir / "t4_matrix_add_1000x1000_set_full.ncu-rep")
    assert report.page == "ncu-rep" and len(report.kernels) == 1
    assert report.kernels[0].name == "matrix_addition2D"
    assert device_from_report(report) == ("Tesla T4", (7, 5))
    s = summarize(report)
    assert s.totals["flops_fp32"] == pytest.approx(
        1.000e6, rel=1e-9
    )  # one add per element of 1000x1000
    assert s.totals["flops_fp64"] == 0.0
    assert s.totals["dram_read_bytes"] == 9_612_288
    assert s.totals["dram_write_bytes"] == 4_189_344
    assert s.totals["time_s"] == pytest.approx(52_576e-9, rel=1e-12)
    assert s.sources["flops_fp32"].endswith("per_cycle_elapsed_x_smsp__cycles_elapsed.avg")
    # full-set reports carry lts__t_sectors, not lts__t_bytes: 32-byte sectors
    assert s.sources["l2_bytes"] == "lts__t_sectors.sum_x32"
    assert s.roofline_missing == [] and roofline_warning(s, "t4.ncu-rep") is None
    assert s.mlflow_tags()["ncu_roofline"] == "complete"


def test_random_bytes_named_ncu_rep_are_not_a_readable_report(tmp_path):
    bad = tmp_path / "bad.ncu-rep"
    bad.write_bytes(
        random.Random(3).randbytes(2000)
    )  # ncu_report loads this as a report with no ranges
    with pytest.raises(BenchError) as err:
        load_ncu_rep(bad)
    msg = str(err.value)
    assert msg.startswith(
        "bad.ncu-rep is not a readable Nsight Compute report (ncu_report finds no results in it)"
    )
    assert "launch-skip" not in msg and "\n" not in msg


def test_truncated_ncu_rep_is_called_truncated_not_empty(ncu_dir, tmp_path):
    data = (ncu_dir / "t4_matrix_add_1000x1000_set_full.ncu-rep").read_bytes()
    cut = tmp_path / "cut.ncu-rep"
    cut.write_bytes(data[:-10])  # the last 10 bytes missing: ncu_report reads no range
    with pytest.raises(
        BenchError,
        match=r"^cut.ncu-rep starts like an Nsight Compute report but ncu_report reads no "
        r"profiled kernel from it: the file is truncated or damaged",
    ):
        load_ncu_rep(cut)


def test_an_ncu_error_log_saved_as_ncu_rep_gets_the_capture_message(tmp_path):
    from profiling.ncu.messages import PERM_MESSAGE

    log = tmp_path / "report.ncu-rep"
    log.write_bytes((MESSAGES / "err_nvgpuctrperm.log").read_bytes())
    with pytest.raises(BenchError) as err:
        load_ncu_rep(log)
    assert (
        str(err.value)
        == f"report.ncu-rep holds ncu's messages but no counter table: {PERM_MESSAGE}"
    )


def test_b200_raw_page_has_time_only(ncu_dir):
    s = summarize(read_ncu_csv(ncu_dir / "b200_decode_raw_page.csv", keep=is_relevant))
    assert s.measured == ["time_s"] and len(s.kernels) == 16
    assert s.roofline_missing == ["FLOP counters", "DRAM bytes"]
    assert "b200.csv has no FLOP counters and no DRAM bytes (found: time_s)" in roofline_warning(
        s, "b200.csv"
    )


def test_an_input_without_any_roofline_counter_is_refused():
    s = summarize(_report({"sm__warps_active.avg": 3.0}))
    assert s.measured == []
    with pytest.raises(BenchError, match="synthetic has none of the roofline counters"):
        require_counters(s, "synthetic")


# ---------------------------------------------------------------- counting rules, hand-computed
def test_flops_per_precision_add_mul_2fma_and_half2_lanes():
    c = op_counter
    s = summarize(
        _report(
            {
                c("dadd"): 1,
                c("dmul"): 2,
                c("dfma"): 3,  # 1 + 2 + 2*3 = 9
                c("fadd"): 10,
                c("fmul"): 20,
                c("ffma"): 30,  # 10 + 20 + 60 = 90
                c("hadd"): 100,
                c("hmul"): 200,
                c("hfma"): 300,  # 2*(100 + 200) + 4*300 = 1800
                "dram__bytes_read.sum": 1000,
                "dram__bytes_write.sum": 899,
            }
        )
    )
    assert (s.totals["flops_fp64"], s.totals["flops_fp32"], s.totals["flops_fp16"]) == (9, 90, 1800)
    assert s.totals["flops_total"] == 1899 and s.totals["dram_bytes"] == 1899
    assert s.intensity("dram") == 1.0


def test_a_precision_with_only_some_counters_is_recorded_as_partial():
    c = op_counter
    q, src, gaps = kernel_quantities({c("hfma"): 10, c("fadd"): 1, c("fmul"): 2, c("ffma"): 3})
    assert q["flops_fp16"] == 40 and gaps == {
        "flops_fp16": "no hadd, hmul counters"
    }  # 4 * 10, hadd/hmul unknown
    assert q["flops_fp32"] == 9 and "flops_fp32" not in gaps and math.isnan(q["flops_fp64"])
    s = summarize(
        _report(
            {c("hfma"): 10, c("fadd"): 1, c("fmul"): 2, c("ffma"): 3, "dram__bytes.sum": 7},
            {
                c("hfma"): 5,
                c("hadd"): 1,
                c("fadd"): 1,
                c("fmul"): 0,
                c("ffma"): 0,
                "dram__bytes.sum": 7,
            },
        )
    )
    assert s.totals["flops_fp16"] == 40 + (20 + 2) and s.totals["flops_fp32"] == 9 + 1
    assert s.partial == {
        "flops_fp16": "no hadd, hmul counters in 1 of 2 kernels; no hmul counter in 1 of 2 kernels"
    }
    assert s.mlflow_tags()["ncu_partial"] == (
        "flops_fp16: no hadd, hmul counters in 1 of 2 kernels; no hmul counter in 1 of 2 kernels"
    )
    assert s.warnings == [
        "flops_fp16 is incomplete (no hadd, hmul counters in 1 of 2 kernels; no hmul counter in 1 of 2 "
        "kernels): ncu_flops_fp16 (where logged) and ncu_flops_total are lower bounds"
    ]


def test_complete_precisions_are_not_partial(ncu_dir):
    s = summarize(
        read_ncu_csv(ncu_dir / "l4_resnet18_bs64_train_step_details_nvtx.csv", keep=is_relevant)
    )
    assert s.partial == {} and s.warnings == [] and s.mlflow_tags()["ncu_partial"] == "none"


def test_smsp_counters_and_rate_times_cycles_count_the_same():
    a = kernel_quantities({"smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": 5})[0]
    b = kernel_quantities(
        {
            "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum.per_cycle_elapsed": 0.5,
            "smsp__cycles_elapsed.avg": 10,
        }
    )[0]
    assert a["flops_fp32"] == b["flops_fp32"] == 10


def test_sm_and_smsp_counter_of_the_same_op_are_not_added_twice():
    q, _, _ = kernel_quantities({op_counter("fadd"): 7, op_counter("fadd", "smsp"): 7})
    assert q["flops_fp32"] == 7


def test_tensor_ops_counters_base_names_win_sparsity_variants_fill_in_ints_excluded():
    q, src, _ = kernel_quantities(
        {
            "sm__ops_path_tensor_src_fp16_dst_fp32.sum": 1000,
            "sm__ops_path_tensor_src_fp16_dst_fp32_sparsity_off.sum": 1000,  # part of the base: not added
            "sm__ops_path_tensor_src_bf16_dst_fp32_sparsity_off.sum": 30,  # base absent: variants count
            "sm__ops_path_tensor_src_bf16_dst_fp32_sparsity_on.sum": 2,
            "sm__ops_path_tensor_src_int8.sum": 5000,  # integer ops are not FLOPs
        }
    )
    assert q["flops_tensor"] == 1032 and src["flops_tensor"] == "sm__ops_path_tensor"


T = "sm__ops_path_tensor_"


@pytest.mark.parametrize(
    "counters, ops",
    [
        # the src_fp16 aggregate covers both destinations: 3000, not 3000 + 1000 + 2000
        (
            {
                T + "src_fp16.sum": 3000,
                T + "src_fp16_dst_fp16.sum": 1000,
                T + "src_fp16_dst_fp32.sum": 2000,
            },
            3000,
        ),
        # without the aggregate the destinations add up: 1000 + 2000, plus bf16 500 and tf32 7
        (
            {
                T + "src_fp16_dst_fp16.sum": 1000,
                T + "src_fp16_dst_fp32.sum": 2000,
                T + "src_bf16_dst_fp32.sum": 500,
                T + "src_tf32_dst_fp32.sum": 7,
            },
            3507,
        ),
        # dst counters win over dst-less sparsity variants of the same source (they overlap): 90 + 30
        (
            {
                T + "src_fp8_sparsity_off.sum": 100,
                T + "src_fp8_sparsity_on.sum": 20,
                T + "src_fp8_dst_fp32.sum": 90,
                T + "src_fp8_dst_fp16.sum": 30,
            },
            120,
        ),
        # only sparsity variants: summed
        ({T + "src_fp8_sparsity_off.sum": 100, T + "src_fp8_sparsity_on.sum": 20}, 120),
        # one destination via its base, the other via its sparsity variants: 40 + (5 + 6)
        (
            {
                T + "src_fp16_dst_fp32.sum": 40,
                T + "src_fp16_dst_fp16_sparsity_off.sum": 5,
                T + "src_fp16_dst_fp16_sparsity_on.sum": 6,
            },
            51,
        ),
        # instruction-specific (Blackwell) counters only when no generic one of that source exists
        ({T + "op_utcqmma_src_fp8_dst_fp32.sum": 64, T + "src_fp8_dst_fp32.sum": 64}, 64),
        (
            {T + "op_utcqmma_src_fp8_dst_fp32.sum": 64, T + "op_utcomma_src_fp4_dst_fp32.sum": 16},
            80,
        ),
        # multi-type sources keep their underscores: fp4_fp6_fp8 is one source
        (
            {
                T + "src_fp4_fp6_fp8_dst_fp32.sum": 8,
                T + "src_fp4_fp6_fp8_dst_fp16.sum": 2,
                T + "src_fp4_dst_fp32.sum": 1,
            },
            11,
        ),
        # realtime variants and integer/binary sources are skipped
        (
            {
                T + "src_fp64.sum": 9,
                T + "src_fp64_realtime.sum": 9,
                T + "src_int4.sum": 99,
                T + "src_b1.sum": 99,
            },
            9,
        ),
    ],
)
def test_tensor_ops_count_each_op_once(counters, ops):
    q, src, gaps = kernel_quantities(counters)
    assert q["flops_tensor"] == ops and src["flops_tensor"] == "sm__ops_path_tensor" and gaps == {}


def test_tensor_ops_rates_fall_back_to_smsp_cycles():
    rate = {T + "src_fp16.sum.per_cycle_elapsed": 2.5}
    q, src, _ = kernel_quantities(
        {**rate, "smsp__cycles_elapsed.avg": 1000}
    )  # no sm__cycles_elapsed.avg
    assert (
        q["flops_tensor"] == 2500
        and src["flops_tensor"]
        == "sm__ops_path_tensor_per_cycle_elapsed_x_smsp__cycles_elapsed.avg"
    )
    q, src, _ = kernel_quantities(
        {**rate, "sm__cycles_elapsed.avg": 400, "smsp__cycles_elapsed.avg": 1000}
    )
    assert q["flops_tensor"] == 1000 and src["flops_tensor"].endswith(
        "_x_sm__cycles_elapsed.avg"
    )  # its own unit first
    q, _, _ = kernel_quantities({**rate, T + "src_fp16.sum": 7, "smsp__cycles_elapsed.avg": 1000})
    assert q["flops_tensor"] == 7  # a count wins over the rate of the same counter
    assert math.isnan(kernel_quantities(rate)[0]["flops_tensor"])  # no cycles at all: not measured


def test_sass_rates_of_sm_counters_fall_back_to_smsp_cycles():
    q, src, _ = kernel_quantities(
        {op_counter("fadd") + ".per_cycle_elapsed": 0.5, "smsp__cycles_elapsed.avg": 8}
    )
    assert (
        q["flops_fp32"] == 4
        and src["flops_fp32"]
        == "sass_thread_inst_executed_per_cycle_elapsed_x_smsp__cycles_elapsed.avg"
    )


def test_t4_fixture_sm_and_smsp_elapsed_cycles_are_the_same_clock(ncu_dir):
    """The fact the fallback rests on, in a real report."""
    import ncu_report

    action = (
        ncu_report.load_report(str(ncu_dir / "t4_matrix_add_1000x1000_set_full.ncu-rep"))
        .range_by_idx(0)
        .action_by_idx(0)
    )
    sm, smsp = (
        action.metric_by_name(f"{u}__cycles_elapsed.avg").as_double() for u in ("sm", "smsp")
    )
    assert sm == smsp == pytest.approx(28_419.6, rel=1e-9)


@pytest.mark.parametrize(
    "cap, flops",
    [
        ((7, 0), 3 * 512),
        ((7, 2), 3 * 512),
        ((7, 5), 3 * 2048),
        ((8, 0), 3 * 4096),
        ((8, 6), 3 * 4096),
        ((8, 9), 3 * 4096),
    ],
)
def test_tensor_instructions_times_the_factor_of_the_architecture(cap, flops):
    q, src, gaps = kernel_quantities({"sm__inst_executed_pipe_tensor.sum": 3}, cap)
    assert (
        q["flops_tensor"] == flops
        and src["flops_tensor"] == f"sm__inst_executed_pipe_tensor_x{flops // 3}"
    )
    assert gaps == {}


@pytest.mark.parametrize(
    "cap, where", [((9, 0), "sm_90"), ((12, 0), "sm_120"), (None, "an unknown GPU")]
)
def test_tensor_instructions_without_a_known_factor_are_a_gap_not_a_guess(cap, where):
    q, _, gaps = kernel_quantities({"sm__inst_executed_pipe_tensor.sum": 3}, cap)
    assert math.isnan(q["flops_tensor"])
    assert gaps == {
        "flops_tensor": f"tensor instructions without a FLOPs-per-instruction factor for {where}"
    }
    q, _, gaps = kernel_quantities({"sm__inst_executed_pipe_tensor.sum": 0}, cap)
    assert q["flops_tensor"] == 0 and gaps == {}  # no tensor work needs no factor


def test_tensor_instructions_on_sm80_plus_are_counted_with_a_caution_and_refused_on_sm90():
    r = _report(
        {
            "sm__inst_executed_pipe_tensor.sum": 2,
            op_counter("fadd"): 1,
            op_counter("fmul"): 0,
            op_counter("ffma"): 0,
            "dram__bytes.sum": 1,
        }
    )
    s = summarize(r, (8, 6))
    assert s.totals["flops_tensor"] == 8192 and s.totals["flops_total"] == 8193
    assert s.cautions == [tensor_inst_caution((8, 6))] and s.warnings == s.cautions
    assert s.cautions[0].startswith(
        "tensor FLOPs from sm__inst_executed_pipe_tensor.sum x 4096 assume every tensor "
        "instruction on sm_86 is an fp16/bf16 HMMA.16816"
    )
    assert s.mlflow_tags()["ncu_caution"] == s.cautions[0]
    assert (
        summarize(r, (7, 0)).cautions == [] and summarize(r, (7, 0)).totals["flops_tensor"] == 1024
    )
    s75 = summarize(r, (7, 5))
    assert s75.totals["flops_tensor"] == 4096 and s75.cautions == [tensor_inst_caution((7, 5))]
    assert "volta_*884*" in s75.cautions[0] and "over-counted 4x" in s75.cautions[0]
    s90 = summarize(r, (9, 0))
    assert "flops_tensor" not in s90.measured and s90.totals["flops_total"] == 1
    assert s90.partial == {
        "flops_tensor": "tensor instructions without a FLOPs-per-instruction factor for sm_90 in 1 of 1 kernels"
    }
    assert tensor_inst_caution((9, 0)).startswith(
        "no FLOPs-per-instruction factor is known for sm_90"
    )
    assert tensor_inst_caution((7, 0)) is None and tensor_inst_caution(None) is None
    assert tensor_inst_flops((8, 9)) == 4096 and tensor_inst_flops((9, 0)) is None


def test_summarize_reads_the_capability_from_the_report():
    k = NcuKernel(
        id=0,
        name="k",
        attrs={"CC": "7.5"},
        metrics={"sm__inst_executed_pipe_tensor.sum": 1, "dram__bytes.sum": 1},
    )
    s = summarize(NcuReport(kernels=[k], page="details", source="x"))
    assert s.totals["flops_tensor"] == 2048


def test_cache_bytes_and_sector_fallback():
    q, src, _ = kernel_quantities({"lts__t_bytes.sum": 640, "l1tex__t_sectors.sum": 10})
    assert q["l2_bytes"] == 640 and src["l2_bytes"] == "lts__t_bytes.sum"
    assert q["l1_bytes"] == 320 and src["l1_bytes"] == "l1tex__t_sectors.sum_x32"


def test_intensities_at_every_level():
    s = summarize(
        _report(
            {
                op_counter("ffma"): 50,
                "dram__bytes_read.sum": 50,
                "dram__bytes_write.sum": 50,
                "lts__t_bytes.sum": 25,
                "l1tex__t_bytes.sum": 10,
                "gpu__time_duration.sum": 1e-6,
            }
        )
    )
    m = s.mlflow_metrics()
    assert m["ncu_intensity_dram_flops_per_byte"] == 1.0
    assert m["ncu_intensity_l2_flops_per_byte"] == 4.0
    assert m["ncu_intensity_l1_flops_per_byte"] == 10.0


def test_phase_shares_and_top_kernels_order():
    s = summarize(
        _report(
            {op_counter("fadd"): 30, "dram__bytes.sum": 10, "gpu__time_duration.sum": 1.0},
            {op_counter("fadd"): 10, "dram__bytes.sum": 30, "gpu__time_duration.sum": 3.0},
            {op_counter("fadd"): 60, "dram__bytes.sum": 60, "gpu__time_duration.sum": 4.0},
            nvtx=["forward", "backward", "backward"],
        )
    )
    ph = s.phases
    assert ph.loc["forward", "flops_share"] == 0.3 and ph.loc["backward", "time_share"] == 0.875
    assert ph.loc["backward", "dram_bytes_share"] == 0.9
    top = top_kernels(s, 2)
    assert top["kernel"].tolist() == ["k2", "k1"] and top["time_share"].tolist() == [0.5, 0.375]
    # the text table (issue 24: the UI's CSV view cuts kernel names), the whole name last; by hand:
    # k2 first, 4 s of 8 (50 %), 60 FLOPs over 60 DRAM bytes (1 FLOP/B), one launch
    lines = top_kernels_text(top).splitlines()
    assert lines[0].split() == [
        "time",
        "share",
        "time",
        "ms",
        "launches",
        "GFLOP",
        "FLOP/B",
        "kernel",
    ]
    assert lines[1].split() == ["50.0%", "4000", "1", "6e-08", "1", "k2"]


def test_na_in_a_counted_metric_is_an_error():
    report = read_ncu_csv(MESSAGES / "na_metrics.csv", keep=is_relevant)
    with pytest.raises(
        BenchError, match=r"n/a for sm__ops_path_tensor_src_tf32_dst_fp32.sum \(2 of 2 kernels\)"
    ):
        summarize(report)


def test_na_in_an_unused_metric_is_ignored():
    r = _report(
        {
            op_counter("fadd"): 1,
            "dram__bytes.sum": 1,
            "sm__throughput.avg.pct_of_peak_sustained_elapsed": math.nan,
        }
    )
    r.na = {"sm__throughput.avg.pct_of_peak_sustained_elapsed": 1}
    assert summarize(r).totals["flops_total"] == 1


def test_no_kernels_is_an_error():
    with pytest.raises(BenchError, match="no kernels in synthetic"):
        summarize(NcuReport(kernels=[], page="details", source="synthetic"))


# ---------------------------------------------------------------- metric sets (generic names: a chip the database does not know)
def test_generic_roofline_metric_set_per_tensor_mode():
    ops = plan_metrics("roofline", "ops").metrics
    assert "sm__sass_thread_inst_executed_op_hfma_pred_on.sum" in ops
    assert "sm__sass_thread_inst_executed_op_dadd_pred_on.sum" in ops
    assert {
        "dram__bytes_read.sum",
        "dram__bytes_write.sum",
        "lts__t_bytes.sum",
        "l1tex__t_bytes.sum",
        "gpu__time_duration.sum",
    } <= set(ops)
    assert (
        "sm__ops_path_tensor_src_tf32_dst_fp32.sum" in ops
        and "sm__inst_executed_pipe_tensor.sum" not in ops
    )
    inst = plan_metrics("roofline", "inst").metrics
    assert "sm__inst_executed_pipe_tensor.sum" in inst and not any("ops_path" in n for n in inst)
    none = plan_metrics("roofline", "none", ["dram__bytes_read.sum", "lts__t_sectors.sum"])
    assert none.tensor == "none" and none.chip is None
    assert not any("tensor" in n for n in none.metrics)
    assert none.metrics.count("dram__bytes_read.sum") == 1
    assert none.metrics[-1] == "lts__t_sectors.sum" and all(is_relevant(n) for n in none.metrics)


def test_generic_seed_metric_set_uses_names_ncu_has_and_unknown_set():
    plan = plan_metrics("seed")
    assert plan.metrics == [
        *(op_counter(op) for op in ("fadd", "fmul", "ffma", "hadd", "hmul", "hfma")),
        "dram__bytes_read.sum",
        "dram__bytes_write.sum",
        "pcie__read_bytes.sum",
        "pcie__write_bytes.sum",
    ]
    assert any("flop_count_sp/flop_count_hp are nvprof metric names" in n for n in plan.notes)
    with pytest.raises(ValueError, match="metric_set must be one of roofline, seed"):
        plan_metrics("full")


@pytest.mark.parametrize(
    "cap, mode",
    [
        (None, "ops"),
        ((9, 0), "ops"),
        ((8, 0), "ops"),
        ((7, 5), "ops"),
        ((7, 0), "inst"),
        ((6, 1), "none"),
    ],
)
def test_tensor_counters_of_an_unknown_chip_by_compute_capability(cap, mode):
    assert tensor_counters_for(cap) == mode
    assert plan_metrics("roofline", "auto", capability=cap).tensor == mode


# ---------------------------------------------------------------- .ncu-rep NVTX phases, with stand-in ncu_report objects
class _Metric:
    def __init__(self, value, unit=""):
        self.value, self._unit = value, unit

    def has_value(self):
        return self.value is not None

    def as_double(self):
        return float(self.value)

    def as_uint64(self):
        return int(self.value)

    def as_string(self):
        return str(self.value)

    def unit(self):
        return self._unit


class _Range:
    """INvtxRange as train's nvtx.start_range(message=...) leaves it: no name, the text in message."""

    def __init__(self, text):
        self.text = text

    def name(self):
        return ""

    def message(self):
        return self.text


class _Domain:
    def __init__(self, push_pop=(), start_end=()):
        self.pp, self.se = [_Range(n) for n in push_pop], [_Range(n) for n in start_end]

    def push_pop_range(self, i):
        return self.pp[i] if i < len(self.pp) else None

    def start_end_range(self, i):
        return self.se[i] if i < len(self.se) else None


class _State:
    def __init__(self, *domains):
        self.doms = dict(enumerate(domains))

    def domains(self):
        return tuple(self.doms)

    def domain_by_id(self, i):
        return self.doms[i]


class _Action:
    def __init__(self, name, metrics, state):
        self._name, self.metrics, self.state = name, metrics, state

    def name(self):
        return self._name

    def metric_names(self):
        return tuple(self.metrics)

    def metric_by_name(self, n):
        return self.metrics.get(n)

    def nvtx_state(self):
        return self.state


class _Ctx:
    def __init__(self, actions):
        self.actions = actions

    def num_ranges(self):
        return 1

    def range_by_idx(self, i):
        return self

    def num_actions(self):
        return len(self.actions)

    def action_by_idx(self, a):
        return self.actions[a]


def test_ncu_rep_phases_come_from_the_known_name_not_the_range_order():
    from profiling.ncu.report_import import _add_results

    def action(name, flops, state):
        return _Action(
            name,
            {
                op_counter("fadd"): _Metric(flops, "inst"),
                "dram__bytes.sum": _Metric(10, "byte"),
                "gpu__time_duration.sum": _Metric(1, "usecond"),
            },
            state,
        )

    ctx = _Ctx(
        [
            # start/end ranges listed inner-first, then outer: by order the phase would be "train_step"
            action("conv_fwd", 30, _State(_Domain(start_end=("forward", "train_step")))),
            # listed outer-first in another domain order
            action(
                "conv_bwd",
                60,
                _State(_Domain(start_end=("train_step",)), _Domain(start_end=("backward",))),
            ),
            # push/pop only, with a user range inside the phase (stack order, innermost last)
            action("sgd", 10, _State(_Domain(push_pop=("train_step", "optimizer", "foreach_add")))),
            action("memcpy", 0, None),  # no NVTX state at all
        ]
    )
    report = NcuReport(kernels=[], page="ncu-rep", source="stand-in")
    _add_results(ctx, report, is_relevant)
    assert [k.phase for k in report.kernels] == ["forward", "backward", "optimizer", None]
    assert report.has_nvtx and report.kernels[0].nvtx_start_end == ("forward", "train_step")
    ph = summarize(report).phases
    assert ph["kernels"].to_dict() == {"forward": 1, "backward": 1, "optimizer": 1, "none": 1}
    assert ph.loc["backward", "flops_share"] == 0.6 and ph.loc["forward", "flops_share"] == 0.3
    assert ph.loc["optimizer", "time_share"] == 0.25


@pytest.mark.parametrize("cap", [(8, 0), (8, 6), (8, 9)])
def test_the_inst_caution_on_sm80_89_names_the_kernels_that_break_it(cap):
    caution = tensor_inst_caution(cap)
    assert "cuBLAS's *1688* kernels (HMMA.1688, 1024 FMA) make fp16/bf16 counts 2x high" in caution
    assert "tf32 kernels (HMMA.1684, 512 FMA) 4x" in caution
    assert "also counts DMMA (fp64) and IMMA (integer: no FLOPs) instructions" in caution


# ---------------------------------------------------------------- packed FP32 (Blackwell datacenter, Rubin)
def test_packed_fp32_instructions_count_two_lanes_each():
    """A synthetic B200 kernel row with scalar and packed FP32 counters (issue 22, item 1):
    fadd + fmul + 2 ffma + 2 fadd2 + 2 fmul2 + 4 ffma2 = 10 + 20 + 60 + 80 + 100 + 240 = 510."""
    c = op_counter
    row = {
        c("fadd"): 10,
        c("fmul"): 20,
        c("ffma"): 30,
        c("fadd2"): 40,
        c("fmul2"): 50,
        c("ffma2"): 60,
        "dram__bytes_read.sum": 300,
        "dram__bytes_write.sum": 210,
    }
    gb100 = counters_for("GB100")
    q, src, gaps = kernel_quantities(row, (10, 0), gb100)
    assert q["flops_fp32"] == 510 and gaps == {}
    assert src["flops_fp32"] == "sass_thread_inst_executed (+ fadd2, fmul2, ffma2)"
    s = summarize(_report(row), (10, 0), gb100)
    assert s.totals["flops_fp32"] == 510 and s.intensity("dram") == 1.0
    # the same row from a rate-only report (--set full): rate x elapsed cycles
    rates = {f"{n}.per_cycle_elapsed": v / 10 for n, v in row.items() if "sass" in n}
    q, _, _ = kernel_quantities({**rates, "sm__cycles_elapsed.avg": 10}, (10, 0), gb100)
    assert q["flops_fp32"] == pytest.approx(510)


def test_a_b200_report_without_the_packed_counters_is_a_lower_bound():
    c = op_counter
    row = {c("fadd"): 10, c("fmul"): 20, c("ffma"): 30}
    q, _, gaps = kernel_quantities(row, (10, 0), counters_for("GB100"))
    assert q["flops_fp32"] == 90
    assert gaps == {"flops_fp32": "no fadd2, fmul2, ffma2 counters (GB100 has packed FP32)"}
    # a chip without packed FP32 (and an unknown chip) lacks nothing
    assert kernel_quantities(row, (9, 0), counters_for("GH100"))[2] == {}
    assert kernel_quantities(row)[2] == {}
