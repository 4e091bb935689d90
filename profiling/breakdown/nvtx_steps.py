"""`python -m profiling.breakdown.nvtx_steps <train flags> --profile-steps K`: profile mode with
module NVTX ranges, the program `python -m profiling --nvtx-modules` runs under ncu.

The train command's own profile mode (`train.profile_mode.profile_steps`: warmup, then K marked steps of
the one `train_step` between cudaProfilerStart and Stop), with two additions that train does not
need to know about: its `wrap` hook attaches a Tracker pushing one NVTX range per module call
(`module: <path>`, profiling.breakdown.hooks), and its profiler start and stop open and close
torch.autograd.profiler.emit_nvtx around the marked steps, which names every op's range
`<op>, seq = n` and every backward node's with the number of the forward op that made it. An
import of the capture (`python -m profiling --import`) then attributes every kernel to its module
(profiling/breakdown/ncu.py) and logs layers.csv with measured FLOPs and DRAM bytes.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Callable

from common import console
from common.cli import cli_entry
from common.errors import UsageError
from profiling.breakdown.hooks import Tracker
from train import bench, profile_mode
from train.config import config_from_args
from train.device import fp32_math_note

MODULE = "profiling.breakdown.nvtx_steps"


def program(train_program: list[str]) -> list[str]:
    """`python -m train <flags> --profile-steps K ...` as this module's command line."""
    argv = list(train_program)
    i = argv.index("-m")
    if argv[i + 1] != "train":
        raise ValueError(f"not a `python -m train` command: {argv!r}")
    argv[i + 1] = MODULE
    return argv


def hooks(cfg, start: Callable[[], None], stop: Callable[[], None]):
    """(wrap, profiler_start, profiler_stop) for train's profile_steps: module ranges from the
    first step, emit_nvtx around the marked ones."""
    import torch

    stack = contextlib.ExitStack()

    def wrap(prep) -> None:
        Tracker(prep.model, cfg.model, ranges=False, nvtx=True, grad_markers=False).attach()

    def profiler_start() -> None:
        stack.enter_context(torch.autograd.profiler.emit_nvtx(record_shapes=False))
        start()

    def profiler_stop() -> None:
        stop()
        stack.close()

    return wrap, profiler_start, profiler_stop


@cli_entry
def main(argv: list[str] | None = None) -> int:
    import torch

    from train.__main__ import build_parser  # the script of python -m train: imported when run

    args = build_parser().parse_args(argv)
    cfg = config_from_args(args)
    if cfg.is_distributed:
        raise UsageError("--nvtx-modules profiles one process: drop --distributed")
    profile_mode.check_profile_mode(cfg, args.profile_steps)
    if not torch.cuda.is_available():
        raise UsageError("module NVTX ranges are for ncu on an NVIDIA GPU (CUDA is not available)")
    if cfg.device == "auto":
        cfg.device = "cuda"
    device = bench.preflight(cfg)
    wrap, start, stop = hooks(cfg, torch.cuda.profiler.start, torch.cuda.profiler.stop)
    fp32_math = profile_mode.profile_steps(
        cfg,
        device,
        args.profile_steps,
        profiler_start=start,
        profiler_stop=stop,
        cudnn_benchmark=not args.no_cudnn_benchmark,
        wrap=wrap,
    )
    # the line train's profile mode prints: python -m profiling reads the fp32 math back from it
    console.info(
        f"profiled {args.profile_steps} step(s) of {cfg.run_name()} with module ranges "
        f"{fp32_math_note(fp32_math)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
