"""`python -m train`: fixed-iteration training benchmark of a torchvision model, logged to MLflow.

The thin edge around train/bench.py: flags, one RunSession per run, the run's figure and scaling
comparison, profile mode, and the per-rank entry of a torchrun job (train/distributed/ has the
engines, the gathering and the failure guard). Over 400 lines because those entries share `run`.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from common import console, schema
from common.cli import ArgumentParser
from common.cli import cli_entry
from common.errors import UsageError
from train.config import TrainConfig, add_config_args, config_from_args


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="python -m train",
        description="Time a fixed number of training steps of a torchvision model and log the run to MLflow "
        "(MLFLOW_TRACKING_URI; default sqlite:///mlflow.db).",
    )
    add_config_args(parser)
    out = parser.add_argument_group("output")
    out.add_argument(
        "--experiment",
        default=None,
        help="MLflow experiment name (default: MLFLOW_EXPERIMENT_NAME or Default)",
    )
    out.add_argument("--no-progress", action="store_true", help="no progress bar")
    out.add_argument(
        "--no-system-metrics", action="store_true", help="do not sample CPU/GPU/memory into the run"
    )
    out.add_argument(
        "--result-file",
        default=None,
        help=argparse.SUPPRESS,  # a sweep's torchrun job: rank 0 writes its record here, logs no run
    )
    out.add_argument(
        "--profile-steps",
        type=int,
        default=0,
        metavar="K",
        help="profile mode (under ncu; see python -m profiling): K NVTX-marked steps between "
        "cudaProfilerStart/Stop after warmup; logs no run",
    )
    out.add_argument(
        "--no-cudnn-benchmark",
        action="store_true",
        help="profile mode: keep cuDNN's autotuner off, so every run picks the same kernels (ncu's "
        "application and app-range replay rerun the program once per pass)",
    )
    return parser


def run(
    cfg: TrainConfig,
    *,
    experiment: str | None = None,
    progress: bool = True,
    system_metrics: bool = True,
    parent=None,
    extra_params: dict | None = None,
    extra_tags: dict | None = None,
    name_suffix: str = "",
    note_extra: str = "",
    measure=None,
    guard=None,
):
    """Pre-flight, then one `train` run: returns (the closed RunSession, BenchResult).

    `name_suffix` ends the run name (a sweep child's `-r<repeat>`); `note_extra` ends its
    description (which sweep it belongs to).

    Raises BenchError for bad input found before the run (nothing logged: a sweep records such a
    configuration as a FAILED child itself) and re-raises failures inside the run after it was
    ended FAILED with the reason.

    `measure(cfg, device, progress=...)` makes the BenchResult: run_benchmark; for a distributed
    config, one torchrun job (train.distributed.launch.run_job: a sweep child), unless this process
    is that job's rank 0, which passes its own and the `guard` that lets it end the run when
    another rank fails (train.distributed.failures).
    """
    from common.envinfo import environment_tags
    from common.record import dataset_input
    from common.tracking import RunSession
    from train.bench import preflight, run_benchmark, run_header, run_note, step_times_csv
    from train.data import dataset_fields
    from train.distributed.failures import NoGuard

    device = preflight(cfg)
    params, tags = run_header(cfg, device)
    if measure is None and cfg.is_distributed:
        from train.distributed.launch import run_job as measure
    guard = guard or NoGuard()
    session = RunSession(
        "train",
        experiment=experiment,
        run_name=f"{cfg.run_name()}-{device.type}{name_suffix}",
        tags=environment_tags(str(device), cfg.env_label),
        parent=parent,
        system_metrics=system_metrics,
    )
    with tempfile.TemporaryDirectory() as tmp, guard.hold(ender(session)), session:
        session.log_params({**params, **(extra_params or {})})
        session.set_tags({**tags, **(extra_tags or {})})
        session.log_metrics(cfg.config_metrics())
        fields = dataset_fields(cfg.data, cfg.image_size, cfg.num_classes, cfg.seed)
        session.log_input(dataset_input(**fields, context="train"))
        session.flush()
        step_times: list[float] = []  # kept when a single-process measurement stops mid-way
        if measure is None:

            def measure(cfg, device, progress=True):
                return run_benchmark(
                    cfg,
                    device,
                    progress=progress,
                    step_times=step_times,
                    on_measure=session.start_system_metrics,
                )

        try:
            with guard.released():
                result = measure(cfg, device, progress=progress)
        except BaseException:  # interrupted (KILLED) or failed mid-way: keep what was measured
            if step_times:
                session.log_text("timing/step_times.csv", step_times_csv(step_times))
            raise
        if cfg.is_distributed:
            compare_scaling(session, cfg, result)
        session.log_params(result.params)
        session.set_tags(result.tags)
        device_name = session.record.tags[schema.TAG_DEVICE_NAME]
        session.set_note(run_note(cfg, device_name, result, note_extra))
        session.log_metrics(result.metrics)
        log_roofline(session, cfg, device_name, result.metrics, Path(tmp))
        for name, values in result.series.items():
            session.log_series(name, values)
        for path, text in result.texts.items():
            session.log_text(path, text)
    return session, result


def log_roofline(session, cfg: TrainConfig, device_name: str, metrics: dict, tmp: Path) -> None:
    """Log `roofline.png`: this run against its device's ceilings (the latest peaks run of the
    device on this server, else the vendor table; analysis/run_roofline.py). Tag `roofline_roof`
    says where the ceilings came from (`measured: peaks run <id>`, `vendor: <source>`), or why
    there is no figure. A failure here is one warning,
    never a failed run."""
    from common.errors import one_line

    try:
        from analysis import run_roofline
        from analysis.vendor import load_vendor_lookup

        peaks = None
        if not session.offline:
            from analysis.fetch.peaks import latest_peaks_row

            peaks = latest_peaks_row(device_name, cfg.env_label)
        roof = run_roofline.run_roof(device_name, peaks, load_vendor_lookup()(device_name))
        if roof is None:
            session.set_tags(
                {"roofline_roof": f"none: no peaks run or vendor entry for {device_name}"}
            )
            return
        image = run_roofline.png(
            roof,
            cfg.precision,
            metrics["achieved_flops_per_s"],
            metrics["modeled_intensity_flops_per_byte"],
            f"{cfg.config_label()} on {device_name}",
        )
        path = tmp / "roofline.png"
        path.write_bytes(image)
        session.log_file("roofline.png", path)
        session.set_tags({"roofline_roof": "; ".join(sorted(set(roof.sources.values())))})
    except Exception as exc:  # noqa: BLE001 - a figure never fails the measured run
        console.warn(f"no roofline.png for this run: {one_line(exc)[:300]}")


def ender(session):
    """`end(status, reason)`: end `session`'s run from outside its `with` block (a distributed
    run's SIGTERM watcher: train.distributed.failures.Guard)."""

    def end(status: str, reason: str) -> None:
        if status == "KILLED":
            session.__exit__(KeyboardInterrupt, KeyboardInterrupt(reason), None)
        else:
            session.fail(reason)
            session.__exit__(None, None, None)

    return end


def compare_scaling(session, cfg: TrainConfig, result) -> None:
    """Scaling efficiency of a distributed run against the newest FINISHED world-size-1 run of the
    same work per process, same env label and device on the tracking server (same engine first,
    then single-process; train.distributed.measure.baseline_keys). Tags say which run it was, or
    why there is none."""
    from common.errors import one_line
    from common.runs import latest_finished_run
    from train.distributed.measure import scaling_metrics, baseline_keys

    tags = session.record.tags
    if session.offline or not session.experiment_id:
        result.tags["scaling_baseline"] = "none: the tracking server was unreachable"
        return
    same = (
        f"tags.{schema.TAG_RUN_KIND} = 'train' and "
        f"tags.{schema.TAG_ENV_LABEL} = {schema.filter_literal(tags[schema.TAG_ENV_LABEL])} and "
        f"tags.{schema.TAG_DEVICE_NAME} = {schema.filter_literal(tags[schema.TAG_DEVICE_NAME])}"
    )
    for which, key in baseline_keys(cfg):
        try:
            run = latest_finished_run(
                session.experiment_id, f"{same} and tags.{schema.TAG_CONFIG_KEY} = '{key}'"
            )
        except Exception as exc:  # noqa: BLE001 - the measurement stands without the comparison
            result.tags["scaling_baseline"] = f"none: cannot search the server ({one_line(exc)})"
            return
        base = run.data.metrics.get("throughput_samples_per_s") if run is not None else None
        if base:
            result.metrics.update(
                scaling_metrics(result.metrics["throughput_samples_per_s"], cfg.world_size, base)
            )
            result.tags["scaling_baseline"] = which
            result.tags["scaling_baseline_run_id"] = run.info.run_id
            return
    result.tags["scaling_baseline"] = (
        "none: no FINISHED world-size-1 run of this configuration (config_key "
        f"{cfg.single_process_key()}) on {tags[schema.TAG_ENV_LABEL]} in this experiment"
    )


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        cfg = config_from_args(args)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if cfg.is_distributed:
        return _distributed(cfg, args)
    from train.distributed.context import job_env

    if job_env().world_size > 1:
        raise UsageError(
            "this is one of several torchrun processes but no engine was given: add --distributed "
            "ddp or --distributed deepspeed (else every process logs a run of its own)"
        )
    if args.profile_steps:
        return _profile(cfg, args.profile_steps, cudnn_benchmark=not args.no_cudnn_benchmark)
    session, result = run(
        cfg,
        experiment=args.experiment,
        progress=not args.no_progress,
        system_metrics=not args.no_system_metrics,
    )
    _say_result(cfg, session, result)
    return 0


def _say_result(cfg: TrainConfig, session, result) -> None:
    from train.bench import summary_line

    where = f"kept offline in {session.spool_path}" if session.offline else f"run {session.run_id}"
    device_name = session.record.tags[schema.TAG_DEVICE_NAME]
    console.result(
        f"{summary_line(cfg, device_name, result.metrics, len(result.step_times_s))}; {where}"
    )
    if cfg.is_distributed:
        console.result(_scaling_text(cfg, result))
    if not session.offline:
        from common.server import ui_hint

        console.result(ui_hint(session.run_id, session.experiment_id))


def _scaling_text(cfg: TrainConfig, result) -> str:
    m, tags = result.metrics, result.tags
    parts = [f"batch {cfg.batch_size} per process, {cfg.batch_size * cfg.world_size} per step"]
    if "compute_only_step_time_median_s" in m:
        parts.append(
            f"without gradient sync {m['compute_only_step_time_median_s'] * 1e3:.1f} ms/step, "
            f"exposed communication {m['exposed_comm_time_s'] * 1e3:.1f} ms "
            f"({m['exposed_comm_time_share']:.0%} of a step)"
        )
    else:
        parts.append(f"compute-only time {tags.get('compute_only', 'not measured')}")
    if "scaling_efficiency" in m:
        parts.append(
            f"scaling efficiency {m['scaling_efficiency']:.2f} against the {tags['scaling_baseline']} "
            f"{tags['scaling_baseline_run_id']}"
        )
    else:
        parts.append(f"scaling efficiency: {tags.get('scaling_baseline', 'none')}")
    return "; ".join(parts)


def _distributed(cfg: TrainConfig, args) -> int:
    """One process of a data-parallel job (under torchrun, or alone as a world-size-1 job).

    Every rank measures; rank 0 alone holds the run (or, in a sweep's job, writes the result file),
    and ends it FAILED naming the rank when any rank fails (train.distributed.failures).
    """
    import os

    from common.errors import EXIT_USAGE
    from train.bench import check_profile_mode, preflight
    from train.distributed import context
    from train.distributed.failures import Guard
    from train.distributed.measure import run_distributed_benchmark

    env = context.job_env()
    if env.rank != 0:
        os.environ.pop("MLFLOW_RUN_ID", None)  # only rank 0 touches the tracking store
    cfg.world_size = env.world_size
    with console.quiet(env.rank != 0):
        try:
            if args.profile_steps:  # bad flags and no GPU first, before any process group
                check_profile_mode(cfg, args.profile_steps)
                _require_cuda()
            device = preflight(cfg)
        except UsageError:
            if env.rank != 0:
                return EXIT_USAGE  # every rank sees the same bad input; rank 0 says it
            raise
        ctx = context.start(cfg, device, env)
        try:
            with Guard(ctx) as guard:

                def measure(cfg, device, progress=True):
                    return guard.blamed(lambda: run_distributed_benchmark(cfg, ctx, progress))

                if args.profile_steps:
                    return _profile_distributed(
                        cfg,
                        args.profile_steps,
                        ctx,
                        guard,
                        cudnn_benchmark=not args.no_cudnn_benchmark,
                    )
                if ctx.rank != 0:
                    measure(cfg, ctx.device)
                    return 0
                if args.result_file:
                    return _job_of_sweep(cfg, args.result_file, measure, guard)
                session, result = run(
                    cfg,
                    experiment=args.experiment,
                    progress=not args.no_progress,
                    system_metrics=not args.no_system_metrics,
                    measure=measure,
                    guard=guard,
                )
        finally:
            ctx.close()
    _say_result(cfg, session, result)
    return 0


def _job_of_sweep(cfg: TrainConfig, path: str, measure, guard) -> int:
    """Rank 0 of a sweep child's torchrun job: the record (or the failure) into `path`; the sweep's
    process logs it (train.distributed.launch.run_job)."""
    from common.errors import BenchError, one_line
    from train.distributed.launch import write_result

    def end(status: str, reason: str) -> None:
        write_result(path, None, status, reason)

    with guard.hold(end):
        try:
            with guard.released():
                result = measure(cfg, None, progress=False)
        except BenchError as err:
            write_result(path, None, "FAILED", one_line(err))
            raise
        write_result(path, result)
    return 0


def _profile(cfg: TrainConfig, steps: int, cudnn_benchmark: bool = True) -> int:
    import torch

    from train.bench import check_profile_mode, preflight, profile_steps

    check_profile_mode(cfg, steps)  # bad flags first: they are wrong on any machine
    _require_cuda()
    if cfg.device == "auto":
        cfg.device = "cuda"
    device = preflight(cfg)
    if device.type != "cuda":
        raise UsageError(f"profile mode needs --device cuda, got {cfg.device}")
    profile_steps(cfg, device, steps, cudnn_benchmark=cudnn_benchmark)
    console.info(
        f"profiled {steps} step(s) of {cfg.run_name()} on {torch.cuda.get_device_name(device)}"
    )
    return 0


def _require_cuda() -> None:
    import torch

    if not torch.cuda.is_available():
        raise UsageError(
            "profile mode needs an NVIDIA GPU (CUDA is not available here); "
            "import ncu output made elsewhere with python -m profiling --import FILE"
        )


def _profile_distributed(
    cfg: TrainConfig, steps: int, ctx, guard, cudnn_benchmark: bool = True
) -> int:
    """Profile mode on every rank of a torchrun job: the same warmup and K marked steps of the
    engine-wrapped step on each rank (they synchronise gradients with each other), so that ncu
    wrapping rank 0 alone captures a real data-parallel step (docs/profiling.md)."""
    from train.bench import profile_steps
    from train.distributed import engines

    guard.blamed(
        lambda: profile_steps(
            cfg,
            ctx.device,
            steps,
            cudnn_benchmark=cudnn_benchmark,
            wrap=lambda prep: engines.wrap(prep, cfg, ctx),
        )
    )
    console.info(
        f"rank {ctx.rank}: profiled {steps} step(s) of {cfg.run_name()} ({cfg.distributed})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
