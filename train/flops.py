"""FLOP and byte counting, outside the timed region.

* Forward FLOPs, MACs and parameters per sample: DeepSpeed's FlopsProfiler (module hooks plus
  patched torch.nn.functional; it counts convolutions and matmuls as 2 x MACs and adds
  elementwise work such as batch norm, ReLU and pooling). It does not see backward.
* Training FLOPs per step: dispatch-level counting of forward + loss + backward + optimizer
  (`counting_mode`) with torch.utils.flop_counter's formulas, which count matmuls, convolutions
  and attention (2 FLOPs per multiply-add) and nothing elementwise. torch 2.14.1's formula for
  `aten.convolution_backward` ignores `groups` in the weight-gradient term; we register a
  corrected one (see `conv_backward_flop`). It has none for the CPU's and MPS's attention
  kernels and counts the recomputed scores in the CUDA ones' backward; we register formulas for
  all of them by one convention (the attention section). Every op that ran goes into the step's
  coverage ledger (train/ledger.py), which names any op that had no formula.
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

from train.ledger import COUNTED, Ledger, OpLine, op_kind, op_name
from train.ledger import extrapolate as extrapolate_ledger


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


# ------------------------------------------------------------------ attention
# The convention (docs/schema.md, "Definitions"): attention is counted as its math path computes
# it, whichever kernel runs. Forward: the scores Q K^T and the output P V, 2 FLOPs per
# multiply-add (torch's sdpa_flop_count). Backward: the four matmuls of the gradients of Q, K, V
# and P (2 x forward), without the scores a flash or memory-efficient kernel recomputes (torch's
# own formulas for the CUDA kernels add that recomputation, 5/4 of ours): so one configuration
# counts the same on a CPU, a GPU, MPS and the meta device (where attention takes the math path).
ATTENTION_FORWARD_OPS = (
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_attention_math_for_mps",
)
"""attention kernels whose forward torch 2.14.1's FlopCounterMode does not know"""
ATTENTION_BACKWARD_OPS = (
    "_scaled_dot_product_flash_attention_for_cpu_backward",
    "_scaled_dot_product_flash_attention_backward",
    "_scaled_dot_product_efficient_attention_backward",
    "_scaled_dot_product_cudnn_attention_backward",
    "_scaled_dot_product_fused_attention_overrideable_backward",
)
"""backward kernels taking (grad_out, query, key, value, ...): counted 2 x their forward"""
ATTENTION_FORWARD_LIKE = ("_scaled_dot_product_fused_attention_overrideable",)
"""forward kernels taking (query, key, value, ...) that torch may not know"""


def attention_flop(query_shape, key_shape, value_shape, *_args, **_kw) -> int:
    """Forward FLOPs of one attention call: Q K^T and P V (torch's sdpa_flop_count)."""
    from torch.utils.flop_counter import sdpa_flop_count

    return sdpa_flop_count(query_shape, key_shape, value_shape)


def attention_backward_flop(_grad_out_shape, query_shape, key_shape, value_shape, *_a, **_kw):
    """Backward FLOPs of one attention call by the convention above: 2 x its forward."""
    return 2 * attention_flop(query_shape, key_shape, value_shape)


def _raw_backward(forward_packet, with_bias: bool):
    """A raw (tensor-taking) backward formula for a varlen-capable kernel: 2 x torch's own raw
    forward formula of the same query, key, value (bias) and sequence arguments. The backward
    kernels take (grad_out, query, key, value, [bias,] out, [logsumexp,] cum_seq_q, cum_seq_k,
    max_q, max_k, ...); the forward ones (query, key, value, [bias,] cum_seq_q, cum_seq_k, max_q,
    max_k, ...)."""

    def formula(_grad_out, query, key, value, *rest, out_val=None, **_kw):
        from torch.utils.flop_counter import flop_registry

        before = (rest[0],) if with_bias else ()
        return 2 * flop_registry[forward_packet](query, key, value, *before, *rest[2:6])

    formula._get_raw = True
    return formula


def flop_formulas() -> dict:
    """The formulas the project adds to or changes in torch's FlopCounterMode registry: the
    grouped convolution_backward (unless torch has fixed it) and attention by the convention."""
    import torch

    aten = torch.ops.aten
    custom = {}
    if not torch_conv_backward_counts_groups():
        custom[aten.convolution_backward] = conv_backward_flop
    for name in ATTENTION_FORWARD_OPS + ATTENTION_FORWARD_LIKE:
        if hasattr(aten, name):
            custom[getattr(aten, name)] = attention_flop
    for name in ATTENTION_BACKWARD_OPS:
        if hasattr(aten, name):
            custom[getattr(aten, name)] = attention_backward_flop
    custom[aten._flash_attention_backward] = _raw_backward(aten._flash_attention_forward, False)
    custom[aten._efficient_attention_backward] = _raw_backward(
        aten._efficient_attention_forward, True
    )
    return custom


def flop_registry() -> dict:
    """Every FLOP formula the project counts with: torch's registry with flop_formulas() applied
    (keys: aten op overload packets; formulas called as formula(*args, **kwargs, out_val=out))."""
    return flop_counter_mode().flop_registry


def flop_counter_mode():
    """FlopCounterMode with the project's formulas (flop_formulas)."""
    from torch.utils.flop_counter import FlopCounterMode

    return FlopCounterMode(display=False, custom_mapping=flop_formulas())


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


# ------------------------------------------------------------------ the counting mode
# aten queries FlopCounterMode leaves to the default handling (they return sizes, not tensors)
_QUERIES = (
    "sym_is_contiguous",
    "is_contiguous",
    "is_strides_like_format",
    "is_non_overlapping_and_dense",
    "size",
    "sym_size",
    "stride",
    "sym_stride",
    "storage_offset",
    "sym_storage_offset",
    "numel",
    "sym_numel",
    "dim",
)


def counting_mode(registry=None, count_bytes: bool = True):
    """A `CountingMode` (a TorchDispatchMode): with it open, every aten op is run and entered in
    its `ledger` (train/ledger.py); FLOPs by `registry` (default: flop_registry()), bytes by the
    byte model unless `count_bytes` is False (the meta device's phase counts need none)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    registry = flop_registry() if registry is None else registry
    queries = {getattr(torch.ops.aten, q).default for q in _QUERIES}
    queries.add(torch.ops.prim.layout.default)

    class CountingMode(TorchDispatchMode):
        """Counts FLOPs, bytes and calls per aten op into `self.ledger`."""

        def __init__(self):
            super().__init__()
            self.ledger = Ledger()
            self._kinds: dict = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func in queries or isinstance(func, torch._ops.HigherOrderOperator):
                return NotImplemented
            out = func(*args, **kwargs)
            kind = self._kinds.get(func)
            if kind is None:
                kind = self._kinds[func] = op_kind(func, registry)
            name = op_name(func)
            line = self.ledger.ops.get(name)
            if line is None:
                line = self.ledger.ops[name] = OpLine(kind)
            line.calls += 1
            if kind == COUNTED:
                line.flops += float(registry[func.overloadpacket](*args, **kwargs, out_val=out))
            if count_bytes:
                moved = op_bytes(func, args, kwargs, out)
                if moved is not None:
                    line.bytes += float(sum(moved))
            return out

    return CountingMode()


@dataclass
class StepCounts:
    """Counts for one training step at `batch_size` (all raw units), with its coverage ledger."""

    batch_size: int
    train_flops: float
    modeled_bytes: float
    ledger: Ledger = field(default_factory=Ledger)
    """every aten op that ran: calls, kind, FLOPs, bytes (train/ledger.py)"""

    @property
    def modeled_intensity_flops_per_byte(self) -> float:
        return self.train_flops / self.modeled_bytes if self.modeled_bytes else float("nan")

    @property
    def flops_by_op(self) -> dict[str, float]:
        return {n: line.flops for n, line in self.ledger.ops.items() if line.kind == COUNTED}


def count_step(run_step, batch_size: int) -> StepCounts:
    """Count FLOPs and modeled bytes of one call of `run_step()` (a full training step), op by
    op (counting_mode)."""
    with counting_mode() as mode:
        run_step()
    ledger = mode.ledger
    return StepCounts(batch_size, ledger.flops, ledger.bytes, ledger)


def extrapolate(a: StepCounts, b: StepCounts, batch_size: int) -> StepCounts:
    """The line through two counts, evaluated at `batch_size` (exact for batch-affine counts)."""
    if a.batch_size == b.batch_size:
        raise ValueError("need two different batch sizes to extrapolate")
    ledger = extrapolate_ledger(a.ledger, b.ledger, batch_size, a.batch_size, b.batch_size)
    return StepCounts(batch_size, ledger.flops, ledger.bytes, ledger)


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
