"""What a model costs to train, measured on real steps: parameters, FLOPs, gradient and
optimizer-state bytes, the activations autograd saves for backward, and the memory model built
from them.

Everything is measured on the benchmark's own device, model and `train_step` at two small batch
sizes (1 and 2; 2 and 4, train/bench.py's `COUNT_BATCHES`, when batch norm cannot train on one
sample) and scaled linearly:

* training FLOPs and modeled bytes: `train.flops.count_step` around `train_step`, after one
  uncounted step, as `train.bench.count_work` does; extrapolated to any batch with
  `train.flops.extrapolate`. Every count is affine in the batch, so a training run of the same
  config (which counts at 2 and 4) logs the same numbers;
* forward FLOPs/MACs: `train.flops.deepspeed_forward_profile`, with the per-module numbers read
  from the same DeepSpeed pass;
* activations: every storage autograd saves during those counted steps, seen through
  `torch.autograd.graph.saved_tensors_hooks` (train/complexity/saved_tensors.py), counted once per storage, attributed to the module
  whose forward first saved it. Storages of parameters and buffers are weights, not activations,
  and are left out. Bytes are affine in the batch: the slope is the per-sample activation memory,
  the intercept what is saved once per step (batch-norm batch statistics, the loss's total weight,
  autocast's low-precision weight copies);
* gradient and optimizer-state bytes: read from `param.grad` and `optimizer.state` after the first
  step (SGD with momentum keeps one buffer per parameter, Adam and AdamW two plus a scalar `step` tensor).

Memory model (see docs/complexity.md):

    predicted_train_mem(B) = weights + gradients + optimizer_state + activation_fixed + activation_per_sample * B

where weights = parameter + buffer bytes. It ignores the allocator's caching and fragmentation,
library workspaces (cuDNN, oneDNN), the transient gradients of activations during backward, the
CUDA context, and the input pipeline. It also ignores that `zero_grad(set_to_none=True)` frees the
gradients before the forward pass, so gradients and all activations never coexist: the sum is an
upper bound of the live tensors, not their exact peak.

Pure measurement and arithmetic: no MLflow, no files. The check of this model against a real
step's RSS growth is train/complexity/rss_step.py.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from train import flops as fl
from train.bench import COUNT_BATCHES, count_steps, prepare
from train.complexity.saved_tensors import (
    LOSS_ROW,
    MODEL_ROW,
    SavedTensorRecorder,
    SavedTensors,
    unique_bytes,
)


# ------------------------------------------------------------------ parameters, gradients, optimizer state
def count_params(model) -> tuple[int, int]:
    """(number of parameters, their bytes). Works on meta-device models (nothing is allocated)."""
    params = list(model.parameters())
    return sum(p.numel() for p in params), sum(p.numel() * p.element_size() for p in params)


def buffer_bytes(model) -> int:
    """Bytes of the model's buffers (batch-norm running statistics and counters)."""
    return sum(b.numel() * b.element_size() for b in model.buffers())


def grad_bytes(model) -> int:
    """Bytes of the gradients currently held by the model's parameters (after a backward pass)."""
    return unique_bytes(p.grad for p in model.parameters() if p.grad is not None)


def optimizer_state_bytes(optimizer) -> int:
    """Bytes of every tensor in `optimizer.state` (momentum buffers, Adam moments, step counters)."""
    import torch

    tensors = (
        v
        for state in optimizer.state.values()
        for v in state.values()
        if isinstance(v, torch.Tensor)
    )
    return unique_bytes(tensors)


def _affine(points: dict[int, float]) -> tuple[float, float]:
    """(slope, intercept) of the line through two (batch, value) points."""
    (b0, v0), (b1, v1) = sorted(points.items())
    slope = (v1 - v0) / (b1 - b0)
    return slope, v0 - slope * b0


# ------------------------------------------------------------------ DeepSpeed per-module forward numbers
def forward_profile_by_module(
    model, inputs
) -> tuple[fl.ForwardProfile, dict[str, tuple[float, float]]]:
    """DeepSpeed's forward profile of `model` on `inputs`, plus (FLOPs, MACs) of each module's own
    work (its functional calls, not its children's), keyed by module name; MODEL_ROW for the top.

    DeepSpeed keeps a per-module accumulator (`module.__flops__`) only while profiling. A forward
    hook registered on the top module before `deepspeed_forward_profile` installs its own hooks runs
    after every child finished and before the top module's own accumulator is final, so it snapshots
    every child; the top module's own share is the total minus the children's.
    """
    snap: dict[str, tuple[float, float]] = {}

    def grab(_module, _inputs, _output):
        for name, m in model.named_modules():
            if m is not model and hasattr(m, "__flops__"):
                snap[name] = (float(m.__flops__), float(m.__macs__))

    handle = model.register_forward_hook(grab)
    try:
        profile = fl.deepspeed_forward_profile(model, inputs)
    finally:
        handle.remove()
    snap[MODEL_ROW] = (
        profile.flops - sum(f for f, _ in snap.values()),
        profile.macs - sum(m for _, m in snap.values()),
    )
    return profile, snap


# ------------------------------------------------------------------ the model's complexity
@dataclass
class LayerRow:
    """One module's share (per sample unless named otherwise)."""

    name: str
    type: str
    output_shape: str  # per sample (batch dimension dropped), e.g. "64x56x56"
    params: int  # parameters owned directly by this module
    fwd_flops_per_sample: float  # DeepSpeed, this module's own forward work
    fwd_macs_per_sample: float
    saved_bytes_per_sample: float  # activations this module saved for backward
    saved_fixed_bytes: float  # saved once per step, independent of the batch


@dataclass
class ModelComplexity:
    """Per-model costs, measured at `measured_batches` and scaled linearly (raw SI units)."""

    model: str
    image_size: int
    precision: str
    optimizer: str
    num_classes: int
    device: str
    params: int
    param_bytes: int
    buffer_bytes: int
    grad_bytes: int
    optimizer_state_bytes: int
    fwd_flops_per_sample: float
    fwd_macs_per_sample: float
    activation_bytes_per_sample: float
    activation_fixed_bytes: float
    saved_weight_bytes: int  # parameter/buffer storages autograd saved (already counted as weights)
    counts: dict[int, fl.StepCounts]  # training FLOPs/modeled bytes at the measured batches
    layers: list[LayerRow] = field(default_factory=list)

    @property
    def measured_batches(self) -> tuple[int, ...]:
        return tuple(sorted(self.counts))

    @property
    def weight_bytes(self) -> int:
        """Parameters plus buffers."""
        return self.param_bytes + self.buffer_bytes

    @property
    def fixed_bytes(self) -> float:
        """The batch-independent part of the memory model."""
        return (
            self.weight_bytes
            + self.grad_bytes
            + self.optimizer_state_bytes
            + self.activation_fixed_bytes
        )

    def step_counts(self, batch_size: int) -> fl.StepCounts:
        """Training FLOPs and modeled bytes per step, as a training run at `batch_size` logs them."""
        if batch_size in self.counts:
            return self.counts[batch_size]
        a, b = (self.counts[k] for k in self.measured_batches[:2])
        return fl.extrapolate(a, b, batch_size)

    @property
    def train_flops_per_sample(self) -> float:
        a, b = (self.counts[k] for k in self.measured_batches[:2])
        return _affine({a.batch_size: a.train_flops, b.batch_size: b.train_flops})[0]

    @property
    def modeled_bytes_per_sample(self) -> float:
        a, b = (self.counts[k] for k in self.measured_batches[:2])
        return _affine({a.batch_size: a.modeled_bytes, b.batch_size: b.modeled_bytes})[0]

    @property
    def modeled_fixed_bytes(self) -> float:
        a, b = (self.counts[k] for k in self.measured_batches[:2])
        return _affine({a.batch_size: a.modeled_bytes, b.batch_size: b.modeled_bytes})[1]

    @property
    def modeled_intensity_limit_flops_per_byte(self) -> float:
        """Modeled intensity as the batch grows without bound (weight traffic fully amortised)."""
        return (
            self.train_flops_per_sample / self.modeled_bytes_per_sample
            if self.modeled_bytes_per_sample
            else float("nan")
        )

    def activation_bytes(self, batch_size: int) -> float:
        return self.activation_fixed_bytes + self.activation_bytes_per_sample * batch_size

    def predicted_train_mem_bytes(self, batch_size: int) -> float:
        return predicted_train_mem_bytes(
            self.weight_bytes,
            self.grad_bytes,
            self.optimizer_state_bytes,
            self.activation_fixed_bytes,
            self.activation_bytes_per_sample,
            batch_size,
        )

    def max_batch_fit(self, memory_bytes: float) -> int:
        return max_batch_fit(self.fixed_bytes, self.activation_bytes_per_sample, memory_bytes)


def predicted_train_mem_bytes(
    weights: float,
    grads: float,
    optimizer_state: float,
    activation_fixed: float,
    activation_per_sample: float,
    batch_size: int,
) -> float:
    """weights + gradients + optimizer state + activation_fixed + activation_per_sample * batch."""
    return weights + grads + optimizer_state + activation_fixed + activation_per_sample * batch_size


def max_batch_fit(fixed_bytes: float, per_sample_bytes: float, memory_bytes: float) -> int:
    """Largest batch B >= 0 with fixed + per_sample * B <= memory (0: not even one sample fits)."""
    if fixed_bytes + per_sample_bytes > memory_bytes:
        return 0
    if per_sample_bytes <= 0:
        raise ValueError("activation bytes per sample must be positive to bound the batch")
    return int((memory_bytes - fixed_bytes) // per_sample_bytes)


MEASURE_BATCHES = (
    1,
    2,
)  # cheapest pair; counts and saved bytes are affine in the batch, so two points suffice


def analyze_model(cfg, device, measure_batches: tuple[int, int] | None = None) -> ModelComplexity:
    """Measure `cfg.model` (a TrainConfig with data="synthetic") on `device`. See the module docstring.

    Uses the benchmark's own `prepare` and `count_steps` (one uncounted `train_step`, then one
    counted `train_step` per measured batch), with the saved-tensor recorder open during the counted
    steps, so counts and activations are those of the real step, not of a re-implemented one.

    Measures at batches 1 and 2 (half the work of count_work's 2 and 4; every count is affine in the
    batch, so the extrapolated numbers are the same). A model whose batch norm sees one value per
    channel at batch 1 (a 1x1 feature map, e.g. ResNets below 64 px) is measured at 2 and 4 instead.
    """
    candidates = [tuple(measure_batches)] if measure_batches else [MEASURE_BATCHES, COUNT_BATCHES]
    for sizes in candidates:
        if len(set(sizes)) != 2 or min(sizes) < 1:
            raise ValueError(f"need two different positive batch sizes to measure at, got {sizes}")
        cfg = dataclasses.replace(cfg, batch_size=sizes[0])  # the caller's config stays as it was
        prep = prepare(cfg, device)
        model, parts = prep.model, prep.parts
        recorders: dict[int, SavedTensorRecorder] = {}

        def around(b: int, model=model, recorders=recorders) -> SavedTensorRecorder:
            recorders[b] = SavedTensorRecorder(model, b)
            return recorders[b]

        try:
            # the benchmark's own counting steps, with the saved-tensor recorder open around each
            counts, batches = count_steps(prep, sizes, around)
            break
        except ValueError as exc:
            if "more than 1 value per channel" not in str(exc) or sizes == candidates[-1]:
                raise
    grads = grad_bytes(model)
    opt_state = optimizer_state_bytes(parts.optimizer)
    saved = {b: rec.result() for b, rec in recorders.items()}
    forward, module_flops = forward_profile_by_module(model, batches[sizes[0]][0])
    n_params, p_bytes = count_params(model)
    act_slope, act_fixed = _affine({b: s.total_bytes for b, s in saved.items()})
    layers = _layer_rows(model, saved, module_flops, forward.batch_size)
    return ModelComplexity(
        model=cfg.model,
        image_size=cfg.image_size,
        precision=cfg.precision,
        optimizer=cfg.optimizer,
        num_classes=cfg.num_classes,
        device=str(device),
        params=n_params,
        param_bytes=p_bytes,
        buffer_bytes=buffer_bytes(model),
        grad_bytes=grads,
        optimizer_state_bytes=opt_state,
        fwd_flops_per_sample=forward.flops_per_sample,
        fwd_macs_per_sample=forward.macs_per_sample,
        activation_bytes_per_sample=act_slope,
        activation_fixed_bytes=act_fixed,
        saved_weight_bytes=saved[sizes[0]].weight_bytes,
        counts=counts,
        layers=layers,
    )


def _layer_rows(
    model, saved: dict[int, SavedTensors], module_flops: dict, flops_batch: int
) -> list[LayerRow]:
    first = saved[min(saved)]
    rows = []
    names = [(n or MODEL_ROW, m) for n, m in model.named_modules()]
    for label, module in [*names, (LOSS_ROW, None)]:
        slope, fixed = _affine({b: s.by_module.get(label, 0) for b, s in saved.items()})
        flops, macs = module_flops.get(label, (0.0, 0.0))
        params = (
            sum(p.numel() for p in module.parameters(recurse=False)) if module is not None else 0
        )
        is_leaf = module is not None and next(module.children(), None) is None
        if not (is_leaf or slope or fixed or flops or params):
            continue
        shape = first.output_shapes.get(label)
        rows.append(
            LayerRow(
                name=label,
                type=type(module).__name__ if module is not None else "cross_entropy",
                output_shape="x".join(str(d) for d in shape[1:]) if shape else "",
                params=params,
                fwd_flops_per_sample=flops / flops_batch,
                fwd_macs_per_sample=macs / flops_batch,
                saved_bytes_per_sample=slope,
                saved_fixed_bytes=fixed,
            )
        )
    return rows


def predicted_step_growth_bytes(c: ModelComplexity, batch_size: int) -> float:
    """What the memory model predicts one first step adds to a process that already holds the weights."""
    return c.predicted_train_mem_bytes(batch_size) - c.weight_bytes
