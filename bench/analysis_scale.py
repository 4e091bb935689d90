"""Time `python -m analysis` on a synthetic fleet's history: first analysis, repeat, and the old path.

    python -m bench.analysis_scale                         # 10,000 runs in sqlite
    python -m bench.analysis_scale --runs 100000 --server  # 100,000 runs, also behind `mlflow server`
    python -m bench.analysis_scale --keep /tmp/b           # keep (and reuse) the store and reports
    python -m bench.analysis_scale --history               # the change-point scan: 10,000 runs in 500 series

The store (bench/fleet_store.py) is written straight into a new sqlite database with MLflow's table
models (`write_bulk`: 10,000 runs in about 40 s here, 100,000 in minutes; logging them one
`log_batch` call at a time would take ~30 ms a run). Every measurement runs in a new process
(`python -m bench.analysis_scale child ...`: imports included, peak RSS from os.wait4), one after
the other in one invocation, so that the ratios compare runs under the same load:

  before      the fetch as it was: mlflow.search_runs(output_format="pandas") per run kind
              (fetch only; skipped above 20,000 runs unless --before)
  first       python -m analysis --cache refresh: an empty cache, every run fetched
  repeat      python -m analysis after a night's work: 20 new runs, a run that was RUNNING at the
              first analysis has finished, one run deleted; the cache fetches only those
  off         python -m analysis --cache off: every run fetched, nothing cached
and with --server the same `first`/`repeat` against a real `mlflow server` on that database
(`--workers`, default 2), plus paging one page at a time against four in flight.
The repeat's summary.csv is checked equal to the --cache off one's: the cache changes no number.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import fleet_store

ROOT = Path(__file__).resolve().parents[1]
NIGHT_NEW_RUNS = 20


# ------------------------------------------------------------------------ child processes
def child(argv: list[str]) -> int:
    """`child analysis <flags>` runs analysis.app.run; `child before` the old fetch; `child page
    <jobs> <cap>` one train search through the search API. Prints one JSON line."""
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import logging

    logging.getLogger("mlflow").setLevel(logging.WARNING)
    t0 = time.perf_counter()
    if argv[0] == "analysis":  # what `python -m analysis` imports before it reads a run
        import analysis.app  # noqa: F401
    elif argv[0] == "history":
        import analysis.history  # noqa: F401
    else:
        import mlflow  # noqa: F401 - imported up front so that import time is reported on its own
    out: dict = {"import_s": time.perf_counter() - t0}
    t0 = time.perf_counter()
    if argv[0] == "analysis":
        from analysis import app

        cfg = app.config_from_args(app.build_parser().parse_args(argv[1:]))
        res = app.run(cfg)
        out.update(
            timings_s=res.timings_s,
            points=res.analysis.counts["points"],
            from_cache=res.source.stats.from_cache,
            fetched=res.source.stats.fetched,
            reader=type(res.source.reader).__name__,
            drawn=len(res.drawn_figures or []),
            figures=sum(p.suffix == ".png" for p in res.files),
            imported=sorted(m for m in ("mlflow", "matplotlib") if m in sys.modules),
        )
    elif argv[0] == "history":
        out.update(history_scan(argv[1]))
    elif argv[0] == "before":
        import mlflow

        exp = mlflow.get_experiment_by_name(fleet_store.EXPERIMENT).experiment_id
        n = 0
        for kind in ("train", "profile", "peaks", "complexity"):
            n += len(
                mlflow.search_runs(
                    [exp], f"tags.run_kind = '{kind}'", max_results=100_000, output_format="pandas"
                )
            )
        out["runs"] = n
    elif argv[0] == "page":
        import mlflow

        from analysis.fetch.api import ApiReader

        exp = mlflow.get_experiment_by_name(fleet_store.EXPERIMENT).experiment_id
        reader = ApiReader(jobs=int(argv[1]))
        t = time.perf_counter()
        df = reader.search([exp], "tags.run_kind = 'train'", int(argv[2]))
        out.update(runs=len(df), search_s=time.perf_counter() - t)
    out["in_process_s"] = time.perf_counter() - t0
    out["peak_rss_bytes"] = peak_rss()
    print("RESULT " + json.dumps(out), flush=True)
    return 0


def history_scan(cache: str) -> dict:
    """The change-point scan of the history store: fetch (through the run cache, `cache` mode),
    screen and join, then analysis.history.scan over every series; its seconds and what it found
    (planted: the series whose change names the torch upgrade fleet_store plants)."""
    from analysis import fetch, history, join, screen

    timings: dict[str, float] = {}
    clock = [time.perf_counter(), time.process_time()]

    def lap(name: str) -> None:  # wall and CPU seconds of a stage (the CPU: load-independent)
        now = [time.perf_counter(), time.process_time()]
        timings[f"{name}_s"], timings[f"{name}_cpu_s"] = now[0] - clock[0], now[1] - clock[1]
        clock[:] = now

    source = fetch.Source(cache)
    runs, _ = fetch.fetch_runs(fetch.Query([fleet_store.HISTORY_EXPERIMENT]), source)
    lap("fetch")
    runs, _ = screen.values(screen.runs(runs)[0])
    train = join.train_runs(runs)
    lap("join")
    found = history.scan(train)
    lap("scan")
    changed = [s for s in found.series if s.changes]
    planted = [
        s for s in changed if any(c["tag"] == "torch_version" for x in s.changes for c in x.changed)
    ]
    return {
        "timings_s": timings,
        "series": len(found.series),
        "train_runs": len(train),
        "changed": len(changed),
        "planted_found": len(planted),
        "at_the_planted_run": sum(s.changes[0].index == len(s.run_ids) // 2 for s in planted),
        "from_cache": source.stats.from_cache,
        "fetched": source.stats.fetched,
        "imported": sorted(m for m in ("ruptures", "mlflow", "matplotlib") if m in sys.modules),
    }


def peak_rss(pid: int | str = "self") -> int:
    """Peak resident memory (VmHWM, bytes) of a process. Not getrusage's ru_maxrss: on Linux a
    child's counts the memory of the process that forked it, carried across exec."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def measure(args: list[str], env: dict, cwd: Path = ROOT) -> dict:
    """Run `python -m bench.analysis_scale child <args>` in checkout `cwd`: its JSON result (with
    its own peak RSS) plus wall and CPU seconds of that process (os.wait4 reaps it with its own
    usage, figure processes included)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench.analysis_scale", "child", *args],
            cwd=cwd,
            env=env,
            stdout=out,
            stderr=err,
            text=True,
        )
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0), err.seek(0)
        stdout, stderr = out.read(), err.read()
    if proc.returncode != 0:
        raise SystemExit(f"child {' '.join(args)} failed ({proc.returncode}):\n{stderr[-3000:]}")
    line = next(ln for ln in stdout.splitlines() if ln.startswith("RESULT "))
    res = json.loads(line[len("RESULT ") :])
    res.update(wall_s=wall, cpu_s=usage.ru_utime + usage.ru_stime)
    return res


# ------------------------------------------------------------------------ the night's work
def night(uri: str) -> None:
    """Between the first and the repeat analysis: NIGHT_NEW_RUNS new train runs, the one RUNNING
    run finishes, one train run is deleted."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(fleet_store.EXPERIMENT).experiment_id
    specs = [s for s in fleet_store.run_specs(200, seed=1) if s["tags"]["run_kind"] == "train"]
    fleet_store.write_client(specs[:NIGHT_NEW_RUNS], experiment_id=exp, client=client)
    running = client.search_runs([exp], "attributes.status = 'RUNNING'", max_results=5)
    for r in running:
        client.set_terminated(r.info.run_id, "FINISHED")
    old = client.search_runs(
        [exp], "tags.run_kind = 'train' AND attributes.status = 'FINISHED'", max_results=1
    )
    client.delete_run(old[0].info.run_id)


# ------------------------------------------------------------------------ main
def fmt(r: dict) -> str:
    """One result line: the process's wall, CPU and peak RSS, then where its time went."""
    parts = [
        f"{r['wall_s']:.1f} s wall",
        f"{r['cpu_s']:.1f} s CPU",
        f"peak RSS {r['peak_rss_bytes'] / 1e6:.0f} MB",
    ]
    steps = {
        "import_s": r["import_s"],
        **(r.get("timings_s") or {"in_process_s": r["in_process_s"]}),
    }
    parts.append("[" + ", ".join(f"{k[:-2]} {v:.2f}" for k, v in steps.items()) + "]")
    if "series" in r:
        parts.append(
            f"{r['train_runs']} train runs in {r['series']} series: {r['changed']} with a change, "
            f"{r['planted_found']} of them the planted one ({r['at_the_planted_run']} at its run)"
        )
    if "fetched" in r and "drawn" not in r:
        parts.append(f"{r['from_cache']} runs from the cache, {r['fetched']} fetched")
        parts.append(
            "imported " + (", ".join(r["imported"]) or "none of ruptures, mlflow, matplotlib")
        )
    elif "fetched" in r:
        parts.append(f"{r['from_cache']} runs from the cache, {r['fetched']} fetched")
        parts.append(
            f"drew {r['drawn']} of {r['figures']} figures; read with {r['reader']}; imported "
            + (", ".join(r["imported"]) or "neither mlflow nor matplotlib")
        )
    if "search_s" in r:
        parts.append(f"{r['runs']} runs in {r['search_s']:.1f} s")
    return "; ".join(parts)


def server_peak_rss(pid: int) -> int:
    """Largest peak RSS among the server's processes (it and its workers)."""
    import psutil

    try:
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    peaks = []
    for p in procs:
        try:
            peaks.append(peak_rss(p.pid))
        except OSError:
            pass
    return max(peaks, default=0)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], prog="python -m bench.analysis_scale"
    )
    ap.add_argument("--runs", type=int, default=10_000, help="runs in the store (default 10000)")
    ap.add_argument("--keep", default="", help="folder for store and reports, kept and reused")
    ap.add_argument("--server", action="store_true", help="also time a real `mlflow server`")
    ap.add_argument("--workers", type=int, default=2, help="the server's workers (default 2)")
    ap.add_argument(
        "--before", action="store_true", help="time the old fetch above 20,000 runs too"
    )
    ap.add_argument(
        "--history",
        action="store_true",
        help="only the change-point scan: --runs runs in 500 series (fleet_store.history_specs)",
    )
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "child":
        return child(argv[1:])
    args = build_parser().parse_args(argv)
    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-analysis-"))
    folder.mkdir(parents=True, exist_ok=True)
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    env = dict(os.environ, MLFLOW_TRACKING_URI=uri, ROOFLINE_CACHE_DIR=str(folder / "cache"))
    env.pop("MLFLOW_RUN_ID", None)
    env.setdefault("DS_ACCELERATOR", "cpu")
    if args.history:
        return history_bench(folder, args, env)
    pristine = fleet(folder, args.runs)
    steps = Steps()
    flags = ["--no-track", "--experiment", fleet_store.EXPERIMENT, "--max-runs", str(args.runs)]
    if args.runs <= 20_000 or args.before:
        steps.run("before", ["before"], env)
    steps.run(
        "first", ["analysis", *flags, "--out", str(folder / "first"), "--cache", "refresh"], env
    )
    night(uri)
    steps.run("repeat", ["analysis", *flags, "--out", str(folder / "repeat")], env)
    steps.run("off", ["analysis", *flags, "--out", str(folder / "off"), "--cache", "off"], env)
    same = (folder / "repeat" / "summary.csv").read_text() == (
        folder / "off" / "summary.csv"
    ).read_text()
    steps.lines.append(f"repeat's summary.csv equal to --cache off's: {same}")
    if args.server:
        shutil.copyfile(pristine, folder / "mlflow.db")
        behind_a_server(steps, folder, uri, env, flags, args)
    return steps.report(f"analysis of {args.runs} runs", folder, args.keep)


HISTORY_SERIES = 500


def history_bench(folder: Path, args, env: dict) -> int:
    """The change-point scan of --runs runs in HISTORY_SERIES series: first (the cache refreshed)
    and repeat (read from the cache), each in a process of its own."""
    db = folder / "history.db"
    env = dict(env, MLFLOW_TRACKING_URI=f"sqlite:///{db}")
    if not db.exists():
        t = time.perf_counter()
        specs = fleet_store.history_specs(HISTORY_SERIES, args.runs // HISTORY_SERIES)
        fleet_store.write_bulk(
            f"sqlite:///{db}", str(folder / "artifacts"), specs, fleet_store.HISTORY_EXPERIMENT
        )
        print(f"wrote {len(specs)} train runs in {time.perf_counter() - t:.0f} s", flush=True)
    steps = Steps()
    steps.run("first", ["history", "refresh"], env)
    steps.run("repeat", ["history", "auto"], env)
    return steps.report(
        f"change-point scan of {args.runs} runs in {HISTORY_SERIES} series", folder, args.keep
    )


def fleet(folder: Path, n_runs: int) -> Path:
    """The store mlflow.db in `folder`: the fleet's history, written once and kept as
    pristine.db (the store before the night's work), which a rerun copies back. Returns that."""
    db, pristine = folder / "mlflow.db", folder / "pristine.db"
    if pristine.exists():
        shutil.copyfile(pristine, db)
        print(f"reusing the {n_runs}-run store in {folder}", flush=True)
        return pristine
    t = time.perf_counter()
    specs = list(fleet_store.run_specs(n_runs))
    specs[-1]["status"] = "RUNNING"  # finishes during the night
    fleet_store.write_bulk(f"sqlite:///{db}", str(folder / "artifacts"), specs)
    shutil.copyfile(db, pristine)
    print(
        f"wrote {len(specs)} runs {fleet_store.counts(specs)} in "
        f"{time.perf_counter() - t:.0f} s to sqlite:///{db}",
        flush=True,
    )
    return pristine


class Steps:
    """The measured child processes, one result line each, in order."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def report(self, title: str, folder: Path, keep: str) -> int:
        """Print `title` with the machine's CPUs and load, then the result lines; remove `folder`
        unless kept."""
        load = os.getloadavg()
        print(
            f"{title} ({os.cpu_count()} CPUs, load average "
            f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f} at the end):"
        )
        for line in self.lines:
            print("  " + line)
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)
        return 0

    def run(self, name: str, child_args: list[str], env: dict) -> dict:
        print(f"  {name} ...", flush=True)
        r = measure(child_args, env)
        self.lines.append(f"{name:<9} {fmt(r)}")
        return r


def behind_a_server(
    steps: Steps, folder: Path, uri: str, env: dict, flags: list[str], args
) -> None:
    """The first analysis and the repeat against a real `mlflow server` on the store, after
    paging one page at a time and four in flight."""
    from tests.mlflow_server import MlflowServer

    server = MlflowServer(uri, folder / "artifacts", workers=args.workers)
    t = time.perf_counter()
    server.start(timeout_s=600)
    steps.lines.append(
        f"mlflow server (--workers {args.workers}) answered /health after "
        f"{time.perf_counter() - t:.0f} s"
    )
    try:
        senv = dict(env, MLFLOW_TRACKING_URI=server.url)
        cap = str(min(args.runs, 10_000))
        steps.run("page x1", ["page", "1", cap], senv)
        steps.run("page x4", ["page", "4", cap], senv)
        steps.run(
            "first",
            ["analysis", *flags, "--out", str(folder / "s-first"), "--cache", "refresh"],
            senv,
        )
        night(server.url)
        steps.run("repeat", ["analysis", *flags, "--out", str(folder / "s-repeat")], senv)
        steps.lines.append(f"server peak RSS {server_peak_rss(server.proc.pid) / 1e6:.0f} MB")
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
