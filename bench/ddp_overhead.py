"""Harness overhead on a 2-process DDP step: the measured loop of a distributed run versus a bare
DDP training loop, side by side in one torchrun job.

Both loops drive the same DistributedDataParallel model, optimizer and resident batch on every
rank (gloo on CPU, nccl on CUDA), in alternating blocks (A B, B A, ...) so that bursts of load from
other processes hit both alike; all ranks run the same schedule, with a barrier before each block
(outside the timed block). The harness block is what `python -m train --distributed ddp` times:
train.bench.measure_steps (train_step through the engine's StepParts, a device-synchronising clock
around each step, the progress-bar update, rendering to /dev/null). The bare block is the loop a
user writes: zero_grad, forward, cross-entropy, backward, step. Reported by rank 0: the median over
pairs of harness/bare wall time of rank 0's blocks with the interquartile range, and an A/A
control (bare vs bare, same schedule) showing the noise floor of the comparison on this machine,
and, free of that noise, the harness's own cost per step: its loop around a step that does nothing,
as a fraction of the bare step.

    python -m bench.ddp_overhead [--nproc 2 --model resnet18 --batch 8 --image-size 64 --iters 5 --rounds 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("DS_ACCELERATOR", "cpu")  # before anything imports deepspeed (train does)


def parse(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m bench.ddp_overhead",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--nproc", type=int, default=2, help="processes (torchrun --nproc-per-node)")
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--batch", type=int, default=8, help="per process")
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--iters", type=int, default=5, help="steps per block")
    ap.add_argument("--rounds", type=int, default=20, help="pairs of blocks")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def launch(args: argparse.Namespace) -> int:
    """Run this module as a torchrun job of args.nproc processes."""
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(args.nproc),
        "-m",
        "bench.ddp_overhead",
        "--worker",
        # the worker's own flags, not sys.argv: torchrun refuses an abbreviation of its own flags
        # anywhere on its command line (--nproc could be --nproc-per-node)
        *("--model", args.model, "--batch", str(args.batch), "--image-size", str(args.image_size)),
        *("--device", args.device, "--iters", str(args.iters), "--rounds", str(args.rounds)),
    ]
    return subprocess.run(argv).returncode


def worker(args: argparse.Namespace) -> None:
    from bench.overhead import harness_cost_s
    from bench.pairing import pairs
    from train import device as dev
    from train.timing import make_clock

    cfg, ctx, prep = _start(args)
    devnull = open(os.devnull, "w")
    harness, bare = _loops(args, cfg, ctx, prep, devnull)
    ratios = pairs(harness, bare, args.rounds)
    control = pairs(bare, bare, args.rounds)
    step_s = statistics.median(bare() for _ in range(3)) / args.iters
    # the harness around a step that does nothing: its own per-step cost, free of the model's noise
    noop_s = harness_cost_s(make_clock(lambda: dev.synchronize(ctx.device)), devnull)
    ctx.close()
    if ctx.rank == 0:
        _report(args, cfg, ctx, ratios, control, step_s, noop_s)


def _start(args: argparse.Namespace):
    """This rank's config, job context and prepared DDP training, warmed up."""
    from train.bench import prepare, preflight
    from train.config import TrainConfig
    from train.distributed import engines
    from train.distributed.context import job_env, start

    env = job_env()
    cfg = TrainConfig(
        model=args.model,
        batch_size=args.batch,
        image_size=args.image_size,
        device=args.device,
        iters=args.iters,
        warmup_iters=0,
        distributed="ddp",
        world_size=env.world_size,
        env_label="bench",
    )
    ctx = start(cfg, preflight(cfg), env)
    prep = prepare(cfg, ctx.device)
    engines.wrap(prep, cfg, ctx)
    for _ in range(5):  # warm up (DDP rebuilds its buckets after the first step)
        prep.step()
    return cfg, ctx, prep


def _loops(args: argparse.Namespace, cfg, ctx, prep, devnull):
    """The two timed blocks, each returning its wall seconds: the harness's loop and a bare one."""
    import torch.nn.functional as F
    from tqdm import tqdm

    from train import device as dev
    from train.bench import measure_steps

    model, optimizer = prep.parts.model, prep.parts.optimizer
    x, y = prep.source.next()  # synthetic: the resident batch the harness's steps use too

    def harness() -> float:
        ctx.barrier()
        bar = tqdm(total=args.iters, mininterval=0.5, leave=False, file=devnull)
        t0 = time.perf_counter()
        measure_steps(prep, bar)
        dev.synchronize(ctx.device)
        elapsed = time.perf_counter() - t0
        bar.close()
        return elapsed

    def bare() -> float:
        ctx.barrier()
        dev.synchronize(ctx.device)
        t0 = time.perf_counter()
        for _ in range(args.iters):
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        dev.synchronize(ctx.device)
        return time.perf_counter() - t0

    return harness, bare


def _report(args, cfg, ctx, ratios, control, step_s: float, noop_s: float) -> None:
    from bench.pairing import describe

    print(
        f"{cfg.model} b{cfg.batch_size} per process, {cfg.image_size}px, DDP on "
        f"{ctx.world_size} x {ctx.device.type} ({ctx.backend}), {args.rounds} block pairs x "
        f"{args.iters} steps, bare step {step_s * 1e3:.1f} ms:"
    )
    print(f"  harness/bare wall time: {describe(ratios)}; goal <= 1.02")
    print(f"  bare/bare (A/A control): {describe(control)}")
    print(
        f"  harness cost per step (around a no-op step): {noop_s * 1e6:.1f} us = "
        f"{noop_s / step_s:.5f} of a step -> expected ratio {1 + noop_s / step_s:.5f}"
    )


def main(argv=None) -> int:
    args = parse(argv)
    if args.worker:
        worker(args)
        return 0
    return launch(args)


if __name__ == "__main__":
    raise SystemExit(main())
