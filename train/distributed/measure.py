"""The distributed benchmark and the metrics made from what every rank measured.

Every rank: prepare and count as a single-process run does (train.bench.setup), put the engine
around the model, warm up, then (after a barrier) the measured steps, each timed on the rank
between two synchronised clock reads; then, where the engine has a way (engines.GradSync), the same
number of steps without gradient synchronisation. Only after the loops do the ranks exchange what
they measured (one all_gather_object), so no collective of the harness is inside a timed step.

Rank 0 makes the run record: per step the slowest rank's time (the step is done when every rank
is), the global throughput (batch per process x world size / mean step time), per-rank memory and
step times and their spread across ranks. `rank_metrics` and `scaling_metrics` are pure.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from common import schema
from train import device as dev
from train.bench import (
    BenchResult,
    Measured,
    bench_result,
    compile_model,
    measure_steps,
    progress_bar,
    runtime_errors,
    setup,
    step_times_csv,
    warm_up,
)
from train.config import TrainConfig
from train.distributed import engines
from train.timing import summarize

TAG_COMPUTE_ONLY = "compute_only"  # measured: <how>, or unavailable: <why>


@dataclass
class RankRecord:
    """What one rank measured, sent to rank 0 once the loops are over."""

    rank: int
    host: str
    times: list[float]
    compute_only_times: list[float] | None
    max_rss_bytes: float
    device_peak_mem_bytes: float | None
    cpu_user_s: float
    cpu_sys_s: float
    wall_s: float


def run_distributed_benchmark(cfg: TrainConfig, ctx, progress: bool = True) -> BenchResult | None:
    """Measure `cfg` on every rank of `ctx`; rank 0 returns the run record, the others None."""
    device = ctx.device
    with runtime_errors(cfg, device):
        prep, counts, forward, count_s = setup(cfg, device)
        sync = engines.wrap(prep, cfg, ctx)
    if cfg.compile:
        prep.parts.model = compile_model(prep.parts.model)
    dev.reset_peak_memory(device)
    extra = 1 + cfg.iters if sync.no_sync is not None else 0
    compute = None
    with (
        progress_bar(cfg, progress and ctx.rank == 0, extra) as bar,
        runtime_errors(cfg, device),
    ):
        warm_up(prep, cfg.warmup_iters, bar)
        ctx.barrier()  # every rank starts measuring together (outside the timed steps)
        measured = measure_steps(prep, bar)
        if sync.no_sync is not None:
            prep.parts.grad_sync = sync.no_sync
            warm_up(prep, 1, bar)  # the first step of the new mode is not timed
            ctx.barrier()
            compute = measure_steps(prep, bar, "compute-only")
    mine = RankRecord(
        ctx.rank,
        ctx.ranks[ctx.rank].host,
        measured.times,
        compute.times if compute is not None else None,
        dev.max_rss_bytes(),
        dev.device_peak_memory_bytes(device),
        measured.cpu_user_s,
        measured.cpu_sys_s,
        measured.wall_s,
    )
    with runtime_errors(cfg, device):
        records = ctx.gather(mine)
        ctx.gathered()  # no rank leaves (closing its connections) while rank 0 still gathers
    if ctx.rank != 0:
        return None
    slowest = slowest_per_step([r.times for r in records])
    job = Measured(
        slowest,
        measured.stop,
        measured.wall_s,
        sum(r.cpu_user_s for r in records),
        sum(r.cpu_sys_s for r in records),
        load=measured.load,  # rank 0's machine
    )
    result = bench_result(
        prep, counts, forward, job, count_s, samples_per_step=cfg.batch_size * ctx.world_size
    )
    result.metrics.update(rank_metrics(records, cfg.batch_size * ctx.world_size))
    result.tags[TAG_COMPUTE_ONLY] = sync.how
    result.params["nodes"] = ctx.nodes
    result.texts["timing/step_times_by_rank.csv"] = by_rank_csv(records)
    if compute is not None:
        compute_slowest = slowest_per_step([r.compute_only_times for r in records])
        result.more_series[schema.COMPUTE_ONLY_SERIES] = compute_slowest
        result.texts["timing/compute_only_step_times.csv"] = step_times_csv(compute_slowest)
    return result


def slowest_per_step(per_rank: list[list[float]]) -> list[float]:
    """Per step, the slowest rank's seconds (every rank measured the same number of steps)."""
    lengths = {len(t) for t in per_rank}
    if len(lengths) != 1:
        raise ValueError(f"ranks measured different numbers of steps: {sorted(lengths)}")
    return np.max(np.asarray(per_rank, dtype=float), axis=0).tolist()


def rank_metrics(records: list[RankRecord], samples_per_step: int) -> dict[str, float]:
    """The job's metrics beyond those of a single-process run (docs/schema.md, "distributed runs"):
    memory and CPU over ranks, each rank's median step time, the spread of step times across ranks,
    and the compute-only steps against the synchronised ones."""
    times = np.asarray([r.times for r in records], dtype=float)  # ranks x steps
    slowest = times.max(axis=0)
    out = {
        "max_rss_bytes": max(r.max_rss_bytes for r in records),
        "cpu_user_s": sum(r.cpu_user_s for r in records),
        "cpu_sys_s": sum(r.cpu_sys_s for r in records),
        "step_time_rank_spread_median_s": float(np.median(slowest - times.min(axis=0))),
        "step_time_rank_spread_max_s": float(np.max(slowest - times.min(axis=0))),
    }
    peaks = [r.device_peak_mem_bytes for r in records if r.device_peak_mem_bytes is not None]
    if peaks:
        out["device_peak_mem_bytes"] = max(peaks)
    for r in records:
        out[f"rank{r.rank}/step_time_median_s"] = float(np.median(r.times))
        out[f"rank{r.rank}/max_rss_bytes"] = r.max_rss_bytes
        if r.device_peak_mem_bytes is not None:
            out[f"rank{r.rank}/device_peak_mem_bytes"] = r.device_peak_mem_bytes
    if all(r.compute_only_times is not None for r in records):
        compute = summarize(
            slowest_per_step([r.compute_only_times for r in records]), samples_per_step
        )
        step_s = float(np.mean(slowest))  # the mean, as every rate (docs/schema.md, Definitions)
        exposed = step_s - compute["step_time_mean_s"]
        out.update(
            compute_only_step_time_median_s=compute["step_time_median_s"],
            compute_only_step_time_mean_s=compute["step_time_mean_s"],
            compute_only_throughput_samples_per_s=compute["throughput_samples_per_s"],
            exposed_comm_time_s=exposed,
            exposed_comm_time_share=exposed / step_s,
        )
    return out


def scaling_metrics(
    throughput_samples_per_s: float, world_size: int, baseline_throughput_samples_per_s: float
) -> dict[str, float]:
    """Scaling efficiency: the job's throughput over world_size times that of one process doing
    the same work per process (1.0 = ideal linear scaling; batch_size is per process, so this is
    weak scaling)."""
    return {
        "scaling_efficiency": throughput_samples_per_s
        / (world_size * baseline_throughput_samples_per_s),
        "scaling_baseline_throughput_samples_per_s": baseline_throughput_samples_per_s,
    }


def baseline_keys(cfg: TrainConfig) -> list[tuple[str, str]]:
    """(which, config_key) of the world-size-1 runs a distributed run of `cfg` is compared with,
    in order of preference: the same engine and stage at world size 1 (scaling alone), then a
    single-process run without an engine (scaling and the engine's own cost). A world-size-1 run
    is compared with the single-process run only."""
    keys = []
    if cfg.world_size > 1:
        keys.append(("same engine at world size 1", replace(cfg, world_size=1).config_key()))
    keys.append(("single-process run", cfg.single_process_key()))
    return keys


def by_rank_csv(records: list[RankRecord]) -> str:
    """Every rank's step times: step, phase (measured | compute_only), rank, step_time_s."""
    lines = ["step,phase,rank,step_time_s"]
    for r in records:
        lines += [f"{i},measured,{r.rank},{t!r}" for i, t in enumerate(r.times)]
        if r.compute_only_times is not None:
            lines += [
                f"{i},compute_only,{r.rank},{t!r}" for i, t in enumerate(r.compute_only_times)
            ]
    return "\n".join(lines) + "\n"
