"""`python -m train`: fixed-iteration training benchmark of a torchvision model, logged to MLflow."""

from __future__ import annotations

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
):
    """Pre-flight, then one `train` run: returns (the closed RunSession, BenchResult).

    `name_suffix` ends the run name (a sweep child's `-r<repeat>`); `note_extra` ends its
    description (which sweep it belongs to).

    Raises BenchError for bad input found before the run (nothing logged: a sweep records such a
    configuration as a FAILED child itself) and re-raises failures inside the run after it was
    ended FAILED with the reason.
    """
    from common.envinfo import environment_tags
    from common.tracking import RunSession, dataset_input
    from train.bench import preflight, run_benchmark, run_header, run_note
    from train.data import dataset_fields

    device = preflight(cfg)
    params, tags = run_header(cfg, device)
    session = RunSession(
        "train",
        experiment=experiment,
        run_name=f"{cfg.run_name()}-{device.type}{name_suffix}",
        tags=environment_tags(str(device), cfg.env_label),
        parent=parent,
        system_metrics=system_metrics,
    )
    with tempfile.TemporaryDirectory() as tmp, session:  # tmp outlives the session's uploads
        session.log_params({**params, **(extra_params or {})})
        session.set_tags({**tags, **(extra_tags or {})})
        session.log_metrics(cfg.config_metrics())
        fields = dataset_fields(cfg.data, cfg.image_size, cfg.num_classes, cfg.seed)
        session.log_input(dataset_input(**fields, context="train"))
        session.flush()
        result = run_benchmark(
            cfg, device, progress=progress, on_measure=session.start_system_metrics
        )
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


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        cfg = config_from_args(args)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.profile_steps:
        return _profile(cfg, args.profile_steps, cudnn_benchmark=not args.no_cudnn_benchmark)
    session, result = run(
        cfg,
        experiment=args.experiment,
        progress=not args.no_progress,
        system_metrics=not args.no_system_metrics,
    )
    from train.bench import summary_line

    where = f"kept offline in {session.spool_path}" if session.offline else f"run {session.run_id}"
    device_name = session.record.tags[schema.TAG_DEVICE_NAME]
    console.result(
        f"{summary_line(cfg, device_name, result.metrics, len(result.step_times_s))}; {where}"
    )
    if not session.offline:
        from common.server import ui_hint

        console.result(ui_hint(session.run_id, session.experiment_id))
    return 0


def _profile(cfg: TrainConfig, steps: int, cudnn_benchmark: bool = True) -> int:
    import torch

    from train.bench import check_profile_mode, preflight, profile_steps

    check_profile_mode(cfg, steps)  # bad flags first: they are wrong on any machine
    if not torch.cuda.is_available():
        raise UsageError(
            "profile mode needs an NVIDIA GPU (CUDA is not available here); "
            "import ncu output made elsewhere with python -m profiling --import FILE"
        )
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


if __name__ == "__main__":
    raise SystemExit(main())
