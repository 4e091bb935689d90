"""Repeat analyses of a 10,000-run fleet by two checkouts of this project, alternated, best of N.

    python -m bench.analysis_repeat --against /path/to/other/checkout [--rounds 3] [--keep DIR]

The store is bench/analysis_scale.py's (kept in --keep and reused). Each checkout first analyses
the store as it was (`--cache refresh`, not timed) and keeps that run and figure cache; then, for
each round and each checkout in turn, the cache is put back and the checkout analyses the store
after the night's work (20 new runs, one finished, one deleted: `repeat`) and, with that repeat's
cache, the same store again (`unchanged`). One process per analysis, wall and CPU seconds of that
process (figure processes included); alternating the checkouts and taking the best of each makes
the ratio fair on a machine whose load swings.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

from bench import fleet_store
from bench.analysis_scale import ROOT, fleet, fmt, measure, night


def prepare(folder: Path, checkouts: dict[str, Path], env: dict, flags: list[str]) -> None:
    """Each checkout's caches after the first analysis (cache.<name>) and after the repeat
    (cache.<name>.repeat); the store after the night's work (night.db)."""
    db = folder / "mlflow.db"
    for name, path in checkouts.items():
        shutil.copyfile(folder / "pristine.db", db)
        shutil.rmtree(folder / "cache", ignore_errors=True)
        measure(
            ["analysis", *flags, "--out", str(folder / "first"), "--cache", "refresh"], env, path
        )
        shutil.rmtree(folder / f"cache.{name}", ignore_errors=True)
        shutil.copytree(folder / "cache", folder / f"cache.{name}")
        if not (folder / "night.db").exists():
            night(f"sqlite:///{db}")
            shutil.copyfile(db, folder / "night.db")
        shutil.copyfile(folder / "night.db", db)
        measure(["analysis", *flags, "--out", str(folder / "repeat")], env, path)
        shutil.rmtree(folder / f"cache.{name}.repeat", ignore_errors=True)
        shutil.copytree(folder / "cache", folder / f"cache.{name}.repeat")


def timed(folder: Path, cache: str, path: Path, env: dict, flags: list[str]) -> dict:
    shutil.rmtree(folder / "cache", ignore_errors=True)
    shutil.copytree(folder / cache, folder / "cache")
    shutil.copyfile(folder / "night.db", folder / "mlflow.db")
    return measure(["analysis", *flags, "--out", str(folder / "repeat")], env, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", required=True, help="the other checkout (a git worktree)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--keep", default="", help="folder for the store, kept and reused")
    args = ap.parse_args(argv)
    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-repeat-"))
    folder.mkdir(parents=True, exist_ok=True)
    env = dict(
        os.environ,
        MLFLOW_TRACKING_URI=f"sqlite:///{folder / 'mlflow.db'}",
        ROOFLINE_CACHE_DIR=str(folder / "cache"),
    )
    env.pop("MLFLOW_RUN_ID", None)
    fleet(folder, args.runs)
    (folder / "night.db").unlink(missing_ok=True)
    checkouts = {"this": ROOT, "other": Path(args.against).resolve()}
    flags = ["--no-track", "--experiment", fleet_store.EXPERIMENT, "--max-runs", str(args.runs)]
    prepare(folder, checkouts, env, flags)
    best: dict[tuple[str, str], tuple[float, float]] = {}
    for _ in range(args.rounds):
        for name, path in checkouts.items():
            for step, cache in (("repeat", f"cache.{name}"), ("unchanged", f"cache.{name}.repeat")):
                r = timed(folder, cache, path, env, flags)
                print(f"  {name:<5} {step:<9} {fmt(r)}", flush=True)
                key = (name, step)
                best[key] = min(best.get(key, (float("inf"),) * 2), (r["wall_s"], r["cpu_s"]))
    load = os.getloadavg()
    print(
        f"best of {args.rounds} ({os.cpu_count()} CPUs, load average {load[0]:.1f} {load[1]:.1f} "
        f"{load[2]:.1f} at the end; other = {checkouts['other']}):"
    )
    for step in ("repeat", "unchanged"):
        (tw, tc), (ow, oc) = best[("this", step)], best[("other", step)]
        print(
            f"  {step:<9} this {tw:.2f} s wall ({tc:.2f} s CPU), other {ow:.2f} s wall "
            f"({oc:.2f} s CPU): {ow / tw:.2f}x"
        )
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
