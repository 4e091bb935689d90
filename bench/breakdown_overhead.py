"""The breakdown's measures (issue 20), side by side in one run, each next to its goal.

* overhead: plain training steps against breakdown steps (module hooks attached, torch.profiler
  recording with shapes), in one process, in pairs (A B, B A, ...), each step timed by the main
  thread's CPU time (time.thread_time) and by wall time; the median over pairs of B/A, and an A/A
  control (plain vs plain, same schedule) that shows the noise floor of the comparison. Separate
  processes on a shared machine swing +-40 %: only paired steps in one process say anything.
* coverage: one breakdown of the config (the command's own code: record, attribute, rows): the
  share of breakdown_step_s that the named rows hold (all but `unattributed`), the share the
  model's modules hold (forward and backward), the rows' FLOPs against the step's training FLOPs
  (train.bench.count_steps, what a train run logs as train_flops_per_step), the parts' sum against
  the wall time, and the trace's size for one step before and after gzip.
* resnet50 b64 224 px: the whole `python -m profiling --breakdown` command, wall time, in a
  tracking store of its own (--resnet50; minutes on a laptop CPU).

    python -m bench.breakdown_overhead [--models resnet18,mobilenet_v2 --batch 8 --image-size 112
                                        --pairs 12 --resnet50]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("DS_ACCELERATOR", "cpu")  # before anything imports deepspeed (train does)

GOALS = {
    "overhead_thread_cpu": "<= 5 % (median of paired steps)",
    "attributed": ">= 98 %",
    "to_modules": ">= 95 %",
    "flops": "within 1 %",
    "parts": "within 3 %",
    "trace": "<= 1 MB per resnet18 step before gzip",
    "resnet50": "< 180 s",
}


def paired_overhead(cfg, pairs: int) -> dict[str, float]:
    """Median over pairs of breakdown-step / plain-step, by thread CPU time and by wall time, and
    the A/A control's median ratio (plain / plain) for both."""
    from torch.profiler import ProfilerActivity, profile

    from profiling.breakdown import names
    from profiling.breakdown.hooks import Tracker
    from train import device as dev
    from train.bench import prepare, preflight
    from train.step import no_marks, train_step

    device = preflight(cfg)
    prep = prepare(cfg, device)
    batch = prep.source.next()
    for _ in range(3):
        prep.step()

    def timed(step) -> tuple[float, float]:
        dev.synchronize(device)
        c0, w0 = time.thread_time(), time.perf_counter()
        step()
        dev.synchronize(device)
        return time.thread_time() - c0, time.perf_counter() - w0

    def plain() -> tuple[float, float]:
        return timed(lambda: train_step(prep.parts, *batch))

    def recorded() -> tuple[float, float]:
        tracker = Tracker(prep.model, cfg.model).attach()
        prep.parts.mark = tracker.mark
        try:
            with profile(activities=[ProfilerActivity.CPU], record_shapes=True):
                with tracker.span(names.step_range(0)):
                    out = timed(lambda: train_step(prep.parts, *batch))
        finally:
            tracker.detach()
            prep.parts.mark = no_marks
        return out

    recorded()  # the profiler's first start is slow: not in a pair
    cpu, wall, cpu_aa, wall_aa = [], [], [], []
    for i in range(pairs):
        first_plain = i % 2 == 0
        a = plain() if first_plain else None
        b = recorded()
        a = a or plain()
        cpu.append(b[0] / a[0])
        wall.append(b[1] / a[1])
        x, y = plain(), plain()
        cpu_aa.append(y[0] / x[0])
        wall_aa.append(y[1] / x[1])
    med = statistics.median
    return {
        "cpu_ratio": med(cpu),
        "wall_ratio": med(wall),
        "cpu_aa": med(cpu_aa),
        "wall_aa": med(wall_aa),
    }


def range_costs(n: int = 20000) -> dict[str, float]:
    """Microseconds of thread CPU time per profiler range opened and closed (no profiler running):
    record_function's op pair (torch.ops.profiler) and _RecordFunctionFast, which the Tracker uses."""
    import torch
    from torch._C._profiler import _RecordFunctionFast

    enter = torch.ops.profiler._record_function_enter_new
    leave = torch.ops.profiler._record_function_exit._RecordFunction

    def op_pair() -> None:
        leave(enter("module: x", None))

    def fast() -> None:
        with _RecordFunctionFast("module: x"):
            pass

    out = {}
    for name, fn in (("record_function ops", op_pair), ("_RecordFunctionFast", fast)):
        c0 = time.thread_time()
        for _ in range(n):
            fn()
        out[name] = (time.thread_time() - c0) / n * 1e6
    return out


def coverage(cfg, steps: int) -> dict[str, float]:
    """One breakdown of `cfg` (no MLflow): the shares, FLOPs, parts and trace size."""
    from profiling.breakdown.attribute import attribute
    from profiling.breakdown.record import record
    from profiling.breakdown.roof import Ceilings
    from profiling.breakdown.table import ModuleTree, coverage as shares, rows
    from profiling.breakdown.trace import bound_trace
    from train.bench import preflight

    device = preflight(cfg)
    t0 = time.perf_counter()
    rec = record(cfg, device, steps)
    att = attribute(rec.events, rec.tracker.owner_of_seq, rec.time_source)
    tree = ModuleTree(rec.tracker.root, list(rec.tracker.paths), rec.tracker.leaves)
    table = rows(tree, att, rec.counts.flops, rec.counts.bytes, rec.step_mean_s, Ceilings())
    cov = shares(table, rec.step_mean_s)
    gz, facts = bound_trace(rec.trace_json, 1, rec.tracker.owner_of_seq)
    return {
        "attributed": cov["breakdown_attributed_fraction"],
        "to_modules": cov["breakdown_module_fraction"],
        "optimizer": sum(r["time_s"] for r in table if r["module"] == "optimizer")
        / rec.step_mean_s,
        "flops_ratio": cov["breakdown_flops_per_step"] / rec.counts.train_flops,
        "parts_ratio": sum(att.parts_s.values()) / rec.step_mean_s,
        "trace_mb": facts["trace_bytes"] / 1e6,
        "trace_gz_mb": facts["trace_gz_bytes"] / 1e6,
        "step_s": rec.step_mean_s,
        "wall_s": time.perf_counter() - t0,
    }


def resnet50_wall_s(extra: list[str]) -> tuple[float, int]:
    """Seconds of `python -m profiling --breakdown --model resnet50 --batch 64 --image-size 224`,
    and its exit code, in a tracking store of its own."""
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(
            os.environ,
            MLFLOW_TRACKING_URI=f"sqlite:///{tmp}/mlflow.db",
            ROOFLINE_SPOOL_DIR=f"{tmp}/spool",
        )
        env.pop("MLFLOW_RUN_ID", None)
        argv = [
            sys.executable,
            "-m",
            "profiling",
            "--breakdown",
            "--model",
            "resnet50",
            "--batch",
            "64",
            "--image-size",
            "224",
            "--device",
            "cpu",
            *extra,
        ]
        t0 = time.perf_counter()
        done = subprocess.run(argv, env=env, cwd=tmp, capture_output=True, text=True)
        if done.returncode:
            print(done.stderr[-2000:], file=sys.stderr)
        return time.perf_counter() - t0, done.returncode


def report(o: dict[str, float], c: dict[str, float]) -> None:
    """One model's figures, each next to its goal."""
    rows = [
        (
            "overhead, thread CPU",
            f"{o['cpu_ratio'] - 1:+.1%} (A/A control {o['cpu_aa'] - 1:+.1%})",
            GOALS["overhead_thread_cpu"],
        ),
        (
            "overhead, wall",
            f"{o['wall_ratio'] - 1:+.1%} (A/A control {o['wall_aa'] - 1:+.1%})",
            "(for reference)",
        ),
        ("step attributed (named rows)", f"{c['attributed']:.1%}", GOALS["attributed"]),
        (
            "step in modules (fwd + bwd)",
            f"{c['to_modules']:.1%} (optimizer row {c['optimizer']:.1%})",
            GOALS["to_modules"],
        ),
        ("rows' FLOPs / training FLOPs", f"{c['flops_ratio']:.6f}", GOALS["flops"]),
        ("parts' sum / breakdown_step_s", f"{c['parts_ratio']:.4f}", GOALS["parts"]),
        (
            "trace per step",
            f"{c['trace_mb']:.2f} MB ({c['trace_gz_mb']:.3f} MB gzipped)",
            GOALS["trace"],
        ),
        ("step / breakdown wall", f"{c['step_s'] * 1e3:.0f} ms / {c['wall_s']:.0f} s", ""),
    ]
    for what, got, goal in rows:
        print(f"  {what:<32} {got:<40} goal {goal}")


def main() -> None:
    ap = argparse.ArgumentParser(
        prog="python -m bench.breakdown_overhead",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--models", default="resnet18,mobilenet_v2")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--image-size", type=int, default=112)
    ap.add_argument("--pairs", type=int, default=12, help="pairs of plain and breakdown steps")
    ap.add_argument("--steps", type=int, default=3, help="recorded steps of the coverage run")
    ap.add_argument(
        "--resnet50", action="store_true", help="also time the resnet50 b64 224 px command"
    )
    ap.add_argument("--resnet50-flags", default="", help="extra flags for that command")
    args = ap.parse_args()

    from train.config import TrainConfig

    costs = range_costs()
    print(
        "one profiler range (thread CPU): " + ", ".join(f"{k} {v:.2f} us" for k, v in costs.items())
    )

    print(
        f"torch threads: {os.environ.get('OMP_NUM_THREADS', 'default')}; load average {os.getloadavg()}"
    )
    for model in args.models.split(","):
        cfg = TrainConfig(
            model=model,
            batch_size=args.batch,
            image_size=args.image_size,
            device="cpu",
            warmup_iters=2,
            iters=args.steps,
            env_label="bench",
        )
        print(
            f"\n{model} b{args.batch} {args.image_size}px CPU ({args.pairs} pairs, {args.steps} recorded steps)"
        )
        report(paired_overhead(cfg, args.pairs), coverage(cfg, args.steps))
    if args.resnet50:
        wall, rc = resnet50_wall_s(args.resnet50_flags.split())
        print(
            f"\nresnet50 b64 224px breakdown command: {wall:.0f} s (exit {rc}); goal {GOALS['resnet50']}"
        )


if __name__ == "__main__":
    main()
