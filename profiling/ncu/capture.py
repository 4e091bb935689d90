"""The capture path of `python -m profiling`: plan the metric list for the GPU, run
``ncu ... python -m train <config> --profile-steps K`` (profiling.ncu.command) and parse its CSV
log; and ``--dry-run``, which prints that plan and command without a GPU, ncu or MLflow run.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from common import console, schema
from common.errors import BenchError, UsageError
from common.tracking import RunSession
from profiling.breakdown.nvtx_steps import program as nvtx_program
from profiling.ncu.chips.counters import ChipCounters, check_metric_names
from profiling.ncu.chips.devices import ChipChoice, cc_text, chip_capability, resolve_chip
from profiling.ncu.command import (
    APPLICATION_REPLAY,
    CaptureOptions,
    check_replay_mode,
    ncu_argv,
    ncu_version,
    resolve_ncu,
    run_ncu,
    timeout_message,
    train_argv,
)
from profiling.ncu.counting import inst_cautioned, tensor_inst_caution, tensor_inst_flops
from profiling.ncu.gpu import chip_for, chip_tags
from profiling.ncu.messages import classify_ncu_output, legacy_message
from profiling.ncu.names import is_relevant
from profiling.ncu.parse import NcuReport, parse_ncu_csv, refuse_truncated
from profiling.ncu.plan import MetricPlan, plan_metrics
from train.config import TrainConfig, config_flags
from train.device import cuda_precision_refusal, fp32_math_reported

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "out" / "profile"
"""Where the ncu CSV logs go unless --out says otherwise."""
NO_GPU_MESSAGE = (
    "profiling needs an NVIDIA GPU with CUDA (torch.cuda.is_available() is False here); counters "
    "measured on another machine can be logged with --import FILE (an ncu CSV or .ncu-rep), which works anywhere"
)


@dataclass
class PlannedCapture:
    """Everything decided before ncu starts."""

    choice: ChipChoice
    counters: ChipCounters | None
    plan: MetricPlan
    cautions: list[str]
    """lines already said about tensor FLOPs from instructions (not repeated after the run)."""


def plan_capture(
    opts: CaptureOptions,
    device_name: str | None,
    capability: tuple[int, int] | None,
    precision: str = "fp32",
) -> PlannedCapture:
    """Chip, metric list and cautions of a capture on the given device; raises before ncu runs
    for what would fail there (a precision the GPU lacks, with the line `python -m train` would
    print; a tensor mode the chip cannot count, --metrics names it lacks, tensor instructions
    without a FLOPs factor). Prints the notes and warnings once."""
    # a GPU given by name alone has its chip's capability (tensor counters, the precision check)
    capability = capability or chip_capability(resolve_chip(device_name).chip)
    refusal = cuda_precision_refusal(precision, device_name, capability)
    if refusal:
        raise UsageError(refusal)
    choice, counters = chip_for(device_name, capability)
    if opts.legacy_metrics:
        raise UsageError(legacy_message(opts.legacy_metrics))
    plan = plan_metrics(
        opts.metric_set, opts.tensor_counters, opts.extra_metrics, counters, capability
    )
    for line in plan.notes:
        console.note(line)
    if opts.extra_metrics and choice.chip:
        problems, unchecked = check_metric_names(choice.chip, opts.extra_metrics)
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
    if plan.tensor == "inst" and inst_cautioned(capability):
        # the ops counters exist there and one instruction's FLOPs vary; refused where no factor is known
        caution = tensor_inst_caution(capability)
        if tensor_inst_flops(capability) is None:
            raise UsageError(f"--tensor-counters inst: {caution}")
        console.warn(f"--tensor-counters inst: {caution}")
        cautions.append(caution)
    return PlannedCapture(choice, counters, plan, cautions)


def capture(
    args, config: TrainConfig, opts: CaptureOptions, probe, session: RunSession
) -> tuple[NcuReport, str, tuple[int, int] | None, ChipCounters | None, list[str]]:
    """(report, device name, compute capability, chip counters, cautions already said) of a capture
    on the GPU `probe` finds; raises BenchError with ncu's failure as one line."""
    gpu = probe(config.device, config.env_label)
    if not gpu.available:
        raise BenchError(NO_GPU_MESSAGE)
    ncu = resolve_ncu(args.ncu)
    planned = plan_capture(opts, gpu.name, gpu.capability, config.precision)
    unchecked = check_replay_mode(ncu, opts.replay_mode)
    if unchecked:
        console.note(unchecked)
    if planned.cautions:
        session.set_tags({"ncu_caution": " | ".join(planned.cautions)})

    log = log_file(args, config)
    log.parent.mkdir(parents=True, exist_ok=True)
    if log.exists():
        log.unlink()  # never parse a stale log from an earlier capture
    argv = ncu_command(ncu, log, planned, args, opts)

    session.set_tags(
        {
            **gpu.tags,
            schema.TAG_DEVICE_NAME: gpu.name or "unknown",
            schema.TAG_DEVICE_TYPE: "cuda",
            schema.TAG_ENV_LABEL: config.env_label,
            "ncu_version": ncu_version(ncu),
            "ncu_tensor_counters": planned.plan.tensor,
            **chip_tags(planned.choice, planned.counters),
        }
    )
    session.log_text("ncu/command.txt", shlex.join(argv) + "\n")
    session.flush()
    console.info(
        f"profiling {config.run_name()} on {gpu.name} ({planned.choice.chip or 'unknown chip'}) with ncu "
        f"({opts.metric_set} metrics, {opts.profile_steps} step(s))"
    )
    console.info(f"  {shlex.join(argv)}")
    ran = run_ncu(argv, log, cwd=ROOT, timeout_s=opts.timeout_s)
    rc = ran.returncode
    text = _keep_evidence(session, log, ran)
    if ran.timed_out:
        raise BenchError(timeout_message(opts.timeout_s, ran.killed, log))
    # ncu prints some failures only to the console (before or instead of the log file): classify both
    reason = classify_ncu_output("\n".join(t for t in (text, ran.console) if t.strip()), rc)
    if reason:
        raise BenchError(reason)
    if not text.strip():
        raise BenchError(f"ncu exited with code {rc} but wrote nothing to {log}")
    report = parse_ncu_csv(text, keep=is_relevant, source=log.name)
    refuse_truncated(report, args.allow_truncated)
    return report, gpu.name or "unknown", gpu.capability, planned.counters, planned.cautions


def _keep_evidence(session: RunSession, log: Path, ran) -> str:
    """Log ncu's log file and console with the run, tag the fp32 math the program reported; the
    log's text ("" when ncu wrote none)."""
    text = log.read_text(encoding="utf-8-sig", errors="replace") if log.exists() else ""
    if log.exists():
        session.log_file(f"ncu/{log.name}", log)
    if ran.console.strip():
        session.log_text("ncu/console.txt", ran.console + "\n")
    fp32_math = fp32_math_reported(ran.console)
    session.set_tags(
        {schema.TAG_FP32_MATH: fp32_math or "unknown (the profiled program did not report it)"}
    )
    return text


def log_file(args: argparse.Namespace, config: TrainConfig) -> Path:
    """The ncu CSV log of this config under --out."""
    return Path(args.out).expanduser().resolve() / f"{config.run_name()}-{config.config_key()}.csv"


def ncu_command(
    ncu: str, log: Path, planned: PlannedCapture, args, opts: CaptureOptions
) -> list[str]:
    """The planned capture's ncu argument list, running this config's `python -m train`."""
    program = train_argv(sys.executable, config_flags(args), opts.profile_steps, opts.replay_mode)
    if getattr(args, "nvtx_modules", False):  # the same profile mode with module NVTX ranges
        program = nvtx_program(program)
    return ncu_argv(ncu, log, planned.plan.metrics, opts, program)


def dry_run(args: argparse.Namespace, config: TrainConfig, opts: CaptureOptions) -> int:
    """Print the capture's ncu command (one shell-quoted line) and, as shell comments, the chip
    and the metric list: what a capture on that GPU would run. No GPU, no ncu, no MLflow run."""
    if any(args.import_file or ()):
        raise UsageError("--dry-run plans a capture: it does not go with --import")
    if not args.device_name and args.compute_capability is None:
        raise UsageError(
            "--dry-run needs the GPU to plan for: --device-name NAME (as torch reports it, or a chip "
            "name such as GH100) or --compute-capability X.Y"
        )
    planned = plan_capture(opts, args.device_name, args.compute_capability, config.precision)
    ncu = shutil.which(args.ncu) or args.ncu
    argv = ncu_command(ncu, log_file(args, config), planned, args, opts)
    plan, counters = planned.plan, planned.counters
    device = args.device_name or f"compute capability {cc_text(args.compute_capability)}"
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
