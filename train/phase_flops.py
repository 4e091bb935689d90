"""A config's training FLOPs per phase (forward, backward, optimizer), counted from shapes alone.

The count `python -m profiling` holds a captured profile against (profiling.ncu.completeness): one
training step of the config's model, batch, image size, classes and optimizer, run through
train.step.train_step (the step the benchmark and profile mode run) on PyTorch's meta device (no
data, no arithmetic: shapes only, so any model and batch counts in about a second), under
FlopCounterMode with the corrected grouped-convolution formula (train.flops.flop_counter_mode), one
counter per phase through the step's phase marks. FlopCounterMode counts matmuls, convolutions and
attention (2 FLOPs per multiply-add) and nothing elementwise, so the optimizer's count is 0.
The counts equal those of the same step on the CPU (tests/test_flops.py). Precision and memory
format do not change them (autocast changes the dtype, not the shapes); fp32 is counted.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from train.flops import flop_counter_mode
from train.models import build_model
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

    @contextlib.contextmanager
    def mark(name: str):
        if name not in counts:  # "train_step" encloses the phases
            yield
            return
        with flop_counter_mode() as counter:
            yield
        counts[name] += float(counter.get_total_flops())

    train_step(StepParts(model, optimizer, contextlib.nullcontext, mark=mark), inputs, targets)
    return PhaseFlops(**counts)


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

    with torch.device(device):
        torch.manual_seed(0)
        model = build_model(model_name, num_classes)
        model.train()
        inputs = torch.randn(batch_size, 3, image_size, image_size)
        targets = torch.randint(0, num_classes, (batch_size,))
    opt = make_optimizer(optimizer, model.parameters(), 0.01)
    return count_phase_flops(model, inputs, targets, opt)
