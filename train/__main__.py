"""`python -m train`: fixed-iteration training benchmark of a torchvision model, logged to MLflow.

Parses the flags, builds the config, runs it and closes (the run: train/run.py; its measurement:
train/bench.py). `--profile-steps` runs profile mode instead (train/profile_mode.py); under
torchrun with `--distributed`, each process runs its rank's part (train/distributed/job.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from common import flags
from common.cli import ArgumentParser, cli_entry
from common.errors import UsageError
from train.config import add_config_args, config_from_args
from train.distributed.context import job_env
from train.distributed.job import run_rank
from train.memory_check import ENV as MEMORY_CHECK_ENV
from train.profile_mode import ProfileMode, profile
from train.run import RunOptions, run
from train.result_text import say_result


@dataclass
class TrainCommand:
    """How `python -m train` records and shows a run, or profiles it (what it measures: TrainConfig)."""

    experiment: str | None = flags.experiment()
    no_progress: bool = flags.no_progress()
    no_system_metrics: bool = field(default=False, metadata=flags.SWITCH)
    """do not sample CPU/GPU/memory into the run."""
    no_memory_check: bool = field(default=False, metadata=flags.SWITCH)
    """run a batch even when its activations, estimated from the counted steps, need more memory
    than the device has free (default: refuse it in one line; docs/train.md)."""
    result_file: str | None = field(default=None, metadata={"hidden": True})
    """a sweep's torchrun job: rank 0 writes its record here and logs no run."""
    profile_steps: int = field(default=0, metadata={"metavar": "K"})
    """profile mode (under ncu; see python -m profiling): K NVTX-marked steps between
    cudaProfilerStart/Stop after warmup; logs no run."""
    no_cudnn_benchmark: bool = field(default=False, metadata=flags.SWITCH)
    """profile mode: keep cuDNN's autotuner off, so every run picks the same kernels (ncu's
    application and app-range replay rerun the program once per pass)."""

    def run_options(self) -> RunOptions:
        return RunOptions(self.experiment, not self.no_progress, not self.no_system_metrics)

    def profile_mode(self) -> ProfileMode | None:
        """What --profile-steps asks for; None: a timed run."""
        return (
            ProfileMode(self.profile_steps, not self.no_cudnn_benchmark)
            if self.profile_steps
            else None
        )


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="python -m train",
        description="Time a fixed number of training steps of a torchvision model and log the run to MLflow "
        "(MLFLOW_TRACKING_URI; default sqlite:///mlflow.db).",
    )
    add_config_args(parser)
    flags.add_flags(parser.add_argument_group("output"), TrainCommand)
    return parser


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    command = flags.build(TrainCommand, args)
    if command.no_memory_check:  # read by train/memory_check.py, here and in torchrun's ranks
        os.environ[MEMORY_CHECK_ENV] = "off"
    cfg = config_from_args(args)
    mode = command.profile_mode()
    if cfg.is_distributed:
        return run_rank(cfg, command.run_options(), mode, command.result_file)
    _single_process()
    if mode:
        return profile(cfg, mode)
    session, result = run(cfg, command.run_options())
    say_result(session)
    return 0


def _single_process() -> None:
    if job_env().world_size > 1:
        raise UsageError(
            "this is one of several torchrun processes but no engine was given: add --distributed "
            "ddp or --distributed deepspeed (else every process logs a run of its own)"
        )


if __name__ == "__main__":
    raise SystemExit(main())
