"""Profile mode (`python -m train --profile-steps K`, run under ncu by `python -m profiling`):
warmup, then K NVTX-marked steps of the same prepared `train_step` between the CUDA profiler's
start and stop. Logs no run. On every rank of a torchrun job, the engine-wrapped step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from common import console
from common.errors import UsageError
from train import device as dev
from train.bench import Prepared, compile_model, preflight, prepare, runtime_errors
from train.config import TrainConfig
from train.distributed import engines
from train.step import nvtx_range, train_step


@dataclass
class ProfileMode:
    """What --profile-steps and --no-cudnn-benchmark ask for."""

    steps: int
    """marked steps after warmup"""
    cudnn_benchmark: bool = True
    """False keeps cuDNN's autotuner off, so every run of the program picks the same kernels (ncu's
    application and app-range replay rerun it once per pass)"""


def profile(cfg: TrainConfig, mode: ProfileMode) -> int:
    """Profile mode in one process (CUDA only)."""
    import torch

    check_profile_mode(cfg, mode.steps)  # bad flags first: they are wrong on any machine
    require_cuda()
    if cfg.device == "auto":
        cfg.device = "cuda"
    device = preflight(cfg)
    if device.type != "cuda":
        raise UsageError(f"profile mode needs --device cuda, got {cfg.device}")
    fp32_math = profile_steps(cfg, device, mode.steps, cudnn_benchmark=mode.cudnn_benchmark)
    console.info(
        f"profiled {mode.steps} step(s) of {cfg.run_name()} on {torch.cuda.get_device_name(device)}"
        f" {dev.fp32_math_note(fp32_math)}"
    )
    return 0


def profile_ranks(cfg: TrainConfig, mode: ProfileMode, ctx, guard) -> int:
    """Profile mode on every rank of a torchrun job: the same warmup and K marked steps of the
    engine-wrapped step on each rank (they synchronise gradients with each other), so that ncu
    wrapping rank 0 alone captures a real data-parallel step (docs/profiling.md)."""
    guard.blamed(
        lambda: profile_steps(
            cfg,
            ctx.device,
            mode.steps,
            cudnn_benchmark=mode.cudnn_benchmark,
            wrap=lambda prep: engines.wrap(prep, cfg, ctx),
        )
    )
    console.info(
        f"rank {ctx.rank}: profiled {mode.steps} step(s) of {cfg.run_name()} ({cfg.distributed})"
    )
    return 0


def require_cuda() -> None:
    import torch

    if not torch.cuda.is_available():
        raise UsageError(
            "profile mode needs an NVIDIA GPU (CUDA is not available here); "
            "import ncu output made elsewhere with python -m profiling --import FILE"
        )


def check_profile_mode(cfg: TrainConfig, steps: int) -> None:
    """Profile mode's own flag rules (UsageError, one line)."""
    if steps <= 0:
        raise UsageError(f"--profile-steps must be a positive integer, got {steps}")
    if cfg.warmup_iters < 1:
        raise UsageError(
            f"profile mode needs --warmup-iters >= 1 (got {cfg.warmup_iters}): otherwise the profiled "
            "step holds cuDNN autotuning, first allocations and, with fp16, GradScaler's skipped "
            "optimizer step"
        )


def profile_steps(
    cfg: TrainConfig,
    device,
    steps: int,
    profiler_start: Callable[[], None] | None = None,
    profiler_stop: Callable[[], None] | None = None,
    mark=nvtx_range,
    cudnn_benchmark: bool = True,
    wrap: Callable[[Prepared], object] | None = None,
) -> str | None:
    """Profile mode: warm up, then `steps` NVTX-marked steps between CUDA profiler start and stop;
    returns the fp32 math in force (device.set_fp32_math).

    Run under `ncu --profile-from-start off` (python -m profiling does that), only the marked
    steps are captured. Start/stop are injectable so the sequence is testable without a GPU.
    `cudnn_benchmark=False` keeps cuDNN's autotuner off, so every run of the program picks the
    same kernels (ncu's application replay modes rerun it once per pass). `wrap(prep)` puts a
    data-parallel engine around the prepared model (a torchrun job's ranks: train/distributed).
    """
    import torch

    check_profile_mode(cfg, steps)
    profiler_start = profiler_start or torch.cuda.profiler.start
    profiler_stop = profiler_stop or torch.cuda.profiler.stop
    with runtime_errors(cfg, device):
        prep = prepare(cfg, device)
        if not cudnn_benchmark:
            torch.backends.cudnn.benchmark = False
        if wrap is not None:
            wrap(prep)
        if cfg.compile:
            prep.parts.model = compile_model(prep.parts.model)
        for _ in range(cfg.warmup_iters):
            prep.step()
        batches = [prep.source.next() for _ in range(steps)]  # loading is not what ncu measures
        dev.synchronize(device)
        prep.parts.mark = mark
        profiler_start()
        for x, y in batches:
            train_step(prep.parts, x, y)
        dev.synchronize(device)
        profiler_stop()
    return prep.fp32_math
