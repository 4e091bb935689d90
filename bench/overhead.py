"""Harness overhead: the measured loop of python -m train versus a bare training loop.

Both loops run the same prepared model, optimizer and resident batch in one process, in
alternating rounds (A B A B ...) so drift on a shared machine hits both alike. The harness loop is
train.timing.measure with the device-synchronising clock and the tqdm progress update the CLI uses;
the bare loop just calls the step. Reported: median over rounds of harness/bare wall time per step.

    python bench/overhead.py [--model resnet18 --batch 8 --image-size 64 --iters 20 --rounds 7]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("DS_ACCELERATOR", "cpu")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()

    from tqdm import tqdm

    from train import device as dev
    from train.bench import prepare, preflight
    from train.config import TrainConfig
    from train.timing import make_clock, measure

    cfg = TrainConfig(model=args.model, batch_size=args.batch, image_size=args.image_size, device=args.device)
    device = preflight(cfg)
    prep = prepare(cfg, device)
    for _ in range(5):  # warm up
        prep.step()
    clock = make_clock(lambda: dev.synchronize(device))

    def harness() -> float:
        bar = tqdm(total=args.iters, mininterval=0.5, leave=False, file=sys.stderr)
        t0 = time.perf_counter()
        measure(prep.step, args.iters, clock, on_step=lambda i, dt: (bar.update(1), bar.set_postfix_str(f"{dt * 1e3:.1f} ms/step")))
        dev.synchronize(device)
        elapsed = time.perf_counter() - t0
        bar.close()
        return elapsed

    def bare() -> float:
        dev.synchronize(device)
        t0 = time.perf_counter()
        for _ in range(args.iters):
            prep.step()
        dev.synchronize(device)
        return time.perf_counter() - t0

    ratios = []
    for r in range(args.rounds):
        a, b = (harness(), bare()) if r % 2 == 0 else tuple(reversed((bare(), harness())))
        ratios.append(a / b)
        print(f"round {r + 1}: harness {a / args.iters * 1e3:.2f} ms/step, bare {b / args.iters * 1e3:.2f} ms/step, ratio {a / b:.4f}")
    med = statistics.median(ratios)
    print(f"{cfg.model} b{cfg.batch_size} {cfg.image_size}px on {device.type}: harness/bare = {med:.4f} "
          f"(median of {args.rounds} rounds x {args.iters} steps; min {min(ratios):.4f}, max {max(ratios):.4f}); "
          f"goal <= 1.01")


if __name__ == "__main__":
    main()
