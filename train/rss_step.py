"""`python -m train.rss_step`: resident-set growth of ONE training step on CPU, in this process.

Run by `train.footprint.measure_step_rss` in a fresh subprocess per measurement. Prints one JSON
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
import sys

from common import console


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

    from train import device as dev
    from train.data import synthetic_source
    from train.models import build_model
    from train.step import StepParts, make_optimizer, train_step

    device = torch.device("cpu")
    torch.manual_seed(0)
    model = build_model(model_name, num_classes).to(device)
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
        prog="python -m train.rss_step", description=__doc__.splitlines()[0]
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
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    sys.exit(main())
