"""Do the breakdown's shares hold on a busy machine? (issue 30 item 2)

The same breakdown (the command's own record, attribute and rows; no MLflow) of one config, run
alone and beside competing processes (busy Python loops, one per core by default), alternating
(alone, beside, alone, beside, ...). For every top-level row of the default view (the modules a
user reads first, forward and backward) it compares the shares between the two conditions, each
condition the median over its runs, by both clocks: the main thread's CPU clock (what the shares
use on the CPU) and the wall clock. The control: the same comparison between the first two runs
alone, the spread of the measure itself.

    python -m bench.breakdown_load [--model resnet18 --batch 4 --image-size 64 --runs 2
                                    --competitors 2 --steps 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("DS_ACCELERATOR", "cpu")  # before anything imports deepspeed (train does)

GOAL_POINTS = 2.0  # the largest change of a top-level row's share, in percentage points

Shares = dict[tuple[str, str], float]


def top_shares(table: list[dict], tree, clock: str) -> Shares:
    """(module, phase) -> share of the step of the default view's top-level rows, by `clock`:
    `share` as the breakdown logs it (thread CPU on the CPU), or `wall` (time_s over the step's
    wall time, the model and step rows' time_s summed)."""
    from profiling.breakdown.table import view_top

    top = set(view_top(table, tree))
    if clock == "share":
        return {(r["module"], r["phase"]): r["share"] for r in table if r["module"] in top}
    step = sum(r["time_s"] for r in table if r["kind"] in ("model", "step"))
    return {(r["module"], r["phase"]): r["time_s"] / step for r in table if r["module"] in top}


def median_shares(runs: list[Shares]) -> Shares:
    """Per row, the median of its share over runs (a row missing from a run counts 0)."""
    keys = set().union(*runs) if runs else set()
    return {k: statistics.median(r.get(k, 0.0) for r in runs) for k in keys}


def largest_shift(a: Shares, b: Shares) -> tuple[tuple[str, str] | None, float]:
    """The row whose share differs most between `a` and `b`, and by how many points."""
    keys = set(a) | set(b)
    if not keys:
        return None, 0.0
    key = max(keys, key=lambda k: (abs(a.get(k, 0.0) - b.get(k, 0.0)), k))
    return key, 100 * abs(a.get(key, 0.0) - b.get(key, 0.0))


def one_breakdown(cfg, device, steps: int) -> dict[str, Shares]:
    """One breakdown of `cfg`: its top-level shares by both clocks."""
    from profiling.breakdown.attribute import attribute
    from profiling.breakdown.record import record
    from profiling.breakdown.roof import Ceilings
    from profiling.breakdown.table import ModuleTree, rows

    rec = record(cfg, device, steps)
    att = attribute(rec.events, rec.tracker.owner_of_seq, rec.time_source)
    tree = ModuleTree(rec.tracker.root, list(rec.tracker.paths), rec.tracker.leaves)
    table = rows(tree, att, rec.counts.flops, rec.counts.bytes, rec.step_mean_s, Ceilings())
    return {
        "share": top_shares(table, tree, "share"),
        "wall": top_shares(table, tree, "wall"),
        "clock": att.share_clock,
    }


def competitors(n: int) -> list[subprocess.Popen]:
    """`n` busy Python loops (this bench's own processes; ended by `stop`)."""
    return [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
        for _ in range(n)
    ]


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait(timeout=30)


def summarise(alone: list[dict], beside: list[dict]) -> list[tuple[str, str, float]]:
    """(clock, row, points) for the largest shift between the conditions by each clock, and the
    control (the first two alone runs against each other) by each clock."""
    out = []
    for clock in ("share", "wall"):
        key, pts = largest_shift(
            median_shares([r[clock] for r in alone]), median_shares([r[clock] for r in beside])
        )
        out.append((clock, " ".join(key) if key else "-", pts))
        if len(alone) >= 2:
            key, pts = largest_shift(alone[0][clock], alone[1][clock])
            out.append((f"{clock} control", " ".join(key) if key else "-", pts))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(
        prog="python -m bench.breakdown_load",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--runs", type=int, default=2, help="breakdowns per condition")
    ap.add_argument("--competitors", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--steps", type=int, default=3, help="recorded steps per breakdown")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    args = ap.parse_args()

    import torch

    from train.bench import preflight
    from train.config import TrainConfig

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    cfg = TrainConfig(
        model=args.model,
        batch_size=args.batch,
        image_size=args.image_size,
        device="cpu",
        warmup_iters=2,
        iters=args.steps,
        env_label="bench",
    )
    device = preflight(cfg)
    alone, beside = [], []
    for i in range(args.runs):
        print(f"run {i + 1}/{args.runs}: alone, load {_load()}", flush=True)
        alone.append(one_breakdown(cfg, device, args.steps))
        procs = competitors(args.competitors)
        try:
            time.sleep(1.0)  # the loops are running before the breakdown starts
            print(f"run {i + 1}/{args.runs}: beside {args.competitors} busy loops", flush=True)
            beside.append(one_breakdown(cfg, device, args.steps))
        finally:
            stop(procs)
    print(
        f"\n{args.model} b{args.batch} {args.image_size}px, {args.runs} runs a condition, "
        f"shares by {alone[0]['clock']}; load average now {_load()}"
    )
    for clock, row, pts in summarise(alone, beside):
        verdict = "" if "control" in clock else ("  met" if pts <= GOAL_POINTS else "  NOT MET")
        name = {"share": "shares (as logged)", "wall": "wall-clock shares"}.get(clock, clock)
        print(
            f"  {name:<28} largest shift {pts:5.2f} points ({row}); goal <= {GOAL_POINTS:g}{verdict}"
        )


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
