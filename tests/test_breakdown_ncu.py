"""An ncu capture with module NVTX ranges -> layers.csv rows with measured FLOPs and DRAM bytes.

The stand-in capture is the real L4 fixture (tests/data/ncu/l4_resnet18_bs64_train_step_details_nvtx.csv,
SOURCES.md: ResNet-18, batch 64, 32x32, fp32, NVIDIA L4; 98 kernels, forward, loss and optimizer,
no backward: its push/pop ranges missed autograd's thread) with module ranges added, built by
`build_standin` below, and nothing else changed:

* the fixture's first 89 kernels are ResNet-18's forward, in the order its modules run them
  (`resnet18_forward_kernel_modules`): per convolution + batch norm pair, the convolution's
  kernel, then batch norm's two (num_batches_tracked += 1, a 1-block elementwise kernel, and
  cuDNN's bn_fw), each ReLU one elementwise kernel, each residual add one (the block's own
  code), max pooling one, the average pooling one reduction, the linear layer a GEMM and its
  split-K reduction. `check_alignment` proves the order against the kernel names and grids
  before anything is added;
* to each of them, the push/pop cell gets the module ranges the Tracker pushes with
  --nvtx-modules, outermost first: `module: resnet18`, then every enclosing module, then the
  module itself (`module: layer1`, `module: layer1.0`, `module: layer1.0.conv1`), in ncu's
  `<domain>:<name>:none:none:none:none:none:none` form after the fixture's own phase ranges;
* kernels 89-97 (loss, the backward seed, the optimizer) keep their rows as they are.

Backward kernels (`stashed seq = n`) have no real row to borrow: that mapping is tested on
hand-made kernels.
"""

from __future__ import annotations

import csv
import math

import pytest

from profiling.breakdown.ncu import has_module_ranges, kernel_owner, ncu_rows, seq_map
from profiling.breakdown.owners import SeqOwners
from profiling.breakdown.roof import Ceilings
from profiling.ncu.parse import NcuKernel, read_ncu_csv
from profiling.ncu.totals import summarize

L4_CSV = "l4_resnet18_bs64_train_step_details_nvtx.csv"
PUSH_POP = "thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"


def resnet18_forward_kernel_modules() -> list[str]:
    """The module of each of ResNet-18's forward kernels, in launch order (see the docstring)."""
    out = ["conv1", "bn1", "bn1", "relu", "maxpool"]
    for layer in ("layer1", "layer2", "layer3", "layer4"):
        for b in (0, 1):
            p = f"{layer}.{b}"
            out += [f"{p}.conv1", f"{p}.bn1", f"{p}.bn1", f"{p}.relu"]
            out += [f"{p}.conv2", f"{p}.bn2", f"{p}.bn2"]
            if b == 0 and layer != "layer1":
                out += [f"{p}.downsample.0", f"{p}.downsample.1", f"{p}.downsample.1"]
            out += [p, f"{p}.relu"]  # the residual add, then the block's ReLU
    return out + ["avgpool", "fc", "fc"]


def check_alignment(kernels, modules) -> None:
    """Every module's kernel is the kind it must be: convolutions run implicit_convolve_sgemm,
    batch norm a 1-block counter increment then bn_fw, pooling and linear their kernels."""
    seen_bn: set[str] = set()
    for k, m in zip(kernels, modules):
        leaf = m.rsplit(".", 1)[-1]
        if leaf.startswith("conv") or m.endswith("downsample.0"):
            assert "convolve_sgemm" in k.name, (k.id, m)
        elif leaf.startswith("bn") or m.endswith("downsample.1"):
            if m not in seen_bn:
                assert k.attrs["Grid Size"] == "(1, 1, 1)", (k.id, m)  # num_batches_tracked += 1
                seen_bn.add(m)
            else:
                assert "bn_fw" in k.name, (k.id, m)
        elif m == "maxpool":
            assert "max_pool" in k.name
        elif m == "avgpool":
            assert "reduce_kernel" in k.name
        elif m == "fc":
            assert "sgemm" in k.name or "splitKreduce" in k.name
        else:  # a ReLU or a block's residual add
            assert "elementwise_kernel" in k.name, (k.id, m)


def module_ranges(path: str) -> list[str]:
    parts = path.split(".")
    nested = ["resnet18"] + [".".join(parts[:n]) for n in range(1, len(parts) + 1)]
    return [f'"<default domain>:module: {p}:none:none:none:none:none:none"' for p in nested]


def build_standin(src, dst) -> None:
    """The L4 fixture with module ranges added to its forward kernels' push/pop cells."""
    modules = resnet18_forward_kernel_modules()
    check_alignment(read_ncu_csv(src).kernels, modules)
    with open(src, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    header = rows[0]
    col, id_col = header.index(PUSH_POP), header.index("ID")
    for row in rows[1:]:
        i = int(row[id_col])
        if i < len(modules):
            row[col] = row[col].rstrip() + "  " + "  ".join(module_ranges(modules[i])) + " "
    with open(dst, "w", newline="", encoding="utf-8") as f:
        csv.writer(f, quoting=csv.QUOTE_ALL).writerows(rows)


@pytest.fixture
def standin(ncu_dir, tmp_path):
    path = tmp_path / "l4_resnet18_bs64_nvtx_modules.csv"
    build_standin(ncu_dir / L4_CSV, path)
    report = read_ncu_csv(path)
    return report, summarize(report)


L4 = Ceilings(dtype="fp32", peak_flops_per_s=30.3e12, dram_bytes_per_s=300e9, source="vendor: test")


def test_every_forward_kernel_gets_its_module_and_the_totals_stay_the_fixtures(standin):
    report, summary = standin
    assert has_module_ranges(report.kernels) and len(report.kernels) == 98
    per_kernel = summary.kernels.to_dict("records")
    table, owners = ncu_rows(report.kernels, per_kernel, L4)
    assert owners[0] == ("conv1", "forward") and owners[86] == ("avgpool", "forward")
    assert owners[33] == ("layer2.0", "forward")  # the residual add: the block's own code
    assert owners[89] == ("loss", "forward") and owners[90] == ("loss", "forward")
    assert owners[91] == ("unattributed", "backward")  # the seed gradient's fill
    assert set(owners[92:]) == {("optimizer", "optimizer")}
    by = {(r["module"], r["phase"]): r for r in table}
    have = set(by)
    for m in ("conv1", "bn1", "layer1", "layer2", "layer3", "layer4", "fc"):
        assert (m, "forward") in have, m
    # SOURCES.md's truths: 4.928e9 fp32 FLOPs, 7.099e8 DRAM bytes, 7.376 ms, over all 98 kernels
    top = [r for r in table if r["kind"] in ("model", "step")]
    assert sum(r["flops"] for r in top) == pytest.approx(4.928e9, rel=1e-3)
    assert sum(r["bytes"] for r in top) == pytest.approx(7.099e8, rel=1e-3)
    assert sum(r["time_s"] for r in top) == pytest.approx(7.376e-3, rel=1e-3)
    assert sum(r["share"] for r in top) == pytest.approx(1.0)
    conv1, bn1 = by[("conv1", "forward")], by[("bn1", "forward")]
    assert bn1["intensity_flops_per_byte"] < conv1["intensity_flops_per_byte"]
    assert conv1["bytes_source"] == "measured" and conv1["time_source"] == "ncu"
    # conv1 (3 -> 64, 7x7, stride 2, 32x32 -> 16x16, batch 64): the counted FLOPs are
    # 2 x 64 x 256 x 64 x 3 x 49 = 308,281,344; ncu's SASS count of the kernel is within 5 %
    assert conv1["flops"] == pytest.approx(308_281_344, rel=0.05)
    layer1 = by[("layer1", "forward")]
    assert layer1["time_s"] == pytest.approx(
        sum(r["time_s"] for r in table if r["module"].startswith("layer1.") and r["leaf"])
        + sum(r["self_time_s"] for r in table if r["module"] in ("layer1.0", "layer1.1")),
        rel=1e-9,
    )
    assert conv1["bound"] in ("memory-bound", "compute-bound") and math.isfinite(
        conv1["roof_fraction"]
    )


def kernel(i, push_pop, phase="forward") -> NcuKernel:
    return NcuKernel(
        i, f"k{i}", nvtx_push_pop=tuple(push_pop), nvtx_start_end=("train_step", phase)
    )


def test_backward_kernels_follow_their_nodes_sequence_number():
    """emit_nvtx names forward ops `<op>, seq = n` and backward nodes `<Node>, seq = n` (torch
    2.14; its docs write `stashed seq=n`: both forms are read)."""
    conv = ["module: net", "module: conv", "aten::conv2d, seq = 10", "aten::convolution, seq = 10"]
    ks = [
        kernel(0, conv),
        kernel(1, ["module: net", "module: fc", "aten::linear, seq = 12", "aten::addmm, seq = 13"]),
        kernel(2, ["aten::cross_entropy_loss, seq = 14", "aten::nll_loss_nd, seq = 15"], "loss"),
        kernel(3, ["ConvolutionBackward0, seq = 10", "aten::convolution_backward"], "backward"),
        kernel(4, ["AddmmBackward0, stashed seq=13"], "backward"),
        kernel(5, ["ViewBackward0, seq = 11"], "backward"),  # a view made no kernel in forward
        kernel(6, ["NllLossBackward0, seq = 15"], "backward"),
        kernel(7, ["CopyBackwards, seq = 3"], "backward"),  # before anything the capture saw
        kernel(8, ["aten::add_"], "optimizer"),
        kernel(9, ["torch::autograd::AccumulateGrad", "grad: fc", "aten::add_"], "backward"),
    ]
    seqs = seq_map(ks)
    assert seqs == {10: "conv", 12: "fc", 13: "fc", 14: "loss", 15: "loss"}
    owners = [kernel_owner(k, SeqOwners(seqs.items())) for k in ks]
    assert owners == [
        ("conv", "forward"),
        ("fc", "forward"),
        ("loss", "forward"),
        ("conv", "backward"),
        ("fc", "backward"),
        ("conv", "backward"),  # the nearest lower number seen: 10
        ("loss", "backward"),
        ("unattributed", "backward"),
        ("optimizer", "optimizer"),
        ("fc", "backward"),  # an AccumulateGrad: its parameter's module (owners.backward_owner)
    ]


def test_import_of_the_standin_logs_layers_and_figures(tracking, ncu_dir, tmp_path):
    import mlflow
    import pandas as pd

    from profiling.cli import main

    path = tmp_path / "standin.csv"
    build_standin(ncu_dir / L4_CSV, path)
    argv = ["--model", "resnet18", "--batch", "64", "--image-size", "32", "--env-label", "lab"]
    assert main([*argv, "--import", str(path), "--device-name", "NVIDIA L4"]) == 0
    (run,) = mlflow.search_runs(experiment_ids=["0"], output_format="list")
    assert run.data.tags["run_kind"] == "profile"
    # modules with kernels of their own: the stem's 4, 6 per block (conv1, bn1, relu, conv2, bn2,
    # the block's add) x 8 blocks, 2 per downsample x 3, avgpool and fc: 4 + 48 + 6 + 2
    assert run.data.tags["breakdown_modules"] == "60 module rows from 98 kernels"
    assert run.data.tags["breakdown_roof"].startswith("vendor: ")
    client = mlflow.tracking.MlflowClient()
    art = tmp_path / "art"
    client.download_artifacts(run.info.run_id, "", str(art))
    layers = pd.read_csv(art / "layers.csv")
    conv1 = layers[(layers.module == "conv1") & (layers.phase == "forward")].iloc[0]
    assert conv1.bytes_source == "measured" and conv1.bound in ("compute-bound", "memory-bound")
    for png in ("layer_roofline.png", "kernel_roofline.png"):
        assert (art / png).read_bytes()[:4] == b"\x89PNG"


def test_capture_with_nvtx_modules_runs_the_breakdown_program(capsys):
    from profiling.cli import main

    argv = ["--model", "resnet18", "--batch", "64", "--device-name", "NVIDIA L4", "--dry-run"]
    assert main([*argv, "--nvtx-modules"]) == 0
    command = capsys.readouterr().out.splitlines()[0]
    assert " -m profiling.breakdown.nvtx_steps --model resnet18 " in command
    assert command.endswith("--profile-steps 1")


def test_nvtx_steps_push_module_ranges_and_emit_nvtx_around_the_marked_steps(monkeypatch):
    """profile_steps on the CPU with the program's hooks; NVTX and emit_nvtx recorded, not run."""
    import contextlib

    import torch

    from profiling.breakdown import nvtx_steps
    from train.profile_mode import profile_steps
    from train.config import TrainConfig

    log: list[str] = []
    monkeypatch.setattr(torch.cuda.nvtx, "range_push", lambda name: log.append(f"push {name}"))
    monkeypatch.setattr(torch.cuda.nvtx, "range_pop", lambda: log.append("pop"))

    @contextlib.contextmanager
    def emit_nvtx(record_shapes=False):
        log.append("emit_nvtx on")
        yield
        log.append("emit_nvtx off")

    monkeypatch.setattr(torch.autograd.profiler, "emit_nvtx", emit_nvtx)
    cfg = TrainConfig(model="resnet18", batch_size=2, image_size=32, device="cpu", warmup_iters=1)
    wrap, start, stop = nvtx_steps.hooks(
        cfg, lambda: log.append("start"), lambda: log.append("stop")
    )
    profile_steps(
        cfg,
        torch.device("cpu"),
        1,
        profiler_start=start,
        profiler_stop=stop,
        mark=lambda _name: contextlib.nullcontext(),
        wrap=wrap,
    )
    marked = log[log.index("start") : log.index("stop") + 1]
    assert log.index("emit_nvtx on") < log.index("start") and log[-1] == "emit_nvtx off"
    assert marked[1] == "push module: resnet18" and "push module: layer4.1.conv2" in marked
    assert marked.count("pop") == sum(1 for x in marked if x.startswith("push"))
    assert nvtx_steps.program(["py", "-m", "train", "--batch", "2"]) == [
        "py",
        "-m",
        "profiling.breakdown.nvtx_steps",
        "--batch",
        "2",
    ]


def test_nvtx_steps_reports_the_fp32_math_as_train_s_profile_mode_does(monkeypatch, capsys):
    """python -m profiling tags a capture with the fp32 math its child reported on the console
    (issue 22, tag fp32_math): the --nvtx-modules child prints the note train's profile mode
    prints, with what profile_steps read back from torch (a stand-in here: no CUDA)."""
    import torch

    import train.bench
    import train.profile_mode
    from profiling.breakdown import nvtx_steps
    from train.device import fp32_math_reported

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(train.bench, "preflight", lambda cfg: torch.device("cpu"))
    monkeypatch.setattr(train.profile_mode, "profile_steps", lambda *a, **k: "tf32")
    argv = ["--model", "resnet18", "--batch", "2", "--image-size", "32", "--precision", "tf32"]
    assert nvtx_steps.main([*argv, "--profile-steps", "1"]) == 0
    assert fp32_math_reported(capsys.readouterr().err) == "tf32"
