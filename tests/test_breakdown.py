"""The breakdown (profiling/breakdown, issue 20) against truths worked out by hand.

* FLOPs per module and phase of a hand-made network (a convolution, a depthwise convolution, a
  linear layer), each formula written out below;
* the attribution of a synthetic event list (host time and device time) whose every row and part
  is summed by hand in the comments;
* the trace bound and the default view on made-up inputs;
* resnet18 at 32 px, batch 2, through `python -m profiling --breakdown` next to a train run of the
  same config: the rows the issue names, FLOPs equal to the train run's, the join key, the parts,
  the trace that parses, the figures.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import math

import mlflow
import pandas as pd
import pytest
import torch
import torch.nn as nn

from common import schema
from profiling.breakdown import names
from profiling.breakdown.attribute import attribute
from profiling.breakdown.events import KERNEL, MEMCPY, RUNTIME, Ev
from profiling.breakdown.roof import Ceilings
from profiling.breakdown.table import ModuleTree, rows, view_top
from profiling.breakdown.trace import bound_trace

# ------------------------------------------------------------------------------ hand-made FLOPs


class Net(nn.Module):
    """Input (2, 2, 4, 4): conv 2->4 3x3 pad 1, depthwise 4->4 3x3 pad 1 (groups 4), in-place
    ReLU, flatten (64 features), linear 64->3."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3, padding=1, bias=False)
        self.dw = nn.Conv2d(4, 4, 3, padding=1, groups=4, bias=False)
        self.relu = nn.ReLU(inplace=True)
        self.fc = nn.Linear(64, 3)

    def forward(self, x):
        return self.fc(self.relu(self.dw(self.conv(x))).flatten(1))


# 2 FLOPs per multiply-add; N = 2 samples, 4 x 4 outputs
CONV_FWD = 2 * 2 * 16 * 4 * 2 * 9  # N x HW x C_out x C_in x k^2 = 4608
CONV_BWD = CONV_FWD  # the images need no gradient: grad_weight only
DW_FWD = 2 * 2 * 16 * 4 * 1 * 9  # C_in per group = 1: 2304
DW_BWD = 2 * DW_FWD  # grad_input + grad_weight (torch 2.14.1's own formula: 2304 + 4 x 2304)
FC_FWD = 2 * 2 * 64 * 3  # addmm: N x in x out = 768
FC_BWD = 2 * FC_FWD  # grad_input mm + grad_weight mm


def _step_parts(model, tracker):
    from train.step import StepParts

    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    return StepParts(model, opt, contextlib.nullcontext, mark=tracker.mark)


def count_one(tracker, run_step, batch_size: int):
    """FLOPs and bytes per (row, phase) of one call of `run_step()` (a training step whose
    `StepParts.mark` is `tracker.mark`), next to the train run's own totals of the same call
    (train.flops.count_step): the row counter the breakdown holds open around a counted step."""
    from profiling.breakdown.counts import RowCounts, _row_counter_class
    from train.flops import count_step

    mode = _row_counter_class()(tracker)
    ranges, tracker.ranges = tracker.ranges, False
    try:
        with mode:
            total = count_step(run_step, batch_size)
    finally:
        tracker.ranges = ranges
        tracker.clear()
    return RowCounts(
        batch_size, dict(mode.flops), dict(mode.bytes), total.train_flops, total.modeled_bytes
    )


def _profiled_step(model, root: str, x, y, lean: bool = False):
    """(attribution of one profiled training step of `model`, FLOPs and bytes per row of the same
    step): an unprofiled step first (the optimizer's state exists from then on, as in train runs),
    then one counted step and one step under the profiler: torch.profiler recording every op, or
    (`lean`) the breakdown's CPU profiler recording user scopes and backward nodes alone."""
    from torch.profiler import ProfilerActivity, profile

    from profiling.breakdown.events import from_kineto
    from profiling.breakdown.recording import kineto_results, lean_profile, tracker_for
    from train.step import train_step

    with tracker_for(model, root, lean) as tracker:
        parts = _step_parts(model, tracker)
        train_step(parts, x, y)
        counts = count_one(tracker, lambda: train_step(parts, x, y), x.shape[0])
        tracker.clear()
        prof = lean_profile() if lean else profile(activities=[ProfilerActivity.CPU])
        with prof:
            with tracker.span(names.step_range(0)):
                train_step(parts, x, y)
    events = tracker.events(from_kineto(kineto_results(prof)))
    att = attribute(events, tracker.owner_of_seq)
    if lean:  # no aten op was recorded: ranges and backward nodes alone, and the CPU clock
        assert events and not any(e.name.startswith("aten::") for e in events)
        assert att.share_clock == "thread_cpu"
        assert sum(att.cpu_self_s.values()) == pytest.approx(att.step_cpu_s[0])
        assert 0 < att.step_cpu_s[0] <= att.step_window_s[0]
    return att, counts


def test_flops_per_module_and_phase_by_hand():
    from profiling.breakdown.hooks import Tracker
    from train.step import train_step

    torch.manual_seed(0)
    model = Net()
    x, y = torch.randn(2, 2, 4, 4), torch.tensor([0, 2])
    with Tracker(model, "net") as tracker:
        parts = _step_parts(model, tracker)
        train_step(parts, x, y)  # the optimizer's state exists from here on, as in train runs
        counts = count_one(tracker, lambda: train_step(parts, x, y), 2)
    f = counts.flops
    assert f[("conv", "forward")] == CONV_FWD and f[("conv", "backward")] == CONV_BWD
    assert f[("dw", "forward")] == DW_FWD and f[("dw", "backward")] == DW_BWD
    assert f[("fc", "forward")] == FC_FWD and f[("fc", "backward")] == FC_BWD
    assert sum(f.values()) == counts.train_flops == 18432
    assert counts.check() == ""
    # the in-place ReLU's backward (threshold_backward) is the ReLU's, not the depthwise conv's:
    # it reads grad (2x4x4x4 fp32 = 512 B) and the output (512 B), writes 512 B
    assert counts.bytes[("relu", "backward")] == 3 * 512
    # the optimizer touches every parameter: SGD with momentum reads and writes them
    assert counts.bytes[("optimizer", "optimizer")] > 0
    assert ("loss", "forward") in counts.bytes and ("loss", "backward") in counts.bytes


@pytest.mark.parametrize("lean", [False, True], ids=["every-op", "lean"])
def test_accumulate_grad_and_backward_nodes_go_to_their_module_under_the_profiler(lean):
    att, _ = _profiled_step(Net(), "net", torch.randn(2, 2, 4, 4), torch.tensor([0, 2]), lean)
    calls = att.calls
    # backward nodes per module: conv: ConvolutionBackward0 + 1 AccumulateGrad; dw the same;
    # relu: ReluBackward0; fc: AddmmBackward0, TBackward0 + 2 AccumulateGrads (weight, bias)
    assert calls[("conv", "backward")] == 2 and calls[("dw", "backward")] == 2
    assert calls[("relu", "backward")] == 1 and calls[("fc", "backward")] == 4
    assert calls[("net", "backward")] == 1  # flatten's ViewBackward0 is the model's own
    assert calls[("loss", "backward")] == 2  # NllLossBackward0, LogSoftmaxBackward0
    assert all(calls[(m, "forward")] == 1 for m in ("net", "conv", "dw", "relu", "fc"))
    assert att.self_s[("optimizer", "optimizer")] > 0


def test_one_ownership_rule():
    """owners.backward_owner: an AccumulateGrad its parameter's module, a node the module that made
    it (the greatest start at or below its number), anything else unattributed."""
    from profiling.breakdown.owners import SeqOwners, backward_owner

    seqs = SeqOwners([(10, "conv"), (12, "fc"), (14, None)])
    assert [seqs(n) for n in (9, 10, 11, 12, 13, 14)] == [None, "conv", "conv", "fc", "fc", None]
    assert backward_owner(seq=11, owner_of_seq=seqs) == "conv"
    assert backward_owner(seq=14, owner_of_seq=seqs) == "unattributed"
    assert backward_owner(accumulate_grad=True, param_owner="fc", seq=11) == "fc"
    assert backward_owner(accumulate_grad=True) == "unattributed"
    assert backward_owner() == "unattributed"


def test_accumulate_grad_nvtx_ranges_name_each_parameters_module(monkeypatch):
    """Under NVTX (profile mode for ncu) the Tracker wraps every AccumulateGrad in a `grad: <owner>`
    range, the owner by the same rule as the host markers: conv's and dw's weights, fc's weight
    and bias."""
    from profiling.breakdown.hooks import Tracker

    log: list[str] = []
    monkeypatch.setattr(torch.cuda.nvtx, "range_push", lambda label: log.append(label))
    monkeypatch.setattr(torch.cuda.nvtx, "range_pop", lambda: log.append("pop"))
    model = Net()
    with Tracker(model, "net", ranges=False, nvtx=True, grad_markers=False):
        log.clear()
        model(torch.randn(2, 2, 4, 4)).sum().backward()
        model(torch.randn(2, 2, 4, 4)).sum().backward()  # the held nodes serve every step
    grads = [(a, b) for a, b in zip(log, log[1:]) if a.startswith(names.GRAD)]
    assert sorted(a for a, _ in grads) == sorted(
        ["grad: conv", "grad: dw", "grad: fc"] * 2 + ["grad: fc"] * 2
    )
    assert all(b == "pop" for _, b in grads)  # nothing of another owner opens inside
    log.clear()
    model(torch.randn(2, 2, 4, 4)).sum().backward()  # detached: no range
    assert log == []


def _flop_counter_totals(fn) -> dict[str, float]:
    """FlopCounterMode.get_flop_counts() of `fn()` (the project's registry), per module path
    ('ResNet.layer1.0.conv1' -> 'layer1.0.conv1'), summed over the ops."""
    from train.flops import flop_counter_mode

    mode = flop_counter_mode()
    with mode:
        fn()
    return {
        k.split(".", 1)[1]: sum(v.values()) for k, v in mode.get_flop_counts().items() if "." in k
    }


def test_flops_per_module_agree_with_flop_counter_mode_but_for_its_residual_siblings():
    """resnet18 (32 px, batch 2), the breakdown's counts against FlopCounterMode's own per-module
    counts, an independent count by torch:

    * forward, alone under FlopCounterMode (its module tracker is right in forward): every module
      at every depth, the sum of the breakdown's forward rows of it and its descendants, equal;
    * the whole step: every leaf module's forward + backward equal, but for the three downsample
      convolutions, which FlopCounterMode also charges the backward of their block's conv1 and
      conv2 (ModuleTracker's parents hold the residual sibling during backward; hooks.py)."""
    import torchvision

    from profiling.breakdown.hooks import Tracker
    from train.step import train_step

    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    x, y = torch.randn(2, 3, 32, 32), torch.tensor([1, 2])
    with Tracker(model, "resnet18") as tracker:
        parts = _step_parts(model, tracker)
        train_step(parts, x, y)
        counts = count_one(tracker, lambda: train_step(parts, x, y), 2)
        whole = _flop_counter_totals(lambda: train_step(parts, x, y))
        with torch.no_grad():
            forward = _flop_counter_totals(lambda: model(x))
    f = counts.flops

    def rows(path: str, phases: tuple[str, ...]) -> float:
        return sum(v for (m, p), v in f.items() if p in phases and (m + ".").startswith(path + "."))

    # 20 convolutions, fc, and the 15 containers above them (stages, blocks, downsamples); batch
    # norm, ReLU and pooling have no counted FLOPs
    assert len(forward) == 36
    for path, n in forward.items():
        assert rows(path, ("forward",)) == n, path
    leaves = [p for p in whole if p in tracker.leaves]
    assert len(leaves) == 21  # 20 convolutions and fc
    down = [f"layer{i}.0.downsample.0" for i in (2, 3, 4)]
    for path in leaves:
        ours = rows(path, ("forward", "backward"))
        if path in down:
            block = path.split(".downsample")[0]
            siblings = f[(block + ".conv1", "backward")] + f[(block + ".conv2", "backward")]
            assert whole[path] - ours == siblings > 0, path
            assert f[(path, "backward")] == 2 * f[(path, "forward")]  # grad_input + grad_weight
        else:
            assert whole[path] == ours, path
    # the leaves own every counted FLOP of the step, once FlopCounterMode's double charge is taken
    # off: its leaf counts overstate the step by exactly the downsamples' extra
    extra = sum(whole[p] - rows(p, ("forward", "backward")) for p in down)
    assert sum(f.values()) == counts.train_flops == sum(whole[p] for p in leaves) - extra


class Residual(nn.Module):
    """A residual block as ResNet's: body conv_a -> conv_b, a downsample on the skip path, added."""

    def __init__(self):
        super().__init__()
        self.conv_a = nn.Conv2d(2, 4, 3, padding=1, bias=False)
        self.conv_b = nn.Conv2d(4, 4, 3, padding=1, bias=False)
        self.down = nn.Conv2d(2, 4, 1, bias=False)
        self.fc = nn.Linear(64, 3)

    def forward(self, x):
        return self.fc((self.conv_b(self.conv_a(x)) + self.down(x)).flatten(1))


@pytest.mark.parametrize("lean", [False, True], ids=["every-op", "lean"])
def test_backward_of_a_residual_block_goes_to_each_branch_under_the_profiler(lean):
    """Where ModuleTracker errs (the downsample beside a body during backward): each
    ConvolutionBackward0 and AccumulateGrad is its own module's, the add's AddBackward0 and the
    flatten's ViewBackward0 the model's; FLOPs likewise (below, by hand)."""
    torch.manual_seed(0)
    x, y = torch.randn(2, 2, 4, 4), torch.tensor([0, 2])
    att, counts = _profiled_step(Residual(), "res", x, y, lean)
    calls = att.calls
    for conv in ("conv_a", "conv_b", "down"):  # ConvolutionBackward0 + its weight's AccumulateGrad
        assert calls[(conv, "backward")] == 2, conv
    assert calls[("fc", "backward")] == 4  # AddmmBackward0, TBackward0, 2 AccumulateGrads
    assert calls[("res", "backward")] == 2  # AddBackward0 (the residual add), ViewBackward0
    f = counts.flops
    assert f[("down", "forward")] == 2 * 2 * 16 * 4 * 2 == 512
    # the images need no gradient: the downsample's and conv_a's backward are grad_weight alone,
    # nothing of the body's (FlopCounterMode's module tracker would add conv_a's and conv_b's)
    assert f[("down", "backward")] == 512
    assert f[("conv_a", "backward")] == f[("conv_a", "forward")] == 2 * 2 * 16 * 4 * 2 * 9
    assert f[("conv_b", "backward")] == 2 * f[("conv_b", "forward")] == 2 * 2 * 2 * 16 * 4 * 4 * 9


# ------------------------------------------------------------------------------ synthetic events
US = 1000  # events below are written in microseconds


def ev(name, t0, t1, **kw) -> Ev:
    return Ev(name, t0 * US, t1 * US, **kw)


def one_step_events() -> list[Ev]:
    """One step of a 3-module net, times in microseconds (see test_host_attribution)."""
    ev_ = names.EVALUATE
    return [
        ev("step: 0", 0, 1000),
        ev("phase: data", 0, 50),
        ev("phase: train_step", 60, 990),
        ev("Optimizer.zero_grad#SGD.zero_grad", 60, 70),
        ev("phase: forward", 80, 400),
        ev("module: net", 90, 350),
        ev("module: conv", 100, 200),
        ev("aten::conv2d", 110, 190, seq=10, corr=5),
        ev("module: relu", 210, 250),
        ev("aten::relu_", 215, 245, seq=11, corr=6),
        ev("module: fc", 260, 340),
        ev("aten::linear", 265, 335, seq=12, corr=7),
        ev("aten::cross_entropy_loss", 360, 390, seq=13, corr=8),
        ev("phase: backward", 410, 900),
        ev(ev_ + "NllLossBackward0", 420, 440, seq=13, fwd_thread=1),
        ev(ev_ + "AddmmBackward0", 450, 550, seq=12, fwd_thread=1),
        ev("aten::mm", 460, 540, corr=9),
        ev(ev_ + names.ACCUMULATE_GRAD, 555, 560),
        ev(names.ACCUMULATE_GRAD, 556, 559),
        ev("grad: fc", 557, 558),
        ev(ev_ + "ReluBackward0", 570, 600, seq=11, fwd_thread=1),
        ev(ev_ + "ConvolutionBackward0", 610, 850, seq=10, fwd_thread=1),
        ev("aten::convolution_backward", 620, 840, corr=10),
        ev("phase: optimizer", 910, 980),
        ev("aten::add_", 920, 970, corr=11),
    ]


SEQ_OWNER = {10: "conv", 11: "relu", 12: "fc", 13: "loss"}


def test_host_attribution_by_hand():
    att = attribute(one_step_events(), SEQ_OWNER.get, "host")
    s = {k: round(v * 1e6, 6) for k, v in att.self_s.items()}  # microseconds
    assert s[("conv", "forward")] == 100 and s[("relu", "forward")] == 40
    assert s[("fc", "forward")] == 80
    assert s[("net", "forward")] == 260 - 220  # the model's own code between its children
    assert s[("loss", "forward")] == 320 - 260  # forward phase outside the model
    # a node's own time, and the engine's after it (440-450 after NllLossBackward0, ...) until
    # the next: what its evaluate_function range holds; before the first node and after the
    # last, nobody's
    assert s[("loss", "backward")] == 20 + 10
    # AddmmBackward0 + 5 after it, its AccumulateGrad (grad: fc) + 10 after it
    assert s[("fc", "backward")] == 100 + 5 + 5 + 10
    assert s[("relu", "backward")] == 30 + 10 and s[("conv", "backward")] == 240
    assert s[("unattributed", "backward")] == 10 + 50  # 410-420 and 850-900
    assert s[("optimizer", "optimizer")] == 70 and s[("zero_grad", "other")] == 10
    assert s[("data", "data")] == 50
    assert s[("unattributed", "other")] == (1000 - 980) + (930 - 10 - 320 - 490 - 70)
    assert sum(s.values()) == 1000
    p = {k: round(v * 1e6, 6) for k, v in att.parts_s.items()}
    assert p == {
        "data_wait": 50,
        "h2d_copy": 0,
        "forward": 320,
        "backward": 490,
        "optimizer": 70 + 10,  # the optimizer step and zero_grad
        "exposed_comm": 0,
        "host_overhead": 1000 - 50 - 320 - 490 - 80,
    }


def test_cpu_clock_is_linear_between_markers_and_never_faster_than_wall():
    from profiling.breakdown.attribute import cpu_clock

    # wall 0..100 us: CPU 0..100 (running); 100..300: CPU +50 (preempted 150 of 200);
    # 300..310: CPU +20 (a read late by 10 us: capped at the stretch's 10 us of wall)
    at = cpu_clock([(0, 1000), (100, 1100), (300, 1150), (310, 1170)])
    assert at(0) == 0 and at(50) == 50 and at(100) == 100
    assert at(200) == pytest.approx(125)  # half of the preempted stretch: half of its 50
    assert at(300) == 150 and at(310) == 160  # capped
    assert at(320) == 170 and at(-10) == -10  # slope 1 outside the markers
    assert cpu_clock([(0, 5)]) is None


def test_shares_by_the_cpu_clock_leave_out_preemption():
    """one_step_events with CPU clock markers at 0, 200 and 1000 us: the thread was preempted for
    100 us inside conv's forward (100-200: CPU advanced 100 us over the first 200 us of wall, half
    of it in 100-200), and ran the rest."""
    cpu = names.CPU_CLOCK
    markers = [ev(cpu + "0", 0, 0), ev(cpu + "100000", 200, 200), ev(cpu + "900000", 1000, 1000)]
    att = attribute(one_step_events() + markers, SEQ_OWNER.get, "host")
    assert att.share_clock == "thread_cpu"
    c = {k: round(v * 1e6, 6) for k, v in att.cpu_self_s.items()}
    assert att.step_cpu_s == [pytest.approx(900e-6)]  # 100 of the first 200 us, then 800
    assert c[("conv", "forward")] == 50  # 100 us of wall at half speed
    assert c[("relu", "forward")] == 40 and c[("data", "data")] == 25  # 50 us at half speed
    assert sum(c.values()) == pytest.approx(900)
    tree = ModuleTree("net", ["net", "conv", "relu", "fc"], {"conv", "relu", "fc"})
    table = rows(tree, att, {}, {}, 1e-3, Ceilings())
    share = {(r["module"], r["phase"]): r["share"] for r in table}
    assert share[("conv", "forward")] == pytest.approx(50 / 900)  # wall would say 100 / 1000
    assert sum(r["share"] for r in table if r["kind"] != "module") == pytest.approx(1)
    plain = rows(tree, attribute(one_step_events(), SEQ_OWNER.get), {}, {}, 1e-3, Ceilings())
    assert {(r["module"], r["phase"]): r["share"] for r in plain}[("conv", "forward")] == 0.1
    assert all(math.isnan(r["cpu_time_s"]) for r in plain)


def test_backward_of_an_unknown_forward_thread_is_unattributed():
    events = [
        e
        if e.seq < 0 or "evaluate" not in e.name
        else Ev(e.name, e.start_ns, e.end_ns, seq=e.seq, fwd_thread=7)
        for e in one_step_events()
    ]
    att = attribute(events, SEQ_OWNER.get, "host")
    assert ("conv", "backward") not in att.self_s
    assert att.self_s[("unattributed", "backward")] * 1e6 == pytest.approx(490 - 5 - 10)


def test_host_attribution_of_a_data_parallel_step_by_hand():
    """one_step_events on rank 0 of a DDP job: a bucket's all-reduce launched inside fc's
    AccumulateGrad (c10d::allreduce_, 1 us) and running on gloo's thread until 890, while the main
    thread, its nodes done at 850, waits in backward (850-890)."""
    events = one_step_events() + [
        ev("c10d::allreduce_", 558, 559),
        ev("gloo:all_reduce", 560, 890, thread=2),
    ]
    att = attribute(events, SEQ_OWNER.get, "host")
    s = {k: round(v * 1e6, 6) for k, v in att.self_s.items()}
    assert s[("communication", "backward")] == 1 + 40
    assert s[("fc", "backward")] == 120 - 1
    assert s[("unattributed", "backward")] == 60 - 40
    assert sum(s.values()) == 1000
    p = {k: round(v * 1e6, 6) for k, v in att.parts_s.items()}
    assert p["exposed_comm"] == 41 and p["backward"] == 490 - 41
    assert sum(p.values()) == 1000


def test_device_attribution_by_hand():
    """Kernels launched by the host ops of one_step_events (correlation ids), a host-to-device
    copy during data, and an NCCL kernel half hidden behind the conv backward kernel."""
    dev = [
        ev("Memcpy HtoD (Pageable -> Device)", 10, 40, kind=MEMCPY, linked_corr=99),
        ev("implicit_gemm", 120, 180, kind=KERNEL, linked_corr=5),  # conv forward
        ev("relu_kernel", 220, 230, kind=KERNEL, linked_corr=6),
        ev("gemm", 270, 330, kind=KERNEL, linked_corr=7),
        ev("gemm_bwd", 470, 530, kind=KERNEL, linked_corr=9),  # AddmmBackward0's mm
        ev("wgrad", 630, 830, kind=KERNEL, linked_corr=10),  # conv backward
        ev("ncclDevKernel_AllReduce_Sum_f32", 800, 860, kind=KERNEL, linked_corr=12),
        ev("sgd_kernel", 930, 960, kind=KERNEL, linked_corr=11),
        ev("cudaLaunchKernel", 112, 118, kind=RUNTIME, linked_corr=5),  # host side: ignored
    ]
    att = attribute(one_step_events() + dev, SEQ_OWNER.get, "device")
    s = {k: round(v * 1e6, 6) for k, v in att.self_s.items()}
    assert s[("conv", "forward")] == 60 and s[("relu", "forward")] == 10
    assert s[("fc", "forward")] == 60 and s[("fc", "backward")] == 60
    assert s[("conv", "backward")] == 200 and s[("optimizer", "optimizer")] == 30
    assert s[("unattributed", "other")] == 30 + 60  # the copy and NCCL: no host op launched them
    busy = 30 + 60 + 10 + 60 + 60 + 200 + 30 + 30  # 800-830 overlaps the wgrad: NCCL adds 30
    assert s[("device idle", "other")] == 1000 - busy
    p = {k: round(v * 1e6, 6) for k, v in att.parts_s.items()}
    assert p["h2d_copy"] == 30 and p["forward"] == 130 and p["backward"] == 260
    assert p["optimizer"] == 30 and p["exposed_comm"] == 30  # 830-860: not behind compute
    assert p["data_wait"] == 50 - 30  # the data phase, less the copy
    assert sum(p.values()) == pytest.approx(1000)


def test_no_step_range_is_a_clear_error():
    with pytest.raises(ValueError, match="no `step: i` range"):
        attribute([ev("aten::mm", 0, 10)], SEQ_OWNER.get)


# ------------------------------------------------------------------------------ table and view
def test_rows_add_up_and_bn_has_no_counted_flops():
    att = attribute(one_step_events(), SEQ_OWNER.get, "host")
    tree = ModuleTree("net", ["net", "conv", "relu", "fc"], {"conv", "relu", "fc"})
    flops = {("conv", "forward"): 1e6, ("conv", "backward"): 2e6}
    bytes_ = {("conv", "forward"): 1e4, ("relu", "forward"): 4e3, ("conv", "backward"): 2e4}
    c = Ceilings(peak_flops_per_s=5e11, dram_bytes_per_s=1e10, source="vendor: test")  # ridge 50
    table = rows(tree, att, flops, bytes_, 1000e-6, c)
    by = {(r["module"], r["phase"]): r for r in table}
    net = by[("net", "forward")]
    assert net["time_s"] == pytest.approx(260e-6) and net["flops"] == 1e6
    assert net["depth"] == 0 and net["kind"] == "model"
    conv = by[("conv", "forward")]
    assert conv["intensity_flops_per_byte"] == 100 and conv["bound"] == "compute-bound"
    assert conv["roof_fraction"] == pytest.approx(1e10 / 5e11)  # achieved / peak
    assert conv["achieved_flops_per_s"] == pytest.approx(1e6 / 100e-6)
    relu = by[("relu", "forward")]
    assert relu["intensity_flops_per_byte"] == 0 and relu["bound"] == "memory-bound"
    assert by[("data", "data")]["bound"] == "n/a"
    assert sum(r["self_time_s"] for r in table) == pytest.approx(1000e-6)
    top = [r for r in table if r["kind"] in ("model", "step")]
    assert sum(r["time_s"] for r in top) == pytest.approx(1000e-6)
    unknown = rows(tree, att, flops, bytes_, 1000e-6, Ceilings(why="none"))
    assert {r["bound"] for r in unknown if r["module"] == "conv"} == {"unknown"}


def test_default_view_opens_a_container_holding_most_of_the_modules():
    """MobileNetV2-like: `features` holds 3 of the 4 leaf modules and is shown by its children;
    ResNet-like: layer1 and layer2 hold 2 of 5 each and stay whole."""
    mobile = ModuleTree(
        "m",
        [
            "m",
            "features",
            "features.0",
            "features.0.conv",
            "features.0.bn",
            "features.1",
            "classifier",
        ],
        {"features.0.conv", "features.0.bn", "features.1", "classifier"},
    )
    table = [{"module": p, "kind": "module", "time_s": 0.1} for p in mobile.paths]
    assert view_top(table, mobile) == ["features.0", "features.1", "classifier"]
    resnet = ModuleTree(
        "r",
        ["r", "layer1", "layer1.0", "layer1.1", "layer2", "layer2.0", "layer2.1", "fc"],
        {"layer1.0", "layer1.1", "layer2.0", "layer2.1", "fc"},
    )
    table = [{"module": p, "kind": "module", "time_s": 0.1} for p in resnet.paths]
    table[1]["time_s"] = 10.0  # however long layer1 takes
    assert view_top(table, resnet) == ["layer1", "layer2", "fc"]


def test_layer_roofline_draws_each_leaf_row_where_it_is_with_its_area_its_time(monkeypatch):
    """The figure's points, read back from matplotlib: one per leaf row with counted FLOPs, at
    (intensity, achieved FLOP/s), area = MAX_AREA_PT2 x its time over the longest, coloured by
    phase, numbered as the description ranks the rows (by share, the optimizer and rows without
    FLOPs included); a row without FLOPs is a bar under its number, the ceiling drawn."""
    from matplotlib.colors import to_rgba

    from profiling.breakdown import figures

    def row(module, phase, time_s, flops, bytes_):
        return {
            "module": module,
            "phase": phase,
            "kind": "module",
            "leaf": True,
            "time_s": time_s,
            "share": time_s / 10e-3,
            "flops": flops,
            "intensity_flops_per_byte": flops / bytes_ if bytes_ else 0.0,
            "achieved_flops_per_s": flops / time_s,
        }

    table = [
        row("conv", "forward", 2e-3, 4e6, 1e5),  # 40 FLOP/B at 2 GFLOP/s
        row("conv", "backward", 4e-3, 8e6, 4e5),  # 20 FLOP/B at 2 GFLOP/s: the longest
        row("fc", "backward", 1e-3, 1e5, 1e5),  # 1 FLOP/B at 0.1 GFLOP/s
        row("bn", "forward", 3e-3, 0.0, 2e5),  # no FLOPs: the note
        {**row("net", "forward", 9e-3, 1e7, 1e6), "kind": "model", "leaf": False},
    ]
    figs = []
    monkeypatch.setattr(figures, "_png", lambda fig: figs.append(fig) or b"")
    c = Ceilings(peak_flops_per_s=1e10, dram_bytes_per_s=1e9, source="vendor: test")  # ridge 10
    c.flops_per_s = {"fp32": 1e10}
    figures.layer_roofline(table, c, "t", "host time")
    ax, bars = figs[0].axes
    drawn = {}
    for coll in ax.collections:
        color = tuple(coll.get_facecolor()[0][:3])
        for (x, y), area in zip(coll.get_offsets(), coll.get_sizes()):
            drawn[(round(float(x), 9), round(float(y), 3))] = (float(area), color)
    blue, orange = to_rgba("tab:blue")[:3], to_rgba("tab:orange")[:3]
    top = figures.MAX_AREA_PT2
    assert drawn == {
        (40.0, 2e9): (pytest.approx(top / 2), pytest.approx(blue)),
        (20.0, 2e9): (pytest.approx(top), pytest.approx(orange)),
        (1.0, 1e8): (pytest.approx(top / 4), pytest.approx(orange)),
    }
    labels = sorted((t.get_text(), t.xy) for t in ax.texts)  # each number points at its point
    assert labels == [("1", (20.0, 2e9)), ("3", (40.0, 2e9)), ("4", (1.0, 1e8))]
    key = " ".join(t.get_text() for t in figs[0].texts)
    assert " 1 conv bwd 40.0%" in key and " 2 bn fwd 30.0%" in key and " 4 fc bwd 10.0%" in key
    assert [t.get_text() for t in bars.texts] == ["2: bn fwd 30.0%"]  # no FLOPs: a bar
    # the roofline package's drawer (roofline.plot.draw_ceilings): the DRAM slope up to the
    # fp32 roof at the ridge (10 FLOP/B), the roof from there, the ridge dotted
    lines = {line.get_gid(): line for line in ax.lines}
    assert set(lines) == {"bytes:dram", "flops:fp32", "ridge:fp32"}
    slope, roof = lines["bytes:dram"], lines["flops:fp32"]
    assert list(slope.get_xdata())[1] == pytest.approx(10) and list(slope.get_ydata())[1] == 1e10
    assert list(roof.get_xdata())[0] == 10 and list(roof.get_ydata()) == [1e10, 1e10]
    assert roof.get_linestyle() == "--"  # a vendor ceiling: dashed, as in the analysis's figures


def test_times_in_s_or_ms_by_magnitude(monkeypatch):
    from common import fmt
    from profiling.breakdown import figures

    assert fmt.duration(2.37) == "2.37 s" and fmt.duration(0.412) == "412 ms"
    assert fmt.duration(5e-5) == "0.05 ms" and fmt.duration(float("nan")) == ""
    figs = []
    monkeypatch.setattr(figures, "_png", lambda fig: figs.append(fig) or b"")
    metrics = {
        "breakdown_step_s": 2.37,
        "breakdown_forward_fraction": 0.4,
        "breakdown_backward_fraction": 0.6,
    }
    figures.parts_bar(metrics, "t", "the main thread's CPU clock")
    (ax,) = figs[0].axes
    label = ax.get_xlabel().replace("\n", " ")
    assert "(the step: 2.37 s of wall time, mean of the recorded steps)" in label
    assert "by the main thread's CPU clock" in label
    assert "e+" not in label
    legend = [t.get_text() for t in ax.get_legend().get_texts()]  # the logged shares, as said
    assert "forward 40.0%" in legend and "backward 60.0%" in legend


def test_point_labels_do_not_overlap_even_where_points_coincide():
    from profiling.breakdown.figures import LABELS, label_offsets

    box = 14.0
    same = [(100.0, 100.0)] * LABELS  # ten modules at one intensity and rate (repeated blocks)
    near = [(100.0 + 3 * i, 100.0) for i in range(LABELS)]
    apart = [(100.0 + 50 * i, 100.0) for i in range(3)]
    for points in (same, near, apart):
        offsets = label_offsets(points, box)
        at = [(x + dx, y + dy) for (x, y), (dx, dy) in zip(points, offsets)]
        for i, (ax_, ay) in enumerate(at):
            for bx, by in at[:i]:
                assert abs(ax_ - bx) >= box - 1e-9 or abs(ay - by) >= box - 1e-9
    assert label_offsets(apart, box) == [(0.0, 0.0)] * 3  # free points keep their label on them


def test_ceilings_measured_over_vendor_for_the_runs_dtype(tracking):
    """profiling.breakdown.roof.device_ceilings through roofline/: the vendor table alone (NVIDIA
    L4: fp32 30.3 TFLOP/s, bf16 121, DRAM 300 GB/s), then a peaks run of the device in the store
    measuring DRAM only (200 GB/s): its bandwidth, the vendor's compute, each source named; a
    device neither knows has no ceilings and says why."""
    from profiling.breakdown.roof import bound, device_ceilings

    vend = device_ceilings("NVIDIA L4", "lab", "bf16", online=True)
    assert (vend.dtype, vend.peak_flops_per_s, vend.dram_bytes_per_s) == ("bf16", 121e12, 300e9)
    assert vend.source.startswith("vendor: ") and vend.flops_per_s["fp32"] == 30.3e12
    assert bound(403.0, vend) == "memory-bound" and bound(404.0, vend) == "compute-bound"
    with mlflow.start_run(run_name="peaks"):
        mlflow.set_tags({schema.TAG_RUN_KIND: "peaks", schema.TAG_DEVICE_NAME: "NVIDIA L4"})
        mlflow.log_metric("peak_dram_bytes_per_s", 200e9)
        peaks_id = mlflow.active_run().info.run_id
    both = device_ceilings("NVIDIA L4", "lab", "fp32", online=True)
    assert (both.dtype, both.peak_flops_per_s, both.dram_bytes_per_s) == ("fp32", 30.3e12, 200e9)
    assert f"measured: peaks run {peaks_id[:8]}" in both.source and "vendor: " in both.source
    assert both.ridge_flops_per_byte == pytest.approx(151.5)
    offline = device_ceilings("NVIDIA L4", "lab", "fp32", online=False)  # no store: vendor only
    assert offline.dram_bytes_per_s == 300e9
    none = device_ceilings("Some CPU", "lab", "fp32", online=True)
    assert not none.known and "python -m profiling.peaks" in none.why
    assert bound(10.0, none) == "unknown"


# ------------------------------------------------------------------------------ trace
def test_trace_is_bounded_keeps_the_median_step_and_names_backward_modules():
    events = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}}]
    durations = (900.0, 400.0, 500.0)  # median 500 us: step 2 (step 0, the first, is slowest)
    for i in range(3):
        t = 1000.0 * i
        events += [
            {"ph": "X", "name": f"step: {i}", "ts": t, "dur": durations[i], "pid": 1, "tid": 1},
            {
                "ph": "X",
                "name": names.EVALUATE + "ConvolutionBackward0",
                "ts": t + 10,
                "dur": 5.0,
                "pid": 1,
                "tid": 1,
                "args": {"Sequence number": 10},
            },
        ]
    text = json.dumps({"traceEvents": events, "traceName": "/tmp/x.json"})
    gz, facts = bound_trace(text, 1, SEQ_OWNER.get, "breakdown of test")
    data = json.loads(gzip.decompress(gz))
    assert facts["trace_steps"] == 1 and facts["recorded_steps"] == 3
    assert data["breakdown"]["trace_steps"] == 1 and data["traceName"] == "breakdown of test"
    assert facts["kept"] == ["2"] and facts["kept_ms"] == [0.5] and facts["median_ms"] == 0.5
    assert "recorded step 2 of 3 (0.5 ms" in data["breakdown"]["note"]
    kept = [e["name"] for e in data["traceEvents"] if e["ph"] == "X"]
    assert kept == ["step: 2", names.EVALUATE + "ConvolutionBackward0"]
    assert data["traceEvents"][-1]["args"]["module"] == "conv"
    assert facts["trace_bytes"] == len(gzip.decompress(gz))


def test_typical_window_of_steps():
    from profiling.breakdown.trace import typical_window

    assert typical_window([3156.0, 480.0, 3464.0], 1) == (0, 3156.0)  # issue 33's three steps
    assert typical_window([900.0, 400.0, 500.0, 520.0], 2) == (2, 510.0)  # 500 and 520
    assert typical_window([5.0], 3) == (0, 5.0)


def test_calls_per_step_are_whole_numbers_over_three_steps():
    shift = 2000  # us: three copies of one step
    events = [
        Ev(
            e.name,
            e.start_ns + k * shift * US,
            e.end_ns + k * shift * US,
            seq=e.seq,
            fwd_thread=e.fwd_thread,
            corr=e.corr,
        )
        for k in range(3)
        for e in one_step_events()
    ]
    att = attribute(events, SEQ_OWNER.get, "host")
    assert att.steps == 3
    assert att.calls[("fc", "backward")] == 2.0  # AddmmBackward0 + its AccumulateGrad
    assert repr(att.calls[("fc", "backward")]) == "2.0"  # 6 / 3, not six thirds summed


def _answer_table(optimizer_share: float) -> tuple[list[dict], ModuleTree]:
    """A resnet-like table: two stages of leaves, and the optimizer row with `optimizer_share`."""
    tree = ModuleTree(
        "net",
        ["net", "layer1", "layer1.conv", "layer1.bn", "layer2", "layer2.conv", "layer2.bn"],
        {"layer1.conv", "layer1.bn", "layer2.conv", "layer2.bn"},
    )

    def row(module, phase, kind, leaf, share, ai, bound, frac=0.5):
        return {
            "module": module,
            "phase": phase,
            "kind": kind,
            "leaf": leaf,
            "share": share,
            "time_s": share,
            "intensity_flops_per_byte": ai,
            "bound": bound,
            "roof_fraction": frac,
            "depth": 1,
            "view": True,
        }

    table = [
        row("layer1", "backward", "module", False, 0.30, 40.0, "compute-bound"),
        row("layer2", "backward", "module", False, 0.25, 30.0, "compute-bound"),
        row("layer1.conv", "backward", "module", True, 0.20, 40.0, "compute-bound", 0.1),
        row("layer2.conv", "backward", "module", True, 0.25, 30.0, "compute-bound", 0.8),
        row("layer1.bn", "backward", "module", True, 0.10, 0.0, "memory-bound"),
        row("optimizer", "optimizer", "step", False, optimizer_share, 0.0, "memory-bound"),
        row("unattributed", "other", "step", False, 0.5, math.nan, "n/a"),
    ]
    return table, tree


def test_summary_names_the_largest_leaves_and_the_optimizer_first_then_stages():
    from profiling.breakdown.text import summary_line, view_text

    label = "net/b4"
    metrics = {"breakdown_recorded_steps": 3.0, "breakdown_step_s": 2.37}
    table, tree = _answer_table(0.177)
    line = summary_line(label, "cpu", table, tree, metrics, "the wall clock")
    assert line.startswith(
        "net/b4 on cpu: 2.37 s/step (mean of 3 recorded); largest, shares by the wall clock: "
    )
    largest, stages = line.split("the wall clock: ")[1].split(" Stage totals: ")
    names_in_order = [part.split(" ")[0] for part in largest.split("; ")]
    assert names_in_order == ["layer2.conv", "layer1.conv", "optimizer"]  # unattributed is not one
    assert "optimizer 17.7%, memory-bound at 0 FLOP/B (a foreach or fused optimizer" in largest
    assert "layer1.conv backward 20.0%, compute-bound at 40 FLOP/B (at 10.0% of its roof" in line
    assert "layer2.conv backward 25.0%, compute-bound at 30 FLOP/B (near its compute roof" in line
    assert stages == "layer1 backward 30.0%, layer2 backward 25.0%."
    small, _ = _answer_table(0.05)  # not among the three largest: not named
    assert "optimizer" not in summary_line(label, "cpu", small, tree, metrics, "the wall clock")
    printed = view_text(table, tree).splitlines()
    assert printed[1].startswith("-- largest rows") and printed[2].startswith("layer2.conv ")
    assert "fusing it with its neighbours" in next(p for p in printed if p.startswith("layer1.bn"))


_KINETO_SCRIPT = """
import sys, time, torch
from profiling.breakdown.recording import _chrome_trace, _profiled, kineto_results
from profiling.breakdown.events import from_kineto
quiet = sys.argv[1] == "quiet"
for lean in (True, False):
    prof = _profiled(lambda i: torch.randn(8).sum() and 0.0, 2, torch.device(
        "cpu" if quiet else "meta"), [], lean)
    from_kineto(kineto_results(prof))
    _chrome_trace(prof, quiet)
print("done", file=sys.stderr)
"""


def test_kinetos_cpu_only_noise_is_silenced_on_the_cpu():
    """kineto prints `USDT: ... profiler_start` and `ERROR: ... gpuGetDeviceCount failed with
    code 35` on a machine without a GPU; a CPU breakdown drops them (another device type keeps
    stderr as it is: the control, where this torch prints them)."""
    import subprocess
    import sys

    def stderr(mode: str) -> str:
        done = subprocess.run(
            [sys.executable, "-c", _KINETO_SCRIPT, mode], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stderr

    quiet = stderr("quiet")
    assert "done" in quiet and "USDT" not in quiet and "gpuGetDeviceCount" not in quiet
    loud = stderr("loud")
    if torch.cuda.is_available() is False and "USDT" not in loud:
        pytest.skip("this torch's kineto prints nothing here: the control shows nothing")
    assert "USDT" in loud


# ------------------------------------------------------------------------------ end to end
RESNET = ["--model", "resnet18", "--batch", "2", "--image-size", "32", "--device", "cpu"]


@pytest.fixture(scope="module")
def resnet_runs(tmp_path_factory, template_db):
    """A train run and a breakdown run of resnet18 b2 32px in one store (one per test module)."""
    import os
    import shutil

    from profiling.cli import main as profiling_main
    from train.__main__ import main as train_main

    folder = tmp_path_factory.mktemp("breakdown")
    shutil.copyfile(template_db, folder / "mlflow.db")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    old = {k: os.environ.get(k) for k in ("MLFLOW_TRACKING_URI", "ROOFLINE_SPOOL_DIR")}
    os.environ.update(MLFLOW_TRACKING_URI=uri, ROOFLINE_SPOOL_DIR=str(folder / "spool"))
    cwd = os.getcwd()
    os.chdir(folder)
    mlflow.set_tracking_uri(uri)
    try:
        assert (
            train_main(
                [
                    *RESNET,
                    "--warmup-iters",
                    "0",
                    "--iters",
                    "1",
                    "--no-progress",
                    "--no-system-metrics",
                ]
            )
            == 0
        )
        assert (
            profiling_main(
                ["--breakdown", *RESNET, "--warmup-iters", "1", "--iters", "2", "--no-progress"]
            )
            == 0
        )
        found = mlflow.search_runs(experiment_ids=["0"], output_format="list")
        by_kind = {r.data.tags[schema.TAG_RUN_KIND]: r for r in found}
        client = mlflow.tracking.MlflowClient()
        art = folder / "art"
        client.download_artifacts(by_kind["breakdown"].info.run_id, "", str(art))
        yield by_kind, art
    finally:
        os.chdir(cwd)
        mlflow.set_tracking_uri(None)
        for k, v in old.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


def test_resnet18_rows_flops_and_join(resnet_runs):
    by_kind, art = resnet_runs
    train, bd = by_kind["train"], by_kind["breakdown"]
    assert bd.info.status == "FINISHED"
    assert bd.data.tags[schema.TAG_CONFIG_KEY] == train.data.tags[schema.TAG_CONFIG_KEY]
    assert bd.data.tags[schema.TAG_CONFIG_LABEL] == train.data.tags[schema.TAG_CONFIG_LABEL]
    assert bd.data.params["model"] == "resnet18" and bd.data.params["iters"] == "2"
    layers = pd.read_csv(art / "layers.csv")
    assert list(layers.columns[:8]) == [
        "module",
        "phase",
        "kind",
        "depth",
        "leaf",
        "view",
        "calls",
        "time_s",
    ]
    have = set(zip(layers.module, layers.phase))
    for m in ("conv1", "bn1", "layer1", "layer2", "layer3", "layer4", "fc"):
        assert {(m, "forward"), (m, "backward")} <= have, m
    modules = layers[layers.kind != "module"]  # the model's rows hold every module's work
    train_flops = train.data.metrics["train_flops_per_step"]
    assert modules.flops.sum() == pytest.approx(train_flops, rel=1e-9)
    assert bd.data.metrics["breakdown_flops_per_step"] == pytest.approx(train_flops, rel=1e-9)
    row = layers.set_index(["module", "phase"])
    # FlopCounterMode's ModuleTracker charges each downsample convolution its block's conv1 and
    # conv2 backward too; by sequence number it is its own: grad_input + grad_weight = 2 x forward
    down = row.loc[("layer2.0.downsample.0", "backward"), "flops"]
    assert down == 2 * row.loc[("layer2.0.downsample.0", "forward"), "flops"]
    assert (
        row.loc[("bn1", "forward"), "intensity_flops_per_byte"]
        < row.loc[("conv1", "forward"), "intensity_flops_per_byte"]
    )
    assert set(layers.bytes_source) == {"modeled"} and set(layers.time_source) == {"host"}
    # this CPU has no peaks run in the store and no vendor entry: bounds unknown, and why
    assert set(layers[layers.kind == "module"].bound) == {"unknown"}
    assert bd.data.tags["breakdown_roof"].startswith("none: no peaks run of")


def test_resnet18_parts_trace_and_figures(resnet_runs):
    by_kind, art = resnet_runs
    m = by_kind["breakdown"].data.metrics
    step = m["breakdown_step_s"]
    parts = sum(m[f"breakdown_{p}_s"] for p in names.PARTS)
    assert parts == pytest.approx(step, rel=0.03)
    assert sum(m[f"breakdown_{p}_fraction"] for p in names.PARTS) == pytest.approx(1, abs=0.03)
    assert m["breakdown_forward_s"] > 0 and m["breakdown_backward_s"] > 0
    assert m["breakdown_rows_fraction"] == pytest.approx(1, abs=0.03)
    assert 0.5 < m["breakdown_module_fraction"] <= m["breakdown_attributed_fraction"] <= 1.03
    data = json.loads(gzip.decompress((art / "trace.json.gz").read_bytes()))
    assert data["breakdown"]["trace_steps"] == 1 and data["breakdown"]["recorded_steps"] == 2
    mods = {
        e["name"] for e in data["traceEvents"] if str(e.get("name", "")).startswith(names.MODULE)
    }
    assert "module: layer4.1.conv2" in mods
    assert m["breakdown_trace_bytes"] > 0 and m["breakdown_trace_steps"] == 1
    body = json.loads((art / "breakdown.json").read_text())
    assert body["counts_check"] == "ok" and len(body["top"]) == 3
    assert len(body["step_wall_s"]) == 2 and math.isclose(sum(body["step_wall_s"]) / 2, step)
    for png in ("layer_roofline.png", "step_parts.png"):
        assert (art / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    note = by_kind["breakdown"].data.tags[schema.TAG_NOTE]
    assert note.startswith("b2/fp32/32px/resnet18 on ") and "largest, shares by " in note
    assert "Stage totals: " in note and "ui.perfetto.dev" in note
    kept = data["breakdown"]["kept"][0]
    assert f"trace.json.gz holds recorded step {kept} of 2 (" in note
    assert "shares by the main thread's CPU clock" in note  # one CPU process: the CPU clock
    assert "Step parts, by the main thread's CPU clock as every share here: " in note
    assert body["share_clock"] == "thread_cpu"
    # one clock for every share: the optimizer part is its rows' shares (the step, zero_grad)
    shares = {(r["module"], r["phase"]): r["share"] for r in body["view"]}
    rows_opt = shares[("optimizer", "optimizer")] + shares.get(("zero_grad", "other"), 0.0)
    assert m["breakdown_optimizer_fraction"] == pytest.approx(rows_opt, abs=0.01)
    bd_tags = by_kind["breakdown"].data.tags  # the largest row, then the three, with their clock
    assert bd_tags["breakdown_largest"].endswith("% (CPU clock)")
    assert bd_tags["breakdown_largest_3"].endswith("(by the main thread's CPU clock)")
    layers = pd.read_csv(art / "layers.csv")
    assert (layers.calls == layers.calls.round()).all()  # whole numbers: 2.0, not 1.99999...
    assert (layers.cpu_time_s <= layers.time_s * 1.001 + 1e-6).all()


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--compile"], "--compile: the breakdown times modules through forward hooks"),
        (["--iters", "auto"], "--iters auto: a breakdown records a fixed number of steps"),
        # issue 32: main said "iters must be a positive integer or auto", then refused auto
        (["--iters", "0"], "error: --iters 0: a breakdown records a whole number of steps, 1 or"),
        (["--iters", "abc"], "error: --iters abc: a breakdown records a whole number of steps"),
        (["--trace-steps", "0"], "--trace-steps must be a positive integer"),
    ],
)
def test_bad_flags_are_one_line_and_create_no_run(tracking, capsys, flags, message):
    from profiling.cli import main as profiling_main

    assert profiling_main(["--breakdown", *RESNET, *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert mlflow.search_runs(experiment_ids=["0"], output_format="list") == []


def test_ddp_breakdown_under_torchrun_logs_rank_0_with_its_communication(tracking, tmp_path):
    """Two CPU processes (gloo): rank 0 logs one run; the wait for the last buckets' all-reduce
    at the end of backward and the collectives' calls are the row `communication` and the part
    exposed_comm."""
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    argv += ["-m", "profiling", "--breakdown", *RESNET, "--distributed", "ddp"]
    argv += ["--warmup-iters", "1", "--iters", "1", "--no-progress"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = mlflow.search_runs(experiment_ids=["0"], output_format="list")
    p, m = run.data.params, run.data.metrics
    assert run.info.status == "FINISHED" and run.data.tags[schema.TAG_RUN_KIND] == "breakdown"
    assert p["world_size"] == "2" and p["distributed"] == "ddp" and p["nodes"] == "1"
    assert run.data.tags[schema.TAG_CONFIG_KEY] == schema.config_key(p)
    assert m["breakdown_exposed_comm_s"] > 0
    parts = sum(m[f"breakdown_{part}_s"] for part in names.PARTS)
    assert parts == pytest.approx(m["breakdown_step_s"], rel=0.03)
    path = mlflow.tracking.MlflowClient().download_artifacts(run.info.run_id, "layers.csv")
    layers = pd.read_csv(path)
    comm = layers[layers.module == "communication"]
    assert len(comm) and comm.time_s.sum() > 0
    assert " (rank 0 of 2): " in run.data.tags[schema.TAG_NOTE]


def test_an_interrupted_breakdown_keeps_the_steps_it_recorded(tracking, capsys, monkeypatch):
    """Issue 32: an interrupted breakdown kept nothing it measured (train keeps its steps). The
    interrupt is raised after two of three recorded steps (Ctrl-C; SIGTERM and SIGHUP raise the
    same KeyboardInterrupt through common.cli)."""
    from profiling.breakdown import recording as record_mod
    from profiling.cli import main as profiling_main

    def two_then_interrupt(one_step, steps, device, walls, lean=False):
        walls.append(one_step(0))
        walls.append(one_step(1))
        raise KeyboardInterrupt

    monkeypatch.setattr(record_mod, "_profiled", two_then_interrupt)
    argv = ["--breakdown", *RESNET, "--warmup-iters", "1", "--iters", "3", "--no-progress"]
    assert profiling_main(argv) == 130
    assert "Traceback" not in capsys.readouterr().err
    (run,) = mlflow.search_runs(experiment_ids=["0"], output_format="list")
    assert run.info.status == "KILLED"
    assert run.data.tags["breakdown_partial"] == "interrupted after 2 of 3 recorded step(s)"
    assert run.data.metrics["breakdown_recorded_steps"] == 2.0
    local = mlflow.tracking.MlflowClient().download_artifacts(run.info.run_id, "step_wall_s.csv")
    lines = open(local).read().splitlines()
    assert lines[0] == "step,wall_s" and len(lines) == 3 and float(lines[1].split(",")[1]) > 0


def test_a_repeated_hint_points_at_the_row_that_said_it():
    """`as above` only right under the row with the same hint; further down, `as for <row>`."""
    from profiling.breakdown.text import view_text

    tree = ModuleTree("net", ["net", "a", "b", "c", "d"], {"a", "b", "c", "d"})

    def row(module, share, ai):
        return {
            "module": module,
            "phase": "backward",
            "kind": "module",
            "leaf": True,
            "share": share,
            "time_s": share,
            "intensity_flops_per_byte": ai,
            "bound": "unknown",
            "roof_fraction": math.nan,
            "depth": 1,
            "view": True,
        }

    table = [row("a", 0.4, 10.0), row("b", 0.3, 12.0), row("c", 0.2, 0.0), row("d", 0.1, 9.0)]
    hints = {
        line.split()[0]: line.split(": ", 1)[1] for line in view_text(table, tree).splitlines()[2:6]
    }
    assert hints["a"] == "`python -m profiling.peaks` measures the ceilings that say"
    assert hints["b"] == "as above"
    assert hints["c"].startswith("elementwise work")
    assert hints["d"] == "as for a backward"


def test_the_breakdown_writes_every_column_the_model_reads():
    """profiling/breakdown's layers.csv columns hold common.schema.BREAKDOWN_ROW_FIELDS, the
    fields train.whatif reads (it may not import profiling)."""
    from profiling.breakdown.table import COLUMNS

    assert set(schema.BREAKDOWN_ROW_FIELDS) <= set(COLUMNS)


def _above_table() -> list[dict]:
    """Leaf rows at 2e10 and 5e9 FLOP/s against a 1e10 FLOP/s roof (DRAM 1e9 B/s: ridge 10)."""

    def row(module, phase, time_s, calls, flops, ai):
        achieved = flops / time_s
        attainable = min(1e10, ai * 1e9)
        return {
            "module": module,
            "phase": phase,
            "kind": "module",
            "leaf": True,
            "time_s": time_s,
            "calls": calls,
            "share": time_s / 0.1,
            "flops": flops,
            "intensity_flops_per_byte": ai,
            "achieved_flops_per_s": achieved,
            "roof_fraction": achieved / attainable,
        }

    return [
        row("layer1.conv", "forward", 0.01, 1.0, 2e8, 50.0),  # 2e10: 2x its compute ceiling
        row("layer2.conv", "backward", 0.02, 2.0, 1e8, 40.0),  # 5e9: under it
        row("fc", "backward", 1e-5, 1.0, 3e5, 20.0),  # 3e10 in 10 us: a short one
    ]


def test_rows_above_their_roof_are_named_with_the_evidence_that_says_why():
    """A row above the ceiling that bounds it is named as a train point above its roof is: which
    rows, by how much, and where the evidence points (a busy peaks run, a vendor figure above the
    measured one: the ceiling; microseconds per call: the row's time)."""
    from profiling.breakdown.above import above_roof

    c = Ceilings(peak_flops_per_s=1e10, dram_bytes_per_s=1e9, source="measured: peaks run abcd1234")
    c.peaks_load = {"load_average_1m_start": 3.9, "load_average_1m_max": 4.2, "cpu_count": 2.0}
    c.vendor_flops_per_s = 4e10
    table = _above_table()
    a = above_roof(table[:2], c)
    assert [r["module"] for r in a.rows] == ["layer1.conv"] and a.verdict == "ceiling"
    text = a.sentence
    assert text.startswith(
        "Above the roof: 1 row reaches 2.0x its ceiling, fp32 10 GFLOP/s compute (measured: "
        "peaks run abcd1234): layer1.conv fwd 2.0x (20 GFLOP/s)."
    )
    assert "ran on a busy machine (busy: 1-minute load average 3.90 at its start" in text
    assert "the vendor figure is 40 GFLOP/s (4.0x the measured one; every row is under it)" in text
    both = above_roof(table, c)  # the 10-us row: its time may be too short
    assert both.verdict == "either" and [r["module"] for r in both.rows] == ["fc", "layer1.conv"]
    assert "1 of them take under 0.05 ms per call (down to 0.01 ms)" in both.sentence
    quiet = Ceilings(peak_flops_per_s=1e10, dram_bytes_per_s=1e9, source="vendor: datasheet")
    assert above_roof(table[2:], quiet).verdict == "time"
    assert above_roof(table[:1], quiet).verdict == "unknown"
    assert above_roof(table[1:2], c) is None  # under its roof: nothing to say
    assert above_roof(table, Ceilings()) is None  # no ceilings, no roof to be above


def test_a_row_above_its_roof_is_ringed_in_the_figure_and_said_in_its_subtitle(monkeypatch):
    from profiling.breakdown import figures
    from profiling.breakdown.above import above_roof

    c = Ceilings(peak_flops_per_s=1e10, dram_bytes_per_s=1e9, source="vendor: test")
    c.flops_per_s = {"fp32": 1e10}
    table = _above_table()[:2]
    figs = []
    monkeypatch.setattr(figures, "_png", lambda fig: figs.append(fig) or b"")
    figures.layer_roofline(table, c, "t", "host time", above=above_roof(table, c), clock="x")
    ax = figs[0].axes[0]
    rings = [coll for coll in ax.collections if coll.get_label().startswith("above its roof")]
    assert len(rings) == 1 and [tuple(o) for o in rings[0].get_offsets()] == [(50.0, 2e10)]
    assert "Ringed: 1 above the roof, nothing measured says why" in ax.get_title().replace(
        "\n", " "
    )
    key = " ".join(t.get_text() for t in figs[0].texts)
    assert " 2 layer1.conv fwd 10.0% ^" in key and "^ above its roof" in key
