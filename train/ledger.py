"""The FLOP coverage ledger of a counted step: every aten op that ran, how often, whether a FLOP
formula counted it, its FLOPs and its modeled bytes.

A FLOP counter that meets an op it has no formula for counts it as 0 and says nothing (torch
2.14.1's FlopCounterMode on the CPU's attention kernels; DeepSpeed's profiler on ops it does not
patch). The ledger gives each op that ran one of four kinds:

* `counted`: a FLOP formula counted it (train.flops.flop_registry: matmuls, convolutions,
  attention);
* `elementwise`: arithmetic linear in its data (pointwise ops, reductions, norms, pooling,
  softmax, losses, the optimizer's updates), which the convention counts as 0 FLOPs
  (docs/schema.md, "Definitions");
* `no arithmetic`: views, copies, allocation, indexing, random numbers;
* `no formula`: everything else. These may do real arithmetic the count leaves out (an attention
  kernel with no formula, a fused or custom op, anything a later torch adds): the run names
  them, says its FLOPs are incomplete (tag `flops_coverage`) and logs their share of the step's
  modeled bytes; analysis makes a finding of it when that share matters.

An op is `no formula` unless it is known to be one of the other kinds: an op the lists below do
not name is reported, never assumed harmless. `tests/test_models.py` runs every torchvision
classifier and timm models of five families and finds no `no formula` op in any of them.

The ledger is filled by train.flops.counting_mode, the one dispatch mode that counts a step:
FLOPs by the registry, the byte model and calls per op, in one pass.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from common import schema

COUNTED = "counted"
ELEMENTWISE = "elementwise"
NO_ARITHMETIC = "no arithmetic"
NO_FORMULA = "no formula"
KINDS = (COUNTED, ELEMENTWISE, NO_ARITHMETIC, NO_FORMULA)

_NO_ARITHMETIC = re.compile(
    r"(_?to_copy|copy_?|clone|contiguous|cat|stack|split(_with_sizes)?(_copy)?|unbind|chunk"
    r"|constant_pad_nd|reflection_pad\dd(_backward)?|replication_pad\dd(_backward)?"
    r"|index(_select)?(_backward)?|index_put_?|_index_put_impl_|gather|scatter_?|take"
    r"|masked_select|embedding|slice_scatter|select_scatter|diagonal_scatter|as_strided_scatter"
    r"|(select|slice|unfold|diagonal)_backward|_unsafe_view|repeat(_interleave)?|flip|roll"
    r"|(new_)?(empty|zeros|ones|full)(_like|_strided)?|fill_?|zero_|scalar_tensor|arange"
    r"|linspace|eye|tril_?|triu_?|lift_fresh(_copy)?|detach_?|alias|resize_|set_"
    r"|_local_scalar_dense|item|(normal|uniform|bernoulli|random|exponential)_?|randn?(_like)?"
    r"|randperm|randint(_like)?|native_dropout(_backward)?|pixel_(un)?shuffle|channel_shuffle"
    r"|native_channel_shuffle|col2im|im2col|_reshape_alias|view_copy|expand_copy|permute_copy"
    r"|t_copy|transpose_copy|squeeze_copy|unsqueeze_copy|masked_fill_?|where|nonzero|sort|topk"
    r"|argsort|_unique2?|unique_dim|max_unpool\dd|_pin_memory|record_stream|_assert_\w+"
    r"|sym_\w+|is_same_size|_has_compatible_shallow_copy_type|equal|_foreach_copy_|_foreach_zero_"
    r"|_conj|_neg_view|resolve_(conj|neg)|as_strided_|_record_function_enter(_new)?"
    r"|_record_function_exit)"
)
"""ops that move, make or select data but do no arithmetic on it"""

_ELEMENTWISE = re.compile(
    r"(sum|mean|prod|amax|amin|max|min|aminmax|argmax|argmin|var|std|var_mean|std_mean|norm"
    r"|linalg_vector_norm|_?cumsum|cumprod|logsumexp|all|any|count_nonzero"
    r"|native_(batch|layer|group)_norm(_backward)?|_native_batch_norm_legit(_functional"
    r"|_no_training)?|native_batch_norm_backward|_batch_norm_with_update(_functional)?"
    r"|batch_norm_backward|_batch_norm_no_update|cudnn_batch_norm(_backward)?"
    r"|miopen_batch_norm(_backward)?|_fused_rms_norm(_backward)?|_fused_layer_norm\w*"
    r"|_?(log_)?softmax(_backward_data)?|_softmax_backward_data|_log_softmax_backward_data"
    r"|nll_loss(2d)?(_forward|_backward)?|cross_entropy_loss|mse_loss(_backward)?"
    r"|binary_cross_entropy(_with_logits)?(_backward)?|smooth_l1_loss(_backward)?"
    r"|huber_loss(_backward)?|kl_div|l1_loss"
    r"|(max|avg|lp)_pool\dd(_with_indices)?(_backward)?|_?adaptive_(max|avg)_pool\dd(_backward)?"
    r"|fractional_max_pool\dd(_backward)?|upsample_\w+|_upsample_\w+|grid_sampler\w*"
    r"|_foreach_\w+|_fused_(sgd|adam|adamw)_?|_amp_\w+|addcmul_?|addcdiv_?|lerp_?|clamp\w*"
    r"|(gelu|silu|hardswish|hardsigmoid|threshold|sigmoid|tanh|leaky_relu|elu|softplus|mish"
    r"|hardtanh|glu|log_sigmoid|_prelu_kernel|rrelu_with_noise)_backward|threshold"
    r"|embedding_dense_backward|_embedding_bag\w*|_safe_softmax"
    r"|_weight_norm_interface(_backward)?|renorm_?|hardtanh_?|leaky_relu_?|elu_?|rrelu\w*"
    r"|glu|_prelu_kernel|prelu|softplus|mish_?|silu_?|gelu_?|hardswish_?|hardsigmoid_?"
    r"|relu6?_?|sigmoid_?|tanh_?|stochastic_depth)"
)
"""ops whose arithmetic is linear in their data: counted 0 FLOPs by the convention (each backward
named is that of an elementwise op; an op with a FLOP formula is `counted` before these apply)"""


def op_kind(func, registry) -> str:
    """The ledger kind of aten op `func` (an OpOverload) given the FLOP `registry`."""
    import torch

    packet = func.overloadpacket
    if packet in registry:
        return COUNTED
    name = packet.__name__
    if func.is_view or _NO_ARITHMETIC.fullmatch(name):
        return NO_ARITHMETIC
    if torch.Tag.pointwise in func.tags or _ELEMENTWISE.fullmatch(name):
        return ELEMENTWISE
    return NO_FORMULA


def op_name(func) -> str:
    """An op's ledger name: `convolution` for aten ops, `namespace.name` for others."""
    name = func.overloadpacket.__name__
    return name if func.namespace == "aten" else f"{func.namespace}.{name}"


def qualified(name: str) -> str:
    """`aten.convolution` for the ledger's `convolution`; other namespaces as they are."""
    return name if "." in name else f"aten.{name}"


@dataclass
class OpLine:
    """One aten op's line in the ledger, summed over its calls in the step."""

    kind: str
    calls: float = 0.0
    flops: float = 0.0
    bytes: float = 0.0


@dataclass
class Ledger:
    """The ledger of one counted step: aten op name -> OpLine."""

    ops: dict[str, OpLine] = field(default_factory=dict)

    @property
    def flops(self) -> float:
        return sum(line.flops for line in self.ops.values())

    @property
    def bytes(self) -> float:
        return sum(line.bytes for line in self.ops.values())

    def uncounted(self) -> list[str]:
        """The `no formula` ops that ran, most modeled bytes first."""
        lines = [(n, line) for n, line in self.ops.items() if line.kind == NO_FORMULA]
        return [n for n, _ in sorted(lines, key=lambda item: (-item[1].bytes, item[0]))]

    @property
    def complete(self) -> bool:
        """Whether every op that ran has a formula or is known to need none."""
        return not self.uncounted()

    def uncounted_bytes_share(self) -> float:
        """The `no formula` ops' share of the step's modeled bytes (0 when complete)."""
        total = self.bytes
        part = sum(self.ops[n].bytes for n in self.uncounted())
        return part / total if total > 0 else 0.0

    def describe_uncounted(self, limit: int = 4) -> str:
        """'aten._x (24 calls, 1.2 % of the modeled bytes), ...' of the `no formula` ops."""
        total = self.bytes or 1.0
        names = self.uncounted()
        words = [
            f"{qualified(n)} ({self.ops[n].calls:.0f} calls, {self.ops[n].bytes / total:.1%} of the "
            "modeled bytes)"
            for n in names[:limit]
        ]
        if len(names) > limit:
            words.append(f"{len(names) - limit} more")
        return ", ".join(words)

    def tags(self) -> dict[str, str]:
        """A train run's coverage tags: `flops_coverage` (complete | incomplete) and, when
        incomplete, `flops_uncounted_ops` (the `no formula` ops, comma-separated)."""
        if self.complete:
            return {schema.TAG_FLOPS_COVERAGE: "complete"}
        return {
            schema.TAG_FLOPS_COVERAGE: "incomplete",
            schema.TAG_FLOPS_UNCOUNTED: ",".join(qualified(n) for n in self.uncounted()),
        }

    def metrics(self) -> dict[str, float]:
        """`flops_uncounted_bytes_share`: the `no formula` ops' share of the modeled bytes."""
        return {schema.METRIC_UNCOUNTED_BYTES_SHARE: self.uncounted_bytes_share()}

    def csv(self) -> str:
        """flops/counts_by_op.csv: one row per op that ran, most modeled bytes first."""
        rows = ["aten_op,calls,flop_formula,train_flops_per_step,modeled_bytes_per_step"]
        order = sorted(self.ops.items(), key=lambda item: (-item[1].bytes, item[0]))
        for name, line in order:
            rows.append(f"{name},{line.calls:.0f},{line.kind},{line.flops:.0f},{line.bytes:.0f}")
        return "\n".join(rows) + "\n"


def extrapolate(a: Ledger, b: Ledger, at: float, batch_a: int, batch_b: int) -> Ledger:
    """The line through two ledgers (at batches batch_a, batch_b) per op, evaluated at batch `at`
    (exact: every op's FLOPs and bytes are affine in the batch; calls do not change)."""

    def line(va: float, vb: float) -> float:
        return va + (vb - va) * (at - batch_a) / (batch_b - batch_a)

    out = Ledger()
    for name in set(a.ops) | set(b.ops):
        la, lb = a.ops.get(name), b.ops.get(name)
        kind = (lb or la).kind
        la, lb = la or OpLine(kind), lb or OpLine(kind)
        out.ops[name] = OpLine(
            kind, max(la.calls, lb.calls), line(la.flops, lb.flops), line(la.bytes, lb.bytes)
        )
    return out
