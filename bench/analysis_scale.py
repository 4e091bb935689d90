"""Time `python -m analysis` on 1,000 synthetic runs in a temporary sqlite tracking store.

    python -m bench.analysis_scale                 # 1,000 runs, analysis timed twice (--no-track, then tracked)
    python -m bench.analysis_scale --keep /tmp/b   # keep the store and the report to look at

The store gets 4 environments (3 GPUs, 1 CPU) x 4 models x 6 batch sizes x 3 precisions = 288
configs, train runs repeated until the run budget is met (each with 20 metrics, 16 params, 12 tags
and a 20-step step_time_s series), profile runs for the GPU configs, one peaks run per environment
and a few FAILED runs. Runs are written with MlflowClient.log_batch (one call per run), which is how
common.tracking writes them too. Only the analysis is timed, not the logging.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

ENVS = [  # env_label, device_name, device_type, fp32 peak, bf16 peak, DRAM byte/s
    ("l4-cloud", "NVIDIA L4", "cuda", 30.3e12, 121e12, 300e9),
    ("a100-cluster", "NVIDIA A100-SXM4-40GB", "cuda", 19.5e12, 312e12, 1555e9),
    ("t4-colab", "Tesla T4", "cuda", 8.1e12, 65e12, 320e9),
    ("laptop-cpu", "Intel(R) Core(TM) i7-1185G7", "cpu", 0.6e12, 0.6e12, 50e9),
]
MODELS = {
    "resnet18": 1.82e9,
    "resnet50": 4.1e9,
    "vgg16": 15.5e9,
    "mobilenet_v2": 0.3e9,
}  # fwd FLOPs/sample (about 2 x MACs)
BATCHES = [8, 16, 32, 64, 128, 256]
PRECISIONS = ["fp32", "fp16", "bf16"]
STEPS = 20


def log_store(n_runs: int, seed: int = 0) -> dict[str, int]:
    """Log `n_runs` synthetic runs into the current tracking store; returns counts per kind."""
    from mlflow.entities import Metric, Param, RunTag
    from mlflow.tracking import MlflowClient

    from common.schema import config_key

    rng = random.Random(seed)
    client = MlflowClient()
    exp = client.create_experiment("bench-analysis")
    now = int(time.time() * 1000)
    counts = {"train": 0, "profile": 0, "peaks": 0, "failed": 0}

    def run(
        tags: dict,
        params: dict,
        metrics: dict,
        series: list[float] | None = None,
        status="FINISHED",
    ):
        r = client.create_run(exp, tags=tags)
        ms = [Metric(k, float(v), now, 0) for k, v in metrics.items()]
        ms += [Metric("step_time_s", v, now, i) for i, v in enumerate(series or [])]
        client.log_batch(
            r.info.run_id,
            metrics=ms,
            params=[Param(k, str(v)) for k, v in params.items()],
            tags=[RunTag(k, str(v)) for k, v in tags.items()],
        )
        client.set_terminated(r.info.run_id, status=status)

    def env_tags(env, dev, dtype):
        return {
            "env_label": env,
            "device_name": dev,
            "device_type": dtype,
            "host": f"{env}-01",
            "torch_version": "2.14.1",
            "cuda_version": "13.0" if dtype == "cuda" else "none",
            "cudnn_version": "91000",
            "driver_version": "580.1",
            "python_version": "3.11.9",
            "os": "Ubuntu 24.04",
            "cpu_model": "x86_64",
        }

    n_peaks = len(ENVS)
    n_failed = 12
    gpu_configs = [
        (e, m, b, p)
        for e in ENVS
        if e[2] == "cuda"
        for m in MODELS
        for b in BATCHES
        for p in PRECISIONS
    ]
    n_profile = min(120, len(gpu_configs))
    n_train = n_runs - n_peaks - n_failed - n_profile
    configs = [(e, m, b, p) for e in ENVS for m in MODELS for b in BATCHES for p in PRECISIONS]

    for env, dev, dtype, fp32, bf16, bw in ENVS:
        run(
            {"run_kind": "peaks", **env_tags(env, dev, dtype)},
            {},
            {
                "peak_flops_per_s_fp32": fp32 * 0.9,
                "peak_flops_per_s_bf16": bf16 * 0.8,
                "peak_flops_per_s_fp16": bf16 * 0.8,
                "peak_dram_bytes_per_s": bw * 0.85,
            },
        )
        counts["peaks"] += 1

    def params_of(m, b, p, dtype, repeat=None):
        out = dict(
            model=m,
            batch_size=b,
            precision=p,
            device=dtype,
            warmup_iters=3,
            iters=STEPS,
            image_size=224,
            data="synthetic",
            workers=0,
            channels_last="false",
            compile="false",
            seed=0,
            lr=0.01,
            optimizer="sgd",
            num_classes=1000,
        )
        if repeat is not None:
            out["repeat"] = repeat
        return out

    i = 0
    while counts["train"] < n_train:
        (env, dev, dtype, fp32, bf16, bw), m, b, p = configs[i % len(configs)]
        repeat = i // len(configs)
        i += 1
        params = params_of(m, b, p, dtype, repeat)
        flops_step = 3 * MODELS[m] * b
        peak = fp32 if p == "fp32" else bf16
        intensity = 20 + 8 * (b**0.5) * (2 if p != "fp32" else 1)
        achieved = min(peak, intensity * bw) * rng.uniform(0.3, 0.7)
        med = flops_step / achieved
        steps = [med * rng.lognormvariate(0, 0.05) for _ in range(STEPS)]
        mean = sum(steps) / STEPS
        thr_i = [b / s for s in steps]
        mu = sum(thr_i) / STEPS
        sd = (sum((t - mu) ** 2 for t in thr_i) / (STEPS - 1)) ** 0.5
        run(
            {"run_kind": "train", "config_key": config_key(params), **env_tags(env, dev, dtype)},
            params,
            {
                "step_time_median_s": sorted(steps)[STEPS // 2],
                "step_time_mean_s": mean,
                "step_time_std_s": mean * 0.05,
                "step_time_p95_s": sorted(steps)[int(STEPS * 0.95) - 1],
                "throughput_samples_per_s": b / mean,
                "throughput_std_samples_per_s": sd,
                "fwd_flops_per_sample": MODELS[m],
                "fwd_macs_per_sample": MODELS[m] / 2,
                "params": 11.7e6,
                "train_flops_per_step": flops_step,
                "achieved_flops_per_s": flops_step / sorted(steps)[STEPS // 2],
                "modeled_bytes_per_step": flops_step / intensity,
                "modeled_intensity_flops_per_byte": intensity,
                "max_rss_bytes": 3e9,
                "cpu_user_s": 10.0,
                "cpu_sys_s": 1.0,
                "wall_s": 20.0,
                "device_peak_mem_bytes": 5e9,
            },
            steps,
        )
        counts["train"] += 1

    rng.shuffle(gpu_configs)
    for (env, dev, dtype, *_), m, b, p in gpu_configs[:n_profile]:
        params = params_of(m, b, p, dtype)
        flops = 3 * MODELS[m] * b * rng.uniform(0.9, 1.1)
        ai = (20 + 8 * (b**0.5)) * rng.uniform(1.5, 3.0)
        run(
            {"run_kind": "profile", "config_key": config_key(params), **env_tags(env, dev, dtype)},
            params,
            {
                "ncu_flops_total": flops,
                "ncu_flops_fp32": flops * 0.3,
                "ncu_flops_tensor": flops * 0.7,
                "ncu_dram_bytes": flops / ai,
                "ncu_l2_bytes": flops / ai * 4,
                "ncu_l1_bytes": flops / ai * 12,
                "ncu_kernel_time_s": 0.5,
                "ncu_kernels": 400,
                "ncu_intensity_dram_flops_per_byte": ai,
            },
        )
        counts["profile"] += 1

    for k in range(n_failed):
        env, dev, dtype, *_ = ENVS[k % len(ENVS)]
        run(
            {
                "run_kind": "train",
                **env_tags(env, dev, dtype),
                "error": "CUDA out of memory. Tried to allocate 8.00 GiB",
            },
            params_of("vgg16", 512, "fp32", dtype),
            {},
            status="FAILED",
        )
        counts["failed"] += 1
    return counts


def cpu_s() -> float:
    """User + system CPU seconds of this process and its finished children (the figure processes)."""
    import resource

    me, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000, help="runs to log (default 1000)")
    ap.add_argument(
        "--keep",
        default="",
        help="folder for the store and reports, kept afterwards; a store "
        "already there is reused (default: a temp dir, removed)",
    )
    args = ap.parse_args()
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-analysis-"))
    folder.mkdir(parents=True, exist_ok=True)
    db = folder / "mlflow.db"
    uri = f"sqlite:///{db}"
    os.environ["MLFLOW_TRACKING_URI"] = uri
    os.environ.pop("MLFLOW_RUN_ID", None)
    import logging

    logging.getLogger("mlflow").setLevel(logging.WARNING)
    import mlflow

    mlflow.set_tracking_uri(uri)
    if db.exists() and mlflow.get_experiment_by_name("bench-analysis") is not None:
        n = len(
            mlflow.search_runs(
                experiment_names=["bench-analysis"], filter_string="tags.run_kind != 'analysis'"
            )
        )
        print(f"reusing {n} runs in {uri}", flush=True)
    else:
        t = time.perf_counter()
        counts = log_store(args.runs)
        n = sum(counts.values())
        print(f"logged {n} runs {counts} in {time.perf_counter() - t:.1f} s to {uri}", flush=True)

    from analysis import app

    lines = []
    # 1. in process, untracked: fetch + join + figures + report
    cfg = app.config_from_args(
        app.build_parser().parse_args(
            ["--experiment", "bench-analysis", "--out", str(folder / "report"), "--no-track"]
        )
    )
    t, c = time.perf_counter(), cpu_s()
    res = app.run(cfg)
    wall, cpu = time.perf_counter() - t, cpu_s() - c
    parts = ", ".join(f"{k[:-2]} {v:.2f}" for k, v in res.timings_s.items() if k != "total_s")
    lines.append(
        f"in process, --no-track: {wall:.2f} s wall, {cpu:.2f} s CPU (incl. figure processes)  [{parts}]; "
        f"{res.analysis.counts['points']} points, {len(list((folder / 'report' / 'figures').glob('*.png')))} figures"
    )
    # 2. in process, tracked (adds the analysis run and its artifacts)
    t = time.perf_counter()
    rc = app.cli(["--experiment", "bench-analysis", "--out", str(folder / "report-tracked")])
    assert rc == 0, f"analysis failed with exit code {rc}"
    lines.append(f"in process, tracked:    {time.perf_counter() - t:.2f} s wall")
    # 3. the command a user types (interpreter start and imports included)
    t, c = time.perf_counter(), cpu_s()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "analysis",
            "--experiment",
            "bench-analysis",
            "--no-track",
            "--out",
            str(folder / "report-cli"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines.append(
        f"python -m analysis --no-track (new process, imports included): {time.perf_counter() - t:.2f} s wall, "
        f"{cpu_s() - c:.2f} s CPU"
    )
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"analysis of {n} runs ({os.cpu_count()} CPUs, load average {load:.1f}):")
    for line in lines:
        print("  " + line)
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
