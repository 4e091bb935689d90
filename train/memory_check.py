"""Will the step fit? The activation memory of the requested batch, estimated before it is run.

`--batch 1500` at 224 px on a CPU grew past 8 GB in 35 s before anything was said. The project's
memory model (train/complexity/footprint.py, docs/complexity.md) says why: autograd saves activations in
proportion to the batch. The benchmark already runs counted steps at batches 2 and 4 before the
real batch (train.bench.count_work); `recorders` sees what autograd saves there
(train/complexity/saved_tensors.py, the complexity command's recorder), and `check` extrapolates, as the memory
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

from common import console
from common.errors import BenchError, UsageError, one_line
from common.fmt import si
from train.complexity.saved_tensors import SavedTensorRecorder
from train.models import build_on_meta

ENV = "ROOFLINE_MEMORY_CHECK"


def enabled() -> bool:
    return os.environ.get(ENV, "on").strip().lower() not in ("off", "0", "false", "no")


def recorders(model, sizes):
    """`around` for train.bench.count_steps: a SavedTensorRecorder per counted batch; returns
    (around, the recorders by batch)."""
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


OPTIMIZER_STATES = {"sgd": 1, "adam": 2, "adamw": 2}
"""Tensors of parameter size each optimizer keeps (SGD's momentum; Adam's two moments)."""


def _param_bytes(model_name: str, num_classes: int, image_size: int | None = None):
    """(parameters, their bytes) of the model built on the meta device (train.models.build_on_meta:
    nothing is allocated), and how it was built."""
    model, how = build_on_meta(model_name, num_classes, image_size)
    params = list(model.parameters())
    return sum(p.numel() for p in params), sum(p.numel() * p.element_size() for p in params), how


def _sized(cfg) -> tuple[int, int] | None:
    """(parameters, bytes) of cfg's model; None, said on the console, when it cannot be built on
    the meta device: the check is then left to the counted steps (`check`)."""
    try:
        n, nbytes, how = _param_bytes(cfg.model, cfg.num_classes, cfg.image_size)
    except UsageError:
        raise
    except Exception as exc:  # noqa: BLE001 - a constructor the meta device cannot run: say so
        console.note(
            f"memory check: {cfg.model} cannot be built on the meta device ({one_line(exc)}); "
            "its weights are not checked before the run, its activations are after the counted steps"
        )
        return None
    if how != "meta":
        console.note(f"memory check: {cfg.model} sized with its {how}")
    return n, nbytes


def check_weights(cfg, device, available: tuple[int | None, str] | None = None) -> None:
    """Before the run exists: UsageError when the model's weights, gradients and optimizer state
    alone need more memory than the device has free (`--num-classes 100000000` makes resnet18's
    classifier 51 G parameters); main said "use a smaller --batch" after trying."""
    if not enabled():
        return
    free, what = available if available is not None else available_bytes(device)
    if free is None:
        return
    sized = _sized(cfg)
    if sized is None:
        return
    n, nbytes = sized
    states = OPTIMIZER_STATES.get(cfg.optimizer, 2)
    need = nbytes * (2 + states)  # weights + gradients + optimizer state
    if need <= free:
        return
    n_default, _, _ = _param_bytes(cfg.model, 1000, cfg.image_size)
    if cfg.num_classes > 1000 and n > 2 * n_default:
        advice = (
            f"--num-classes {cfg.num_classes} makes it {n / n_default:,.0f}x the size it has with "
            "1000 classes: use fewer classes"
        )
    else:
        advice = "use a smaller model, or a device with more memory"
    raise UsageError(
        f"{cfg.model} with {cfg.num_classes} classes has {si(n)} parameters: its weights, gradients "
        f"and {cfg.optimizer} state need {si(need, 'B')}, more than the {si(free, 'B')} {what} on "
        f"{device} before any batch; {advice} (or pass --no-memory-check to try it anyway)"
    )
