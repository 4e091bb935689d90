"""`python -m profiling`: Nsight Compute counters of one training config -> one MLflow `profile` run.

Two ways in:

* capture (needs an NVIDIA GPU and ncu): runs ``ncu ... python -m train <config> --profile-steps K``
  (profiling.ncu_command), parses ncu's CSV log and logs the run;
* ``--import FILE``: an ncu CSV (details or raw page) or a ``.ncu-rep`` report made elsewhere, logged
  with the config given on the command line (works on any machine).

The CUDA check is injectable: ``main(argv, probe=...)`` takes a callable ``probe(device, env_label)``
returning GpuInfo; the default asks torch. Tests pass a stand-in probe and put a stand-in ``ncu`` on
PATH, so the whole capture path runs without a GPU (docs/profiling.md, "Testing without a GPU").
"""

from __future__ import annotations

import argparse
import math
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from common import console, schema
from common.cli import ArgumentParser, cli_entry, optional
from common.errors import BenchError, UsageError
from common.tracking import RunSession
from profiling import chips, ncu_metrics
from profiling.ncu_command import (
    APPLICATION_REPLAY,
    CACHE_CONTROLS,
    CLOCK_CONTROLS,
    REPLAY_MODES,
    CaptureOptions,
    check_replay_mode,
    classify_ncu_output,
    legacy_message,
    ncu_argv,
    ncu_version,
    resolve_ncu,
    run_ncu,
    train_argv,
)
from profiling.ncu_parse import NcuReport, parse_ncu_csv, read_ncu_csv
from profiling.ncu_report_import import is_ncu_rep, load_ncu_rep
from train.config import TrainConfig, add_config_args, config_from_args
from train.config import config_flags as train_config_flags
from train.data import num_classes_for
from train.models import check_model_name

ROOT = Path(__file__).resolve().parents[1]
TOP_KERNELS = 25
NO_GPU_MESSAGE = (
    "profiling needs an NVIDIA GPU with CUDA (torch.cuda.is_available() is False here); counters "
    "measured on another machine can be logged with --import FILE (an ncu CSV or .ncu-rep), which works anywhere"
)


@dataclass
class GpuInfo:
    """What the capture path needs to know about the local GPU."""

    available: bool
    """torch.cuda.is_available()."""
    name: str | None = None
    """torch.cuda.get_device_name(), e.g. "NVIDIA L4"."""
    capability: tuple[int, int] | None = None
    """compute capability (major, minor); chooses the tensor-core counters."""
    tags: dict[str, str] = field(default_factory=dict)
    """environment tags (common.envinfo.environment_tags)."""


def cuda_probe(device: str, env_label: str | None = None) -> GpuInfo:
    """The real probe: torch's view of `device` (no CUDA context is created)."""
    import torch

    if not torch.cuda.is_available():
        return GpuInfo(False)
    from common.envinfo import environment_tags

    dev = torch.device(device)
    index = dev.index if dev.index is not None else 0
    return GpuInfo(
        True,
        torch.cuda.get_device_name(index),
        tuple(torch.cuda.get_device_capability(index)),
        environment_tags(device, env_label),
    )


# ------------------------------------------------------------------------------------ flags
def _capability(text: str) -> tuple[int, int]:
    try:
        return chips.parse_capability(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog="python -m profiling",
        description="Nsight Compute counters of one training config (capture with ncu, or --import) "
        "-> one MLflow `profile` run with FLOPs, DRAM/L2/L1 bytes and measured arithmetic intensity.",
    )
    add_config_args(p, distributed=False)
    g = p.add_argument_group("profiling")
    g.add_argument(
        "--profile-steps",
        type=int,
        default=1,
        help="training steps profiled after warmup (default 1)",
    )
    g.add_argument(
        "--metric-set",
        default="roofline",
        choices=ncu_metrics.METRIC_SETS,
        help="ncu metrics to collect",
    )
    g.add_argument("--metrics", default="", help="extra ncu metrics, comma separated")
    g.add_argument(
        "--replay-mode", default="kernel", choices=REPLAY_MODES, help="ncu --replay-mode"
    )
    g.add_argument(
        "--clock-control", default="base", choices=CLOCK_CONTROLS, help="ncu --clock-control"
    )
    g.add_argument(
        "--cache-control",
        default="all",
        choices=CACHE_CONTROLS,
        help="ncu --cache-control: all (flush caches before every replay pass, ncu's default: cold-cache "
        "DRAM bytes, intensity biased low) or none (keep what the previous pass left)",
    )
    g.add_argument(
        "--launch-skip",
        type=optional(int),
        default=0,
        help="ncu --launch-skip (kernels in the profiled region)",
    )
    g.add_argument(
        "--launch-count", type=optional(int), default=None, help="ncu --launch-count (default: all)"
    )
    g.add_argument(
        "--tensor-counters",
        default="auto",
        choices=ncu_metrics.TENSOR_MODES,
        help="tensor-core counters: auto (the chip's sm__ops_path_tensor_* counters where it has them; "
        "instructions on Volta), ops, inst (warns on sm_75-89, refused on sm_90+), none",
    )
    g.add_argument("--ncu", default="ncu", help="ncu executable (default: ncu on PATH)")
    g.add_argument(
        "--out", default=str(ROOT / "out" / "profile"), help="folder for the ncu CSV log"
    )
    g.add_argument(
        "--import",
        dest="import_file",
        type=optional(),
        default=None,
        metavar="FILE",
        help="log an existing ncu CSV or .ncu-rep instead of capturing (works without a GPU)",
    )
    g.add_argument(
        "--device-name",
        type=optional(),
        default=None,
        help='GPU name as torch.cuda.get_device_name() reports it, e.g. "NVIDIA L4", or a chip name such '
        "as GH100 (imports: read from the file when it carries it; --dry-run: the GPU to plan for)",
    )
    g.add_argument(
        "--compute-capability",
        type=optional(_capability),
        default=None,
        metavar="X.Y",
        help="compute capability of the GPU (--dry-run: the GPU to plan for; imports: when the file "
        "does not carry it)",
    )
    g.add_argument(
        "--dry-run",
        action="store_true",
        help="print the exact ncu command (one shell-quoted line) and its metric list for --device-name "
        "or --compute-capability, then exit: no GPU, no ncu, no MLflow run",
    )
    g.add_argument(
        "--experiment", type=optional(), default=None, help="MLflow experiment (default: MLflow's)"
    )
    return p


def config_flags(args: argparse.Namespace) -> list[str]:
    """The training-config flags of `args` as `python -m train` takes them (from add_config_args)."""
    return train_config_flags(args)


def _config(args: argparse.Namespace) -> TrainConfig:
    if args.device == "auto":
        args.device = "cuda"
    if not str(args.device).startswith("cuda"):
        raise UsageError(
            f"profiling measures CUDA kernels: --device must be cuda or cuda:N, got {args.device!r}"
        )
    # an unknown model is bad input (exit 2, no run), on the import path as on the capture path;
    # the canonical spelling keeps config_key equal to that of `python -m train` (its preflight does the same)
    args.model = check_model_name(args.model)
    try:
        config = config_from_args(args)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    # the same num_classes as `python -m train` derives, so config_key joins with its timing runs
    config.num_classes = num_classes_for(config.data, config.num_classes)
    return config


def _options(args: argparse.Namespace) -> CaptureOptions:
    try:
        return CaptureOptions(
            profile_steps=args.profile_steps,
            metric_set=args.metric_set,
            extra_metrics=tuple(m for m in (args.metrics or "").split(",")),
            replay_mode=args.replay_mode,
            clock_control=args.clock_control,
            cache_control=args.cache_control,
            # Inductor's compile workers are child processes: ncu stays out of them
            target_processes="application-only" if args.compile else "all",
            launch_skip=args.launch_skip or 0,
            launch_count=args.launch_count,
            tensor_counters=args.tensor_counters,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


# ------------------------------------------------------------------------------------ main
def main(argv: list[str] | None = None, *, probe: Callable[..., GpuInfo] | None = None) -> int:
    """Entry point; `probe` replaces the CUDA check (tests)."""
    return cli_entry(lambda a: _main(a, probe or cuda_probe))(argv)


def _main(argv: list[str] | None, probe: Callable[..., GpuInfo]) -> int:
    args = build_parser().parse_args(argv)
    config = _config(args)
    opts = _options(args)
    importing = args.import_file is not None
    if not importing and config.warmup_iters < 1:
        raise UsageError(
            "--warmup-iters 0: the profiled step would hold cuDNN autotuning, first allocations and, "
            "with fp16, GradScaler's skipped optimizer step; profile after at least 1 warmup step (default 5)"
        )
    if args.dry_run:
        return _dry_run(args, config, opts)
    if importing and not Path(args.import_file).is_file():
        raise UsageError(f"--import {args.import_file}: no such file")

    run_name = f"{config.run_name()}-ncu"
    tags = {
        schema.TAG_CONFIG_KEY: config.config_key(),
        schema.TAG_ENV_LABEL: config.env_label,
        schema.TAG_DEVICE_TYPE: "cuda",
        schema.TAG_INTENSITY_SOURCE: "measured",
        "ncu_source": "import" if importing else "capture",
    }
    params = {**config.params(), "profile_steps": opts.profile_steps}
    if importing:
        params["ncu_import_file"] = Path(args.import_file).name
    else:
        params.update(
            ncu_metric_set=opts.metric_set,
            ncu_replay_mode=opts.replay_mode,
            ncu_clock_control=opts.clock_control,
            ncu_cache_control=opts.cache_control,
            ncu_target_processes=opts.target_processes,
            ncu_launch_skip=opts.launch_skip,
            ncu_launch_count=opts.launch_count if opts.launch_count is not None else "all",
            ncu_extra_metrics=",".join(opts.extra_metrics) or "none",
        )

    with RunSession("profile", experiment=args.experiment, run_name=run_name, tags=tags) as session:
        session.log_params(params)
        session.flush()
        if importing:
            report, device_name, capability, counters = _import(args, session)
            cautioned: list[str] = []
        else:
            report, device_name, capability, counters, cautioned = _capture(
                args, config, opts, probe, session
            )
        summary = ncu_metrics.summarize(report, capability, counters)
        ncu_metrics.require_counters(summary, report.source)
        warnings, tags = list(summary.warnings), summary.mlflow_tags()
        incomplete = ncu_metrics.roofline_warning(summary, report.source)
        if incomplete:
            warnings.append(incomplete)
        warnings = [w for w in warnings if w not in cautioned]  # said before ncu ran
        gap = ncu_metrics.tensor_flops_gap(summary, config.precision)
        if gap:
            tags["ncu_tensor_undercount"], warning = gap
            warnings.append(warning)
        for warning in warnings:
            console.warn(warning)
        session.set_tags({schema.TAG_DEVICE_NAME: device_name, **tags})
        session.log_metrics(summary.mlflow_metrics())
        session.log_text(
            "ncu/top_kernels.csv", ncu_metrics.top_kernels(summary, TOP_KERNELS).to_csv(index=False)
        )
        session.log_text("ncu/kernels.csv", summary.kernels.to_csv(index=False))
        if summary.phases is not None:
            session.log_text("ncu/phases.csv", summary.phases.to_csv(index_label="phase"))
        elif not importing:
            console.note(
                "no NVTX phases in the ncu output (does train's profile mode mark forward/backward/optimizer?)"
            )
        if "time_s" not in summary.measured:
            console.note("no gpu__time_duration.sum in the input: ncu_kernel_time_s not logged")
    console.result(_summary_line(session.run_id, summary, device_name))
    return 0


def _chip_counters(
    device_name: str | None, capability: tuple[int, int] | None, chip_id: int | None = None
) -> tuple[chips.ChipChoice, chips.ChipCounters | None]:
    """The device's chip and that chip's counters, with a note for every assumption made."""
    choice = chips.resolve_chip(device_name, capability, chip_id)
    if choice.note:
        console.note(choice.note)
    counters = chips.counters_for(choice.chip) if choice.chip else None
    if counters is not None and chips.source_note():
        console.note(chips.source_note())
    return choice, counters


def _chip_tags(choice: chips.ChipChoice, counters: chips.ChipCounters | None) -> dict[str, str]:
    tags = {"ncu_chip": choice.chip or "unknown", "ncu_chip_from": choice.how}
    if counters is not None:
        tags["ncu_metric_database"] = counters.source
    return tags


def _import(
    args: argparse.Namespace, session: RunSession
) -> tuple[NcuReport, str, tuple[int, int] | None, chips.ChipCounters | None]:
    path = Path(args.import_file)
    session.log_file(f"ncu/{path.name}", path)
    console.info(f"importing {path} ...")
    if is_ncu_rep(path):
        report = load_ncu_rep(path)
    else:
        report = read_ncu_csv(path, keep=ncu_metrics.is_relevant)
    name, cap = ncu_metrics.device_from_report(report)
    cap = cap or args.compute_capability
    device_name = args.device_name or name
    if not device_name:
        raise BenchError(
            f"{path.name} does not name its GPU: pass --device-name as torch.cuda.get_device_name() "
            'reports it on the profiled machine, e.g. --device-name "NVIDIA L4"'
        )
    if args.device_name and name and args.device_name != name:
        console.note(
            f"{path.name} says the GPU is {name!r}; logging --device-name {args.device_name!r}"
        )
    choice, counters = _chip_counters(device_name, cap, ncu_metrics.chip_id_from_report(report))
    extra = {"ncu_import_file": path.name, "ncu_page": report.page, **_chip_tags(choice, counters)}
    if cap:
        extra["cuda_capability"] = f"{cap[0]}.{cap[1]}"
    session.set_tags(extra)
    return report, device_name, cap, counters


@dataclass
class PlannedCapture:
    """Everything decided before ncu starts."""

    choice: chips.ChipChoice
    counters: chips.ChipCounters | None
    plan: ncu_metrics.MetricPlan
    cautions: list[str]
    """lines already said about tensor FLOPs from instructions (not repeated after the run)."""


def plan_capture(
    opts: CaptureOptions, device_name: str | None, capability: tuple[int, int] | None
) -> PlannedCapture:
    """Chip, metric list and cautions of a capture on the given device; raises before ncu runs
    for what would fail there (a tensor mode the chip cannot count, --metrics names it lacks,
    tensor instructions without a FLOPs factor). Prints the notes and warnings once."""
    choice, counters = _chip_counters(device_name, capability)
    if opts.legacy_metrics:
        raise UsageError(legacy_message(opts.legacy_metrics))
    plan = ncu_metrics.plan_metrics(
        opts.metric_set, opts.tensor_counters, opts.extra_metrics, counters, capability
    )
    for line in plan.notes:
        console.note(line)
    if opts.extra_metrics and choice.chip:
        problems, unchecked = chips.check_metric_names(choice.chip, opts.extra_metrics)
        if problems:
            raise UsageError(f"--metrics: {'; '.join(problems)}")
        if unchecked:
            console.note(unchecked)
    if opts.replay_mode in APPLICATION_REPLAY:
        console.note(
            f"--replay-mode {opts.replay_mode} reruns the program once per pass: it runs with "
            "cuDNN's autotuner off (--no-cudnn-benchmark), so every pass picks the same kernels; "
            "they may differ from the ones an autotuned benchmark run picks"
        )
    if opts.target_processes == "application-only":
        console.note(
            "--compile: ncu profiles the application only (--target-processes application-only), "
            "so it is not injected into Inductor's compile workers"
        )
    cautions = []
    if plan.tensor == "inst" and ncu_metrics.inst_cautioned(capability):
        # the ops counters exist there and one instruction's FLOPs vary; refused where no factor is known
        caution = ncu_metrics.tensor_inst_caution(capability)
        if ncu_metrics.tensor_inst_flops(capability) is None:
            raise UsageError(f"--tensor-counters inst: {caution}")
        console.warn(f"--tensor-counters inst: {caution}")
        cautions.append(caution)
    return PlannedCapture(choice, counters, plan, cautions)


def _capture(
    args, config: TrainConfig, opts: CaptureOptions, probe, session: RunSession
) -> tuple[NcuReport, str, tuple[int, int] | None, chips.ChipCounters | None, list[str]]:
    gpu = probe(config.device, config.env_label)
    if not gpu.available:
        raise BenchError(NO_GPU_MESSAGE)
    ncu = resolve_ncu(args.ncu)
    planned = plan_capture(opts, gpu.name, gpu.capability)
    unchecked = check_replay_mode(ncu, opts.replay_mode)
    if unchecked:
        console.note(unchecked)
    if planned.cautions:
        session.set_tags({"ncu_caution": " | ".join(planned.cautions)})

    log_file = _log_file(args, config)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    if log_file.exists():
        log_file.unlink()  # never parse a stale log from an earlier capture
    argv = _ncu_command(ncu, log_file, planned, args, opts)

    session.set_tags(
        {
            **gpu.tags,
            schema.TAG_DEVICE_NAME: gpu.name or "unknown",
            schema.TAG_DEVICE_TYPE: "cuda",
            schema.TAG_ENV_LABEL: config.env_label,
            "ncu_version": ncu_version(ncu),
            "ncu_tensor_counters": planned.plan.tensor,
            **_chip_tags(planned.choice, planned.counters),
        }
    )
    session.log_text("ncu/command.txt", shlex.join(argv) + "\n")
    session.flush()
    console.info(
        f"profiling {config.run_name()} on {gpu.name} ({planned.choice.chip or 'unknown chip'}) with ncu "
        f"({opts.metric_set} metrics, {opts.profile_steps} step(s))"
    )
    console.info(f"  {shlex.join(argv)}")
    ran = run_ncu(argv, log_file, cwd=ROOT)
    rc = ran.returncode
    text = log_file.read_text(encoding="utf-8-sig", errors="replace") if log_file.exists() else ""
    if log_file.exists():
        session.log_file(f"ncu/{log_file.name}", log_file)
    if ran.console.strip():
        session.log_text("ncu/console.txt", ran.console + "\n")
    # ncu prints some failures only to the console (before or instead of the log file): classify both
    reason = classify_ncu_output("\n".join(t for t in (text, ran.console) if t.strip()), rc)
    if reason:
        raise BenchError(reason)
    if not text.strip():
        raise BenchError(f"ncu exited with code {rc} but wrote nothing to {log_file}")
    report = parse_ncu_csv(text, keep=ncu_metrics.is_relevant, source=log_file.name)
    return report, gpu.name or "unknown", gpu.capability, planned.counters, planned.cautions


def _log_file(args: argparse.Namespace, config: TrainConfig) -> Path:
    return Path(args.out).expanduser().resolve() / f"{config.run_name()}-{config.config_key()}.csv"


def _ncu_command(
    ncu: str, log_file: Path, planned: PlannedCapture, args, opts: CaptureOptions
) -> list[str]:
    program = train_argv(sys.executable, config_flags(args), opts.profile_steps, opts.replay_mode)
    return ncu_argv(ncu, log_file, planned.plan.metrics, opts, program)


def _dry_run(args: argparse.Namespace, config: TrainConfig, opts: CaptureOptions) -> int:
    """Print the capture's ncu command (one shell-quoted line) and, as shell comments, the chip
    and the metric list: what a capture on that GPU would run. No GPU, no ncu, no MLflow run."""
    if args.import_file is not None:
        raise UsageError("--dry-run plans a capture: it does not go with --import")
    if not args.device_name and args.compute_capability is None:
        raise UsageError(
            "--dry-run needs the GPU to plan for: --device-name NAME (as torch reports it, or a chip "
            "name such as GH100) or --compute-capability X.Y"
        )
    planned = plan_capture(opts, args.device_name, args.compute_capability)
    ncu = shutil.which(args.ncu) or args.ncu
    argv = _ncu_command(ncu, _log_file(args, config), planned, args, opts)
    plan, counters = planned.plan, planned.counters
    device = args.device_name or f"compute capability {chips.cc_text(args.compute_capability)}"
    where = counters.source if counters else "generic names, not checked"
    console.result(shlex.join(argv))
    console.result(
        f"# {device} -> {planned.choice.chip or 'unknown chip'} ({where}): "
        f"{len(plan.metrics)} metrics, tensor counters {plan.tensor}"
    )
    for name in plan.metrics:
        console.result(f"#   {name}")
    if plan.missing:
        console.result(
            f"# not counted on {planned.choice.chip or 'this GPU'}: {', '.join(plan.missing)}"
        )
    return 0


def _summary_line(run_id: str | None, s: ncu_metrics.NcuSummary, device_name: str) -> str:
    t = s.totals
    n = len(s.kernels)
    parts = [f"profile run {run_id} ({device_name}): {n} kernel{'' if n == 1 else 's'}"]
    if "flops_total" in t:
        precisions = [q.split("_", 1)[1] for q in s.measured if q.startswith("flops_") and t.get(q)]
        parts.append(f"{t['flops_total']:.4g} FLOP ({'+'.join(precisions) or 'none counted'})")
    if "dram_bytes" in t:
        parts.append(f"{t['dram_bytes']:.4g} DRAM bytes")
    ai = s.intensity("dram")
    if ai is not None and not math.isnan(ai):
        parts.append(f"intensity {ai:.3g} FLOP/byte (measured)")
    if "time_s" in t:
        parts.append(f"kernel time {t['time_s'] * 1e3:.4g} ms under ncu (not a training time)")
    return ", ".join(parts)
