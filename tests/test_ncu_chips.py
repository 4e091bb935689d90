"""Counters per chip, checked against NVIDIA's metric database (libnvperf_host.so from the
ncu-report wheel, a requirement of this project: it loads without a GPU).

Every chip the database lists from Turing on: each metric set's names exist there, tensor
FLOPs count each op once (the chosen counters' raw dependencies are disjoint and cover every
floating-point tensor raw counter), devices map to the right chips, and the committed table is
what the database says.
"""

from __future__ import annotations

import random
import sys

import pytest

from profiling.ncu import nvperf
from profiling.ncu.chips.counters import (
    TABLE_FILE,
    check_metric_names,
    committed_table,
    counters_for,
    source_note,
)
from profiling.ncu.chips.devices import CC_CHIPS, parse_capability, resolve_chip
from profiling.ncu.chips.table import build_table, table_text
from profiling.ncu.counting import _tensor_ops
from profiling.ncu.names import TENSOR_PREFIX, is_relevant, op_counter
from profiling.ncu.plan import plan_metrics

needs_library = pytest.mark.skipif(
    sys.platform != "linux", reason="libnvperf_host.so ships in the Linux ncu-report wheel"
)


@pytest.fixture(scope="module")
def db():
    database = nvperf.open_database()
    assert database is not None, f"libnvperf_host.so must load: {nvperf.load_error()}"
    return database


@pytest.fixture
def no_library(monkeypatch):
    """As on a machine where libnvperf_host.so does not load: the committed table is used."""
    monkeypatch.setattr(nvperf, "library_path", lambda: None)
    nvperf.open_database.cache_clear()
    counters_for.cache_clear()
    yield
    nvperf.open_database.cache_clear()
    counters_for.cache_clear()


def all_chips():
    return list(committed_table()["chips"])


# ---------------------------------------------------------------- the database and the table
@needs_library
def test_the_database_lists_every_chip_from_turing_on(db):
    assert {"TU104", "TU116", "GA100", "GA102", "GA10B", "AD102", "GH100", "GB100", "GB202"} <= set(
        db.chips
    )
    assert set(db.chips) == set(all_chips())


@needs_library
def test_the_committed_table_is_what_the_database_says(db):
    """Regenerated from the installed library; the version stamp may differ, the facts may not
    (after an ncu-report update that changes them: `python -m profiling.ncu.chips --write`)."""
    fresh = build_table(db)
    committed = committed_table()
    assert fresh["chips"] == committed["chips"], (
        "regenerate with `python -m profiling.ncu.chips --write`"
    )
    assert committed["ncu_report"] == "2026.3.1" and committed["library"] == "libnvperf_host.so"
    if fresh["ncu_report"] == committed["ncu_report"]:
        assert table_text(fresh) == TABLE_FILE.read_text(encoding="utf-8")


@needs_library
def test_the_binding_validates_names_and_gives_raw_dependencies(db):
    with db.chip("GH100") as gh100:
        assert gh100.has("dram__bytes_read.sum") and not gh100.has("dram__bytes_read.nonsense")
        assert not gh100.has("sm__ops_path_tensor_src_fp16_dst_fp16.sum")
        whole = set(gh100.raw_dependencies("sm__ops_path_tensor_src_fp16.sum"))
        parts = set(gh100.raw_dependencies("sm__ops_path_tensor_op_hgmma_src_fp16.sum")) | set(
            gh100.raw_dependencies("sm__ops_path_tensor_op_hmma_src_fp16.sum")
        )
        assert whole == parts and len(whole) == 8
        assert gh100.raw_dependencies("no_such__metric.sum") == ()
        assert "dram__bytes_read" in gh100.base_names("counter")
    with pytest.raises(nvperf.NvperfError, match="does not know chip 'GX999'"):
        db.chip("GX999")


def test_a_missing_library_is_a_reason_not_a_crash(no_library):
    assert nvperf.open_database() is None
    assert "libnvperf_host.so not found" in nvperf.load_error()
    counters = counters_for("GH100")
    assert counters.source == "ncu_chips.json (ncu-report 2026.3.1)"
    assert "using ncu_chips.json, generated from ncu-report 2026.3.1" in source_note()
    problems, note = check_metric_names("GH100", ["dram__bytes_raed.sum"])
    assert problems == [] and note.startswith(
        "--metrics names are not checked (libnvperf_host.so not found"
    )


@needs_library
def test_the_table_and_the_library_give_the_same_plans(db, monkeypatch):
    def plans():
        counters_for.cache_clear()
        return {c: plan_metrics("roofline", "auto", (), counters_for(c)) for c in all_chips()}

    live = plans()
    assert counters_for("GH100").source == "libnvperf_host.so from ncu-report 2026.3.1"
    monkeypatch.setattr(nvperf, "library_path", lambda: None)
    nvperf.open_database.cache_clear()
    try:
        from_table = plans()
        assert counters_for("GH100").source == "ncu_chips.json (ncu-report 2026.3.1)"
    finally:
        monkeypatch.undo()
        nvperf.open_database.cache_clear()
        counters_for.cache_clear()
    assert {c: p.metrics for c, p in live.items()} == {c: p.metrics for c, p in from_table.items()}


# ---------------------------------------------------------------- every metric set is valid on its chip
@needs_library
@pytest.mark.parametrize("chip", all_chips())
@pytest.mark.parametrize("metric_set", ["roofline", "seed"])
def test_every_metric_set_name_exists_on_its_chip(db, chip, metric_set):
    counters = counters_for(chip)
    modes = ["auto", "none"] + (["ops"] if counters.tensor else []) + ["inst"]
    with db.chip(chip) as live:
        for mode in modes:
            plan = plan_metrics(metric_set, mode, (), counters)
            invalid = [n for n in plan.metrics if not live.has(n)]
            assert invalid == [], f"{chip} {metric_set} --tensor-counters {mode}: {invalid}"
            assert plan.chip == chip and len(plan.metrics) == len(set(plan.metrics))
            if metric_set == "roofline":  # every counter it asks for is read
                assert all(is_relevant(n) for n in plan.metrics)


@pytest.mark.parametrize(
    "chip, dram, tensor",
    [
        (
            "TU104",
            ("dram__bytes_read.sum", "dram__bytes_write.sum"),
            ("src_fp16_bf16_tf32_dst_fp32", "src_fp16_dst_fp16"),
        ),
        ("TU116", ("dram__bytes_read.sum", "dram__bytes_write.sum"), ()),
        (
            "GA100",
            ("dram__bytes_read.sum", "dram__bytes_write.sum"),
            (
                "src_bf16_dst_fp32",
                "src_fp16_dst_fp16",
                "src_fp16_dst_fp32",
                "src_fp64",
                "src_tf32_dst_fp32",
            ),
        ),
        (
            "GA10B",
            (),
            (
                "src_bf16_dst_fp32",
                "src_fp16_dst_fp16",
                "src_fp16_dst_fp32",
                "src_fp64",
                "src_tf32_dst_fp32",
            ),
        ),
        (
            "GH100",
            ("dram__bytes_read.sum", "dram__bytes_write.sum"),
            ("src_bf16_dst_fp32", "src_fp16", "src_fp64", "src_fp8", "src_tf32_dst_fp32"),
        ),
        ("GB202", ("dram__bytes_op_read.sum", "dram__bytes_op_write.sum"), None),
        ("GB20B", (), None),
    ],
)
def test_the_issue_s_findings_per_chip(chip, dram, tensor):
    """GH100 has no src_fp16_dst_fp16 (its src_fp16 covers HGMMA + HMMA); GB20x has no
    dram__bytes_read/write; GA10B and GB20B have no DRAM counters; TU10x has exact op counters."""
    c = counters_for(chip)
    assert c.dram == dram
    if tensor is not None:
        assert c.tensor_sum() == tuple(f"{TENSOR_PREFIX}{t}.sum" for t in tensor)
    assert not c.has("sm__ops_path_tensor_src_fp16_dst_fp16.sum") or chip != "GH100"


@pytest.mark.parametrize("chip", ["GA10B", "GB10B", "GB20B", "GB20C"])
def test_a_chip_without_dram_counters_still_counts_flops_l2_l1_and_time(chip):
    plan = plan_metrics("roofline", "auto", (), counters_for(chip))
    assert plan.missing == ["DRAM bytes"] and not any(n.startswith("dram__") for n in plan.metrics)
    assert any(f"{chip} has no DRAM counters" in n for n in plan.notes)
    assert {
        op_counter("ffma"),
        "lts__t_bytes.sum",
        "l1tex__t_bytes.sum",
        "gpu__time_duration.sum",
    } <= set(plan.metrics)
    assert plan.tensor == "ops"


def test_tensor_modes_a_chip_cannot_count_are_refused():
    from common.errors import UsageError

    tu116 = counters_for("TU116")
    assert plan_metrics("roofline", "auto", (), tu116).tensor == "none"
    with pytest.raises(UsageError, match="TU116 has no sm__ops_path_tensor_\\* counters"):
        plan_metrics("roofline", "ops", (), tu116)


# ---------------------------------------------------------------- tensor ops counted once
@pytest.mark.parametrize("chip", all_chips())
def test_tensor_counters_nest_and_the_sum_leaves_nothing_out(chip):
    c = counters_for(chip)
    sets = list(c.tensor.values())
    for a in sets:  # laminar: any two are disjoint or nested
        for b in sets:
            assert not (a & b) or a <= b or b <= a
    tops = c.tensor_sum()
    assert sum(len(c.tensor[n]) for n in tops) == len(
        set().union(*(c.tensor[n] for n in tops)) if tops else set()
    )
    for n in c.tensor:  # every counter is summed or covered by one that is
        assert n in tops or any(c.covers(t, n) for t in tops), n


def test_on_gb20x_the_fp4_aggregate_and_its_sparsity_parts_read_different_raw_counters():
    """So raw dependencies alone would add the three; the names say the two are the parts."""
    c = counters_for("GB202")
    agg = f"{TENSOR_PREFIX}src_fp4_dst_fp32.sum"
    on, off = agg.replace(".sum", "_sparsity_on.sum"), agg.replace(".sum", "_sparsity_off.sum")
    assert not (c.tensor[agg] & (c.tensor[on] | c.tensor[off]))
    assert c.tensor_parts(agg) == (off, on) and c.tensor_sum([agg, on, off]) == (agg,)


@pytest.mark.parametrize("chip", all_chips())
def test_synthetic_counters_give_the_total_by_raw_dependencies_and_by_name(chip):
    """Each leaf counter (one that covers no other) gets a value, each aggregate the sum of the
    leaves it covers. Whether a report holds every counter, only the leaves or only the summed
    ones, the chip rule gives the leaves' total; so does the name rule (used when the chip is
    not known) on the full set."""
    c = counters_for(chip)
    if not c.tensor:
        pytest.skip(f"{chip} has no tensor ops counters")
    rng = random.Random(chip)
    leaves = [n for n in c.tensor if not c.tensor_parts(n)]
    distinct = [n for i, n in enumerate(leaves) if not any(c.covers(m, n) for m in leaves[:i])]
    leaf_value = {n: float(rng.randint(1, 10**6)) for n in distinct}
    value = {n: sum(v for leaf, v in leaf_value.items() if c.covers(n, leaf)) for n in c.tensor}
    truth = sum(leaf_value.values())
    everything = dict(value)
    for present in (
        everything,
        {n: value[n] for n in distinct},
        {n: value[n] for n in c.tensor_sum()},
    ):
        assert _tensor_ops(present, c)[0] == pytest.approx(truth, rel=1e-12)
    assert _tensor_ops(everything)[0] == pytest.approx(truth, rel=1e-12), "name rule"


def test_the_raw_dependency_rule_is_named_in_the_source_tag():
    c = counters_for("GH100")
    total, how = _tensor_ops(
        {"sm__ops_path_tensor_src_fp16.sum": 10.0, "sm__ops_path_tensor_op_hmma_src_fp16.sum": 4.0},
        c,
    )
    assert total == 10.0 and how == "sm__ops_path_tensor (GH100 raw dependencies)"


# ---------------------------------------------------------------- devices -> chips
@pytest.mark.parametrize(
    "name, chip",
    [
        ("Tesla T4", "TU104"),
        ("NVIDIA GeForce RTX 2080 Ti", "TU102"),
        ("NVIDIA GeForce GTX 1660 SUPER", "TU116"),
        ("NVIDIA GeForce GTX 1650", "TU117"),
        ("NVIDIA A100-SXM4-80GB", "GA100"),
        ("NVIDIA A10G", "GA102"),
        ("NVIDIA GeForce RTX 3090", "GA102"),
        ("NVIDIA GeForce RTX 3060 Ti", "GA104"),
        ("Orin", "GA10B"),
        ("NVIDIA L4", "AD104"),
        ("NVIDIA L40S", "AD102"),
        ("NVIDIA GeForce RTX 4090", "AD102"),
        ("NVIDIA GeForce RTX 4070 Ti SUPER", "AD103"),
        ("NVIDIA H100 80GB HBM3", "GH100"),
        ("NVIDIA H200", "GH100"),
        ("NVIDIA GH200 480GB", "GH100"),
        ("NVIDIA B200", "GB100"),
        ("NVIDIA B300 SXM6 AC", "GB110"),
        ("NVIDIA GeForce RTX 5090", "GB202"),
        ("NVIDIA GeForce RTX 5070", "GB205"),
        ("NVIDIA GB10", "GB20B"),
        ("GH100", "GH100"),
        ("ga102", "GA102"),
        # issue 22, item 5: names torch reports today, chips as the PCI ID database
        # (pciutils/pciids) pairs them with products
        ("Tesla V100-SXM2-16GB", "GV100"),
        ("Tesla V100-PCIE-32GB", "GV100"),
        ("Tesla V100S-PCIE-32GB", "GV100"),
        ("NVIDIA TITAN V", "GV100"),
        ("Quadro GV100", "GV100"),
        ("NVIDIA DGX Spark", "GB20B"),
        ("NVIDIA GeForce RTX 3080 Ti Laptop GPU", "GA103"),
        ("NVIDIA RTX A5500 Laptop GPU", "GA103"),
        ("NVIDIA GeForce RTX 3080 Laptop GPU", "GA104"),
        ("NVIDIA GeForce RTX 3070 Ti Laptop GPU", "GA104"),
        ("NVIDIA GeForce RTX 3060 Laptop GPU", "GA106"),
        ("NVIDIA GeForce RTX 3050 Ti Laptop GPU", "GA107"),
        ("NVIDIA GeForce RTX 3080 Ti", "GA102"),
        ("NVIDIA GeForce RTX 4090 Laptop GPU", "AD103"),
        ("NVIDIA GeForce RTX 4080 Laptop GPU", "AD104"),
        ("NVIDIA GeForce RTX 4070 Laptop GPU", "AD106"),
        ("NVIDIA GeForce RTX 4060 Laptop GPU", "AD107"),
        ("NVIDIA GeForce RTX 4050 Laptop GPU", "AD107"),
        ("NVIDIA RTX 5000 Ada Generation Laptop GPU", "AD103"),
        ("NVIDIA GeForce RTX 4070 SUPER", "AD104"),
        ("NVIDIA GeForce RTX 4060 Ti", "AD106"),
        ("NVIDIA RTX 6000 Ada Generation", "AD102"),
        ("NVIDIA RTX 4000 Ada Generation", "AD104"),
        ("NVIDIA RTX 2000 Ada Generation", "AD107"),
        ("NVIDIA L20", "AD102"),
        ("NVIDIA L40", "AD102"),
        ("NVIDIA RTX A6000", "GA102"),
        ("NVIDIA RTX A4000", "GA104"),
        ("NVIDIA A800-SXM4-80GB", "GA100"),
        ("NVIDIA H100 NVL", "GH100"),
        ("NVIDIA H20", "GH100"),
        ("NVIDIA H800", "GH100"),
        ("NVIDIA GB200", "GB100"),
        ("NVIDIA GB300", "GB110"),
        ("NVIDIA Thor", "GB10B"),
        ("NVIDIA GeForce RTX 5090 D", "GB202"),
        ("NVIDIA GeForce RTX 5090 Laptop GPU", "GB203"),
        ("NVIDIA GeForce RTX 5080 Laptop GPU", "GB203"),
        ("NVIDIA GeForce RTX 5070 Ti Laptop GPU", "GB205"),
        ("NVIDIA GeForce RTX 5070 Laptop GPU", "GB206"),
        ("NVIDIA GeForce RTX 5060 Laptop GPU", "GB206"),
        ("NVIDIA GeForce RTX 5050 Laptop GPU", "GB207"),
        ("NVIDIA GeForce RTX 5060 Ti", "GB206"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "GB202"),
        ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "GB202"),
        ("NVIDIA RTX PRO 5000 Blackwell", "GB202"),
        ("NVIDIA RTX PRO 4000 Blackwell", "GB203"),
        ("NVIDIA RTX PRO 5000 Blackwell Generation Laptop GPU", "GB203"),
        ("NVIDIA RTX PRO 3000 Blackwell Generation Laptop GPU", "GB205"),
        ("NVIDIA RTX PRO 2000 Blackwell", "GB206"),
        ("NVIDIA RTX PRO 1000 Blackwell Generation Laptop GPU", "GB207"),
    ],
)
def test_device_names_map_to_their_chips(name, chip):
    choice = resolve_chip(name)
    assert choice.chip == chip and choice.how in ("device name", "chip")
    assert (choice.note is None) == (chip != "GV100")  # Volta: a note (below)


def test_every_chip_a_device_name_maps_to_is_in_the_database_or_named_as_absent():
    from profiling.ncu.chips.devices import DEVICE_PATTERNS, NOT_IN_DATABASE

    assert {c for c, _ in DEVICE_PATTERNS} - set(all_chips()) == set(NOT_IN_DATABASE)


@pytest.mark.parametrize(
    "how", [{"device_name": "Tesla V100-SXM2-16GB"}, {"capability": (7, 0)}, {"chip_id": 0x140}]
)
def test_volta_is_named_with_the_last_ncu_that_profiles_it(how):
    """GV100 is absent from the shipped database (ncu-report 2026.3.1): planning for Volta says,
    in one line, which ncu release still profiles it and what this project does there."""
    choice = resolve_chip(**how)
    assert choice.chip == "GV100" and counters_for("GV100") is None
    assert choice.note == (
        "GV100 (Volta) is not in NVIDIA's metric database of ncu-report 2026.3.1: the newest "
        "Nsight Compute known to profile it is 2025.3.1 (its ncu-report database has GV100/GV11B; "
        "2026.2.0's has none), so capture with ncu 2025.3.1 or older (and a PyTorch build with "
        "sm_70 kernels); this project plans generic metric names there, unchecked, and counts "
        "tensor FLOPs as sm__inst_executed_pipe_tensor.sum x 512"
    )


@pytest.mark.parametrize(
    "cc, chip",
    [
        ((7, 5), "TU104"),
        ((8, 0), "GA100"),
        ((8, 6), "GA102"),
        ((8, 7), "GA10B"),
        ((8, 9), "AD102"),
        ((9, 0), "GH100"),
        ((10, 0), "GB100"),
        ((10, 3), "GB110"),
        ((11, 0), "GB10B"),
        ((12, 0), "GB202"),
        ((12, 1), "GB20B"),
    ],
)
def test_compute_capabilities_map_to_a_representative_chip(cc, chip):
    choice = resolve_chip(capability=cc)
    assert choice.chip == chip and choice.how == "compute capability"
    if len(CC_CHIPS[cc]) > 1:
        assert f"compute capability {cc[0]}.{cc[1]} covers" in choice.note


@pytest.mark.parametrize("cc", [cc for cc, options in CC_CHIPS.items() if cc != (7, 5)])
def test_chips_behind_one_capability_other_than_7_5_have_the_same_counters(cc):
    plans = {
        c: plan_metrics(s, "auto", (), counters_for(c)).metrics
        for c in CC_CHIPS[cc]
        for s in ("roofline",)
    }
    assert len({tuple(p) for p in plans.values()}) == 1, plans


def test_7_5_is_two_counter_sets_and_the_note_says_so():
    tu104 = plan_metrics("roofline", "auto", (), counters_for("TU104")).metrics
    tu116 = plan_metrics("roofline", "auto", (), counters_for("TU116")).metrics
    assert tu104 != tu116 and not any("ops_path" in n for n in tu116)
    assert (
        "TU116/TU117, GTX 16xx, have no tensor-core counters"
        in resolve_chip(capability=(7, 5)).note
    )


def test_report_chip_numbers_and_unknown_devices():
    assert resolve_chip(chip_id=356).chip == "TU104"  # the T4 fixture's device__attribute_chip
    assert resolve_chip(chip_id=416).chip == "GB100"  # the B200 fixture's
    unknown = resolve_chip("Some Old GPU", (6, 1))
    assert unknown.chip is None and "metric names are not checked" in unknown.note
    guessed = resolve_chip("Some Future GPU", (9, 0))
    assert guessed.chip == "GH100" and "is not a GPU this project knows by name" in guessed.note
    assert parse_capability(" 8.6 ") == (8, 6)
    with pytest.raises(ValueError, match="expected a compute capability such as 8.6, got '86'"):
        parse_capability("86")


# ---------------------------------------------------------------- --metrics names
@needs_library
def test_extra_metric_names_are_checked_against_the_chip(db):
    problems, note = check_metric_names(
        "GB202",
        [
            "dram__bytes_read.sum",  # GB20x has op_read
            "lts__t_sectors.sum",  # fine
            "lts__t_bytes.summ",  # known counter, bad rollup
            "launch__grid_size",  # ncu's own, not in the database
            "regex:sm__.*",  # ncu syntax, not checked
        ],
    )
    assert note is None
    assert problems[0].startswith("GB202 has no metric dram__bytes_read.sum (nearest: ")
    assert "dram__bytes_op_read.sum" in problems[0]
    assert (
        problems[1]
        == "GB202 has no metric lts__t_bytes.summ (nearest: lts__t_bytes.sum, lts__t_bytes.avg, lts__t_bytes.max, lts__t_bytes.min)"
    )
    assert len(problems) == 2


# ---------------------------------------------------------------- packed FP32 (issue 22, item 1)
PACKED_FP32_CHIPS = {"GB100", "GB102", "GB110", "GB112", "GR100"}
PACKED = [op_counter(op) for op in ("fadd2", "fmul2", "ffma2")]


@pytest.mark.parametrize("chip", all_chips())
def test_packed_fp32_counters_are_asked_for_where_the_chip_has_them(chip):
    """Chosen per chip from the database like every other counter: the five chips that have
    them get fadd2/fmul2/ffma2 in both metric sets, no other chip does."""
    for metric_set in ("roofline", "seed"):
        plan = plan_metrics(metric_set, "auto", (), counters_for(chip))
        asked = [n for n in PACKED if n in plan.metrics]
        assert asked == (PACKED if chip in PACKED_FP32_CHIPS else []), (chip, metric_set)
        assert not any("2_pred_on" in m for m in plan.missing)


@needs_library
@pytest.mark.parametrize("chip", sorted(PACKED_FP32_CHIPS))
def test_scalar_fp32_counters_do_not_include_the_packed_ones(db, chip):
    """Each packed counter is built from a raw counter of its own: ffma and ffma2 share no raw
    dependency, so adding them counts no instruction twice (docs/profiling.md, "Packed FP32")."""
    with db.chip(chip) as c:
        for op in ("fadd", "fmul", "ffma"):
            scalar = set(c.raw_dependencies(op_counter(op)))
            packed = set(c.raw_dependencies(op_counter(f"{op}2")))
            assert len(scalar) == len(packed) == 1 and not scalar & packed, (chip, op)
    assert {ch for ch in db.chips if _has_packed(db, ch)} == PACKED_FP32_CHIPS


def _has_packed(db, chip) -> bool:
    with db.chip(chip) as c:
        return all(c.has(n) for n in PACKED)
