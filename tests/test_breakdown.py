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


def _profiled_step(model, root: str, x, y):
    """(attribution of one profiled training step of `model`, FLOPs and bytes per row of the same
    step): an unprofiled step first (the optimizer's state exists from then on, as in train runs),
    then one counted step and one step under the profiler."""
    from torch.profiler import ProfilerActivity, profile

    from profiling.breakdown.counts import count_one
    from profiling.breakdown.events import from_kineto
    from profiling.breakdown.hooks import Tracker
    from train.step import train_step

    with Tracker(model, root) as tracker:
        parts = _step_parts(model, tracker)
        train_step(parts, x, y)
        counts = count_one(tracker, lambda: train_step(parts, x, y), x.shape[0])
        tracker.clear()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            with tracker.span(names.step_range(0)):
                train_step(parts, x, y)
    return attribute(from_kineto(prof.profiler.kineto_results), tracker.owner_of_seq), counts


def test_flops_per_module_and_phase_by_hand():
    from profiling.breakdown.counts import count_one
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


def test_accumulate_grad_and_backward_nodes_go_to_their_module_under_the_profiler():
    att, _ = _profiled_step(Net(), "net", torch.randn(2, 2, 4, 4), torch.tensor([0, 2]))
    calls = att.calls
    # backward nodes per module: conv: ConvolutionBackward0 + 1 AccumulateGrad; dw the same;
    # relu: ReluBackward0; fc: AddmmBackward0, TBackward0 + 2 AccumulateGrads (weight, bias)
    assert calls[("conv", "backward")] == 2 and calls[("dw", "backward")] == 2
    assert calls[("relu", "backward")] == 1 and calls[("fc", "backward")] == 4
    assert calls[("net", "backward")] == 1  # flatten's ViewBackward0 is the model's own
    assert calls[("loss", "backward")] == 2  # NllLossBackward0, LogSoftmaxBackward0
    assert all(calls[(m, "forward")] == 1 for m in ("net", "conv", "dw", "relu", "fc"))
    assert att.self_s[("optimizer", "optimizer")] > 0


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

    from profiling.breakdown.counts import count_one
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


def test_backward_of_a_residual_block_goes_to_each_branch_under_the_profiler():
    """Where ModuleTracker errs (the downsample beside a body during backward): each
    ConvolutionBackward0 and AccumulateGrad is its own module's, the add's AddBackward0 and the
    flatten's ViewBackward0 the model's; FLOPs likewise (below, by hand)."""
    torch.manual_seed(0)
    att, counts = _profiled_step(Residual(), "res", torch.randn(2, 2, 4, 4), torch.tensor([0, 2]))
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
    assert s[("loss", "backward")] == 20
    assert s[("fc", "backward")] == 100 + 5  # AddmmBackward0 + its AccumulateGrad (grad: fc)
    assert s[("relu", "backward")] == 30 and s[("conv", "backward")] == 240
    assert s[("unattributed", "backward")] == 490 - (20 + 105 + 30 + 240)  # between nodes
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


def test_backward_of_an_unknown_forward_thread_is_unattributed():
    events = [
        e
        if e.seq < 0 or "evaluate" not in e.name
        else Ev(e.name, e.start_ns, e.end_ns, seq=e.seq, fwd_thread=7)
        for e in one_step_events()
    ]
    att = attribute(events, SEQ_OWNER.get, "host")
    assert ("conv", "backward") not in att.self_s
    assert att.self_s[("unattributed", "backward")] * 1e6 == pytest.approx(490 - 5)


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
    assert s[("fc", "backward")] == 105 - 1
    assert s[("unattributed", "backward")] == 95 - 40
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
    phase, the biggest numbered first; a row without FLOPs is in the note, the ceiling drawn."""
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
    (ax,) = figs[0].axes
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
    labels = sorted((t.get_text(), t.xy) for t in ax.texts)
    assert labels == [("1", (20.0, 2e9)), ("2", (40.0, 2e9)), ("3", (1.0, 1e8))]
    notes = " ".join(t.get_text() for t in figs[0].texts)
    assert "bn fwd 30.0%" in notes and "1  conv bwd 40.0%" in notes
    (roof,) = ax.lines  # the fp32 roof: DRAM slope up to the ridge (10 FLOP/B), then flat
    assert list(roof.get_xdata())[1] == 10 and list(roof.get_ydata())[1:] == [1e10, 1e10]


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
def test_trace_is_bounded_and_names_backward_modules():
    events = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}}]
    for i in range(3):
        t = 1000.0 * i
        events += [
            {"ph": "X", "name": f"step: {i}", "ts": t, "dur": 900.0, "pid": 1, "tid": 1},
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
    kept = [e["name"] for e in data["traceEvents"] if e["ph"] == "X"]
    assert kept == ["step: 0", names.EVALUATE + "ConvolutionBackward0"]
    assert data["traceEvents"][-1]["args"]["module"] == "conv"
    assert facts["trace_bytes"] == len(gzip.decompress(gz))


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
    assert note.startswith("resnet18/b2/fp32/32px on ") and "most time: " in note


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
    from profiling.breakdown import record as record_mod
    from profiling.cli import main as profiling_main

    def two_then_interrupt(one_step, steps, device, walls):
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
