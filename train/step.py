"""The ONE training step, shared by the timing benchmark and the NVTX profile mode."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, ContextManager

PHASES = ("train_step", "forward", "backward", "optimizer")


def no_marks(_name: str) -> ContextManager:
    return contextlib.nullcontext()


@contextlib.contextmanager
def nvtx_range(name: str):
    """A process-wide NVTX start/end range.

    Push/pop ranges are per thread: autograd launches backward kernels from its own thread, so
    `ncu --nvtx-include "train_step/"` with push/pop ranges silently drops them. Start/end ranges
    are process-wide and cover every thread's launches between start and end.
    """
    import nvtx

    rng = nvtx.start_range(message=name)
    try:
        yield
    finally:
        nvtx.end_range(rng)


@dataclass
class StepParts:
    """What a step needs besides the batch. `autocast` is a zero-argument context factory.

    `grad_sync` is a zero-argument context factory held open around forward and backward: a
    nullcontext normally, a data-parallel engine's `no_sync` when a distributed run times its steps
    without gradient synchronisation (train/distributed). How gradients are cleared, propagated and
    applied are methods, so an engine that does those itself (DeepSpeed: train/distributed/engines.py)
    overrides them and the step stays this one function.
    """

    model: object
    optimizer: object
    autocast: Callable[[], ContextManager]
    scaler: object | None = None
    mark: Callable[[str], ContextManager] = no_marks
    grad_sync: Callable[[], ContextManager] = contextlib.nullcontext

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def backward(self, loss) -> None:
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def update(self) -> None:
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()


def logits_of(output):
    """Main logits of a classifier output (googlenet/inception return named tuples in train mode)."""
    return getattr(output, "logits", output)


AUX_LOSS_WEIGHTS = {"aux_logits1": 0.3, "aux_logits2": 0.3, "aux_logits": 0.4}
"""The weight of each auxiliary head's loss in torchvision's training recipe
(references/classification/train.py): GoogLeNet 0.3 for each of its two heads, Inception-v3 0.4
for its one."""


def aux_heads(output) -> dict[str, float]:
    """{head: weight} of the auxiliary heads a classifier output carries (empty for most)."""
    return {k: w for k, w in AUX_LOSS_WEIGHTS.items() if getattr(output, k, None) is not None}


def classifier_loss(output, targets):
    """Cross-entropy of the main logits, plus each auxiliary head's cross-entropy times its
    recipe weight (AUX_LOSS_WEIGHTS): the models' standard objective, so their auxiliary heads
    are trained (forward and backward) as in real training."""
    import torch.nn.functional as F

    loss = F.cross_entropy(logits_of(output), targets)
    for head, weight in aux_heads(output).items():
        loss = loss + weight * F.cross_entropy(getattr(output, head), targets)
    return loss


def train_step(parts: StepParts, inputs, targets):
    """Clear gradients, forward and loss (under autocast), backward, optimizer step. Returns the
    loss (not synchronised)."""
    mark = parts.mark
    with mark("train_step"):
        parts.zero_grad()
        with parts.grad_sync():
            with mark("forward"):
                with parts.autocast():
                    loss = classifier_loss(parts.model(inputs), targets)
            with mark("backward"):
                parts.backward(loss)
        with mark("optimizer"):
            parts.update()
    return loss.detach()


def make_optimizer(name: str, params, lr: float):
    import torch

    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)  # no weight decay (torch's default 0)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr)
    raise ValueError(f"optimizer must be sgd, adam or adamw, got {name!r}")
