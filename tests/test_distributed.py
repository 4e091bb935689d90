"""Data-parallel runs: torchrun jobs with DDP and DeepSpeed, their metrics, keys and failures.

The pure parts (keys, the blame rule, the per-rank maths) are tested in-process. The jobs run as
real `torchrun --standalone --nproc-per-node 2 -m train ...` processes on two CPU processes
(gloo), at the tiny size; one module-wide tracking store holds the single-process baseline they
compare with.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time

import mlflow
import pytest

from common import schema
from common.errors import BenchError, UsageError
from tests.conftest import ROOT
from tests.helpers import TINY
from train.config import TrainConfig, config_flags
from train.distributed.failures import (
    KIND_COMM,
    KIND_ERROR,
    KIND_SIGNAL,
    Guard,
    Report,
    blame,
    classify,
)
from train.distributed.context import DistContext, JobEnv, RankInfo, job_env
from train.distributed.launch import last_error_line, torchrun_argv
from train.distributed.measure import (
    RankRecord,
    baseline_keys,
    rank_metrics,
    scaling_metrics,
    slowest_per_step,
)

# computed on main before distributed runs existed (cc3f9f9): single-process keys must not move
TINY_KEY = "7fd492fdb6cc1975"  # resnet18 b2 fp32 32px, sgd, 1000 classes
DEFAULT_KEY = "2f52cf5e32d71239"  # TrainConfig()
TINY_SWEEP_KEY = "2580e9c3d769167a"
TINY_CFG = dict(
    model="resnet18", batch_size=2, image_size=32, warmup_iters=1, iters=3, device="cpu"
)
EXPERIMENT = "dist"


# ---------------------------------------------------------------- keys and config (pure)
def test_single_process_keys_and_params_are_unchanged():
    from train.sweep.spec import sweep_key

    cfg = TrainConfig(**TINY_CFG, env_label="x")
    assert cfg.config_key() == TINY_KEY
    assert TrainConfig(env_label="x").config_key() == DEFAULT_KEY
    assert sweep_key(cfg) == TINY_SWEEP_KEY
    assert not {"distributed", "zero_stage", "world_size", "backend"} & set(cfg.params())
    # a run logged before the fields existed (params as MLflow stores them) keys the same
    params = {k: str(v).lower() for k, v in cfg.params().items()}
    assert schema.config_key(params) == TINY_KEY


def test_distributed_key_holds_world_size_engine_stage_and_backend():
    def key(**kw):
        return TrainConfig(**TINY_CFG, env_label="x", backend="gloo", **kw).config_key()

    ddp2 = key(distributed="ddp", world_size=2)
    others = {
        key(distributed="ddp", world_size=4),
        key(distributed="ddp", world_size=1),
        key(distributed="deepspeed", world_size=2),
        key(distributed="deepspeed", world_size=2, zero_stage=2),
        TrainConfig(
            **TINY_CFG, env_label="x", distributed="ddp", world_size=2, backend="nccl"
        ).config_key(),
        TINY_KEY,
    }
    assert ddp2 not in others and len(others) == 6
    cfg = TrainConfig(**TINY_CFG, env_label="x", distributed="ddp", world_size=2, backend="gloo")
    assert cfg.single_process_key() == TINY_KEY
    params = {k: str(v) for k, v in cfg.params().items()}  # as MLflow returns them
    assert schema.config_key(params) == ddp2


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(zero_stage=2), "zero_stage 2 needs distributed=deepspeed"),
        (dict(distributed="ddp", zero_stage=2), "zero_stage 2 needs distributed=deepspeed"),
        (dict(world_size=2), "world_size 2 needs a data-parallel engine"),
        (dict(distributed="ddp", iters="auto"), "iters=auto is not supported with distributed"),
        (dict(distributed="deepspeed", compile=True), "compile with distributed=deepspeed"),
        (dict(distributed="horovod"), "distributed must be one of none, ddp, deepspeed"),
        (dict(distributed="ddp", backend="mpi"), "backend must be one of auto, nccl, gloo"),
        (dict(distributed="ddp", collective_timeout_s=0), "collective_timeout_s must be > 0"),
        (dict(distributed="deepspeed", zero_stage=4), "zero_stage must be 0, 1, 2 or 3"),
    ],
)
def test_config_errors_name_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**{**TINY_CFG, **kwargs}, env_label="x")


@pytest.mark.parametrize(
    "precision, autocast",
    [("fp32", None), ("tf32", None), ("fp16", "float16"), ("bf16", "bfloat16")],
)
def test_deepspeed_autocasts_only_the_half_precisions(precision, autocast):
    """tf32 is fp32 tensors with TF32 math (set by train.device.set_fp32_math), not an autocast
    dtype: DeepSpeed's config carries no torch_autocast for it (issue 22: it raised KeyError)."""
    from train.distributed.engines import deepspeed_config

    cfg = TrainConfig(precision=precision, distributed="deepspeed", env_label="x")
    got = deepspeed_config(cfg).get("torch_autocast")
    assert got == ({"enabled": True, "dtype": autocast} if autocast else None)


def test_deepspeed_on_the_cpu_does_not_build_its_shared_memory_all_reduce(monkeypatch):
    """DeepSpeed's CPU backend would compile deepspeed_shm_comm (100 s of g++ in a new
    environment) that ZeRO's collectives never call: marked incompatible, DeepSpeed's own
    build_shm_op gives None (it loads or builds the op without the mark)."""
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    import deepspeed
    from deepspeed.comm.torch import build_shm_op

    from train.distributed.engines import skip_shm_all_reduce

    skip_shm_all_reduce(deepspeed)
    assert build_shm_op() is None


def test_backend_follows_the_device():
    import torch

    from train.device import collective_backend

    assert collective_backend("auto", torch.device("cpu")) == "gloo"
    assert collective_backend("auto", torch.device("cuda", 0)) == "nccl"
    assert collective_backend("gloo", torch.device("cuda", 0)) == "gloo"
    with pytest.raises(UsageError, match="--backend nccl needs CUDA"):
        collective_backend("nccl", torch.device("cpu"))
    with pytest.raises(UsageError, match="MPS has no collective backend"):
        collective_backend("auto", torch.device("mps"))


def test_job_env_reads_torchrun_variables():
    assert job_env({}) == JobEnv()
    env = job_env({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4"})
    assert (env.rank, env.world_size, env.local_rank, env.local_world_size) == (3, 8, 1, 4)
    assert env.torchrun
    with pytest.raises(UsageError, match="outside WORLD_SIZE"):
        job_env({"RANK": "2", "WORLD_SIZE": "2"})


def test_a_sweep_job_passes_the_whole_config_to_torchrun():
    from train.__main__ import build_parser
    from train.config import config_from_args

    cfg = TrainConfig(
        **TINY_CFG, env_label="lab", distributed="deepspeed", zero_stage=2, world_size=4
    )
    argv = torchrun_argv(cfg, "/tmp/r.json", python="py")
    assert argv[:7] == [
        "py",
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "4",
        "-m",
    ]
    train_args = argv[argv.index("train") + 1 :]
    back = config_from_args(build_parser().parse_args(train_args))
    back.world_size = 4  # torchrun's WORLD_SIZE
    assert back == cfg and back.config_key() == cfg.config_key()
    assert train_args[train_args.index("--result-file") + 1] == "/tmp/r.json"
    assert config_flags(cfg)[:2] == ["--model", "resnet18"]


def test_last_error_line_of_a_job():
    text = "W noise\nerror: rank 1 on h failed: out of memory\nTraceback...\nChildFailedError:\n"
    assert last_error_line(text) == "rank 1 on h failed: out of memory"
    assert last_error_line("a\nb\n") == "b"


# ---------------------------------------------------------------- the maths (pure)
def record(rank, times, compute=None, rss=1e9, peak=None):
    return RankRecord(rank, "h", times, compute, rss, peak, 1.0, 0.5, sum(times))


def test_per_step_slowest_rank_spread_and_exposed_communication():
    records = [
        record(0, [1.0, 2.0, 3.0], [1.0, 1.0, 1.0], rss=2e9, peak=5.0),
        record(1, [2.0, 1.0, 4.0], [1.0, 1.0, 2.0], rss=3e9, peak=7.0),
    ]
    assert slowest_per_step([r.times for r in records]) == [2.0, 2.0, 4.0]
    m = rank_metrics(records, samples_per_step=4)
    assert m["step_time_rank_spread_median_s"] == 1.0  # |1-2|, |2-1|, |3-4|
    assert m["max_rss_bytes"] == 3e9 and m["device_peak_mem_bytes"] == 7.0
    assert m["rank0/step_time_median_s"] == 2.0 and m["rank1/step_time_median_s"] == 2.0
    assert m["rank1/max_rss_bytes"] == 3e9 and m["rank0/device_peak_mem_bytes"] == 5.0
    assert m["cpu_user_s"] == 2.0 and m["cpu_sys_s"] == 1.0
    # compute-only per step: max(1,1), max(1,1), max(1,2) -> median 1, mean 4/3; synchronised
    # (slowest rank) 2, 2, 4 -> mean 8/3. Exposed communication is a difference of MEAN step times
    # (it was of medians, 2 - 1, until the mean became the one statistic for step times shown and
    # rates: docs/schema.md, Definitions): 8/3 - 4/3 = 4/3, a share of (4/3) / (8/3) = 0.5.
    assert m["compute_only_step_time_median_s"] == 1.0
    assert m["compute_only_step_time_mean_s"] == pytest.approx(4 / 3)
    assert m["exposed_comm_time_s"] == pytest.approx(4 / 3)
    assert m["exposed_comm_time_share"] == pytest.approx(0.5)
    assert m["compute_only_throughput_samples_per_s"] == pytest.approx(4 / (4 / 3))


def test_no_compute_only_metrics_without_a_sync_free_step():
    m = rank_metrics([record(0, [1.0, 2.0]), record(1, [1.0, 2.0])], samples_per_step=4)
    assert not [k for k in m if "compute_only" in k or "exposed" in k]
    with pytest.raises(ValueError, match="different numbers of steps"):
        slowest_per_step([[1.0], [1.0, 2.0]])


def test_scaling_efficiency_is_throughput_over_world_size_times_one_process():
    m = scaling_metrics(
        throughput_samples_per_s=30.0, world_size=4, baseline_throughput_samples_per_s=10.0
    )
    assert m == {"scaling_efficiency": 0.75, "scaling_baseline_throughput_samples_per_s": 10.0}


def test_baseline_is_the_same_engine_at_world_size_1_then_a_single_process_run():
    cfg = TrainConfig(**TINY_CFG, env_label="x", distributed="ddp", world_size=2, backend="gloo")
    one = TrainConfig(**TINY_CFG, env_label="x", distributed="ddp", world_size=1, backend="gloo")
    assert baseline_keys(cfg) == [
        ("same engine at world size 1", one.config_key()),
        ("single-process run", TINY_KEY),
    ]
    assert baseline_keys(one) == [("single-process run", TINY_KEY)]


# ---------------------------------------------------------------- who failed (pure)
RANKS = [RankInfo(r, "h0" if r < 2 else "h1", 100 + r, "cpu") for r in range(4)]


def rep(rank, kind, reason, t):
    return Report(rank, kind, reason, t)


def test_the_earliest_own_failure_is_blamed_not_the_peers_that_saw_it():
    reports = {
        0: rep(0, KIND_COMM, "Connection reset by peer", 2.0),
        1: rep(1, KIND_ERROR, "out of memory on cuda at batch 64", 1.0),
        2: rep(2, KIND_SIGNAL, "terminated by SIGTERM", 3.0),
        3: rep(3, KIND_ERROR, "later failure", 1.5),
    }
    status, reason = blame(reports, RANKS, lambda i: None)
    assert status == "FAILED"
    assert (
        reason
        == "rank 1 on h0 failed: out of memory on cuda at batch 64 (1 other rank(s) failed too)"
    )


def test_a_rank_killed_without_a_word_is_named():
    reports = {r: rep(r, KIND_SIGNAL, "terminated by SIGTERM", 1.0) for r in (0, 2, 3)}
    status, reason = blame(reports, RANKS, lambda i: i.rank == 1)
    assert status == "FAILED"
    assert reason.startswith("rank 1 (pid 101 on h0) ended without reporting a reason")


def test_a_silent_living_rank_is_named_with_what_the_others_saw():
    reports = {
        0: rep(0, KIND_COMM, "Timed out waiting 60000ms for recv", 5.0),
        1: rep(1, KIND_COMM, "Timed out", 6.0),
    }
    status, reason = blame(reports, RANKS, lambda i: None if i.host == "h1" else False)
    assert status == "FAILED"
    assert reason.startswith("ranks 2 (pid 102 on h1), 3 (pid 103 on h1) did not report")
    assert reason.endswith("rank 0 saw: Timed out waiting 60000ms for recv")


def test_only_communication_errors_blame_the_first():
    reports = {r: rep(r, KIND_COMM, f"timeout {r}", 10.0 - r) for r in range(4)}
    assert blame(reports, RANKS, lambda i: False) == ("FAILED", "rank 3 on h1: timeout 3")


def test_sigterm_everywhere_is_a_stop_from_outside():
    reports = {r: rep(r, KIND_SIGNAL, "terminated by SIGTERM", 1.0) for r in range(4)}
    assert blame(reports, RANKS, lambda i: False) == (
        "KILLED",
        "terminated by SIGTERM (every rank)",
    )


def test_classify_sees_through_the_benchmark_error_to_the_collective():
    gloo = RuntimeError(
        "[../third_party/gloo/gloo/transport/tcp/pair.cc:545] Read error [127.0.0.1]:15254: "
        "Connection reset by peer."
    )
    wrapped = BenchError("resnet18 failed to train at batch 2: RuntimeError: ...")
    wrapped.__cause__ = gloo
    assert classify(gloo) == KIND_COMM and classify(wrapped) == KIND_COMM
    assert classify(BenchError("out of memory on cuda at batch 64")) == KIND_ERROR
    assert classify(ValueError("bad")) == KIND_ERROR


class FakeStore:
    def __init__(self):
        self.data = {}

    def set(self, key, value):
        self.data[key] = value.encode() if isinstance(value, str) else value

    def check(self, keys):
        return all(k in self.data for k in keys)

    def get(self, key):
        return self.data[key]


def test_rank_0_blames_the_rank_that_reported_when_it_only_saw_the_collective_fail():
    from train.distributed.failures import Board

    ranks = [RankInfo(r, "h", 10**7 + r, "cpu") for r in range(2)]  # pids that do not exist
    board = Board(FakeStore(), 2)
    board.report(1, KIND_ERROR, "out of memory on cpu at batch 2 (resnet18, 32px, fp32)")
    ctx = DistContext(JobEnv(0, 2, 0, 2, True), "gloo", None, ranks)
    guard = Guard(ctx, board, wait_s=0.5)

    def body():
        raise RuntimeError("[gloo] Read error: Connection reset by peer")

    with pytest.raises(BenchError) as err:
        guard.blamed(body)
    assert str(err.value).startswith("rank 1 on h failed: out of memory on cpu at batch 2")
    assert board.reports()[0].kind == KIND_COMM  # rank 0 reported what it saw, too

    other = Guard(DistContext(JobEnv(1, 2, 1, 2, True), "gloo", None, ranks), board)
    with pytest.raises(BenchError, match=r"^rank 1: ValueError: broken"):
        other.blamed(lambda: (_ for _ in ()).throw(ValueError("broken")))


# ---------------------------------------------------------------- jobs (processes)
@pytest.fixture(scope="module")
def store(template_db, tmp_path_factory):
    """One sqlite store for the module's jobs, with a single-process baseline run of the tiny
    config in experiment EXPERIMENT; yields (tracking URI, baseline run id, folder)."""
    folder = tmp_path_factory.mktemp("dist")
    db = folder / "mlflow.db"
    shutil.copyfile(template_db, db)
    uri = f"sqlite:///{db}"
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(folder)
        mp.setenv("MLFLOW_TRACKING_URI", uri)
        mp.setenv("ROOFLINE_SPOOL_DIR", str(folder / "spool"))
        for name in ("MLFLOW_RUN_ID", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_EXPERIMENT_ID"):
            mp.delenv(name, raising=False)
        mlflow.set_tracking_uri(uri)
        from train.__main__ import main

        assert main([*TINY, "--env-label", "ci", "--experiment", EXPERIMENT]) == 0
        base = runs(f"tags.config_key = '{TINY_KEY}'")
        assert len(base) == 1 and base[0].data.tags["config_key"] == TINY_KEY
        yield uri, base[0].info.run_id, folder
        mlflow.set_tracking_uri(None)


def runs(filt: str = "", experiment: str = EXPERIMENT) -> list:
    return mlflow.search_runs(
        experiment_names=[experiment],
        filter_string=filt,
        output_format="list",
        order_by=["attributes.start_time ASC"],
    )


def job_env_vars(uri: str, folder, **extra) -> dict:
    env = dict(os.environ, MLFLOW_TRACKING_URI=uri, ROOFLINE_SPOOL_DIR=str(folder / "spool"))
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    for name in ("MLFLOW_RUN_ID", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_EXPERIMENT_ID"):
        env.pop(name, None)
    env.update(extra)
    return env


def torchrun(*args: str, nproc: int = 2) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(nproc),
        "-m",
        "train",
        *TINY,
        "--env-label",
        "ci",
        "--experiment",
        EXPERIMENT,
        *args,
    ]


def check_two_process_run(run, baseline_id: str) -> None:
    p, m, t = run.data.params, run.data.metrics, run.data.tags
    assert run.info.status == "FINISHED"
    assert p["world_size"] == "2" and p["nodes"] == "1" and p["backend"] == "gloo"
    assert p["batch_size"] == "2" and p["global_batch_size"] == "4"
    assert t["batch_size_scope"] == "per_process" and t["base_config_key"] == TINY_KEY
    assert t["config_key"] == schema.config_key(p) != TINY_KEY
    assert t["scaling_baseline"] == "single-process run"
    assert t["scaling_baseline_run_id"] == baseline_id
    base = mlflow.get_run(baseline_id).data.metrics["throughput_samples_per_s"]
    assert m["scaling_efficiency"] == pytest.approx(m["throughput_samples_per_s"] / (2 * base))
    assert m["throughput_samples_per_s"] == pytest.approx(4 / m["step_time_mean_s"])
    for r in (0, 1):
        assert m[f"rank{r}/max_rss_bytes"] > 1e8 and m[f"rank{r}/step_time_median_s"] > 0
    assert m["step_time_rank_spread_median_s"] >= 0
    assert m["measured_iters"] == 3


def test_ddp_job_logs_one_run_with_communication_cost_and_scaling(store):
    uri, baseline_id, folder = store
    pre = mlflow.tracking.MlflowClient().create_run(
        mlflow.get_experiment_by_name(EXPERIMENT).experiment_id
    )  # as `mlflow run` does: rank 0 takes this run over, the other rank never touches it
    env = job_env_vars(uri, folder, MLFLOW_RUN_ID=pre.info.run_id)
    done = subprocess.run(
        torchrun("--distributed", "ddp"), env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = runs("params.distributed = 'ddp'")
    assert [r.info.run_id for r in found] == [pre.info.run_id]
    run = found[0]
    check_two_process_run(run, baseline_id)
    assert run.data.tags["compute_only"] == "measured: DDP no_sync()"
    check_exposed_communication(run)
    client = mlflow.tracking.MlflowClient()
    by_rank = client.download_artifacts(run.info.run_id, "timing/step_times_by_rank.csv")
    rows = open(by_rank).read().splitlines()
    assert rows[0] == "step,phase,rank,step_time_s" and len(rows) == 1 + 2 * 2 * 3
    assert "scaling efficiency" in done.stdout and "exposed communication" in done.stdout


def check_exposed_communication(run) -> None:
    m = run.data.metrics
    assert m["compute_only_step_time_median_s"] > 0
    # means, not medians (the one statistic for step times shown and rates: docs/schema.md)
    assert m["exposed_comm_time_s"] == pytest.approx(
        m["step_time_mean_s"] - m["compute_only_step_time_mean_s"]
    )
    assert m["exposed_comm_time_share"] == pytest.approx(
        m["exposed_comm_time_s"] / m["step_time_mean_s"]
    )
    history = mlflow.tracking.MlflowClient().get_metric_history(
        run.info.run_id, "steps/compute_only_step_time_s"
    )
    assert len(history) == 3


def test_deepspeed_zero2_job_logs_one_run_with_communication_cost_and_scaling(store):
    uri, baseline_id, folder = store
    done = subprocess.run(
        torchrun("--distributed", "deepspeed", "--zero-stage", "2"),
        env=job_env_vars(uri, folder),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = runs("params.distributed = 'deepspeed'")
    assert len(found) == 1
    run = found[0]
    check_two_process_run(run, baseline_id)
    assert run.data.params["zero_stage"] == "2"
    assert run.data.tags["compute_only"] == (
        "measured: DeepSpeed ZeRO stage 2 step with its collectives skipped"
    )
    check_exposed_communication(run)


def test_analysis_tables_the_two_jobs_against_the_single_process_run(store, tmp_path):
    """python -m analysis over the ddp and ZeRO-2 jobs above (fetched through READ_KEYS): the
    scaling rows recompute each run's own scaling efficiency and carry its exposed communication."""
    from analysis import core, fetch, report

    data, _ = fetch.fetch_runs(fetch.Query(experiments=[EXPERIMENT]), fetch.Source("off"))
    analysis = core.build(data)
    rows = {r["label"]: r for r in analysis.scaling.to_dict("records")}
    for label, engine in (("ddp×2", "ddp"), ("zero2×2", "deepspeed")):
        row = rows[f"resnet18/b2/fp32/32px/{label}"]
        (run,) = runs(f"params.distributed = '{engine}' and params.world_size = '2'")
        m = run.data.metrics
        assert row["baseline"] == "single-process run" and row["world_size"] == 2
        assert row["scaling_efficiency"] == pytest.approx(m["scaling_efficiency"])
        assert row["exposed_comm_time_share"] == pytest.approx(m["exposed_comm_time_share"])
    text = report.markdown_text(
        report.report_blocks(report.Report(analysis, {}, "store", EXPERIMENT, "now"))
    )
    assert "## Scaling with world size" in text and "| resnet18/b2/fp32/32px/zero2 | 2 |" in text


def rank_process(parent_pid: int, rank: int):
    import psutil

    for proc in psutil.Process(parent_pid).children(recursive=True):
        try:
            if proc.environ().get("RANK") == str(rank) and "train" in proc.cmdline():
                return proc
        except psutil.Error:
            continue
    return None


def test_killing_one_rank_ends_the_job_within_the_timeout_with_a_failed_run_naming_it(store):
    uri, _, folder = store
    timeout_s = 60
    job = subprocess.Popen(
        torchrun(
            "--distributed",
            "ddp",
            "--iters",
            "100000",
            "--collective-timeout-s",
            str(timeout_s),
            "--experiment",
            "dist-kill",
        ),
        env=job_env_vars(uri, folder),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 300
        while not (mlflow.get_experiment_by_name("dist-kill") and runs(experiment="dist-kill")):
            assert job.poll() is None and time.monotonic() < deadline, job.communicate()[1][-3000:]
            time.sleep(1)
        time.sleep(5)  # the run is open: the ranks are counting, warming up or measuring
        victim = rank_process(job.pid, 1)
        assert victim is not None
        victim_pid = victim.pid
        killed = time.monotonic()
        os.kill(victim_pid, signal.SIGKILL)
        _, err = job.communicate(timeout=timeout_s + 60)
        elapsed = time.monotonic() - killed
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode != 0
    assert elapsed < timeout_s, err[-3000:]
    (run,) = runs(experiment="dist-kill")
    assert run.info.status == "FAILED"
    assert run.data.tags["error"].startswith(f"rank 1 (pid {victim_pid} on ")
    assert "ended without reporting a reason" in run.data.tags["error"]
    assert f"error: rank 1 (pid {victim_pid}" in err


def test_world_size_is_a_sweep_axis_one_torchrun_job_per_child_and_resumes(store):
    from train.sweep.__main__ import main as sweep

    uri, _, folder = store
    argv = (
        "--models resnet18 --batch-sizes 2 --image-size 32 --iters 3 --warmup-iters 1 "
        "--device cpu --distributed ddp --world-sizes 1 2 --env-label sweep-box "
        "--experiment dist-sweep --name ws --no-progress"
    ).split()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", str(ROOT))
        assert sweep(argv) == 0
        children = runs("tags.run_kind = 'train'", experiment="dist-sweep")
        assert [(r.info.status, r.data.params["world_size"]) for r in children] == [
            ("FINISHED", "1"),
            ("FINISHED", "2"),
        ]
        one, two = children
        assert one.data.tags["scaling_baseline"].startswith("none: no FINISHED world-size-1 run")
        assert two.data.tags["scaling_baseline"] == "same engine at world size 1"
        assert two.data.tags["scaling_baseline_run_id"] == one.info.run_id
        assert two.data.metrics["scaling_efficiency"] > 0
        assert one.data.tags["mlflow.parentRunId"] == two.data.tags["mlflow.parentRunId"]
        assert sweep(argv) == 0  # resume: both done
        assert len(runs("tags.run_kind = 'train'", experiment="dist-sweep")) == 2


def test_world_size_1_deepspeed_stage_0_in_process_measures_without_sync(store):
    """`python -m train --distributed deepspeed` without torchrun: a one-process job (its own
    process group), DeepSpeed's no_sync() at stage 0, compared with the single-process run."""
    from train.__main__ import main

    uri, baseline_id, folder = store
    argv = [*TINY, "--env-label", "ci", "--experiment", EXPERIMENT, "--distributed", "deepspeed"]
    with pytest.MonkeyPatch.context() as mp:
        for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):  # set for DeepSpeed: undone after
            mp.setenv(name, "")
            mp.delenv(name)
        assert main(argv) == 0
    assert "RANK" not in os.environ
    (run,) = runs("params.distributed = 'deepspeed' and params.world_size = '1'")
    assert run.info.status == "FINISHED"
    assert run.data.tags["compute_only"] == "measured: DeepSpeed engine.no_sync() (ZeRO stage 0)"
    assert run.data.metrics["compute_only_step_time_median_s"] > 0
    assert run.data.tags["scaling_baseline_run_id"] == baseline_id
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the guard put SIGTERM back


def test_profile_mode_runs_the_ddp_wrapped_step_between_profiler_start_and_stop():
    """What every rank of a profiled torchrun job runs (docs/profiling.md), as a one-process job."""
    import torch

    from train.bench import preflight
    from train.profile_mode import profile_steps
    from train.distributed import context, engines

    events, wrapped = [], []

    class Mark:
        def __init__(self, name):
            self.name = name

        def __enter__(self):
            events.append(self.name)

        def __exit__(self, *exc):
            pass

    def wrap(prep):
        wrapped.append(engines.wrap(prep, cfg, ctx))
        prep.parts.model.register_forward_pre_hook(lambda *a: events.append("ddp forward"))

    cfg = TrainConfig(**TINY_CFG, env_label="x", distributed="ddp")
    ctx = context.start(cfg, preflight(cfg), JobEnv())
    try:
        profile_steps(
            cfg,
            ctx.device,
            1,
            profiler_start=lambda: events.append("start"),
            profiler_stop=lambda: events.append("stop"),
            mark=Mark,
            wrap=wrap,
        )
    finally:
        ctx.close()
    assert [w.how for w in wrapped] == ["measured: DDP no_sync()"]
    assert isinstance(ctx.device, torch.device) and cfg.backend == "gloo"
    profiled = events[events.index("start") :]
    assert profiled == [
        "start",
        "train_step",
        "forward",
        "ddp forward",
        "backward",
        "optimizer",
        "stop",
    ]
    assert events[: events.index("start")] == ["ddp forward"]  # the warmup step, unmarked


def test_distributed_profile_mode_needs_cuda_and_logs_nothing(capsys):
    from train.__main__ import main

    code = main([*TINY, "--distributed", "ddp", "--profile-steps", "1"])
    assert code == 2
    assert "profile mode needs an NVIDIA GPU" in capsys.readouterr().err


def test_several_processes_without_an_engine_are_refused(capsys, monkeypatch):
    from train.__main__ import main

    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert main(TINY) == 2
    assert "no engine was given: add --distributed ddp" in capsys.readouterr().err


@pytest.mark.parametrize("stage", [1, 2])
def test_zero_compute_only_steps_run_no_collective(stage):
    """The ZeRO compute-only step holds no collective: one rank runs it alone while its peer waits
    (a collective left in it would block until the 20 s timeout and fail the job)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    done = subprocess.run(
        [*argv, str(ROOT / "tests" / "zero_alone.py"), str(stage)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # the two ranks share torchrun's stdout: their lines may interleave ("rank 0 ok 0rank 1 ok 3")
    assert sorted(re.findall(r"rank \d ok \d", done.stdout)) == ["rank 0 ok 0", "rank 1 ok 3"]
