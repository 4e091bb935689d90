"""The command-line flags of `python -m train.complexity` and their parsing into a ComplexityConfig."""

from __future__ import annotations

import argparse
import re
from dataclasses import fields

from common.cli import ArgumentParser, split_words
from common.errors import UsageError
from train.complexity.config import ComplexityConfig


def _int_list(values, flag: str) -> list[int]:
    out = []
    for token in split_words(values):
        try:
            out.append(int(token))
        except ValueError:
            raise UsageError(f"{flag} takes whole numbers, got {token!r}") from None
    return out


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog="python -m train.complexity",
        description="Parameters, FLOPs, activation memory and predicted training memory per model and batch "
        "size, measured at batch 1 and 2 and scaled linearly; logged as a `complexity` MLflow run.",
    )
    d = ComplexityConfig(env_label="x")
    p.add_argument(
        "--models",
        nargs="+",
        default=list(d.models),
        help="torchvision classifiers (space or comma separated)",
    )
    p.add_argument(
        "--batch-sizes",
        nargs="+",
        default=[str(b) for b in d.batch_sizes],
        help="batch sizes to predict for",
    )
    p.add_argument(
        "--image-size", type=int, default=d.image_size, help="input height and width (pixels)"
    )
    p.add_argument("--optimizer", default=d.optimizer, help="sgd (momentum 0.9), adam or adamw")
    p.add_argument("--precision", default=d.precision, help="fp32, bf16 or fp16 (autocast)")
    p.add_argument(
        "--device", default=d.device, help="auto | cpu | cuda | cuda:N | mps (where to measure)"
    )
    p.add_argument("--num-classes", type=int, default=d.num_classes, help="classifier outputs")
    p.add_argument(
        "--device-memory",
        default=None,
        help="memory to fit into, e.g. 16GiB (2^30), 16GB (10^9), 512MiB; default: the device's "
        "(CUDA total memory; CPU: available RAM)",
    )
    p.add_argument(
        "--validate-rss",
        nargs="?",
        const="true",
        default="auto",
        metavar="{auto,true,false}",
        help="check the prediction against the RSS growth of one real step (fresh process per model and "
        "batch); auto (default) = on for --device cpu, off elsewhere; false turns it off",
    )
    p.add_argument(
        "--rss-batch-sizes",
        nargs="+",
        default=[str(b) for b in d.rss_batch_sizes],
        help="batch sizes of the RSS check",
    )
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument(
        "--env-label", default=None, help="name of this environment (default: host name)"
    )
    _add_output_flags(p)
    return p


def _add_output_flags(p: argparse.ArgumentParser) -> None:
    """Where the result goes: the MLflow experiment, --out files, the console."""
    p.add_argument(
        "--experiment",
        default=None,
        help="MLflow experiment name (default: MLFLOW_EXPERIMENT_NAME or Default)",
    )
    p.add_argument(
        "--out", default=None, help="also write the tables (CSV, Markdown) into this folder"
    )
    p.add_argument(
        "--no-track", action="store_true", help="do not log an MLflow run (print, and write --out)"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def config_from_args(args: argparse.Namespace) -> ComplexityConfig:
    kwargs = {
        f.name: getattr(args, f.name)
        for f in fields(ComplexityConfig)
        if getattr(args, f.name, None) is not None
    }
    kwargs["models"] = split_words(args.models)
    kwargs["batch_sizes"] = _int_list(args.batch_sizes, "--batch-sizes")
    kwargs["rss_batch_sizes"] = _int_list(args.rss_batch_sizes, "--rss-batch-sizes")
    try:
        return ComplexityConfig(**kwargs)
    except ValueError as exc:
        raise UsageError(_flag_message(str(exc))) from None


def _flag_message(text: str) -> str:
    """'batch_sizes must ...' -> '--batch-sizes must ...' (the user typed flags)."""
    m = re.match(r"^(\w+)(:?\s)(.*)$", text)
    if m and m.group(1) in {f.name for f in fields(ComplexityConfig)}:
        return f"--{m.group(1).replace('_', '-')}{m.group(2)}{m.group(3)}"
    return text
