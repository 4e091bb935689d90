"""An independent count of a training step's FLOPs, from the forward pass alone.

The project's count (train/ledger.py) applies torch's FLOP formulas, with its own for grouped
convolution backward and attention, to every op of forward and backward. This one never looks at
backward: in the forward pass it counts each contraction by a formula written here (a
convolution: 2 x output elements x input channels per group x kernel elements; a matrix product:
2 x m x k x n), and charges it once more for each of its two operands that needs a gradient,
since autograd's backward of a contraction is one contraction of the same size per operand
gradient. So for a CNN, training = 3 x forward - the first convolution's input gradient (the
images need none), and a ViT's attention counts as its math path computes it (Q K^T and P V and
their four gradient products), whichever kernel the step ran. Any other op with real arithmetic
in forward (an attention kernel, a fused op) is listed in `unknown` rather than guessed.
"""

from __future__ import annotations

from math import prod

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten


def _needs_grad(t) -> int:
    return int(isinstance(t, torch.Tensor) and t.requires_grad)


def _conv(args, out) -> tuple[int, tuple]:
    x, w = args[0], args[1]
    transposed = bool(args[6]) if len(args) > 6 else False
    per_elem = w.shape[1] * prod(w.shape[2:])
    macs = (x.numel() if transposed else out.numel()) * per_elem
    return 2 * macs, (x, w)


def _mm(a, b) -> int:
    return 2 * a.shape[0] * a.shape[1] * b.shape[1]


def _bmm(a, b) -> int:
    return 2 * a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2]


CONTRACTIONS = {
    aten.convolution: _conv,
    aten.mm: lambda args, out: (_mm(args[0], args[1]), (args[0], args[1])),
    aten.addmm: lambda args, out: (_mm(args[1], args[2]), (args[1], args[2])),
    aten.bmm: lambda args, out: (_bmm(args[0], args[1]), (args[0], args[1])),
    aten.baddbmm: lambda args, out: (_bmm(args[1], args[2]), (args[1], args[2])),
}
KNOWN_ATTENTION = {
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
}


class HandCount(TorchDispatchMode):
    """Open around a forward pass: `forward_flops` and `training_flops` (forward x (1 + operands
    needing a gradient), per contraction) of the step it belongs to."""

    def __init__(self):
        super().__init__()
        self.forward_flops = 0
        self.training_flops = 0
        self.unknown: set[str] = set()
        self.kinds: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        rule = CONTRACTIONS.get(func.overloadpacket)
        if rule is not None:
            flops, operands = rule(args, out)
            self.kinds.add(func.overloadpacket.__name__)
            self.forward_flops += flops
            self.training_flops += flops * (1 + sum(_needs_grad(t) for t in operands))
        elif func.overloadpacket.__name__ in KNOWN_ATTENTION:
            self.unknown.add(func.overloadpacket.__name__)
        return out


# ------------------------------------------------------------------ one model, both counts
def check_model(
    spec: str, size: int, batch: int = 2, num_classes: int = 1000, device: str = "meta"
) -> dict:
    """One training step of `spec` at `size` px on `device`, counted at once by the project's
    count (train.phase_flops.count_phase_flops: the train run's counter, on the meta device
    profiling's too) and by HandCount around the model's forward. "meta" allocates nothing; "cpu"
    runs the real step, faster for small models with many batch norms (the meta device's are
    Python). Returns plain data (a spawned worker's answer)."""
    from train.models import build_model, build_on_meta
    from train.phase_flops import count_phase_flops
    from train.step import aux_heads, make_optimizer

    torch.set_num_threads(1)
    if device == "meta":
        model, how = build_on_meta(spec, num_classes, size)
    else:
        model, how = build_model(spec, num_classes, size).to(device), device
    model.train()
    hand, heads = HandCount(), {}
    forward = model.forward

    def counted_forward(*args, **kwargs):
        with hand:
            out = forward(*args, **kwargs)
        heads.update(aux_heads(out))
        return out

    model.forward = counted_forward
    with torch.device(device):
        x = torch.randn(batch, 3, size, size)
        y = torch.randint(0, num_classes, (batch,))
    counted = count_phase_flops(model, x, y, make_optimizer("sgd", model.parameters(), 0.01))
    return {
        "spec": spec,
        "size": size,
        "built": how,
        "params": sum(p.numel() for p in model.parameters()),
        "forward": counted.forward,
        "backward": counted.backward,
        "optimizer": counted.optimizer,
        "total": counted.total,
        "uncounted": list(counted.uncounted),
        "hand_forward": hand.forward_flops,
        "hand_total": hand.training_flops,
        "hand_unknown": sorted(hand.unknown),
        "contractions": sorted(hand.kinds),
        "aux_heads": heads,
    }


def trains_at(spec: str, size: int, batch: int = 2) -> bool:
    """Whether one forward and backward of `spec` at `size` px runs on the meta device."""
    from train.models import build_on_meta
    from train.step import classifier_loss

    try:
        model, _ = build_on_meta(spec, 10, size)
        model.train()
        with torch.device("meta"):
            x, y = torch.randn(batch, 3, size, size), torch.randint(0, 10, (batch,))
        classifier_loss(model(x), y).backward()
    except Exception:  # noqa: BLE001 - any failure is "does not train at this size"
        return False
    return True


# ------------------------------------------------------------------ a second count: fvcore
FVCORE_CONTRACTIONS = ("conv", "linear", "matmul", "bmm", "einsum", "addmm")
"""fvcore's operator names for the contractions; the rest it counts (batch_norm, layer_norm,
pooling: flops of its own) are elementwise, 0 by the project's convention"""


def fvcore_forward(spec: str, size: int, batch: int = 2) -> tuple[int, list[str]]:
    """fvcore's count of one forward pass of `spec` at `size` px (FlopCountAnalysis traces the
    model with torch.jit.trace): 2 x its contractions, since fvcore counts one flop per fused
    multiply-add. Returns (FLOPs, the ops it saw but does not count, e.g. attention)."""
    import warnings

    from fvcore.nn import FlopCountAnalysis

    from train.models import build_model

    model = build_model(spec, 1000, size).train()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit's deprecation, fvcore's "unsupported op"
        counted = FlopCountAnalysis(model, torch.randn(batch, 3, size, size))
        counted.unsupported_ops_warnings(False)
        counted.uncalled_modules_warnings(False)
        by_op = counted.by_operator()
        skipped = sorted(counted.unsupported_ops())
    return 2 * sum(by_op.get(op, 0) for op in FVCORE_CONTRACTIONS), skipped


def attention_flops(batch: int, tokens: int, dim: int, layers: int) -> int:
    """Forward FLOPs of a transformer's attention matmuls (Q K^T and P V) as the math path
    computes them: 2 products of tokens x tokens x dim (over the heads) per layer, 2 per
    multiply-add."""
    return 2 * 2 * batch * tokens * tokens * dim * layers
