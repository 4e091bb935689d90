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
* ZeRO stages 1 and 2 have no such switch (stage 1's optimizer step finds no reduced gradients
  after `no_sync()`, `TypeError` in 0.19.8; stage 2's `no_sync()` asserts, "incompatible with
  gradient partitioning logic"). Their compute-only step is the whole engine step (forward,
  backward, `engine.step()`) with every collective of torch.distributed made a no-op for its
  duration (`skip_collectives`): the gradient reductions and the all-gather of the updated
  partitions return at once, leaving their buffers as they were (the local gradients, the
  previous parameters: finite numbers, the same work for the arithmetic). What remains is compute
  plus the engine's own bookkeeping (bucketing, partition copies). tests/test_distributed.py checks
  that no collective is left: under it one rank runs ZeRO 1 and 2 steps alone while its peer
  waits (2 CPU processes, gloo, resnet18).
* ZeRO stage 3 gathers parameters before each layer's forward: skipped all-gathers leave them
  uninitialised memory (non-finite values on the next real step, seen here), so no compute-only
  step is timed.

For stage 3 the run says so (tag `compute_only`) and logs no compute-only time.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass
from typing import Callable, ContextManager

from train import device as dev
from train import flops as fl
from train.config import TrainConfig
from train.step import StepParts

NO_SYNC_UNAVAILABLE = {
    3: "unavailable: DeepSpeed ZeRO stage 3 gathers parameters in forward; skipping its "
    "collectives would compute on uninitialised parameters",
}
# torch.distributed's data collectives (module functions, as DeepSpeed's torch backend calls them)
COLLECTIVES = (
    "all_reduce",
    "all_reduce_coalesced",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "reduce_scatter_single",
    "_reduce_scatter_base",
    "broadcast",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_single",
    "_all_gather_base",
    "all_gather_coalesced",
    "all_to_all",
    "all_to_all_single",
    "gather",
    "gather_single",
    "gather_into_tensor",
    "scatter",
)


class _Done:
    """The handle a skipped collective returns (DeepSpeed waits on some even when synchronous)."""

    def wait(self, *args, **kwargs) -> bool:
        return True

    def is_completed(self) -> bool:
        return True


def _skipped(*args, **kwargs) -> _Done:
    return _Done()


@contextlib.contextmanager
def skip_collectives():
    """Every torch.distributed collective in COLLECTIVES a no-op while held (this thread and any
    other: the harness runs none of its own inside a step)."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    saved = [
        (module, name, getattr(module, name))
        for module in (dist, distributed_c10d)
        for name in COLLECTIVES
        if hasattr(module, name)
    ]
    for module, name, _ in saved:
        setattr(module, name, _skipped)
    try:
        yield
    finally:
        for module, name, fn in saved:
            setattr(module, name, fn)


@dataclass
class GradSync:
    """How an engine skips gradient synchronisation: `no_sync` (a context factory for forward and
    backward) or None, and the `compute_only` tag saying which, or why not."""

    no_sync: Callable[[], ContextManager] | None
    how: str


class EngineStepParts(StepParts):
    """A DeepSpeed engine's step: `engine.backward(loss)` scales the loss (fp16) and reduces or
    partitions gradients; `engine.step()` applies them and clears them (so no zero_grad here).
    With `sync_in_update`, `grad_sync` is held around `engine.step()` too (ZeRO 1 and 2: the
    compute-only step skips the optimizer step's all-gather as well)."""

    sync_in_update: bool = False

    def zero_grad(self) -> None:
        pass

    def backward(self, loss) -> None:
        self.model.backward(loss)

    def update(self) -> None:
        with self.grad_sync() if self.sync_in_update else contextlib.nullcontext():
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
    if cfg.precision in ("fp16", "bf16"):  # tf32 is fp32 tensors with TF32 math, not autocast
        dtype = {"fp16": "float16", "bf16": "bfloat16"}[cfg.precision]
        config["torch_autocast"] = {"enabled": True, "dtype": dtype}
    return config


def skip_shm_all_reduce(deepspeed) -> None:
    """DeepSpeed's CPU backend compiles a shared-memory all-reduce (deepspeed_shm_comm: two g++
    jobs, 100 s here, on the first run in a new environment) that only its inference_all_reduce
    calls; ZeRO's collectives go through torch.distributed (gloo on the CPU). Marked incompatible,
    it is not built, and the run starts at once."""
    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False


def _deepspeed(prep, cfg: TrainConfig, ctx) -> GradSync:
    os.environ["DS_ACCELERATOR"] = fl.deepspeed_accelerator(ctx.device)  # before deepspeed loads
    import deepspeed

    deepspeed.utils.logger.setLevel(logging.WARNING)
    if not ctx.env.torchrun:  # a one-process job: DeepSpeed reads torchrun's variables itself
        for name, value in (("RANK", 0), ("LOCAL_RANK", 0), ("WORLD_SIZE", 1)):
            os.environ.setdefault(name, str(value))
    if ctx.device.type == "cpu":
        skip_shm_all_reduce(deepspeed)
    deepspeed.init_distributed(dist_backend=ctx.backend)  # adopts the process group made in context
    engine, optimizer, _, _ = deepspeed.initialize(
        model=prep.model, optimizer=prep.parts.optimizer, config=deepspeed_config(cfg)
    )
    prep.parts = EngineStepParts(
        engine, optimizer, dev.autocast_context(cfg.precision, ctx.device), None
    )
    if cfg.zero_stage == 0:
        return GradSync(engine.no_sync, "measured: DeepSpeed engine.no_sync() (ZeRO stage 0)")
    if cfg.zero_stage in (1, 2):
        prep.parts.sync_in_update = True
        return GradSync(
            skip_collectives,
            f"measured: DeepSpeed ZeRO stage {cfg.zero_stage} step with its collectives skipped",
        )
    return GradSync(None, NO_SYNC_UNAVAILABLE[cfg.zero_stage])
