"""profiling.peaks, how it measures: the sampling engine and time budget (sampling) with a fake
clock, the kernels' FLOP and byte counting (gemm, stream), CUDA graphs of many L2 copies per
launch (stream) with a fake GPU queue, the CPU dtype probe, run_peaks' steps (measure)."""

from __future__ import annotations

import math

import pytest

from profiling.peaks import gemm, measure, sampling, sizing, stream

MIB = 2**20


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


# ------------------------------------------------------------------------------ run_peaks, the CPU probe
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
