"""Do the breakdown's shares hold on a busy machine?

The same breakdown (the command's own record, attribute and rows; no MLflow) of one config, its
recorded steps alternating between alone and beside competing processes (busy Python loops, one
per core by default, stopped with SIGSTOP before an alone step and resumed with SIGCONT before a
beside step): paired steps of one model in one process, so that what moves a share between the
conditions is the load and not where this run's activations landed in memory (two breakdowns of
one config alone differed by up to 9 points in a row's share on a quiet machine: docs/breakdown.md).
Each step is attributed on its own; for every top-level row of the default view (the modules a
user reads first, forward and backward) the bench takes the median, over neighbouring (alone,
beside) pairs of steps, of the change in its share, by both clocks: the main thread's CPU clock
(what the shares use on the CPU) and the wall clock; the loops are pinned one per CPU and this
process to the first (`competitors`). The control: the same between an alone step and the next
alone one, the spread of the measure itself.

    python -m bench.breakdown_load [--model resnet18 --batch 4 --image-size 64 --runs 2
                                    --competitors 2 --steps 10]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys

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


def paired_shift(pairs: list[tuple[Shares, Shares]]) -> tuple[tuple[str, str] | None, float, list]:
    """The row whose share moves most from the first to the second step of a pair, in points:
    per row the median over pairs of (second - first), a row missing from a step counting 0;
    with that row's per-pair differences (points). Pairs of neighbouring steps of one breakdown:
    a change of state between breakdowns, or in the middle of one (where its buffers landed,
    whether the allocator hands out fresh pages), moves a few pairs, not the median."""
    keys = set().union(*(set(a) | set(b) for a, b in pairs)) if pairs else set()
    if not keys:
        return None, 0.0, []
    diffs = {k: [100 * (b.get(k, 0.0) - a.get(k, 0.0)) for a, b in pairs] for k in keys}
    med = {k: statistics.median(v) for k, v in diffs.items()}
    key = max(keys, key=lambda k: (abs(med[k]), k))
    return key, abs(med[key]), diffs[key]


def step_shares(rec) -> list[dict[str, Shares]]:
    """Each recorded step of `rec` (recording.Recording) attributed on its own: its top-level shares
    by both clocks (`share`: as the breakdown logs them, `wall`)."""
    from profiling.breakdown import names
    from profiling.breakdown.attribute import attribute
    from profiling.breakdown.roof import Ceilings
    from profiling.breakdown.table import ModuleTree, rows

    tree = ModuleTree(rec.tracker.root, list(rec.tracker.paths), rec.tracker.leaves)
    ranges = sorted(
        (e for e in rec.events if e.name.startswith(names.STEP)), key=lambda e: e.start_ns
    )
    out = []
    for s, wall_s in zip(ranges, rec.step_wall_s):
        mine = [e for e in rec.events if s.start_ns <= e.start_ns <= s.end_ns]
        att = attribute(mine, rec.tracker.owner_of_seq, rec.time_source)
        table = rows(tree, att, {}, {}, wall_s, Ceilings())
        out.append(
            {
                "share": top_shares(table, tree, "share"),
                "wall": top_shares(table, tree, "wall"),
                "clock": att.share_clock,
            }
        )
    return out


def one_breakdown(cfg, device, steps: int, procs: list[subprocess.Popen]) -> list[dict]:
    """One breakdown of `cfg` whose even recorded steps run alone (the competitors stopped) and
    odd ones beside them (resumed): each step's shares (`step_shares`) with its condition."""
    from profiling.breakdown.recording import record

    signal_all(procs, signal.SIGSTOP)  # step 0 alone
    try:
        rec = record(cfg, device, steps, walls=Alternating(procs))
    finally:
        signal_all(procs, signal.SIGSTOP)
    out = step_shares(rec)
    for i, step in enumerate(out):
        step["beside"] = bool(i % 2)
    return out


class Alternating(list):
    """The `walls` list record() appends each recorded step's seconds to as it ends: after step i
    it stops the competitors before an even step (alone) and resumes them before an odd one
    (beside), between the two steps as the recording's loop runs them."""

    def __init__(self, procs: list[subprocess.Popen]) -> None:
        super().__init__()
        self.procs = procs

    def append(self, wall_s: float) -> None:
        super().append(wall_s)
        signal_all(self.procs, signal.SIGCONT if len(self) % 2 else signal.SIGSTOP)


def signal_all(procs: list[subprocess.Popen], sig: int) -> None:
    for p in procs:
        p.send_signal(sig)


def competitors(n: int) -> list[subprocess.Popen]:
    """`n` busy Python loops (this bench's own processes; ended by `stop`), the k-th held to the
    k-th CPU this process may use, and this process to the first: the first loop shares the
    training thread's CPU (it preempts it), the next ones run beside it. Unpinned, a loop resumed
    for one 60 ms step lands on whichever CPU is free and the training thread is not preempted at
    all (its steps' wall time equalled their CPU time, measured)."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    procs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
        for _ in range(n)
    ]
    if cpus:
        for k, p in enumerate(procs):
            os.sched_setaffinity(p.pid, {cpus[k % len(cpus)]})
        os.sched_setaffinity(0, {cpus[0]})
    return procs


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.send_signal(signal.SIGCONT)  # a stopped process does not act on SIGTERM until resumed
        p.terminate()
    for p in procs:
        p.wait(timeout=30)


def summarise(runs: list[list[dict]]) -> list[tuple[str, str, float]]:
    """(clock, row, points) by each clock: the largest shift of a top-level row's share from an
    alone step to the beside step after it (`paired_shift`; each run's steps in order, even alone,
    odd beside), and the control: the same from an alone step to the next alone step."""
    out = []
    for clock in ("share", "wall"):
        for name, gap, first in ((clock, 1, 0), (f"{clock} control", 2, 0)):
            pairs = [
                (run[i][clock], run[i + gap][clock])
                for run in runs
                for i in range(first, len(run) - gap, 2)
            ]
            key, pts, per_pair = paired_shift(pairs)
            row = "-"
            if key:
                row = f"{' '.join(key)}; per pair " + " ".join(f"{d:+.1f}" for d in per_pair)
            out.append((name, row, pts))
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
    ap.add_argument(
        "--steps",
        type=int,
        default=10,
        help="recorded steps per breakdown, alone and beside in turn",
    )
    ap.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    args = ap.parse_args()

    import torch

    from train.bench import preflight
    from bench.breakdown_overhead import bench_config

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    cfg = bench_config(args.model, args.batch, args.image_size, args.steps)
    device = preflight(cfg)
    steps = max(2, args.steps)
    runs: list[list[dict]] = []
    procs = competitors(args.competitors)
    try:
        for i in range(args.runs):
            print(
                f"run {i + 1}/{args.runs}: {steps} recorded steps, alone and beside "
                f"{args.competitors} busy loops in turn; load {_load()}",
                flush=True,
            )
            runs.append(one_breakdown(cfg, device, steps, procs))
    finally:
        stop(procs)
    print(
        f"\n{args.model} b{args.batch} {args.image_size}px, {args.runs} runs of {steps} steps, "
        f"alone and beside in turn; shares by {runs[0][0]['clock']}; load average now {_load()}"
    )
    for clock, row, pts in summarise(runs):
        verdict = "" if "control" in clock else ("  met" if pts <= GOAL_POINTS else "  NOT MET")
        name = {"share": "shares (as logged)", "wall": "wall-clock shares"}.get(clock, clock)
        print(
            f"  {name:<28} largest shift {pts:5.2f} points ({row}); goal <= {GOAL_POINTS:g}{verdict}"
        )


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
