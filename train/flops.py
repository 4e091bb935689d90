"""FLOP and byte counting, outside the timed region.

* Forward FLOPs, MACs and parameters per sample: DeepSpeed's FlopsProfiler (module hooks plus
  patched torch.nn.functional; it counts convolutions and matmuls as 2 x MACs and adds
  elementwise work such as batch norm, ReLU and pooling). It does not see backward.
* Training FLOPs per step: dispatch-level counting of forward + loss + backward + optimizer with
  torch.utils.flop_counter.FlopCounterMode, which counts matmuls, convolutions and attention
  (2 FLOPs per multiply-add) and nothing elementwise. torch 2.14.1's formula for
  `aten.convolution_backward` ignores `groups` in the weight-gradient term; we register a
  corrected one (see `conv_backward_flop`).
* Modeled bytes per step: for every aten op, the bytes of its tensor inputs plus its tensor
  outputs (compulsory traffic, no reuse between ops). Views and uninitialised allocations move
  no data and are skipped. This is a model, labelled `modeled`, never presented as measured.

Counts are exact and shape-based. They are taken at two small batch sizes and extrapolated
linearly to the benchmark's batch: every term is either proportional to the batch (activations)
or independent of it (weights, optimizer state), so two points determine the line exactly
(tests/test_flops.py checks this against a direct count).
"""

from __future__ import annotations

import contextlib
import io
import os
import textwrap
from dataclasses import dataclass, field
from functools import lru_cache
from math import prod


# ------------------------------------------------------------------ conv backward correction
def _conv_fwd_flops(x_shape, w_shape, out_shape, transposed: bool) -> int:
    """FLOPs (2 per multiply-add) of a convolution; w_shape's input-channel dim is per group."""
    batch = x_shape[0]
    spatial = (x_shape if transposed else out_shape)[2:]
    c_out, c_in_per_group, *kernel = w_shape
    return 2 * batch * prod(spatial) * prod(kernel) * c_out * c_in_per_group


def conv_backward_flop(
    grad_out_shape,
    x_shape,
    w_shape,
    _bias,
    _stride,
    _padding,
    _dilation,
    transposed,
    _output_padding,
    groups,
    output_mask,
    out_shape=None,
    **_kw,
) -> int:
    """FLOPs of aten.convolution_backward, with `groups` honoured.

    grad_input is a (transposed) convolution of grad_output with the weight: the same multiply-adds
    as the forward. grad_weight accumulates, for every weight element, one product per output
    position and sample: N * prod(out_spatial) * C_out * (C_in / groups) * prod(kernel) multiply-adds,
    again exactly the forward's count. torch 2.14.1 computes the grad_weight term with the batch and
    channel dims swapped and so multiplies by C_in instead of C_in / groups (x groups too many:
    x32..960 for MobileNetV2's depthwise convolutions).
    """
    flops = 0
    # forward output shape = grad_out_shape (regular conv); for transposed convs x is the smaller side
    if output_mask[0]:
        flops += _conv_fwd_flops(x_shape, w_shape, grad_out_shape, transposed)
    if output_mask[1]:
        flops += _conv_fwd_flops(x_shape, w_shape, grad_out_shape, transposed)
    return flops


@lru_cache(maxsize=1)
def torch_conv_backward_counts_groups() -> bool:
    """Whether the installed torch's own formula already gets grouped convolutions right."""
    from torch.utils.flop_counter import conv_backward_flop as torch_formula

    n, c, h, k = 2, 8, 6, 3  # depthwise 3x3, 8 channels, 'same' padding
    x, w, go = [n, c, h, h], [c, 1, k, k], [n, c, h, h]
    theirs = torch_formula(
        go,
        x,
        w,
        None,
        [1, 1],
        [1, 1],
        [1, 1],
        False,
        [0, 0],
        c,
        [False, True, False],
        out_val=[x, w, None],
    )
    return theirs == _conv_fwd_flops(x, w, go, False)


def flop_counter_mode():
    """FlopCounterMode with the corrected convolution_backward formula (unless torch has fixed it)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    custom = (
        {}
        if torch_conv_backward_counts_groups()
        else {torch.ops.aten.convolution_backward: conv_backward_flop}
    )
    return FlopCounterMode(display=False, custom_mapping=custom)


# ------------------------------------------------------------------ byte model
_NO_DATA_OPS = {
    "empty",
    "empty_like",
    "empty_strided",
    "new_empty",
    "new_empty_strided",
    "detach",
    "lift_fresh",
    "alias",
}


def _tensor_bytes(t) -> int:
    nbytes = t.numel() * t.element_size()
    try:  # an expanded (stride-0) tensor reads only its storage
        return min(nbytes, t.untyped_storage().nbytes())
    except (RuntimeError, NotImplementedError):
        return nbytes


def op_bytes(func, args, kwargs, out) -> tuple[int, int] | None:
    """(bytes read, bytes written) of one aten op in the byte model: its tensor inputs and its
    tensor outputs; None for views and allocations, which move no data."""
    import torch
    from torch.utils._pytree import tree_flatten

    if func.is_view or func.overloadpacket.__name__ in _NO_DATA_OPS:
        return None
    read = sum(
        _tensor_bytes(a)
        for a in tree_flatten((args, kwargs or {}))[0]
        if isinstance(a, torch.Tensor)
    )
    written = sum(_tensor_bytes(o) for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor))
    return read, written


def _byte_counter_class():
    from torch.utils._python_dispatch import TorchDispatchMode

    class ByteCounter(TorchDispatchMode):
        """Counts bytes read (tensor inputs) and written (tensor outputs) per aten op."""

        def __init__(self):
            super().__init__()
            self.read_bytes = 0
            self.written_bytes = 0
            self.by_op: dict[str, int] = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            moved = op_bytes(func, args, kwargs, out)
            if moved is None:
                return out
            read, written = moved
            name = func.overloadpacket.__name__
            self.read_bytes += read
            self.written_bytes += written
            self.by_op[name] = self.by_op.get(name, 0) + read + written
            return out

    return ByteCounter


@dataclass
class StepCounts:
    """Counts for one training step at `batch_size` (all raw units)."""

    batch_size: int
    train_flops: float
    modeled_bytes: float
    flops_by_op: dict[str, float] = field(default_factory=dict)
    bytes_by_op: dict[str, float] = field(default_factory=dict)

    @property
    def modeled_intensity_flops_per_byte(self) -> float:
        return self.train_flops / self.modeled_bytes if self.modeled_bytes else float("nan")


def count_step(run_step, batch_size: int) -> StepCounts:
    """Count FLOPs and modeled bytes of one call of `run_step()` (a full training step)."""
    counter_cls = _byte_counter_class()
    with flop_counter_mode() as fc, counter_cls() as bc:
        run_step()
    flops_by_op = {
        str(k).split(".")[-1]: float(v) for k, v in fc.get_flop_counts().get("Global", {}).items()
    }
    return StepCounts(
        batch_size=batch_size,
        train_flops=float(fc.get_total_flops()),
        modeled_bytes=float(bc.read_bytes + bc.written_bytes),
        flops_by_op=flops_by_op,
        bytes_by_op={k: float(v) for k, v in bc.by_op.items()},
    )


def extrapolate(a: StepCounts, b: StepCounts, batch_size: int) -> StepCounts:
    """The line through two counts, evaluated at `batch_size` (exact for batch-affine counts)."""
    if a.batch_size == b.batch_size:
        raise ValueError("need two different batch sizes to extrapolate")

    def line(va: float, vb: float) -> float:
        slope = (vb - va) / (b.batch_size - a.batch_size)
        return va + slope * (batch_size - a.batch_size)

    keys = lambda da, db: set(da) | set(db)  # noqa: E731
    return StepCounts(
        batch_size=batch_size,
        train_flops=line(a.train_flops, b.train_flops),
        modeled_bytes=line(a.modeled_bytes, b.modeled_bytes),
        flops_by_op={
            k: line(a.flops_by_op.get(k, 0.0), b.flops_by_op.get(k, 0.0))
            for k in keys(a.flops_by_op, b.flops_by_op)
        },
        bytes_by_op={
            k: line(a.bytes_by_op.get(k, 0.0), b.bytes_by_op.get(k, 0.0))
            for k in keys(a.bytes_by_op, b.bytes_by_op)
        },
    )


# ------------------------------------------------------------------ DeepSpeed forward profile
@dataclass
class ForwardProfile:
    """DeepSpeed FlopsProfiler results for one forward pass of `batch_size` samples."""

    batch_size: int
    flops: float
    macs: float
    params: int
    report: str  # DeepSpeed's per-layer table

    @property
    def flops_per_sample(self) -> float:
        return self.flops / self.batch_size

    @property
    def macs_per_sample(self) -> float:
        return self.macs / self.batch_size


def deepspeed_accelerator(device) -> str:
    """DeepSpeed's accelerator name (DS_ACCELERATOR) for a torch device: cuda, mps or cpu."""
    return device.type if device.type in ("cuda", "mps") else "cpu"


def deepspeed_forward_profile(model, inputs) -> ForwardProfile:
    """Profile one training-mode forward pass (no autograd graph) with DeepSpeed's FlopsProfiler.

    DS_ACCELERATOR is set from the device of `inputs` before DeepSpeed is loaded (it picks its
    accelerator once per process, and synchronises through it around every module to time it; a
    CPU accelerator on a GPU would time kernel launches). The report (`ForwardProfile.report`)
    starts with what was profiled: the batch and the device. The model is left in training mode
    afterwards, as it was.
    """
    wanted = deepspeed_accelerator(inputs.device)
    os.environ["DS_ACCELERATOR"] = wanted
    import torch
    from deepspeed.accelerator import get_accelerator
    from deepspeed.profiling.flops_profiler import FlopsProfiler

    in_use = get_accelerator().device_name()
    was_training = model.training
    model.train()
    prof = FlopsProfiler(model)
    try:
        prof.start_profile()
        with torch.no_grad():
            model(inputs)
        flops, macs, params = prof.get_total_flops(), prof.get_total_macs(), prof.get_total_params()
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            prof.print_model_profile(profile_step=1, module_depth=-1, top_modules=3, detailed=True)
        prof.stop_profile()
    finally:
        prof.end_profile()
        model.train(was_training)
    header = profile_header(tuple(inputs.shape), str(inputs.device), wanted, in_use)
    report = model_params_line(in_device_words(buf.getvalue(), inputs.device.type), int(params))
    return ForwardProfile(
        int(inputs.shape[0]), float(flops), float(macs), int(params), header + report
    )


def profile_header(shape: tuple, device: str, wanted: str, in_use: str) -> str:
    """What DeepSpeed's report below profiled: which batch, on which device."""
    n = shape[0]
    lines = [
        f"What was profiled: one training-mode forward pass (no autograd) of a batch of {n} "
        f"sample(s), input {'x'.join(map(str, shape))}, on {device}. Every count and latency below "
        f"is for that batch of {n} (fwd_flops_per_sample = fwd flops / {n}), which may differ from "
        "the benchmark's batch size; latencies are of this one untimed pass, not the timed steps.",
        f"DeepSpeed accelerator: {in_use}.",
    ]
    if in_use != wanted:
        lines[-1] = (
            f"DeepSpeed accelerator: {in_use}, chosen when DeepSpeed was first loaded in this "
            f"process, not {wanted}: the latencies below are not synchronised with {device}."
        )
    # wrapped: MLflow's text viewer does not wrap lines
    return "\n".join(textwrap.fill(line, 100) for line in lines) + "\n"


def model_params_line(report: str, params: int) -> str:
    """DeepSpeed's 'params of model = params per GPU * mp_size' line reads 0 outside its engine
    (no model-parallel size is known): give the count it printed a line above instead, saying so."""
    out = []
    for line in report.splitlines():
        if line.startswith("params of model = ") and line.split(":")[-1].strip() == "0":
            line = f"params of model: {params:,} (DeepSpeed prints 0 here outside its engine)"
        out.append(line)
    return "\n".join(out) + ("\n" if report.endswith("\n") else "")


def in_device_words(report: str, device_type: str) -> str:
    """DeepSpeed writes "per GPU" whatever the device: say "per CPU" on a CPU."""
    return report if device_type in ("cuda", "mps") else report.replace(" per GPU", " per CPU")
