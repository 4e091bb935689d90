"""profiling.peaks, what is measured and how large: dtype availability (dtypes), PeaksConfig
validation (config), STREAM array sizes and the fit check (sizing), device facts from sysfs and
/proc (facts). Pure functions, no measuring."""

from __future__ import annotations

import pytest

from common import schema
from common.errors import UsageError
from profiling.peaks import facts, sizing
from profiling.peaks.config import DEFAULT_TIME_BUDGET_S, PeaksConfig
from profiling.peaks.dtypes import dtype_availability, select_dtypes


# ------------------------------------------------------------------------------ dtype availability
def _default(av):
    return [d for d, s in av.items() if s.default]


def _measurable(av):
    return [d for d, s in av.items() if s.measurable]


@pytest.mark.parametrize(
    "capability,bf16,defaults,not_measurable",
    [
        ((7, 0), False, ["fp32", "fp16"], ["tf32", "bf16"]),  # V100
        ((7, 5), False, ["fp32", "fp16"], ["tf32", "bf16"]),  # T4
        ((8, 0), True, ["fp32", "tf32", "fp16", "bf16"], []),  # A100
        ((8, 6), True, ["fp32", "tf32", "fp16", "bf16"], []),  # A10G, RTX 3090
        ((8, 9), True, ["fp32", "tf32", "fp16", "bf16"], []),  # L4, RTX 4090
        ((9, 0), True, ["fp32", "tf32", "fp16", "bf16"], []),  # H100
    ],
)
def test_cuda_dtypes(capability, bf16, defaults, not_measurable):
    av = dtype_availability("cuda", capability, bf16)
    assert _default(av) == defaults
    assert [d for d in av if not av[d].measurable] == not_measurable
    assert av["fp64"].measurable and not av["fp64"].default  # opt-in everywhere
    if not_measurable:
        assert f"sm_{capability[0]}{capability[1]}" in av["tf32"].reason


def test_cuda_bf16_follows_native_support_not_capability():
    # torch.cuda.is_bf16_supported() with emulation says True on a T4; we pass the native answer
    assert not dtype_availability("cuda", (8, 0), False)["bf16"].measurable
    assert dtype_availability("cuda", (8, 0), True)["bf16"].default


@pytest.mark.parametrize("dtype,other", [("fp16", "bf16"), ("bf16", "fp16")])
@pytest.mark.parametrize(
    "ratio,default,reason",
    [
        (None, False, "not probed"),
        (0.03, False, "3% of the fp32 rate"),  # no fast path (oneDNN fallback): opt-in only
        (0.249, False, "25% of the fp32 rate"),  # just below the threshold
        (0.25, True, ""),
        (1.25, True, ""),  # AVX512-FP16 / AMX: as fast as fp32 or faster
    ],
)
def test_cpu_dtypes_follow_the_probe(dtype, other, ratio, default, reason):
    ratios = {} if ratio is None else {dtype: ratio}
    av = dtype_availability("cpu", cpu_probe_ratios={**ratios, other: 1.0})
    assert av["fp32"].default and av[other].default
    assert not av["tf32"].measurable and "CUDA" in av["tf32"].reason
    assert av[dtype].measurable and av[dtype].default == default
    assert reason in av[dtype].reason
    if not default:
        assert f"no fast {dtype} path" in av[dtype].reason or "not probed" in av[dtype].reason


def test_cpu_dtypes_without_a_probe_default_to_fp32_only():
    assert _default(dtype_availability("cpu")) == ["fp32"]
    assert _measurable(dtype_availability("cpu")) == ["fp64", "fp32", "fp16", "bf16"]


def test_mps_dtypes():
    assert _measurable(dtype_availability("mps", bf16_supported=False)) == ["fp32", "fp16"]
    assert _default(dtype_availability("mps", bf16_supported=True)) == ["fp32", "fp16", "bf16"]


def test_select_dtypes_defaults_order_and_refusals():
    av = dtype_availability("cuda", (7, 5), False)
    chosen, skipped = select_dtypes(None, av)
    assert chosen == ["fp32", "fp16"] and set(skipped) == {"fp64", "tf32", "bf16"}
    chosen, _ = select_dtypes(["fp16", "fp64"], av)
    assert chosen == ["fp64", "fp16"]  # canonical order
    with pytest.raises(UsageError, match=r"--dtypes bf16: no native bf16.*sm_75"):
        select_dtypes(["fp32", "bf16"], av)


def test_unknown_device_type_is_rejected():
    with pytest.raises(ValueError, match="device_type"):
        dtype_availability("tpu")


# ------------------------------------------------------------------------------ config validation
@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"device": "gpu"}, "device"),
        ({"device": "cuda:x"}, "device"),
        ({"dtypes": ("fp8",)}, "dtypes"),
        ({"dtypes": ("fp32", "fp32")}, "dtypes"),
        ({"dtypes": ()}, "dtypes"),
        ({"matrix_size": -1}, "matrix_size"),
        ({"matrix_size": 8}, "matrix_size"),
        ({"bandwidth_mib": -1}, "bandwidth_mib"),
        ({"repeats": 0}, "repeats"),
        ({"time_budget_s": -1}, "time_budget_s"),
        ({"time_budget_s": float("nan")}, "time_budget_s"),
        ({"bandwidth_repeats": -3}, "bandwidth_repeats"),
    ],
)
def test_config_validation_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        PeaksConfig(env_label="t", **kwargs)


def test_dtypes_all_expands_to_what_the_device_can_run():
    cfg = PeaksConfig(env_label="t", dtypes=("all",))
    assert cfg.params()["dtypes"] == "all"
    assert cfg.requested_dtypes(dtype_availability("cpu")) == ["fp64", "fp32", "fp16", "bf16"]
    assert cfg.requested_dtypes(dtype_availability("cuda", (7, 5))) == ["fp64", "fp32", "fp16"]
    assert PeaksConfig(env_label="t").requested_dtypes(dtype_availability("cpu")) is None


def test_config_defaults_per_device():
    cfg = PeaksConfig(env_label="t", dtypes=("BF16", "fp32"))
    assert cfg.dtypes == ("bf16", "fp32")
    assert cfg.matrix_size_for("cpu") == 4096 and cfg.matrix_size_for("cuda") == 8192
    assert PeaksConfig(env_label="t", matrix_size=64).matrix_size_for("cuda") == 64
    assert PeaksConfig(env_label="").env_label == schema.default_env_label()
    default = PeaksConfig(env_label="t")
    assert (
        default.bandwidth_mib == 0 and default.time_budget_s == DEFAULT_TIME_BUDGET_S
    )  # automatic size, budget
    assert default.params()["time_budget_s"] == DEFAULT_TIME_BUDGET_S


# ------------------------------------------------------------------------------ array sizes
MIB = 2**20


@pytest.mark.parametrize(
    "llc,available,expected_mib,warns",
    [
        (480 * MIB, 23 * 2**30, 1920, False),  # this host: 4 x 480 MiB L3
        (105 * MIB, 23 * 2**30, 512, False),  # 4 x 105 MiB = 420 MiB < the 512 MiB floor
        (None, None, 512, False),  # nothing known: the floor
        (40 * 2**20 + 1, None, 512, False),
        (200 * MIB, None, 800, False),  # no memory figure: no cap
        (480 * MIB, 6 * 2**30, 1024, True),  # cap: 3 arrays <= half of 6 GiB -> 1024 MiB each
        (None, 1.5 * 2**30, 256, True),  # even the floor is capped: 0.5 * 1536 MiB / 3
    ],
)
def test_dram_array_size_is_four_llc_at_least_512_mib_capped_by_memory(
    llc, available, expected_mib, warns
):
    size, warning = sizing.dram_array_bytes(llc, available)
    assert size == expected_mib * MIB
    assert (warning is not None) == warns
    if warns:
        assert warning.startswith("STREAM arrays capped at") and f"{expected_mib} MiB" in warning


def test_l2_arrays_fill_half_the_l2_together():
    assert (
        sizing.l2_array_bytes(4 * MIB) == 696320
    )  # 4 MiB * 0.5 / 3 = 699050.7 -> 170 pages of 4 KiB
    assert sizing.l2_array_bytes(40 * MIB) == 6987776  # A100: 40 MiB * 0.5 / 3 -> 1706 pages
    assert sizing.l2_array_bytes(1000) == 4096  # at least one page
    assert sizing.l2_array_bytes(None) == 0 and sizing.l2_array_bytes(0) == 0  # unknown: no L2 step


# ------------------------------------------------------------------------------ device facts, fit check
def test_last_level_cache_from_sysfs(tmp_path):
    for i, (level, size) in enumerate([(1, "48K"), (1, "32K"), (2, "2048K"), (3, "107520K")]):
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "size").write_text(f"{size}\n")
    assert facts.cpu_last_level_cache_bytes(str(tmp_path)) == 107520 * 1024
    assert facts.cpu_last_level_cache_bytes(str(tmp_path / "missing")) is None


def _sysfs_caches(root, caches):
    for i, (level, kind, size, shared) in enumerate(caches):
        d = root / f"index{i}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
        (d / "shared_cpu_list").write_text(f"{shared}\n")
    return str(root)


def test_cache_sizes_count_every_instance_the_cpus_use(tmp_path):
    # this host's sysfs: private 48K L1d, 64K L1i, 2048K L2 per core; one 491520K L3 for CPUs 0-1
    root = _sysfs_caches(
        tmp_path,
        [
            (1, "Data", "48K", "0"),
            (1, "Instruction", "64K", "0"),
            (2, "Unified", "2048K", "0"),
            (3, "Unified", "491520K", "0-1"),
        ],
    )
    assert facts.cpu_cache_bytes(1, root, cpus=1) == 48 * 1024  # the instruction cache is not data
    assert (
        facts.cpu_cache_bytes(2, root, cpus=2) == 2 * 2048 * 1024
    )  # two threads: two private L2s (lscpu: 4 MiB)
    assert facts.cpu_cache_bytes(2, root, cpus=1) == 2048 * 1024
    assert (
        facts.cpu_last_level_cache_bytes(root, cpus=2) == 480 * 2**20
    )  # lscpu: L3 480 MiB (1 instance)
    assert (
        facts.cpu_last_level_cache_bytes(root, cpus=4) == 960 * 2**20
    )  # CPUs 0-3: two L3 instances
    assert facts.cpu_cache_bytes(4, root) is None
    assert facts._count_cpus("0-3,8,10-11\n") == 7


def test_device_facts_on_this_cpu_feed_the_l2_size():
    hw = facts.device_facts("cpu")
    if hw.l2_bytes is None:
        pytest.skip("no sysfs cache information on this host")
    assert hw.l2_bytes >= facts.cpu_cache_bytes(2, cpus=1) > 0


def test_cpu_matrix_flags(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile sse\n")
    assert facts.cpu_matrix_flags(str(info)) == "amx_bf16 amx_tile avx512_bf16 avx512f avx2"


def test_check_sizes():
    hw = facts.DeviceFacts(llc_bytes=100 * 2**20, free_bytes=4 * 2**30)
    assert sizing.check_sizes(512 * 2**20, 4096, ["fp32"], hw) == []
    (warning,) = sizing.check_sizes(64 * 2**20, 4096, ["fp32"], hw)
    assert "less than 4x the last-level cache" in warning
    with pytest.raises(UsageError, match="STREAM arrays need 6.0 GiB.*--bandwidth-mib"):
        sizing.check_sizes(2 * 2**30, 4096, ["fp32"], hw)
    with pytest.raises(UsageError, match="matmul operands.*--matrix-size"):
        sizing.check_sizes(2**20, 32768, ["fp64"], hw)
    assert sizing.check_sizes(64 * 2**20, 4096, ["fp32"], hw, cache_warning=False) == []
