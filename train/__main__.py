"""`python -m train`: fixed-iteration training benchmark of a torchvision model, logged to MLflow.

Parses the flags, builds the config, runs it and closes (the run: train/run.py; its measurement:
train/bench.py). `--profile-steps` runs profile mode instead (train/profile_mode.py); under
torchrun with `--distributed`, each process runs its rank's part (train/distributed/job.py).
"""

from __future__ import annotations

import argparse
import os

from common.cli import ArgumentParser, cli_entry
from common.errors import UsageError
from train.config import TrainConfig, add_config_args, config_from_args
from train.distributed.context import job_env
from train.distributed.job import run_rank
from train.profile_mode import ProfileMode, profile
from train.run import RunOptions, run
from train.summary import say_result


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="python -m train",
        description="Time a fixed number of training steps of a torchvision model and log the run to MLflow "
        "(MLFLOW_TRACKING_URI; default sqlite:///mlflow.db).",
    )
    add_config_args(parser)
    out = parser.add_argument_group("output")
    out.add_argument(
        "--experiment",
        default=None,
        help="MLflow experiment name (default: MLFLOW_EXPERIMENT_NAME or Default)",
    )
    out.add_argument("--no-progress", action="store_true", help="no progress bar")
    out.add_argument(
        "--no-system-metrics", action="store_true", help="do not sample CPU/GPU/memory into the run"
    )
    out.add_argument(
        "--no-memory-check",
        action="store_true",
        help="run a batch even when its activations, estimated from the counted steps, need more "
        "memory than the device has free (default: refuse it in one line; docs/train.md)",
    )
    out.add_argument(
        "--result-file",
        default=None,
        help=argparse.SUPPRESS,  # a sweep's torchrun job: rank 0 writes its record here, logs no run
    )
    out.add_argument(
        "--profile-steps",
        type=int,
        default=0,
        metavar="K",
        help="profile mode (under ncu; see python -m profiling): K NVTX-marked steps between "
        "cudaProfilerStart/Stop after warmup; logs no run",
    )
    out.add_argument(
        "--no-cudnn-benchmark",
        action="store_true",
        help="profile mode: keep cuDNN's autotuner off, so every run picks the same kernels (ncu's "
        "application and app-range replay rerun the program once per pass)",
    )
    return parser


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.no_memory_check:  # read by train/memory_check.py, here and in torchrun's ranks
        os.environ["ROOFLINE_MEMORY_CHECK"] = "off"
    cfg = _config(args)
    options = RunOptions(args.experiment, not args.no_progress, not args.no_system_metrics)
    mode = (
        ProfileMode(args.profile_steps, not args.no_cudnn_benchmark) if args.profile_steps else None
    )
    if cfg.is_distributed:
        return run_rank(cfg, options, mode, args.result_file)
    _single_process()
    if mode:
        return profile(cfg, mode)
    session, result = run(cfg, options)
    say_result(cfg, session, result)
    return 0


def _config(args: argparse.Namespace) -> TrainConfig:
    try:
        return config_from_args(args)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _single_process() -> None:
    if job_env().world_size > 1:
        raise UsageError(
            "this is one of several torchrun processes but no engine was given: add --distributed "
            "ddp or --distributed deepspeed (else every process logs a run of its own)"
        )


if __name__ == "__main__":
    raise SystemExit(main())
