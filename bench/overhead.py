"""Harness overhead: the measured loop of python -m train versus a bare training loop.

Both loops run the same prepared model, optimizer and resident batch in one process, in short
alternating blocks (A B, B A, A B, ...) so that bursts of load from other processes on a shared
machine hit both alike, and the median of the per-pair ratios discards the pairs a burst did hit.
The harness block is train.timing.measure with the device-synchronising clock and the tqdm progress
update the CLI uses (rendering to /dev/null); the bare block just calls the step. Reported: median
over pairs of harness/bare wall time, with the interquartile range, and an A/A control (bare vs
bare, same schedule) that shows the noise floor of that comparison on this machine.

Because that floor is about ±1-2 % on a shared 2-core machine, the harness's own cost is also
measured directly: the same loop around a step that does nothing, per step, as a fraction of the
bare step time. That figure is what the harness adds, free of the model's timing noise.

    python -m bench.overhead [--model resnet18 --batch 8 --image-size 64 --iters 5 --rounds 40]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from bench.pairing import describe, pairs

os.environ.setdefault("DS_ACCELERATOR", "cpu")  # before anything imports deepspeed (train does)


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m bench.overhead",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--iters", type=int, default=5, help="steps per block")
    ap.add_argument("--rounds", type=int, default=40, help="pairs of blocks")
    return ap.parse_args()


def main() -> None:
    from train import device as dev
    from train.bench import prepare, preflight
    from train.config import TrainConfig
    from train.timing import make_clock

    args = parse()
    cfg = TrainConfig(
        model=args.model, batch_size=args.batch, image_size=args.image_size, device=args.device
    )
    device = preflight(cfg)
    prep = prepare(cfg, device)
    for _ in range(5):  # warm up
        prep.step()
    clock = make_clock(lambda: dev.synchronize(device))
    devnull = open(os.devnull, "w")

    def harness() -> float:
        return harness_s(prep.step, args.iters, clock, devnull, lambda: dev.synchronize(device))

    def bare() -> float:
        dev.synchronize(device)
        t0 = time.perf_counter()
        for _ in range(args.iters):
            prep.step()
        dev.synchronize(device)
        return time.perf_counter() - t0

    ratios = pairs(harness, bare, args.rounds)
    control = pairs(bare, bare, args.rounds)
    bare_step_s = statistics.median(bare() for _ in range(5)) / args.iters

    overhead_s = harness_cost_s(clock, devnull)

    print(
        f"{cfg.model} b{cfg.batch_size} {cfg.image_size}px on {device.type}, {args.rounds} block pairs x {args.iters} steps:"
    )
    print(f"  harness/bare wall time: {describe(ratios)}")
    print(f"  bare/bare (A/A control): {describe(control)}")
    print(
        f"  harness cost per step: {overhead_s * 1e6:.1f} us = {overhead_s / bare_step_s:.5f} of a "
        f"{bare_step_s * 1e3:.1f} ms step -> expected ratio {1 + overhead_s / bare_step_s:.5f}; goal <= 1.01"
    )


def harness_s(step, n: int, clock, out, finish=lambda: None) -> float:
    """Wall seconds of the harness's loop over `n` calls of `step`: train.timing.measure with the
    clock and the progress update the CLI uses (rendering to `out`), then `finish()` (a sync)."""
    from tqdm import tqdm

    from train.timing import measure

    bar = tqdm(total=n, mininterval=0.5, leave=False, file=out)
    t0 = time.perf_counter()
    measure(
        step,
        n,
        clock,
        on_step=lambda i, dt: (bar.update(1), bar.set_postfix_str(f"{dt * 1e3:.1f} ms/step")),
    )
    finish()
    elapsed = time.perf_counter() - t0
    bar.close()
    return elapsed


def harness_cost_s(clock, out, n: int = 2000) -> float:
    """Seconds per step of the harness's loop (harness_s) around a step that does nothing."""
    return harness_s(lambda: None, n, clock, out) / n


if __name__ == "__main__":
    main()
