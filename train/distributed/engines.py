"""DDP or DeepSpeed around a prepared model, and each engine's way to skip gradient synchronisation.

Communication cost is measured by timing the same steps without gradient synchronisation:

* DDP: `DistributedDataParallel.no_sync()` held around forward and backward (torch's own rule: the
  forward must be inside). The optimizer step is local in DDP, so the step is the whole step minus
  the gradient all-reduce. The buffer broadcast DDP makes at every forward
  (`broadcast_buffers=True`, its default: batch-norm running statistics from rank 0) is not
  gradient synchronisation and stays in the compute-only step.
* DeepSpeed ZeRO stage 0: `DeepSpeedEngine.no_sync()` (deepspeed/runtime/engine.py, 0.19.8) skips
  `allreduce_gradients` in the backward epilogue; `engine.step()` must run outside it (the engine
  asserts so), and at stage 0 the step is the wrapped torch optimizer's, local.
* ZeRO stage 1: `no_sync()` is accepted, but the ZeRO optimizer's step then finds no reduced
  gradients (`TypeError: 'NoneType' object is not iterable` in 0.19.8) and its step all-gathers the
  updated parameter partitions anyway: no step without communication exists.
* ZeRO stages 2 and 3 partition gradients during backward: `no_sync()` asserts ("incompatible with
  gradient partitioning logic of ZeRO stage 2").

For stages 1-3 the run says so (tag `compute_only`) and logs no compute-only time.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Callable, ContextManager

from train import device as dev
from train import flops as fl
from train.config import TrainConfig
from train.step import StepParts

NO_SYNC_UNAVAILABLE = {
    1: "unavailable: DeepSpeed ZeRO stage 1 has no step without communication (no_sync() leaves "
    "its optimizer no reduced gradients, and its step all-gathers the updated partitions)",
    2: "unavailable: DeepSpeed ZeRO stage 2 partitions gradients during backward; its no_sync() "
    "refuses this stage",
    3: "unavailable: DeepSpeed ZeRO stage 3 partitions gradients and parameters; its no_sync() "
    "refuses this stage",
}


@dataclass
class GradSync:
    """How an engine skips gradient synchronisation: `no_sync` (a context factory for forward and
    backward) or None, and the `compute_only` tag saying which, or why not."""

    no_sync: Callable[[], ContextManager] | None
    how: str


class EngineStepParts(StepParts):
    """A DeepSpeed engine's step: `engine.backward(loss)` scales the loss (fp16) and reduces or
    partitions gradients; `engine.step()` applies them and clears them (so no zero_grad here)."""

    def zero_grad(self) -> None:
        pass

    def backward(self, loss) -> None:
        self.model.backward(loss)

    def update(self) -> None:
        self.model.step()


def wrap(prep, cfg: TrainConfig, ctx) -> GradSync:
    """Put cfg's engine around `prep`'s model (its StepParts change in place); return how that
    engine times a step without gradient synchronisation."""
    if cfg.distributed == "ddp":
        return _ddp(prep, ctx)
    if cfg.distributed == "deepspeed":
        return _deepspeed(prep, cfg, ctx)
    raise ValueError(f"not a data-parallel engine: {cfg.distributed!r}")


def _ddp(prep, ctx) -> GradSync:
    from torch.nn.parallel import DistributedDataParallel

    ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    model = DistributedDataParallel(prep.model, device_ids=ids)
    prep.parts.model = model
    return GradSync(model.no_sync, "measured: DDP no_sync()")


def deepspeed_config(cfg: TrainConfig) -> dict:
    """The DeepSpeed config of `cfg`: its batch per process, no gradient accumulation, its ZeRO
    stage, and for fp16/bf16 DeepSpeed's torch_autocast (the engine's autocast, with its own
    GradScaler for fp16 at stage 0; the step's own torch.autocast around forward and loss is the
    same dtype, so the ops run as in a single-process run)."""
    config = {
        "train_micro_batch_size_per_gpu": cfg.batch_size,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": cfg.zero_stage},
        # our optimizers are torch's (SGD with momentum, Adam, AdamW): DeepSpeed only lists its own
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 2**31 - 1,
        "wall_clock_breakdown": False,
    }
    if cfg.precision != "fp32":
        dtype = {"fp16": "float16", "bf16": "bfloat16"}[cfg.precision]
        config["torch_autocast"] = {"enabled": True, "dtype": dtype}
    return config


def _deepspeed(prep, cfg: TrainConfig, ctx) -> GradSync:
    os.environ["DS_ACCELERATOR"] = fl.deepspeed_accelerator(ctx.device)  # before deepspeed loads
    import deepspeed

    deepspeed.utils.logger.setLevel(logging.WARNING)
    if not ctx.env.torchrun:  # a one-process job: DeepSpeed reads torchrun's variables itself
        for name, value in (("RANK", 0), ("LOCAL_RANK", 0), ("WORLD_SIZE", 1)):
            os.environ.setdefault(name, str(value))
    deepspeed.init_distributed(dist_backend=ctx.backend)  # adopts the process group made in context
    engine, optimizer, _, _ = deepspeed.initialize(
        model=prep.model, optimizer=prep.parts.optimizer, config=deepspeed_config(cfg)
    )
    prep.parts = EngineStepParts(
        engine, optimizer, dev.autocast_context(cfg.precision, ctx.device), None
    )
    if cfg.zero_stage == 0:
        return GradSync(engine.no_sync, "measured: DeepSpeed engine.no_sync() (ZeRO stage 0)")
    return GradSync(None, NO_SYNC_UNAVAILABLE[cfg.zero_stage])
