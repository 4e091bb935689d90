"""A synthetic fleet's history of runs for bench/analysis_scale.py, and two ways to write it.

`run_specs(n)` describes n runs: 4 environments (3 GPUs, 1 CPU) x 4 models x 6 batch sizes x 3
precisions = 288 configs, train runs repeated until the budget is met (each with 18 metrics, 16
params, 12 tags and a 20-step step_time_s series), profile runs for up to 120 GPU configs, one
peaks run per environment and 12 FAILED train runs. Runs start one minute apart, oldest first.

Two writers store the same specs:

* `write_client`: MlflowClient.create_run + log_batch + set_terminated per run, the way
  common.tracking writes runs (about 30 ms a run here: 1,000 runs take half a minute);
* `write_bulk`: the rows MLflow's SQL store would write (runs, tags, params, metrics,
  latest_metrics), inserted with SQLAlchemy Core through MLflow's own table models into a
  database MLflow created, thousands of rows per statement: 100,000 runs in minutes instead of
  the better part of an hour. tests/test_analysis_fleet.py checks that MLflow reads both alike.
"""

from __future__ import annotations

import itertools
import random
import time
import uuid
from typing import Iterator

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
N_FAILED = 12
EXPERIMENT = "bench-analysis"


def _env_tags(env: str, dev: str, dtype: str) -> dict[str, str]:
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


def _params(m: str, b: int, p: str, dtype: str, repeat: int | None = None) -> dict:
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


def run_specs(n_runs: int, seed: int = 0) -> Iterator[dict]:
    """`n_runs` run descriptions {tags, params, metrics, series, status}, in logging order."""
    rng = random.Random(seed)
    gpu_configs = [
        (e, m, b, p)
        for e in ENVS
        if e[2] == "cuda"
        for m in MODELS
        for b in BATCHES
        for p in PRECISIONS
    ]
    n_profile = min(120, len(gpu_configs), n_runs // 10)
    n_failed = min(N_FAILED, n_runs // 20)
    n_train = n_runs - len(ENVS) - n_failed - n_profile
    if n_train <= 0:
        raise ValueError(f"n_runs must be at least {len(ENVS) + 1}, got {n_runs}")
    runs = itertools.chain(
        _peaks_runs(),
        _train_runs(n_train, rng),
        _profile_runs(gpu_configs, n_profile, rng),  # after the train runs: they share `rng`
        _failed_runs(n_failed),
    )
    for n, run in enumerate(runs, start=1):
        yield {"name": f"{run['tags']['run_kind']}-{n}", **run}


def _spec(kind, tags, params, metrics, series=None, status="FINISHED") -> dict:
    return {
        "tags": {"run_kind": kind, **tags},
        "params": {k: str(v) for k, v in params.items()},
        "metrics": {k: float(v) for k, v in metrics.items()},
        "series": series or [],
        "status": status,
    }


def _peaks_runs() -> Iterator[dict]:
    """One peaks run per environment, at 80 to 90 % of its datasheet figures."""
    for env, dev, dtype, fp32, bf16, bw in ENVS:
        metrics = {
            "peak_flops_per_s_fp32": fp32 * 0.9,
            "peak_flops_per_s_bf16": bf16 * 0.8,
            "peak_flops_per_s_fp16": bf16 * 0.8,
            "peak_dram_bytes_per_s": bw * 0.85,
        }
        yield _spec("peaks", _env_tags(env, dev, dtype), {}, metrics)


def _train_runs(n_train: int, rng: random.Random) -> Iterator[dict]:
    """`n_train` train runs over every config in turn, at 30 to 70 % of the roof at a made-up
    intensity, with 5 % step-to-step noise."""
    from common.schema import config_key

    configs = [(e, m, b, p) for e in ENVS for m in MODELS for b in BATCHES for p in PRECISIONS]
    for i in range(n_train):
        (env, dev, dtype, fp32, bf16, bw), m, b, p = configs[i % len(configs)]
        params = _params(m, b, p, dtype, i // len(configs))
        flops_step = 3 * MODELS[m] * b
        peak = fp32 if p == "fp32" else bf16
        intensity = 20 + 8 * (b**0.5) * (2 if p != "fp32" else 1)
        achieved = min(peak, intensity * bw) * rng.uniform(0.3, 0.7)
        typical_s = flops_step / achieved
        steps = [typical_s * rng.lognormvariate(0, 0.05) for _ in range(STEPS)]
        tags = {"config_key": config_key(params), **_env_tags(env, dev, dtype)}
        metrics = _train_metrics(MODELS[m], b, steps, flops_step, intensity)
        yield _spec("train", tags, params, metrics, steps)


def _train_metrics(
    fwd_flops: float, b: int, steps: list[float], flops_step: float, intensity: float
) -> dict:
    """The 18 metrics of a train run whose step times are `steps`."""
    mean = sum(steps) / STEPS
    thr_i = [b / s for s in steps]
    mu = sum(thr_i) / STEPS
    sd = (sum((t - mu) ** 2 for t in thr_i) / (STEPS - 1)) ** 0.5
    return {
        "step_time_median_s": sorted(steps)[STEPS // 2],
        "step_time_mean_s": mean,
        "step_time_std_s": mean * 0.05,
        "step_time_p95_s": sorted(steps)[int(STEPS * 0.95) - 1],
        "throughput_samples_per_s": b / mean,
        "throughput_std_samples_per_s": sd,
        "fwd_flops_per_sample": fwd_flops,
        "fwd_macs_per_sample": fwd_flops / 2,
        "params": 11.7e6,
        "train_flops_per_step": flops_step,
        "achieved_flops_per_s": flops_step / mean,  # the one step-time statistic for rates
        "modeled_bytes_per_step": flops_step / intensity,
        "modeled_intensity_flops_per_byte": intensity,
        "max_rss_bytes": 3e9,
        "cpu_user_s": 10.0,
        "cpu_sys_s": 1.0,
        "wall_s": 20.0,
        "device_peak_mem_bytes": 5e9,
    }


HISTORY_EXPERIMENT = "bench-history"
HISTORY_PLANTED_EVERY = 20
"""one series in this many has a planted change halfway: 10 % slower from the torch upgrade"""


def history_specs(n_series: int = 500, runs_per_series: int = 20, seed: int = 0) -> list[dict]:
    """A nightly fleet's history for the change-point scan (analysis/history.py): `n_series`
    series (50 environments x models x batch sizes) of `runs_per_series` train runs each, run
    round-robin (night after night), each run's mean step time with 2 % run-to-run noise and a
    ±1 % CI of its own; every HISTORY_PLANTED_EVERY-th series gets 10 % slower from its middle
    run on, where torch goes from 2.14.1 to 2.15.0."""
    from common.schema import config_key

    rng = random.Random(seed)
    combos = [(m, b) for m in MODELS for b in BATCHES[:3]]
    series = [(f"node-{k // len(combos):03d}", *combos[k % len(combos)]) for k in range(n_series)]
    out = []
    for night in range(runs_per_series):
        for k, (env, m, b) in enumerate(series):
            planted = k % HISTORY_PLANTED_EVERY == 0 and night >= runs_per_series // 2
            params = _params(m, b, "fp32", "cuda")
            tags = {"config_key": config_key(params), **_env_tags(env, "NVIDIA L4", "cuda")}
            tags["torch_version"] = "2.15.0" if planted else "2.14.1"
            mean = (
                3 * MODELS[m] * b / 10e12 * (1.10 if planted else 1.0) * rng.lognormvariate(0, 0.02)
            )
            steps = [mean] * STEPS
            metrics = _train_metrics(MODELS[m], b, steps, 3 * MODELS[m] * b, 50.0)
            metrics.update(step_time_ci95_rel=0.01, measured_iters=float(STEPS))
            out.append({"name": f"train-{len(out) + 1}", **_spec("train", tags, params, metrics)})
    return out


def _profile_runs(gpu_configs: list, n_profile: int, rng: random.Random) -> Iterator[dict]:
    """Profile runs for `n_profile` GPU configs drawn at random."""
    from common.schema import config_key

    rng.shuffle(gpu_configs)
    for (env, dev, dtype, *_), m, b, p in gpu_configs[:n_profile]:
        params = _params(m, b, p, dtype)
        flops = 3 * MODELS[m] * b * rng.uniform(0.9, 1.1)
        ai = (20 + 8 * (b**0.5)) * rng.uniform(1.5, 3.0)
        metrics = {
            "ncu_flops_total": flops,
            "ncu_flops_fp32": flops * 0.3,
            "ncu_flops_tensor": flops * 0.7,
            "ncu_dram_bytes": flops / ai,
            "ncu_l2_bytes": flops / ai * 4,
            "ncu_l1_bytes": flops / ai * 12,
            "ncu_kernel_time_s": 0.5,
            "ncu_kernels": 400,
            "ncu_intensity_dram_flops_per_byte": ai,
        }
        tags = {"config_key": config_key(params), **_env_tags(env, dev, dtype)}
        yield _spec("profile", tags, params, metrics)


def _failed_runs(n_failed: int) -> Iterator[dict]:
    """FAILED train runs (out of memory), spread over the environments."""
    for k in range(n_failed):
        env, dev, dtype, *_ = ENVS[k % len(ENVS)]
        tags = {
            **_env_tags(env, dev, dtype),
            "error": "CUDA out of memory. Tried to allocate 8 GiB",
        }
        yield _spec("train", tags, _params("vgg16", 512, "fp32", dtype), {}, status="FAILED")


def counts(specs: list[dict]) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in specs:
        kind = "failed" if s["status"] == "FAILED" else s["tags"]["run_kind"]
        out[kind] = out.get(kind, 0) + 1
    return out


def write_client(
    specs: list[dict], experiment: str = EXPERIMENT, experiment_id: str | None = None, client=None
) -> str:
    """Log `specs` through MlflowClient (default: the current tracking URI), one log_batch per
    run, into `experiment_id` or a new experiment named `experiment`; returns the experiment id."""
    from mlflow.entities import Metric, Param, RunTag
    from mlflow.tracking import MlflowClient

    client = client or MlflowClient()
    exp = experiment_id or client.create_experiment(experiment)
    now = int(time.time() * 1000)
    for s in specs:
        r = client.create_run(exp, run_name=s["name"], tags=s["tags"])
        ms = [Metric(k, v, now, 0) for k, v in s["metrics"].items()]
        ms += [Metric("step_time_s", v, now, i) for i, v in enumerate(s["series"])]
        client.log_batch(
            r.info.run_id,
            metrics=ms,
            params=[Param(k, v) for k, v in s["params"].items()],
            tags=[RunTag(k, v) for k, v in s["tags"].items()],
        )
        if s["status"] != "RUNNING":
            client.set_terminated(r.info.run_id, status=s["status"])
    return exp


def write_bulk(
    uri: str, artifacts: str, specs: list[dict], experiment: str = EXPERIMENT, chunk: int = 5000
) -> str:
    """Insert `specs` into the SQL tracking store at `uri` as MLflow's SqlAlchemyStore would store
    them, without its per-run transactions; returns the experiment id. Runs start one minute apart
    ending now; each ends 30 s after it started; metrics are stamped with the run's start."""
    import sqlalchemy as sa
    from mlflow.store.tracking.dbmodels import models as m
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    store = SqlAlchemyStore(uri, artifacts)
    exp_id = store.create_experiment(experiment)
    location = store.get_experiment(exp_id).artifact_location.rstrip("/")
    t0 = int(time.time() * 1000) - 60_000 * len(specs)
    with store.engine.begin() as conn:
        for lo in range(0, len(specs), chunk):
            tables = {
                t: [] for t in (m.SqlRun, m.SqlTag, m.SqlParam, m.SqlMetric, m.SqlLatestMetric)
            }
            for i, s in enumerate(specs[lo : lo + chunk], start=lo):
                rows = _run_rows(s, uuid.uuid4().hex, t0 + 60_000 * i, location, int(exp_id))
                for table, new in zip(tables, rows):
                    tables[table] += new
            for table, rows in tables.items():
                if rows:
                    conn.execute(sa.insert(table.__table__), rows)
    store.engine.dispose()
    return exp_id


def _run_rows(s: dict, rid: str, start: int, location: str, exp_id: int) -> tuple[list, ...]:
    """The rows of one run for MLflow's tables runs, tags, params, metrics and latest_metrics."""
    name = s["name"]
    run = dict(
        run_uuid=rid,
        name=name,
        source_type="UNKNOWN",
        source_name="",
        entry_point_name="",
        user_id="bench",
        status=s["status"],
        start_time=start,
        end_time=None if s["status"] == "RUNNING" else start + 30_000,
        deleted_time=None,
        source_version="",
        lifecycle_stage="active",
        artifact_uri=f"{location}/{rid}/artifacts",
        experiment_id=exp_id,
    )
    run_tags = {**s["tags"], "mlflow.runName": name, "mlflow.user": "bench"}
    tags = [dict(key=k, value=v, run_uuid=rid) for k, v in run_tags.items()]
    params = [dict(key=k, value=v, run_uuid=rid) for k, v in s["params"].items()]
    rows = [(k, v, 0) for k, v in s["metrics"].items()]
    rows += [("step_time_s", v, j) for j, v in enumerate(s["series"])]
    metrics = [
        dict(key=k, value=v, timestamp=start, step=j, is_nan=False, run_uuid=rid)
        for k, v, j in rows
    ]
    last: dict[str, tuple] = {}
    for k, v, j in rows:
        last[k] = (v, j)  # rows are in step order: the last one is the latest
    latest = [
        dict(key=k, value=v, timestamp=start, step=j, is_nan=False, run_uuid=rid)
        for k, (v, j) in last.items()
    ]
    return [run], tags, params, metrics, latest
