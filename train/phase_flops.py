"""A config's training FLOPs per phase (forward, backward, optimizer), counted from shapes alone.

The count `python -m profiling` holds a captured profile against (profiling.ncu.completeness): one
training step of the config's model, batch, image size, classes and optimizer, run through
train.step.train_step (the step the benchmark and profile mode run) on PyTorch's meta device (no
data, no arithmetic: shapes only, so any model and batch counts in about a second), with the
train run's counter (train.flops.counting_mode: torch's formulas with the project's grouped
convolution and attention ones), one counter per phase through the step's phase marks. It counts
matmuls, convolutions and attention (2 FLOPs per multiply-add) and nothing elementwise, so the
optimizer's count is 0. Attention takes the math path on the meta device and a fused kernel on a
CPU or GPU; the attention formulas count both the same (docs/schema.md, "Definitions"), so the
counts equal those of the same step on the CPU (tests/test_flops.py, for a CNN and a ViT).
Precision and memory format do not change them (autocast changes the dtype, not the shapes);
fp32 is counted. A model whose constructor cannot run on the meta device (RegNet's) is built with
train.models.build_on_meta's fallback.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from train.flops import counting_mode
from train.models import build_on_meta, build_model
from train.step import StepParts, make_optimizer, train_step


@dataclass(frozen=True)
class PhaseFlops:
    """FLOPs of one training step, per phase (raw counts, 2 per multiply-add)."""

    forward: float
    """forward pass and loss."""
    backward: float
    """autograd's backward pass."""
    optimizer: float
    """the optimizer step (0: FlopCounterMode counts no elementwise work)."""
    uncounted: tuple[str, ...] = ()
    """ops that ran with no FLOP formula (train/ledger.py): the count leaves them out."""

    @property
    def total(self) -> float:
        return self.forward + self.backward + self.optimizer

    def phase(self, name: str) -> float:
        return {"forward": self.forward, "backward": self.backward, "optimizer": self.optimizer}[
            name
        ]


def count_phase_flops(model, inputs, targets, optimizer) -> PhaseFlops:
    """FLOPs per phase of one train_step of `model` on (`inputs`, `targets`) with `optimizer`."""
    counts = {"forward": 0.0, "backward": 0.0, "optimizer": 0.0}
    uncounted: dict[str, None] = {}

    @contextlib.contextmanager
    def mark(name: str):
        if name not in counts:  # "train_step" encloses the phases
            yield
            return
        with counting_mode(count_bytes=False) as counter:
            yield
        counts[name] += counter.ledger.flops
        uncounted.update(dict.fromkeys(counter.ledger.uncounted()))

    train_step(StepParts(model, optimizer, contextlib.nullcontext, mark=mark), inputs, targets)
    return PhaseFlops(**counts, uncounted=tuple(uncounted))


def config_phase_flops(
    model_name: str,
    batch_size: int,
    image_size: int,
    num_classes: int,
    optimizer: str = "sgd",
    device: str = "meta",
) -> PhaseFlops:
    """FLOPs per phase of one training step of this configuration, counted on `device` (meta:
    shapes only; "cpu" runs the real step, for checking)."""
    import torch

    torch.manual_seed(0)
    if device == "meta":
        model, _how = build_on_meta(model_name, num_classes, image_size)
    else:
        with torch.device(device):
            model = build_model(model_name, num_classes, image_size)
    model.train()
    with torch.device(device):
        inputs = torch.randn(batch_size, 3, image_size, image_size)
        targets = torch.randint(0, num_classes, (batch_size,))
    opt = make_optimizer(optimizer, model.parameters(), 0.01)
    return count_phase_flops(model, inputs, targets, opt)
