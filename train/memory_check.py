"""Will the step fit? The activation memory of the requested batch, estimated before it is run.

`--batch 1500` at 224 px on a CPU grew past 8 GB in 35 s before anything was said. The project's
memory model (train/footprint.py, docs/complexity.md) says why: autograd saves activations in
proportion to the batch. The benchmark already runs counted steps at batches 2 and 4 before the
real batch (train.bench.count_work); `recorders` sees what autograd saves there
(train/saved_tensors.py, the complexity command's recorder), and `check` extrapolates, as the memory
model does, to the requested batch:

    needed(B) = activation_fixed + activation_per_sample * B

Weights, gradients and optimizer state already exist when this runs (the counted steps made them),
and so does a synthetic input batch; what the real step adds is its activations. The model leaves
out backward's transient gradients and library workspaces, so `needed` is a lower bound of the
growth: a refusal is never a false alarm by the model's own error. It is compared with what the
device has free now: available RAM (psutil) on a CPU, free memory (`torch.cuda.mem_get_info`) on a
CUDA device; MPS is not checked (its limit is not a free-memory figure).

`python -m train --no-memory-check` (or ROOFLINE_MEMORY_CHECK=off, which torchrun's ranks and a
profile capture inherit) skips the check: the run then tries the batch and fails the usual way if
it does not fit.
"""

from __future__ import annotations

import os

from common.errors import BenchError
from common.fmt import si

ENV = "ROOFLINE_MEMORY_CHECK"


def enabled() -> bool:
    return os.environ.get(ENV, "on").strip().lower() not in ("off", "0", "false", "no")


def recorders(model, sizes):
    """`around` for train.bench.count_steps: a SavedTensorRecorder per counted batch; returns
    (around, the recorders by batch)."""
    from train.saved_tensors import SavedTensorRecorder

    made = {}

    def around(b: int):
        made[b] = SavedTensorRecorder(model, b)
        return made[b]

    return around, made


def available_bytes(device) -> tuple[int | None, str]:
    """Memory free for the step now on `device`, and what the figure is; (None, why) when unknown."""
    if device.type == "cuda":
        import torch

        return int(torch.cuda.mem_get_info(device)[0]), "free on the GPU"
    if device.type == "cpu":
        import psutil

        return int(psutil.virtual_memory().available), "RAM available"
    return None, f"not checked on {device.type}"


def needed_bytes(saved: dict[int, int], batch_size: int) -> tuple[float, float, float]:
    """(bytes the step of `batch_size` saves for backward, per sample, fixed) from the saved bytes
    at two counted batch sizes ({batch: bytes})."""
    (b0, v0), (b1, v1) = sorted(saved.items())
    per_sample = max(0.0, (v1 - v0) / (b1 - b0))
    fixed = max(0.0, v0 - per_sample * b0)
    return fixed + per_sample * batch_size, per_sample, fixed


def check(cfg, device, saved: dict[int, int], available: tuple[int | None, str] | None = None):
    """BenchError when the step of cfg.batch_size would need more memory for its activations than
    the device has free; `saved` = {counted batch: bytes autograd saved}."""
    if not enabled() or len(saved) < 2:
        return
    free, what = available if available is not None else available_bytes(device)
    if free is None:
        return
    need, per_sample, fixed = needed_bytes(saved, cfg.batch_size)
    if need <= free:
        return
    fit = int((free - fixed) // per_sample) if per_sample > 0 else 0
    advice = f"use --batch {fit} or less" if fit >= 1 else "not even batch 1 fits"
    raise BenchError(
        f"batch {cfg.batch_size} of {cfg.model} at {cfg.image_size} px needs at least "
        f"{si(need, 'B')} for the activations autograd saves ({si(per_sample, 'B')} per sample, "
        f"measured at batches {' and '.join(map(str, sorted(saved)))}), more than the "
        f"{si(free, 'B')} {what} on {device}: {advice}, or pass --no-memory-check to try it anyway"
    )
