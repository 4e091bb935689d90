"""The what-if loop's own cost against the train runs it makes, side by side in one store:

* the loop: the `whatif` run's wall time, from the moment it is created (the original read, the
  predictions made and sent) to its end (the checks logged), every invocation of a resumed one
  included;
* its train runs: the sum of the wall times (start to end) of the counterfactual and original
  runs of its sweep;
* the overhead: (loop - train runs) / train runs: store reads, the sweep's claims and resume
  bookkeeping, reading the runs back, the checks. Goal: at most 10 %.

Without --run, it makes a store of its own in a temporary folder and runs one small what-if there
(a train run and a breakdown of --model at --batch/--image-size, then --moves with --repeats);
with --run, it reads an existing what-if run on MLFLOW_TRACKING_URI (the real ones of
docs/whatif.md). The process's start (importing torch) is before the run and not counted.

    python -m bench.whatif_overhead [--model resnet18 --batch 2 --image-size 32 --repeats 2]
    MLFLOW_TRACKING_URI=sqlite:///mlflow.db python -m bench.whatif_overhead --run WHATIF_RUN_ID
"""

from __future__ import annotations

import argparse
import os
import tempfile

GOAL = 0.10


def parse(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m bench.whatif_overhead",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--run", default="", help="an existing whatif run to read instead")
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--image-size", type=int, default=32)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--moves", nargs="+", default=["channels_last", "batch_x2"])
    return ap.parse_args(argv)


def overhead(whatif_run_id: str, client) -> dict:
    """The loop's wall time, its train runs' and the overhead fraction, from the store."""
    from train.whatif.runlog import TAG_SWEEP

    run = client.get_run(whatif_run_id)
    sweep = run.data.tags[TAG_SWEEP]
    children = client.search_runs(
        [run.info.experiment_id],
        f"tags.sweep_name = '{sweep}' and tags.run_kind = 'train'",
        max_results=5000,
    )
    trains = [r for r in children if r.info.end_time and r.info.start_time]
    train_s = sum((r.info.end_time - r.info.start_time) / 1e3 for r in trains)
    loop_s = (run.info.end_time - run.info.start_time) / 1e3
    return {
        "loop_s": loop_s,
        "train_runs_s": train_s,
        "train_runs": len(trains),
        "overhead": (loop_s - train_s) / train_s if train_s else float("nan"),
    }


def own_whatif(args) -> str:
    """A train run and a breakdown of the configuration, then its what-if; the what-if run's id."""
    from profiling.cli import main as profiling_main
    from train.config import TrainConfig
    from train.run import RunOptions, run
    from train.whatif.loop import Request, run_whatif

    flags = [
        "--model",
        args.model,
        "--batch",
        str(args.batch),
        "--image-size",
        str(args.image_size),
    ]
    flags += ["--device", "cpu", "--iters", "2", "--warmup-iters", "1", "--no-progress"]
    if profiling_main(["--breakdown", *flags]) != 0:
        raise SystemExit("the breakdown failed")
    cfg = TrainConfig(
        model=args.model,
        batch_size=args.batch,
        image_size=args.image_size,
        iters=args.iters,
        warmup_iters=1,
        device="cpu",
    )
    session, _ = run(cfg, RunOptions(progress=False, system_metrics=False))
    out = run_whatif(
        Request(session.run_id, repeats=args.repeats, moves=args.moves, progress=False)
    )
    return out.run_id


def main(argv=None) -> int:
    args = parse(argv)
    from common.runs import mlflow_client

    load0 = os.getloadavg()[0]
    if args.run:
        found = overhead(args.run, mlflow_client())
        where = f"what-if run {args.run}"
    else:
        with tempfile.TemporaryDirectory() as tmp:
            os.chdir(tmp)
            os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{tmp}/bench.db"
            os.environ["ROOFLINE_SPOOL_DIR"] = f"{tmp}/spool"
            run_id = own_whatif(args)
            found = overhead(run_id, mlflow_client())
            where = f"{args.model} b{args.batch} {args.image_size}px, {' '.join(args.moves)}"
    o = found["overhead"]
    print(
        f"{where}: the loop {found['loop_s']:.1f} s, its {found['train_runs']} train runs "
        f"{found['train_runs_s']:.1f} s: overhead {o:+.1%} (goal <= {GOAL:.0%}: "
        f"{'met' if o <= GOAL else 'not met'}); load average {load0:.2f} -> {os.getloadavg()[0]:.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
