"""profiling.peaks: dtype availability, time budget, timing arithmetic, STREAM byte counting and
array sizing, the `peaks` run."""

from __future__ import annotations

import json
import math

import mlflow
import pytest

from common import envinfo, schema
from common.errors import UsageError
from common.fmt import si
from profiling.peaks import __main__ as cli
from profiling.peaks import facts, gemm, measure, results, sampling, sizing, stream
from profiling.peaks.config import DEFAULT_TIME_BUDGET_S, PeaksConfig
from profiling.peaks.dtypes import dtype_availability, select_dtypes
from tests.conftest import gpu_available


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


# ------------------------------------------------------------------------------ timing arithmetic
class FakeDevice:
    """A clock that advances `call_s` per kernel call, so every timing is known exactly."""

    def __init__(self, call_s: float):
        self.now = 0.0
        self.call_s = call_s
        self.calls = 0

    def clock(self) -> float:
        return self.now

    def kernel(self) -> None:
        self.calls += 1
        self.now += self.call_s


def _sample(name, unit, work, fn, *args, **kwargs) -> sampling.Measurement:
    """sampling.sample_kernels for one kernel."""
    return sampling.sample_kernels({name: (unit, work, fn)}, *args, **kwargs)[name]


def test_sample_batches_fast_calls_and_computes_rates():
    dev = FakeDevice(0.25)
    m = _sample(
        "k", "flops", 1e9, dev.kernel, 3, lambda: None, dev.clock, warmup_s=0.0, min_sample_s=1.0
    )
    assert m.calls_per_sample == 4  # 4 calls of 0.25 s make a 1 s sample
    assert m.samples_s == [1.0, 1.0, 1.0]
    assert m.rates == [4e9, 4e9, 4e9] and m.best == 4e9 and m.p10 == 4e9
    assert m.near_best_fraction == 1.0 and m.far_below_fraction == 0.0 and not m.bimodal
    assert dev.calls == 1 + 3 * 4  # one warmup call, then the samples


def test_warmup_runs_until_warmup_s():
    dev = FakeDevice(0.25)
    _sample(
        "k", "flops", 1.0, dev.kernel, 1, lambda: None, dev.clock, warmup_s=1.0, min_sample_s=0.0
    )
    assert dev.calls == 4 + 1  # warmup calls at t=0.25, 0.5, 0.75, 1.0; then one sample


def test_calls_per_sample_come_from_the_fastest_warmup_call():
    dev = FakeDevice(0.0)
    durations = iter(
        [0.5, 0.0625, 0.125] + [0.0625] * 100
    )  # the first call met a descheduled thread

    def kernel():
        dev.now += next(durations)

    m = _sample(
        "k", "bytes", 1.0, kernel, 1, lambda: None, dev.clock, warmup_s=0.6, min_sample_s=0.25
    )
    assert m.warmup_s == [0.5, 0.0625, 0.125]  # warmup calls until 0.6 s had passed
    assert (
        m.calls_per_sample == 4
    )  # 0.25 s / 0.0625 s; the last call (0.125 s) would give 2, the first 1


def test_best_and_spread_of_uneven_samples():
    m = sampling.Measurement("copy", "bytes", 8.0, 2, [1.0, 4.0, 2.0])
    assert m.rates == [16.0, 4.0, 8.0]
    assert m.best == 16.0 and m.p10 == 4.8  # sorted 4, 8, 16: 4 + 0.2 x (8 - 4)
    assert m.near_best_fraction == 1 / 3 and m.far_below_fraction == 1 / 3  # 16; 4 (< 8)
    assert m.bimodal and m.spread_text() == (
        "1/3 samples within 10% of the best, 1/3 below 50% of it"
    )
    steady = sampling.Measurement("copy", "bytes", 8.0, 2, [1.0, 1.05, 1.5])  # 16, 15.2, 10.7
    assert steady.near_best_fraction == 2 / 3 and not steady.bimodal  # slower, not far below
    assert steady.spread_text() == "2/3 samples within 10% of the best"
    assert sampling.Measurement("one", "bytes", 8.0, 1, [2.0]).p10 == 4.0  # one sample: itself


def test_clock_that_does_not_advance_is_an_error():
    with pytest.raises(RuntimeError, match="clock did not advance"):
        _sample("k", "flops", 1.0, lambda: None, 2, lambda: None, lambda: 0.0, 0.0, 0.0)


class Recorder(FakeDevice):
    """FakeDevice whose kernels record their names in call order."""

    def __init__(self, call_s: float):
        super().__init__(call_s)
        self.order: list[str] = []

    def kernel_named(self, name: str):
        def call():
            self.order.append(name)
            self.kernel()

        return call


def _two_kernels(dev: Recorder) -> dict:
    return {
        "copy": ("bytes", 8.0, dev.kernel_named("copy")),
        "triad": ("bytes", 12.0, dev.kernel_named("triad")),
    }


def test_kernels_alternate_sample_by_sample():
    dev = Recorder(0.5)
    m = sampling.sample_kernels(
        _two_kernels(dev), 3, lambda: None, dev.clock, warmup_s=0.0, min_sample_s=1.0
    )
    # warmup (one call each), then 3 rounds of one 2-call sample per kernel, copy and triad taking turns
    assert dev.order == ["copy", "triad"] + (["copy"] * 2 + ["triad"] * 2) * 3
    assert m["copy"].samples_s == [1.0, 1.0, 1.0] and m["triad"].rates == [24.0, 24.0, 24.0]
    assert not m["copy"].cut and m["copy"].requested == 3


@pytest.mark.parametrize(
    "deadline,budget_end,taken",
    [
        (math.inf, math.inf, 10),  # no budget: every repeat
        (
            5.0,
            math.inf,
            4,
        ),  # warmup ends at t=1; samples end at 2, 3, 4, 5; a fifth would end at 6 > 5
        (5.5, math.inf, 4),
        (6.0, math.inf, 5),
        (
            0.0,
            math.inf,
            3,
        ),  # the share is spent before the first sample: MIN_SAMPLES are still taken
        (0.0, 0.0, 1),  # the whole budget is spent: one sample, so the step still has a value
        (math.inf, 3.0, 2),  # rounds end at t=2 and t=3; a third would end at 4, after the budget
        (math.inf, 2.5, 1),  # the second round would end at 3 > 2.5
        (4.0, 2.5, 1),  # the whole budget beats the step's MIN_SAMPLES
    ],
)
def test_budget_stops_sampling_when_the_share_is_spent(deadline, budget_end, taken):
    dev = FakeDevice(1.0)
    m = _sample(
        "k",
        "flops",
        1.0,
        dev.kernel,
        10,
        lambda: None,
        dev.clock,
        0.0,
        0.0,
        deadline=deadline,
        budget_end=budget_end,
    )
    assert len(m.samples_s) == taken and m.requested == 10
    assert m.cut == (taken < 10)


def test_a_sample_stops_after_ten_times_its_expected_length():
    """A thread descheduled by other processes makes tiny calls 1000x slower; one sample of the
    100 calls calibrated on a fast warmup call must not run for 100 s."""
    dev = FakeDevice(0.01)

    def kernel():
        dev.kernel()
        dev.call_s = 1.0  # every call after the warmup call takes 1 s

    m = _sample("k", "bytes", 3.0, kernel, 2, lambda: None, dev.clock, 0.0, 1.0)
    assert m.calls_per_sample == 100  # 1 s / 0.01 s
    # the cap is 10 x max(min_sample_s, warmup call) = 10 s: the call that ends past it is the last
    assert (
        m.samples_s == pytest.approx([11.0, 11.0])
        and m.calls == [11, 11]
        and m.sample_calls == [11, 11]
    )
    assert m.rates == pytest.approx(
        [3.0, 3.0]
    )  # 11 calls x 3 bytes / 11 s: the calls made count, not those planned
    assert m.warmup_s == [0.01]
    assert m.to_dict()["sample_calls"] == [11, 11]


def test_budget_cut_is_per_round_for_alternating_kernels():
    dev = Recorder(1.0)
    m = sampling.sample_kernels(
        _two_kernels(dev), 10, lambda: None, dev.clock, 0.0, 0.0, deadline=9.0
    )
    # warmup ends at t=2; rounds of 2 s end at 4, 6, 8; the next would end at 10 > 9
    assert [len(x.samples_s) for x in m.values()] == [3, 3]
    assert dev.order[-2:] == ["copy", "triad"]


def test_budget_splits_what_is_left_by_weight():
    dev = FakeDevice(1.0)
    budget = sampling.Budget(45.0, [1.0, 1.0, 2.0, 0.5], dev.clock)
    assert budget.end == 45.0
    assert budget.next_step() == pytest.approx(
        45 * 1 / 4.5
    )  # 10 s of 45 for the first of weights 1+1+2+0.5
    dev.now = 4.0  # the first step used 4 s of its 10
    assert budget.next_step() == pytest.approx(4 + 41 * 1 / 3.5)  # what it left over is shared
    dev.now = 50.0  # over budget: later steps get deadlines of "now"
    assert budget.next_step() == 50.0 and budget.next_step() == 50.0
    with pytest.raises(RuntimeError, match="more often"):
        budget.next_step()
    unlimited = sampling.Budget(0, [1.0], dev.clock)
    assert unlimited.total_s is None and unlimited.next_step() == math.inf


def test_matmul_counts_two_n_cubed_flops_and_restores_precision():
    import torch

    before = torch.get_float32_matmul_precision()
    m = gemm.measure_matmul("fp32", 48, 2, "cpu", min_sample_s=0.0)
    assert m.work == 2 * 48**3 and len(m.samples_s) == 2
    assert all(math.isfinite(r) and r > 0 for r in m.rates)
    assert torch.get_float32_matmul_precision() == before


def test_stream_counts_bytes_like_stream():
    m = stream.measure_stream(1000 * 4, 3, "cpu", min_sample_s=0.0)
    assert set(m) == {"copy", "triad"}
    assert m["copy"].work == 2 * 1000 * 4  # read a, write c
    assert m["triad"].work == 3 * 1000 * 4  # read b, read c, write a
    assert all(len(x.samples_s) == 3 and x.best > 0 for x in m.values())


class _RecordOps:
    """Records (op name, storage address of its result) of every aten op run inside it."""

    def __enter__(self):
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode

        ops = self.ops = []

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                ptr = out.untyped_storage().data_ptr() if isinstance(out, torch.Tensor) else None
                ops.append((func.overloadpacket.__name__, ptr))
                return out

        self._mode = Mode()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc):
        return self._mode.__exit__(*exc)


def test_stream_arrays_are_preallocated_touched_once_and_reused():
    """A regression to clone() or to fresh outputs per call would add ops and storages here."""
    with _RecordOps() as rec:
        m = stream.measure_stream(4096 * 4, 4, "cpu", min_sample_s=0.0)
    names = [name for name, _ in rec.ops]
    assert (
        names[:6] == ["empty"] * 3 + ["fill_"] * 3
    )  # allocated, then first touched, before any timed call
    # then only the two kernels, writing in place: warmup + 4 samples of one call, copy and triad alternating
    assert names[6:] == ["copy_", "add"] * 5
    assert (
        len({ptr for _, ptr in rec.ops}) == 3
    )  # every op's result lives in one of the three arrays
    assert [len(x.samples_s) for x in m.values()] == [4, 4]


# ------------------------------------------------------------------------------ L2 on CUDA: many copies per launch
def test_copies_per_launch_make_one_launch_move_a_gigabyte():
    assert stream.copies_per_launch(17473536) == 58  # 1e9 / 17.47 MB = 57.2 -> 58
    assert stream.copies_per_launch(1e9) == 1 and stream.copies_per_launch(3e9) == 1
    assert stream.copies_per_launch(1.0) == stream.L2_MAX_COPIES  # capped
    with pytest.raises(ValueError, match="bytes_per_copy"):
        stream.copies_per_launch(0)
    # the copy kernel (2 arrays) of the L2 arrays: H100 50 MiB L2 -> arrays of 8736768 bytes, one
    # copy moves 17.5 MB (the "~17 MB copy" of issue 11); A100 40 MiB -> 13.98 MB; T4 4 MiB -> 1.39 MB
    for l2_mib, copies in ((50, 58), (40, 72), (4, 719)):
        array_bytes = sizing.l2_array_bytes(l2_mib * MIB)
        assert stream.l2_copies_per_launch(array_bytes, "cuda") == copies, l2_mib
        assert stream.l2_copies_per_launch(array_bytes, "cpu") == 1  # CPU: one call per copy
        assert stream.l2_copies_per_launch(array_bytes, "mps") == 1
    assert stream.l2_copies_per_launch(0, "cuda") == 1


class FakeGpu:
    """A CPU clock and a GPU queue: a launch costs the CPU `launch_s`, then the GPU runs its copies
    (`copy_s` each) after whatever is queued; sync waits for the queue to drain."""

    def __init__(self, launch_s: float, copy_s: float):
        self.launch_s, self.copy_s = launch_s, copy_s
        self.now = self.gpu_free = 0.0

    def clock(self) -> float:
        return self.now

    def sync(self) -> None:
        self.now = max(self.now, self.gpu_free)

    def _launch(self, copies: int) -> None:
        self.now += self.launch_s
        self.gpu_free = max(self.gpu_free, self.now) + copies * self.copy_s

    def copy(self) -> None:
        self._launch(1)

    def graph(self, fn, copies: int):
        """Stands in for stream.cuda_graph: one launch runs `copies` calls of `fn` on the GPU."""
        assert fn == self.copy
        return lambda: self._launch(copies)


def test_one_launch_per_copy_measures_the_launch_rate_and_a_graph_the_copies():
    """An H100-like L2 copy: 17.5 MB in 2 us on the GPU, 10 us for the CPU to launch it."""
    nbytes, launch_s, copy_s = 17473536.0, 10e-6, 2e-6
    eager = FakeGpu(launch_s, copy_s)
    m = _sample("copy", "bytes", nbytes, eager.copy, 3, eager.sync, eager.clock, 0.0, 1e-3)
    # warmup call 12 us -> 84 launches per sample; the GPU idles between them: 84 x 10 us + 2 us
    assert m.calls_per_sample == 84 and m.samples_s[0] == pytest.approx(842e-6)
    assert m.best == pytest.approx(84 * nbytes / 842e-6)
    assert m.best < 0.21 * nbytes / copy_s  # a fifth of what the L2 does: the launch rate

    gpu = FakeGpu(launch_s, copy_s)
    copies = stream.copies_per_launch(nbytes)
    kernels = stream.batched({"copy": ("bytes", nbytes, gpu.copy)}, copies, gpu.graph)
    assert kernels["copy"][:2] == ("bytes", copies * nbytes)  # bytes = copies x one copy's bytes
    m = sampling.sample_kernels(kernels, 3, gpu.sync, gpu.clock, 0.0, 1e-3)["copy"]
    # one launch = 58 copies = 116 us of GPU time: warmup 126 us -> 8 launches per sample, queued
    # behind each other: the sample ends at 10 us + 8 x 116 us
    assert m.calls_per_sample == 8 and m.samples_s[0] == pytest.approx(938e-6)
    assert m.best == pytest.approx(8 * copies * nbytes / 938e-6)
    assert m.best > 0.98 * nbytes / copy_s  # within 2 % of the L2's rate


def test_stream_with_copies_per_call_counts_every_copy():
    """The CPU stand-in for a CUDA graph (a Python loop) runs the real kernels: each call is 3
    copies of each kernel, and its bytes are 3 x one copy's."""
    with _RecordOps() as rec:
        m = stream.measure_stream(4096 * 4, 2, "cpu", min_sample_s=0.0, copies_per_call=3)
    names = [name for name, _ in rec.ops]
    assert names[6:] == (["copy_"] * 3 + ["add"] * 3) * 3  # warmup + 2 samples, one call each
    assert m["copy"].work == 3 * 2 * 4096 * 4 and m["triad"].work == 3 * 3 * 4096 * 4
    assert m["copy"].copies_per_call == 3 and m["copy"].to_dict()["copies_per_call"] == 3
    assert stream.measure_stream(4096 * 4, 1, "cpu", min_sample_s=0.0)["copy"].copies_per_call == 1


def test_progress_reports_every_step_in_plan_order():
    seen = []
    r = measure.run_peaks(
        "cpu",
        ["fp32", "bf16"],
        32,
        4096 * 4,
        2,
        3,
        l2_array_bytes=4096,
        min_sample_s=0.0,
        on_step=lambda label, meas: seen.append((label, meas)),
    )
    assert (
        [label for label, _ in seen]
        == measure.plan(["fp32", "bf16"])
        == ["stream l2", "gemm fp32", "gemm bf16", "stream dram"]
    )
    assert (
        len(r.l2["copy"].samples_s) == measure.L2_REPEATS_FACTOR * 3
        and len(r.stream["copy"].samples_s) == 3
    )
    assert (
        seen[0][1] is r.l2[r.l2_kernel]
        and seen[1][1] is r.compute["fp32"]
        and seen[2][1] is r.compute["bf16"]
    )
    assert seen[3][1] is r.stream[r.dram_kernel]
    assert r.l2["copy"].work == 2 * 4096 and r.stream["copy"].work == 2 * 4096 * 4
    assert r.l2["copy"].copies_per_call == 1  # CPU: one torch call per copy, no graph
    assert (
        set(r.step_s) == set(measure.plan(["fp32", "bf16"])) and sum(r.step_s.values()) <= r.wall_s
    )
    seen.clear()
    measure.run_peaks(
        "cpu",
        ["fp32"],
        32,
        4096,
        1,
        1,
        min_sample_s=0.0,
        on_step=lambda label, meas: seen.append(label),
    )
    assert (
        seen == measure.plan(["fp32"], l2=False) == ["gemm fp32", "stream dram"]
    )  # no L2 size: no L2 step


def test_result_metrics_pick_the_better_stream_kernel():
    r = results.PeaksResult("cpu", 64, 4000)
    r.compute["fp32"] = sampling.Measurement("fp32", "flops", 100.0, 1, [1.0, 2.0, 4.0])
    r.stream["copy"] = sampling.Measurement("copy", "bytes", 10.0, 1, [1.0, 1.0])
    r.stream["triad"] = sampling.Measurement("triad", "bytes", 30.0, 1, [1.0, 2.0, 3.0])
    m = r.metrics()
    assert m["peak_flops_per_s_fp32"] == 100.0 and m["peak_flops_per_s_fp32_p10"] == 30.0
    assert m["peak_flops_per_s_fp32_near_best_fraction"] == 1 / 3  # rates 100, 50, 25
    assert r.dram_kernel == "triad"
    assert m["peak_dram_bytes_per_s"] == 30.0 and m["peak_dram_bytes_per_s_p10"] == 11.0
    assert m["peak_dram_bytes_per_s_near_best_fraction"] == 1 / 3  # rates 30, 15, 10
    assert not any(k.endswith("_median") for k in m)
    # per kernel only the best; the spread of every kernel is in samples.json
    assert "peak_dram_copy_bytes_per_s_p10" not in m
    assert r.to_dict()["stream"]["triad"]["p10_per_s"] == 11.0
    assert m["peak_dram_copy_bytes_per_s"] == 10.0
    assert (
        m["samples_gemm_fp32"] == 3 and m["samples_dram_copy"] == 2 and m["samples_dram_triad"] == 3
    )
    assert "peak_l2_bytes_per_s" not in m and r.l2_kernel is None
    r.l2["copy"] = sampling.Measurement(
        "copy", "bytes", 200.0, 4, [1.0, 2.0], requested=5
    )  # 800, 400 B/s
    r.l2["triad"] = sampling.Measurement(
        "triad", "bytes", 300.0, 1, [1.0, 1.0], requested=5
    )  # 300 B/s
    r.cpu_probe_ratios = {"fp16": 0.5, "bf16": 3.0}
    m = r.metrics()
    assert (
        r.l2_kernel == "copy"
        and m["peak_l2_bytes_per_s"] == 800.0
        and m["peak_l2_bytes_per_s_p10"] == 440.0  # rates 800, 400: 400 + 0.1 x 400
        and m["peak_l2_bytes_per_s_near_best_fraction"] == 0.5
    )
    assert m["peak_l2_triad_bytes_per_s"] == 300.0 and m["samples_l2_copy"] == 2
    assert m["cpu_fp16_probe_ratio"] == 0.5 and m["cpu_bf16_probe_ratio"] == 3.0
    assert r.budget_cuts() == {"l2 copy": (2, 5), "l2 triad": (2, 5)}
    assert r.to_dict()["budget_cuts"]["l2 copy"] == {"taken": 2, "asked": 5}
    assert r.l2_withheld is None and r.to_dict()["l2_withheld"] is None
    for key in m:
        schema.check_key(key)


def test_an_l2_figure_below_dram_is_withheld():
    r = results.PeaksResult("cpu", 64, 4000)
    r.stream["triad"] = sampling.Measurement("triad", "bytes", 30.0, 1, [1.0])  # DRAM 30 B/s
    r.l2["copy"] = sampling.Measurement(
        "copy", "bytes", 20.0, 1, [1.0]
    )  # "L2" 20 B/s: disturbed samples
    r.l2["triad"] = sampling.Measurement("triad", "bytes", 12.0, 1, [1.0])
    m = r.metrics()
    assert "below the DRAM figure" in r.l2_withheld and "peak_l2_bytes_per_s" not in m
    assert "peak_l2_bytes_per_s_p10" not in m and "peak_l2_bytes_per_s_near_best_fraction" not in m
    assert m["peak_l2_copy_bytes_per_s"] == 20.0  # the raw figures stay
    r.l2["copy"] = sampling.Measurement("copy", "bytes", 31.0, 1, [1.0])
    assert r.l2_withheld is None and r.metrics()["peak_l2_bytes_per_s"] == 31.0


def test_format_rate_is_si():
    assert si(1.234e11, "FLOP/s") == "123 GFLOP/s"
    assert si(3.35e12, "B/s") == "3.35 TB/s"
    assert si(12.0, "B/s") == "12 B/s"


def test_cpu_probe_ratio_is_best_fp32_time_over_best_dtype_time():
    import torch

    dev = FakeDevice(0.0)
    order = []
    # per dtype: the warmup call, then one call per round (3 rounds); seconds each call takes
    times = {
        torch.float32: iter([9.0, 2.0, 3.0, 4.0]),
        torch.float16: iter([9.0, 8.0, 40.0, 10.0]),
        torch.bfloat16: iter([9.0, 1.0, 0.5, 2.0]),
    }

    def mm(a, b, out):
        order.append(a.dtype)
        dev.now += next(times[a.dtype])

    ratios = gemm.probe_cpu_ratios(("fp16", "bf16"), n=8, rounds=3, clock=dev.clock, mm=mm)
    assert ratios == {
        "fp16": 2.0 / 8.0,
        "bf16": 2.0 / 0.5,
    }  # best fp32 2 s; best fp16 8 s, best bf16 0.5 s
    assert (
        order == [torch.float32, torch.float16, torch.bfloat16] * 4
    )  # interleaved, warmup included


def test_cpu_probe_runs_real_matmuls():
    ratios = gemm.probe_cpu_ratios(n=32, rounds=1)
    assert set(ratios) == {"fp16", "bf16"} and all(
        math.isfinite(r) and r > 0 for r in ratios.values()
    )


# ------------------------------------------------------------------------------ CLI edge helpers
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


# ------------------------------------------------------------------------------ the CLI
TINY = [
    "--device",
    "cpu",
    "--matrix-size",
    "64",
    "--bandwidth-mib",
    "1",
    "--repeats",
    "2",
    "--bandwidth-repeats",
    "3",
]


@pytest.mark.skipif(gpu_available(), reason="checks the message on a machine without CUDA")
def test_cuda_without_cuda_is_a_one_line_error(capsys, tracking):
    assert cli.main(["--device", "cuda"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --device cuda: CUDA is not available") and "\n" not in err
    assert mlflow.search_runs(search_all_experiments=True).empty  # nothing measured, no run


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--dtypes", "fp32,fp8"], "dtypes must be among"),
        (["--dtypes", "tf32"], "--dtypes tf32: tf32 is a CUDA tensor-core mode"),
        (["--repeats", "0"], "repeats must be a positive integer"),
        (["--device", "tpu"], "device must be auto, cpu, cuda, cuda:N or mps"),
        (["--bandwidth-mib", "10000000"], "the STREAM arrays need 29296.9 GiB"),  # 3 x 9.5 TiB
    ],
)
def test_bad_flags_exit_2_with_one_line(capsys, tracking, argv, message):
    assert cli.main(TINY + argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and "\n" not in err


def test_mps_without_mps_is_a_one_line_error(capsys, tracking):
    import torch

    if torch.backends.mps.is_available():
        pytest.skip("checks the message on a machine without MPS")
    assert cli.main(["--device", "mps"]) == 2
    assert capsys.readouterr().err.startswith("error: --device mps: MPS is not available")


def test_tiny_measurement_logs_a_peaks_run(capsys, tracking):
    argv = TINY + [
        "--dtypes",
        "fp32,bf16",
        "--env-label",
        "test-env",
        "--experiment",
        "peaks-test",
        "--time-budget-s",
        "600",
    ]
    l2 = sizing.l2_array_bytes(facts.device_facts("cpu").l2_bytes)
    assert cli.main(argv) == 0
    captured = capsys.readouterr()
    out, err = captured.out.strip().splitlines(), captured.err
    assert (
        len(out) == 1 and out[0].startswith("peaks cpu [") and "fp32" in out[0] and "DRAM" in out[0]
    )

    (run,) = mlflow.search_runs(experiment_names=["peaks-test"], output_format="list")
    assert run.info.status == "FINISHED" and run.info.run_id in out[0]
    tags, metrics, params = run.data.tags, run.data.metrics, run.data.params
    assert tags[schema.TAG_RUN_KIND] == "peaks"
    assert tags[schema.TAG_ENV_LABEL] == "test-env"
    assert tags[schema.TAG_DEVICE_NAME] == envinfo.device_name("cpu")
    assert tags[schema.TAG_DEVICE_TYPE] == "cpu" and "torch_version" in tags
    assert tags["dtypes_measured"] == "fp32,bf16" and "tf32" in tags["dtypes_skipped"]
    for dtype in ("fp32", "bf16"):
        best, p10 = metrics[f"peak_flops_per_s_{dtype}"], metrics[f"peak_flops_per_s_{dtype}_p10"]
        assert math.isfinite(best) and 0 < p10 <= best
        assert 0 < metrics[f"peak_flops_per_s_{dtype}_near_best_fraction"] <= 1
    assert "peak_flops_per_s_fp16" not in metrics
    kernel = tags["peak_dram_kernel"]
    # 1 MiB "DRAM" arrays are cache-resident, so the L2 figure may come out below them and be withheld
    withheld = "peak_l2_withheld" in tags
    for level in ("dram", "l2") if l2 else ("dram",):
        for key in (f"peak_{level}_copy_bytes_per_s", f"peak_{level}_triad_bytes_per_s"):
            assert math.isfinite(metrics[key]) and metrics[key] > 0, key
        if level == "l2" and withheld:
            assert (
                "peak_l2_bytes_per_s" not in metrics
                and "below the DRAM figure" in tags["peak_l2_withheld"]
            )
            assert (
                max(metrics["peak_l2_copy_bytes_per_s"], metrics["peak_l2_triad_bytes_per_s"])
                < metrics["peak_dram_bytes_per_s"]
            )
            continue
        for key in (f"peak_{level}_bytes_per_s", f"peak_{level}_bytes_per_s_p10"):
            assert math.isfinite(metrics[key]) and metrics[key] > 0, key
        assert 0 < metrics[f"peak_{level}_bytes_per_s_p10"] <= metrics[f"peak_{level}_bytes_per_s"]
        assert 0 < metrics[f"peak_{level}_bytes_per_s_near_best_fraction"] <= 1
        assert metrics[f"peak_{level}_bytes_per_s"] == max(
            metrics[f"peak_{level}_copy_bytes_per_s"], metrics[f"peak_{level}_triad_bytes_per_s"]
        )
    assert metrics["peak_dram_bytes_per_s"] == metrics[f"peak_dram_{kernel}_bytes_per_s"]
    assert params["matrix_size_resolved"] == "64" and params["stream_array_bytes"] == str(2**20)
    assert (
        params["dtypes"] == "fp32,bf16"
        and params["repeats"] == "2"
        and params["time_budget_s"] == "600.0"
    )
    assert params["l2_array_bytes"] == str(l2) and params["l2_copies_per_launch"] == "1"
    if l2:
        if not withheld:
            assert (
                metrics["peak_l2_bytes_per_s"]
                == metrics[f"peak_l2_{tags['peak_l2_kernel']}_bytes_per_s"]
            )
        assert (
            metrics["samples_l2_copy"]
            == metrics["samples_l2_triad"]
            == 3 * measure.L2_REPEATS_FACTOR
        )
    # the budget is generous: every asked-for sample was taken, and the run says so
    assert tags["time_budget_cut"] == "none" and "within the 600 s time budget" in out[0]
    assert (
        metrics["samples_gemm_fp32"] == 2
        and metrics["samples_dram_copy"] == metrics["samples_dram_triad"] == 3
    )
    assert metrics["setup_s"] == pytest.approx(
        sum(v for k, v in metrics.items() if k.startswith("setup_") and k != "setup_s")
    )
    assert {"setup_device_s", "setup_probes_s", "setup_environment_s", "setup_tracking_s"} <= set(
        metrics
    )
    assert (
        "setup_startup_s" not in metrics
    )  # main(argv) from a test: the process start says nothing
    assert "note: time: device facts" in err and "measuring" in err

    client = mlflow.tracking.MlflowClient()
    local = client.download_artifacts(run.info.run_id, "peaks/samples.json")
    samples = json.loads(open(local).read())
    assert len(samples["compute"]["fp32"]["samples_s"]) == 2
    assert samples["compute"]["fp32"]["flops_per_call"] == 2 * 64**3
    assert len(samples["stream"]["triad"]["samples_s"]) == 3
    assert samples["stream"]["copy"]["bytes_per_call"] == 2 * 2**20  # 2 arrays of 1 MiB
    assert samples["stream"]["copy"]["samples_requested"] == 3 and samples["budget_cuts"] == {}


def _no_measuring_probe(monkeypatch, ratios):
    calls = []

    def probe(*args, **kwargs):
        calls.append(args)
        return dict(ratios)

    monkeypatch.setattr(gemm, "probe_cpu_ratios", probe)
    return calls


@pytest.mark.parametrize(
    "ratios,measured,skipped",
    [
        ({"fp16": 1.0, "bf16": 3.0}, "fp32,fp16,bf16", None),  # AMX / AVX512-FP16: both fast
        ({"fp16": 0.02, "bf16": 3.0}, "fp32,bf16", "fp16 matmul ran at 2% of the fp32 rate"),
        (
            {"fp16": 0.9, "bf16": 0.05},
            "fp32,fp16",
            "bf16 matmul ran at 5% of the fp32 rate",
        ),  # no AMX/AVX512-BF16
    ],
)
def test_default_dtypes_on_cpu_follow_the_probe(
    monkeypatch, capsys, tracking, ratios, measured, skipped
):
    calls = _no_measuring_probe(monkeypatch, ratios)
    assert cli.main(TINY + ["--experiment", "auto"]) == 0  # no --dtypes: the CPU defaults
    assert len(calls) == 1
    err = capsys.readouterr().err
    (run,) = mlflow.search_runs(experiment_names=["auto"], output_format="list")
    tags, metrics = run.data.tags, run.data.metrics
    assert tags["dtypes_measured"] == measured
    assert set(metrics) >= {f"peak_flops_per_s_{d}" for d in measured.split(",")}
    slow = {"fp16", "bf16"} - set(measured.split(","))
    assert not any(f"peak_flops_per_s_{d}" in metrics for d in slow)
    if skipped:
        assert skipped in tags["dtypes_skipped"] and skipped in err
    assert (
        metrics["cpu_fp16_probe_ratio"] == ratios["fp16"]
        and metrics["cpu_bf16_probe_ratio"] == ratios["bf16"]
    )


def test_explicit_dtypes_skip_the_probe(monkeypatch, capsys, tracking):
    calls = _no_measuring_probe(monkeypatch, {"fp16": 0.01, "bf16": 0.01})
    assert cli.main(TINY + ["--dtypes", "bf16", "--experiment", "explicit"]) == 0
    assert calls == []  # asked for: measured however slow, and nothing probed
    (run,) = mlflow.search_runs(experiment_names=["explicit"], output_format="list")
    assert (
        run.data.tags["dtypes_measured"] == "bf16"
        and "cpu_bf16_probe_ratio" not in run.data.metrics
    )


def test_time_budget_cuts_sampling_and_says_so(capsys, tracking):
    argv = TINY + [
        "--dtypes",
        "fp32",
        "--repeats",
        "5",
        "--time-budget-s",
        "0.001",
        "--experiment",
        "budget",
    ]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    # one sample lasts >= 50 ms, so the 1 ms budget is gone after the first round of every step
    assert (
        "the 0.001 s time budget cut sampling (gemm fp32 1/5, dram copy 1/3, dram triad 1/3" in out
    )
    (run,) = mlflow.search_runs(experiment_names=["budget"], output_format="list")
    m, tags = run.data.metrics, run.data.tags
    assert (
        m["samples_gemm_fp32"] == 1 and m["samples_dram_copy"] == 1 and m["samples_dram_triad"] == 1
    )
    assert tags["time_budget_cut"].startswith("gemm fp32 1/5, dram copy 1/3, dram triad 1/3")
    assert math.isfinite(m["peak_flops_per_s_fp32"]) and math.isfinite(m["peak_dram_bytes_per_s"])


def test_automatic_dram_array_size(monkeypatch, capsys, tracking):
    monkeypatch.setattr(sizing, "DRAM_MIN_ARRAY_BYTES", 2**20)  # keep the arrays tiny
    hw = facts.DeviceFacts(None, True, llc_bytes=2**20, free_bytes=48 * 2**20, l2_bytes=None)
    monkeypatch.setattr(facts, "device_facts", lambda device: hw)
    base = [a for a in TINY if a not in ("--bandwidth-mib", "1")] + ["--dtypes", "fp32"]
    assert (
        cli.main(base + ["--experiment", "auto-size"]) == 0
    )  # 4 x 1 MiB LLC = 4 MiB, cap 8 MiB: no warning
    err = capsys.readouterr().err
    assert "capped" not in err and "no L2 ceiling measured" in err
    (run,) = mlflow.search_runs(experiment_names=["auto-size"], output_format="list")
    assert run.data.params["bandwidth_mib"] == "0" and run.data.params["stream_array_bytes"] == str(
        4 * 2**20
    )
    assert (
        "peak_l2_bytes_per_s" not in run.data.metrics and run.data.params["l2_array_bytes"] == "0"
    )

    monkeypatch.setattr(
        facts, "device_facts", lambda device: facts.DeviceFacts(None, True, 2**20, 12 * 2**20)
    )
    assert (
        cli.main(base + ["--experiment", "capped"]) == 0
    )  # cap: half of 12 MiB for three arrays = 2 MiB each
    assert "warning: STREAM arrays capped at 2 MiB each instead of 4 MiB" in capsys.readouterr().err
    (run,) = mlflow.search_runs(experiment_names=["capped"], output_format="list")
    assert run.data.params["stream_array_bytes"] == str(2 * 2**20)


def test_vendor_entry_is_logged_when_the_device_is_in_the_table(tmp_path, capsys, tracking):
    name = envinfo.device_name("cpu")
    peaks_file = tmp_path / "peaks.json"
    peaks_file.write_text(
        json.dumps(
            [
                {
                    "device_name": name,
                    "flops_per_s": {"fp32": 1e12},
                    "dram_bytes_per_s": 100e9,
                    "source": "https://example.com/cpu",
                }
            ]
        )
    )
    assert (
        cli.main(TINY + ["--dtypes", "fp32", "--peaks-file", str(peaks_file), "--experiment", "v"])
        == 0
    )
    assert "of datasheet" in capsys.readouterr().out
    (run,) = mlflow.search_runs(experiment_names=["v"], output_format="list")
    assert (
        run.data.tags["vendor_peaks"] == name
        and run.data.tags["vendor_source"] == "https://example.com/cpu"
    )
    assert float(run.data.params["vendor_peak_flops_per_s_fp32"]) == 1e12
    assert float(run.data.params["vendor_peak_dram_bytes_per_s"]) == 100e9
    m = run.data.metrics
    assert m["fraction_of_vendor_flops_fp32"] == pytest.approx(m["peak_flops_per_s_fp32"] / 1e12)
    assert m["fraction_of_vendor_dram"] == pytest.approx(m["peak_dram_bytes_per_s"] / 100e9)
    assert "vendor_peak_l2_bytes_per_s" not in run.data.params and "fraction_of_vendor_l2" not in m


def test_vendor_cache_bandwidths_are_compared_when_given():
    from profiling.peak_table import VendorPeaks

    r = results.PeaksResult("cuda", 64, 4000)
    r.compute["bf16"] = sampling.Measurement("bf16", "flops", 100.0, 1, [1.0])
    r.stream["copy"] = sampling.Measurement("copy", "bytes", 50.0, 1, [1.0])
    r.l2["triad"] = sampling.Measurement("triad", "bytes", 300.0, 1, [1.0])
    vendor = VendorPeaks(
        "X", {"bf16": 400.0}, 100.0, "https://x", l2_bytes_per_s=600.0, l1_bytes_per_s=900.0
    )
    params, tags, metrics = results.vendor_fields(vendor, r)
    assert (
        params["vendor_peak_l2_bytes_per_s"] == 600.0
        and params["vendor_peak_l1_bytes_per_s"] == 900.0
    )
    assert metrics == {
        "fraction_of_vendor_flops_bf16": 0.25,
        "fraction_of_vendor_dram": 0.5,
        "fraction_of_vendor_l2": 0.5,
    }


@pytest.mark.parametrize(
    "message",
    [
        "CUDA out of memory. Tried to allocate 2.00 GiB",
        "DefaultCPUAllocator: can't allocate memory: you tried to allocate 6442450944 bytes",
        "DefaultCPUAllocator: not enough memory: you tried to allocate 6442450944 bytes",  # Windows
    ],
)
def test_out_of_memory_ends_the_run_failed(monkeypatch, capsys, tracking, message):
    def boom(*args, **kwargs):
        raise RuntimeError(message)

    monkeypatch.setattr(measure, "run_peaks", boom)
    assert cli.main(TINY + ["--dtypes", "fp32", "--experiment", "oom"]) == 1
    first = measure.plan(
        ["fp32"], l2=sizing.l2_array_bytes(facts.device_facts("cpu").l2_bytes) > 0
    )[0]
    assert f"error: out of memory during {first}: use a smaller" in capsys.readouterr().err
    (run,) = mlflow.search_runs(experiment_names=["oom"], output_format="list")
    assert run.info.status == "FAILED" and "smaller --matrix-size" in run.data.tags["error"]


def test_other_runtime_errors_are_not_called_out_of_memory(monkeypatch, tracking):
    def boom(*args, **kwargs):
        raise RuntimeError("an unrelated bug")

    monkeypatch.setattr(measure, "run_peaks", boom)
    with pytest.raises(RuntimeError, match="unrelated bug"):  # a bug shows its traceback
        cli.main(TINY + ["--dtypes", "fp32", "--experiment", "bug"])


def test_a_disturbed_l2_figure_is_reported_but_not_logged_as_the_l2_roof(
    monkeypatch, capsys, tracking
):
    def disturbed(device, dtypes, n, array_bytes, repeats, bandwidth_repeats, **kwargs):
        r = results.PeaksResult("cpu", n, array_bytes, 4096)
        r.compute["fp32"] = sampling.Measurement("fp32", "flops", 1e9, 1, [0.01])
        r.stream["triad"] = sampling.Measurement("triad", "bytes", 1e8, 1, [0.01])  # 10 GB/s
        r.l2["copy"] = sampling.Measurement(
            "copy", "bytes", 2e6, 1, [0.01]
        )  # 200 MB/s: a descheduled thread
        r.l2["triad"] = sampling.Measurement("triad", "bytes", 3e6, 1, [0.01])  # 300 MB/s
        return r

    monkeypatch.setattr(measure, "run_peaks", disturbed)
    assert cli.main(TINY + ["--dtypes", "fp32", "--experiment", "disturbed"]) == 0
    captured = capsys.readouterr()
    assert "warning: the L2 figure (300 MB/s) is below the DRAM figure (10 GB/s)" in captured.err
    assert "L2 300 MB/s (triad) (below DRAM: disturbed, not reported as peak_l2)" in captured.out
    (run,) = mlflow.search_runs(experiment_names=["disturbed"], output_format="list")
    assert (
        "peak_l2_bytes_per_s" not in run.data.metrics
        and run.data.metrics["peak_l2_triad_bytes_per_s"] == 3e8
    )
    assert "below the DRAM figure" in run.data.tags["peak_l2_withheld"]
    assert run.data.tags["samples_bimodal"] == "none" and "bimodal" not in captured.out


def _loaded_machine_result(n=64, array_bytes=2**20) -> results.PeaksResult:
    """Issue 12's run: L2 samples bimodal on a loaded machine, 4 of 30 clean (46-50 GB/s), 26 taken
    while another process held a core (40-67 MB/s): their median was 3 orders below the best."""
    r = results.PeaksResult("cpu", n, array_bytes, 4096)
    r.compute["fp32"] = sampling.Measurement("fp32", "flops", 1e9, 1, [0.010, 0.0102, 0.0105])
    r.stream["triad"] = sampling.Measurement("triad", "bytes", 1e8, 1, [0.01, 0.0101, 0.0103])
    clean = [2.0e-3, 2.05e-3, 2.1e-3, 2.15e-3]  # 1e8 bytes in 2 ms: 50 GB/s
    disturbed = [1.5 + i / 25 for i in range(26)]  # 1.5 to 2.5 s: 67 to 40 MB/s
    r.l2["copy"] = sampling.Measurement(
        "copy", "bytes", 1e8, 1, disturbed[:13] + clean + disturbed[13:]
    )
    r.l2["triad"] = sampling.Measurement("triad", "bytes", 1.5e8, 1, [0.0125] * 30)  # 12 GB/s
    return r


def test_bimodal_samples_are_said_not_hidden_in_a_median():
    import statistics

    r = _loaded_machine_result()
    copy = r.l2["copy"]
    assert r.l2_kernel == "copy" and copy.best == pytest.approx(50e9)
    assert statistics.median(copy.rates) < copy.best / 500  # what `_median` used to log
    m = r.metrics()
    assert m["peak_l2_bytes_per_s"] == copy.best  # the ceiling stays the best sample
    assert m["peak_l2_bytes_per_s_near_best_fraction"] == 4 / 30
    assert 40e6 < m["peak_l2_bytes_per_s_p10"] < 50e6  # the disturbed group, named as such
    assert m["peak_dram_bytes_per_s_near_best_fraction"] == 1.0  # 10, 9.9, 9.7 GB/s
    assert list(r.bimodal()) == ["l2 copy"] and not r.l2["triad"].bimodal
    assert copy.spread_text() == "4/30 samples within 10% of the best, 26/30 below 50% of it"
    line = results.summary_line("cpu", "X", r, None, PeaksConfig(env_label="t"), "not tracked")
    assert "L2 50 GB/s (copy) (bimodal: 4/30 samples near the best)" in line
    assert line.count("bimodal") == 1  # fp32 and DRAM samples agree with their best
    assert r.to_dict()["bimodal"] == ["l2 copy"] and r.to_dict()["l2"]["copy"]["bimodal"]


def test_a_peaks_run_with_bimodal_samples_says_so(monkeypatch, capsys, tracking):
    monkeypatch.setattr(measure, "run_peaks", lambda *a, **k: _loaded_machine_result())
    assert cli.main(TINY + ["--dtypes", "fp32", "--experiment", "bimodal"]) == 0
    captured = capsys.readouterr()
    assert (
        "note: l2 copy samples bimodal (best reported): 4/30 samples within 10% of the best, "
        "26/30 below 50% of it" in captured.err
    )
    assert "L2 50 GB/s (copy) (bimodal: 4/30 samples near the best)" in captured.out
    (run,) = mlflow.search_runs(experiment_names=["bimodal"], output_format="list")
    assert run.data.tags["samples_bimodal"] == "l2 copy"
    assert run.data.metrics["peak_l2_bytes_per_s"] == pytest.approx(50e9)
    assert run.data.metrics["peak_l2_bytes_per_s_near_best_fraction"] == pytest.approx(4 / 30)
    assert not any(k.endswith("_median") for k in run.data.metrics)


def test_no_track_measures_without_a_run(capsys, tracking):
    assert cli.main(TINY + ["--dtypes", "fp32", "--track", "false"]) == 0
    assert capsys.readouterr().out.strip().endswith("not tracked")
    assert mlflow.search_runs(search_all_experiments=True).empty


@pytest.mark.gpu
def test_cuda_tiny_measurement(tracking):
    import torch

    cap = torch.cuda.get_device_capability()
    av = dtype_availability("cuda", cap, torch.cuda.is_bf16_supported(including_emulation=False))
    dtypes, _ = select_dtypes(None, av)
    l2 = sizing.l2_array_bytes(facts.device_facts("cuda").l2_bytes)
    r = measure.run_peaks("cuda", dtypes, 256, 2**20, 2, 2, l2_array_bytes=l2, min_sample_s=0.0)
    assert set(r.compute) == set(dtypes) and all(m.best > 0 for m in r.compute.values())
    assert r.metrics()["peak_dram_bytes_per_s"] > 0 and r.metrics()["peak_l2_bytes_per_s"] > 0
    copies = stream.l2_copies_per_launch(l2, "cuda")
    n = l2 // stream.STREAM_ELEMENT_BYTES
    assert copies > 1 and r.l2["copy"].copies_per_call == copies
    assert r.l2["copy"].work == copies * 2 * n * stream.STREAM_ELEMENT_BYTES


@pytest.mark.gpu
def test_cuda_graph_runs_every_copy_in_one_replay():
    import torch

    x = torch.zeros(1, device="cuda")
    replay = stream.cuda_graph(lambda: x.add_(1), 7, "cuda")
    torch.cuda.synchronize()
    assert x.item() == 1  # the warmup call, outside the capture
    replay()
    replay()
    torch.cuda.synchronize()
    assert x.item() == 1 + 2 * 7
