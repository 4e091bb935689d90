"""The RSS check of the memory model: resident-set growth of ONE training step on CPU.

`measure_step_rss` (the parent, python -m train.complexity) runs `python -m train.complexity.rss_step` in a
fresh subprocess per measurement; that program measures in its own process and prints one JSON
line: the RSS before the step (model and optimizer built, nothing else) and the peak RSS during the
step, which includes creating its input batch, the forward, backward and first optimizer step
(gradients and optimizer state appear in this step).

Peak RSS comes from Linux's VmHWM after resetting it (`echo 5 > /proc/self/clear_refs`) just
before the step. `getrusage().ru_maxrss` is NOT clean in a fresh subprocess on Linux: exec() keeps
the larger of the old and new peak, and Python's subprocess starts children with vfork, whose "old"
memory is the parent's, so a child of a 1 GB parent reports ru_maxrss >= 1 GB from its first line.
ru_maxrss is the fallback where /proc is missing (macOS), and then the result says so.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from common import console
from common.errors import BenchError
from train import device as dev
from train.data import synthetic_source
from train.models import build_model
from train.step import StepParts, make_optimizer, train_step

ROOT = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------ the parent: run the probe
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


def probe_argv(
    model: str, batch_size: int, image_size: int, optimizer: str, precision: str, num_classes: int
) -> list[str]:
    """The command that measures one step's RSS growth (train/complexity/rss_step.py)."""
    return [
        sys.executable,
        "-m",
        "train.complexity.rss_step",
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


# ------------------------------------------------------------------ the probe (this process)
def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _rss_bytes() -> float:
    import psutil

    return float(psutil.Process().memory_info().rss)


def measure(
    model_name: str,
    batch_size: int,
    image_size: int,
    optimizer: str,
    precision: str,
    num_classes: int,
) -> dict:
    import torch

    device = torch.device("cpu")
    torch.manual_seed(0)
    model = build_model(model_name, num_classes, image_size).to(device)
    model.train()
    parts = StepParts(
        model,
        make_optimizer(optimizer, model.parameters(), 0.01),
        dev.autocast_context(precision, device),
    )
    gc.collect()
    reset = _reset_peak()
    before = _rss_bytes()
    x, y = synthetic_source(batch_size, image_size, num_classes, device, False, 0).next()
    train_step(parts, x, y)
    hwm = _status_kib("VmHWM")
    if reset and hwm is not None:
        peak, source = hwm * 1024.0, "VmHWM reset before the step"
    else:
        peak, source = dev.max_rss_bytes(), "ru_maxrss"
    return {
        "batch_size": batch_size,
        "rss_before_bytes": before,
        "peak_rss_bytes": peak,
        "peak_source": source,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m train.complexity.rss_step", description=__doc__.splitlines()[0]
    )
    p.add_argument("--model", required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--optimizer", default="sgd")
    p.add_argument("--precision", default="fp32")
    p.add_argument("--num-classes", type=int, default=1000)
    a = p.parse_args(argv)
    console.result(
        json.dumps(measure(a.model, a.batch, a.image_size, a.optimizer, a.precision, a.num_classes))
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
