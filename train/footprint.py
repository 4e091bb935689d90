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
  `torch.autograd.graph.saved_tensors_hooks`, counted once per storage, attributed to the module
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

Pure measurement and arithmetic: no MLflow, no files (the RSS probe runs in a subprocess, see
`measure_step_rss`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path

from common.errors import BenchError
from train import flops as fl

ROOT = Path(__file__).resolve().parents[1]
LOSS_ROW = "(loss)"  # saved tensors packed outside the model's forward (cross-entropy)
MODEL_ROW = "(model)"  # work done in the top-level module's own forward (e.g. torch.flatten)


# ------------------------------------------------------------------ sizes
_SIZE_RE = re.compile(
    r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([kmgtp]?)(i?)(b?)\s*$", re.IGNORECASE
)
_PREFIX_POWER = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}


def parse_bytes(text: str | int | float) -> int:
    """Bytes in a size like `16GiB` (binary, 2**30), `16GB` (decimal, 10**9), `512MiB`, `1.5e9`.

    A bare number is bytes. Raises ValueError with the accepted forms.
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value, unit = float(text), 1
    else:
        m = _SIZE_RE.match(str(text))
        if not m or (m.group(3) and not m.group(2)):
            raise ValueError(
                f"expected a size like 16GiB, 16GB, 512MiB or a number of bytes, got {text!r}"
            )
        number, prefix, binary, _b = m.groups()
        value = float(number)
        unit = (1024 if binary else 1000) ** _PREFIX_POWER[prefix.lower()]
    size = value * unit
    if not math.isfinite(size) or size < 1:
        raise ValueError(f"a memory size must be at least 1 byte, got {text!r}")
    return int(size)


def format_bytes(n: float) -> str:
    """Human-readable binary size for display only (values are stored raw)."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} B"


def device_memory_bytes(device) -> tuple[int, str]:
    """Memory the training could use on `device` and where the number comes from."""
    import torch

    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory), "CUDA total memory"
    if device.type == "mps":
        return int(torch.mps.recommended_max_memory()), "MPS recommended max working set"
    import psutil

    return int(psutil.virtual_memory().available), "available RAM (psutil) at start"


# ------------------------------------------------------------------ parameters, gradients, optimizer state
def _storage_key(t):
    """(key, bytes) identifying the storage behind `t`; tensors without one count their own bytes."""
    try:
        s = t.untyped_storage()
        return ("ptr", str(t.device), s.data_ptr()), int(s.nbytes())
    except (RuntimeError, NotImplementedError, TypeError):  # e.g. opaque mkldnn tensors
        return ("id", id(t)), int(t.numel() * t.element_size())


def _unique_bytes(tensors) -> int:
    seen, total = set(), 0
    for t in tensors:
        key, nbytes = _storage_key(t)
        if key not in seen:
            seen.add(key)
            total += nbytes
    return total


def count_params(model) -> tuple[int, int]:
    """(number of parameters, their bytes). Works on meta-device models (nothing is allocated)."""
    params = list(model.parameters())
    return sum(p.numel() for p in params), sum(p.numel() * p.element_size() for p in params)


def buffer_bytes(model) -> int:
    """Bytes of the model's buffers (batch-norm running statistics and counters)."""
    return sum(b.numel() * b.element_size() for b in model.buffers())


def grad_bytes(model) -> int:
    """Bytes of the gradients currently held by the model's parameters (after a backward pass)."""
    return _unique_bytes(p.grad for p in model.parameters() if p.grad is not None)


def optimizer_state_bytes(optimizer) -> int:
    """Bytes of every tensor in `optimizer.state` (momentum buffers, Adam moments, step counters)."""
    import torch

    tensors = (
        v
        for state in optimizer.state.values()
        for v in state.values()
        if isinstance(v, torch.Tensor)
    )
    return _unique_bytes(tensors)


def meta_model(name: str, num_classes: int = 1000):
    """The torchvision model `name` built on the meta device: shapes and parameter counts, no memory."""
    import torch

    from train.models import build_model

    with torch.device("meta"):
        return build_model(name, num_classes)


# ------------------------------------------------------------------ saved activations
@dataclass
class SavedTensors:
    """What autograd saved for backward during one step (each storage once)."""

    batch_size: int
    total_bytes: int
    by_module: dict[str, int]
    weight_bytes: int  # saved storages that are parameters or buffers (not counted in total_bytes)
    output_shapes: dict[str, tuple]  # module name -> output shape of its last call


class SavedTensorRecorder:
    """Context manager recording the storages autograd saves for backward while it is open.

    Each storage is counted once (keyed by device and data pointer; the recorder keeps a reference
    to every storage it saw until it closes, so a pointer cannot be reused by another storage in the
    meantime). Storages of the model's parameters and buffers are weights and are reported apart.
    A storage is attributed to the innermost module whose forward was running when it was first
    saved (forward pre/post hooks on every module); storages saved outside the model's forward are
    attributed to LOSS_ROW, those saved by the top-level module itself to MODEL_ROW.
    """

    def __init__(self, model, batch_size: int) -> None:
        self.model = model
        self.batch_size = batch_size
        self._stack: list[str] = []
        self._seen: dict[tuple, str] = {}
        self._keep: list = []
        self._handles: list = []
        self._ctx = None
        self.by_module: dict[str, int] = {}
        self.weight_bytes = 0
        self.output_shapes: dict[str, tuple] = {}
        self._weights: set[tuple] = set()

    def __enter__(self) -> "SavedTensorRecorder":
        import torch

        self._weights = {
            _storage_key(t)[0] for t in chain(self.model.parameters(), self.model.buffers())
        }
        for name, module in self.model.named_modules():
            label = name or MODEL_ROW
            self._handles.append(module.register_forward_pre_hook(self._pre(label)))
            self._handles.append(module.register_forward_hook(self._post(label), always_call=True))
        self._ctx = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)
        self._ctx.__enter__()
        return self

    def __exit__(self, *exc) -> bool:
        self._ctx.__exit__(*exc)
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self._keep.clear()
        return False

    def _pre(self, label: str):
        def hook(_module, _inputs):
            self._stack.append(label)

        return hook

    def _post(self, label: str):
        def hook(_module, _inputs, output):
            if self._stack and self._stack[-1] == label:
                self._stack.pop()
            shape = _first_tensor_shape(output)
            if shape is not None:
                self.output_shapes[label] = shape

        return hook

    def _pack(self, t):
        key, nbytes = _storage_key(t)
        if nbytes == 0 or key in self._seen:
            return t
        self._seen[key] = owner = self._stack[-1] if self._stack else LOSS_ROW
        self._keep.append(t)
        if key in self._weights:
            self.weight_bytes += nbytes
        else:
            self.by_module[owner] = self.by_module.get(owner, 0) + nbytes
        return t

    def result(self) -> SavedTensors:
        return SavedTensors(
            self.batch_size,
            sum(self.by_module.values()),
            dict(self.by_module),
            self.weight_bytes,
            dict(self.output_shapes),
        )


def _first_tensor_shape(output):
    import torch

    from train.step import logits_of

    output = logits_of(output)
    if isinstance(output, torch.Tensor):
        return tuple(output.shape)
    if isinstance(output, (tuple, list)):
        for o in output:
            if isinstance(o, torch.Tensor):
                return tuple(o.shape)
    return None


def saved_bytes(model, run, batch_size: int = 1) -> SavedTensors:
    """Run `run()` (a forward, a loss or a whole training step) and record what autograd saved."""
    with SavedTensorRecorder(model, batch_size) as rec:
        run()
    return rec.result()


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
    from train.bench import COUNT_BATCHES, count_steps, prepare

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


# ------------------------------------------------------------------ RSS check (CPU)
@dataclass
class RssMeasurement:
    """Resident-set growth of one real training step in a fresh process."""

    batch_size: int
    rss_before_bytes: float  # after model and optimizer exist, before the batch and the step
    peak_rss_bytes: float  # peak during the step
    peak_source: str  # "VmHWM reset before the step" or "ru_maxrss"

    @property
    def growth_bytes(self) -> float:
        return self.peak_rss_bytes - self.rss_before_bytes


def predicted_step_growth_bytes(c: ModelComplexity, batch_size: int) -> float:
    """What the memory model predicts one first step adds to a process that already holds the weights."""
    return c.predicted_train_mem_bytes(batch_size) - c.weight_bytes


def probe_argv(
    model: str, batch_size: int, image_size: int, optimizer: str, precision: str, num_classes: int
) -> list[str]:
    """The command that measures one step's RSS growth (train/rss_step.py)."""
    return [
        sys.executable,
        "-m",
        "train.rss_step",
        "--model",
        model,
        "--batch",
        str(batch_size),
        "--image-size",
        str(image_size),
        "--optimizer",
        optimizer,
        "--precision",
        precision,
        "--num-classes",
        str(num_classes),
    ]


def measure_step_rss(
    model: str,
    batch_size: int,
    image_size: int,
    optimizer: str = "sgd",
    precision: str = "fp32",
    num_classes: int = 1000,
    timeout_s: float = 600.0,
) -> RssMeasurement:
    """Run one training step on CPU in a fresh process and return its RSS growth."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.setdefault("DS_ACCELERATOR", "cpu")
    argv = probe_argv(model, batch_size, image_size, optimizer, precision, num_classes)
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout_s, env=env, cwd=str(ROOT)
        )
    except subprocess.TimeoutExpired:
        raise BenchError(
            f"RSS probe of {model} at batch {batch_size} took over {timeout_s:.0f} s: use smaller --rss-batch-sizes"
        ) from None
    if done.returncode != 0:
        lines = [ln for ln in (done.stderr or "").splitlines() if ln.strip()]
        raise BenchError(
            f"RSS probe of {model} at batch {batch_size} failed: {lines[-1] if lines else f'exit {done.returncode}'}"
        )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return RssMeasurement(
        batch_size,
        float(result["rss_before_bytes"]),
        float(result["peak_rss_bytes"]),
        result["peak_source"],
    )
