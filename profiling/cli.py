"""`python -m profiling`: Nsight Compute counters of one training config -> one MLflow `profile` run.

Two ways in:

* capture (needs an NVIDIA GPU and ncu): runs ``ncu ... python -m train <config> --profile-steps K``
  (profiling.ncu.capture, the command from profiling.ncu.command), parses ncu's CSV log and logs the
  run; ``--dry-run`` prints that command and its metric list instead;
* ``--import FILE``: an ncu CSV (details or raw page) or a ``.ncu-rep`` report made elsewhere, logged
  with the config given on the command line (works on any machine; profiling.ncu.import_path);
* ``--breakdown``: not ncu at all: where the step's time goes per module and phase, on any device
  (profiling/breakdown/cli.py, docs/breakdown.md).

This module holds the flags, the config and the run both paths log (profiling.ncu.totals's metrics,
tags and kernel tables). The CUDA check is injectable: ``main(argv, probe=...)`` takes a callable
``probe(device, env_label)`` returning profiling.ncu.gpu.GpuInfo; the default asks torch. Tests pass
a stand-in probe and put a stand-in ``ncu`` on PATH, so the whole capture path runs without a GPU
(docs/profiling.md, "Testing without a GPU").
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from common import console, flags, fmt, out_folder, schema
from common.cli import ArgumentParser, cli_entry, optional
from common.errors import BenchError, UsageError, one_line
from common.run_record import dataset_input
from common.tracking import RunSession
from profiling.ncu.capture import DEFAULT_OUT, capture, dry_run
from profiling.ncu.checks import check_rates, check_values
from profiling.ncu.chips.devices import parse_capability
from profiling.ncu.command import CaptureOptions
from profiling.ncu.completeness import CountCheck, check_against_count
from profiling.ncu.counting import TIME_FROM_CYCLES
from profiling.ncu.gpu import GpuInfo, cuda_probe
from profiling.ncu.capture_set import ImportOptions
from profiling.hierarchy.table import TableOptions
from profiling.hierarchy.log import log_hierarchy
from profiling.ncu.import_path import check_import_file, import_paths, import_report
from profiling.ncu.totals import (
    NcuSummary,
    require_counters,
    roofline_warning,
    summarize,
    tensor_flops_gap,
    top_kernels,
    top_kernels_text,
)
from train.config import RunHeader, TrainConfig, add_config_args, config_from_args
from train.data import dataset_fields, num_classes_for
from train.models import check_model_name
from train.ledger import qualified
from train.phase_flops import config_phase_flops

TOP_KERNELS = 25


# ------------------------------------------------------------------------------------ flags
def _capability(text: str) -> tuple[int, int]:
    try:
        return parse_capability(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


@dataclass
class ProfileCommand:
    """Where the counters come from (a capture, --import, --dry-run) and where they go; how ncu
    captures is CaptureOptions, what it profiles TrainConfig."""

    ncu: str = "ncu"
    """the ncu executable: a name looked up on PATH, or a path."""
    nvtx_modules: bool = field(default=False, metadata=flags.SWITCH)
    """capture: one NVTX range per module call, and emit_nvtx's sequence numbers, so the run also
    logs layers.csv with measured FLOPs and DRAM bytes per module (docs/breakdown.md)."""
    out: str = str(DEFAULT_OUT)
    """folder for the ncu CSV log."""
    import_file: tuple[str, ...] = field(
        default=(),
        metadata={"flags": ("--import",), "metavar": "PATH", "nargs": "+", "parse": optional(str)},
    )
    """log existing ncu output instead of capturing (works without a GPU): ncu CSVs (gzipped or
    not), .ncu-rep reports or folders of them, one capture set merged launch by launch
    (profiling.ncu.capture_set; --phase says which phase each holds)."""
    allow_truncated: bool = field(default=False, metadata=flags.SWITCH)
    """log an ncu CSV that looks cut short (a short or unfinished last row, a last result missing
    metrics) as an incomplete profile without a roofline point, instead of failing."""
    device_name: str | None = None
    """GPU name as torch.cuda.get_device_name() reports it, e.g. "NVIDIA L4", or a chip name such
    as GH100 (imports: read from the file when it carries it; --dry-run: the GPU to plan for)."""
    compute_capability: tuple[int, int] | None = field(
        default=None, metadata={"parse": _capability, "metavar": "X.Y"}
    )
    """compute capability of the GPU (--dry-run: the GPU to plan for; imports: when the file does
    not carry it)."""
    dry_run: bool = field(default=False, metadata=flags.SWITCH)
    """print the exact ncu command (one shell-quoted line) and its metric list for --device-name or
    --compute-capability, then exit: no GPU, no ncu, no MLflow run."""
    experiment: str | None = flags.experiment()


def build_parser() -> argparse.ArgumentParser:
    """The training config's flags (train.config), then the `profiling` group: how ncu runs, then
    where the counters come from."""
    p = ArgumentParser(
        prog="python -m profiling",
        description="Nsight Compute counters of one training config (capture with ncu, or --import) "
        "-> one MLflow `profile` run with FLOPs, DRAM/L2/L1 bytes and measured arithmetic intensity.",
    )
    add_config_args(p, distributed=False)
    g = p.add_argument_group("profiling")
    flags.add_flags(g, CaptureOptions)
    flags.add_flags(g, ProfileCommand)
    flags.add_flags(p.add_argument_group("imported capture sets"), ImportOptions)
    flags.add_flags(p.add_argument_group("hierarchical roofline tables"), TableOptions)
    return p


def _config(args: argparse.Namespace) -> TrainConfig:
    args.import_opts = flags.build(ImportOptions, args, as_flags=True)
    args.phase = args.import_opts.phase
    args.table_opts = flags.build(TableOptions, args, as_flags=True)
    if args.device == "auto":
        args.device = "cuda"
    if not str(args.device).startswith("cuda"):
        raise UsageError(
            f"profiling measures CUDA kernels: --device must be cuda or cuda:N, got {args.device!r}"
        )
    workload = args.import_opts.workload
    if args.device_name:
        _checked_name(args.device_name, "--device-name")  # logged as the run's device_name
    importing = bool(import_paths(args))
    if (workload or args.phase) and not importing:
        raise UsageError(
            "--workload and --phase describe imported files: they go with --import PATH (a capture "
            "runs python -m train on a torchvision --model and marks its phases itself)"
        )
    # an unknown model is bad input (exit 2, no run), on the import path as on the capture path;
    # the canonical spelling keeps config_key equal to that of `python -m train` (its preflight
    # does the same). Both ask torchvision (30 s and 900 MB here): an import asks it once its
    # files are read (_check_model), so a file refused never pays for it.
    args.model = workload or (args.model if importing else check_model_name(args.model))
    config = config_from_args(args)
    # the same num_classes as `python -m train` derives, so config_key joins with its timing runs
    config.num_classes = num_classes_for(config.data, config.num_classes)
    return config


def _checked_name(text: str, what: str) -> None:
    try:
        schema.check_name(text, what)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _check_model(args: argparse.Namespace, config: TrainConfig) -> None:
    """An import's model checks, made once its files are read: a --workload is no torchvision
    model (_not_a_model), a --model is one, in its canonical spelling (check_model_name)."""
    workload = args.import_opts.workload
    if workload:
        _not_a_model(workload)
    else:
        config.model = args.model = check_model_name(config.model)


def _not_a_model(workload: str) -> None:
    """UsageError for a --workload that is a torchvision model: its import would be logged under
    the model's config key while skipping the check against its counted FLOPs."""
    try:
        model = check_model_name(workload)
    except UsageError:
        return
    raise UsageError(
        f"--workload {workload} is the torchvision model {model}: give --model {model} instead, "
        "so that the import is checked against its counted training FLOPs (--workload names "
        "programs that are not torchvision models)"
    )


def _options(args: argparse.Namespace) -> CaptureOptions:
    # Inductor's compile workers are child processes: ncu stays out of them
    target = "application-only" if args.compile else "all"
    return flags.build(CaptureOptions, args, target_processes=target)


# ------------------------------------------------------------------------------------ main
def main(argv: list[str] | None = None, *, probe: Callable[..., GpuInfo] | None = None) -> int:
    """Entry point; `probe` replaces the CUDA check (tests). `--breakdown` runs the breakdown
    instead (profiling/breakdown/cli.py)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--breakdown" in argv:  # imported here: its figures' matplotlib costs seconds at startup
        from profiling.breakdown.cli import main as breakdown_main

        return breakdown_main([a for a in argv if a != "--breakdown"])
    return cli_entry(lambda a: _main(a, probe or cuda_probe))(argv)


def _main(argv: list[str] | None, probe: Callable[..., GpuInfo]) -> int:
    args = build_parser().parse_args(argv)
    config = _config(args)
    opts = _options(args)
    importing = bool(import_paths(args))
    if not importing and config.warmup_iters < 1:
        raise UsageError(
            "--warmup-iters 0: the profiled step would hold cuDNN autotuning, first allocations and, "
            "with fp16, GradScaler's skipped optimizer step; profile after at least 1 warmup step (default 5)"
        )
    if args.dry_run:
        return dry_run(args, config, opts)
    imported = _imported(args) if importing else None
    if importing:
        _check_model(args, config)

    header = config.header(intensity_source="measured")  # the train runs' key and label
    run_name = header.run_name(kind="ncu")
    tags = _run_tags(args, header, config.env_label, importing)
    with (
        _capture_folder(args, importing),
        RunSession("profile", experiment=args.experiment, run_name=run_name, tags=tags) as session,
    ):
        session.log_params(_run_params(args, header, opts, importing))
        if not importing:  # an imported report's input data is whatever the profiled run used
            fields = dataset_fields(config.data, config.image_size, config.num_classes, config.seed)
            session.log_input(dataset_input(**fields, context="profile"))
        session.flush()
        if imported:
            report, device_name, summary, extra, files = imported
            for path in files:  # only what parsed as ncu output is stored
                session.log_file(f"ncu/{path.name}", path)
            session.set_tags(extra)
            cautioned: list[str] = []
        else:
            report, device_name, capability, counters, cautioned = capture(
                args, config, opts, probe, session
            )
            summary = _checked_summary(report, capability, counters)
        _log_summary(session, args, config, summary, device_name, report.source, cautioned)
        _log_layers(session, report, summary, config, device_name)
    console.result(_summary_line(f"profile run {session.run_id}", summary, device_name))
    return 0


def _log_layers(session, report, summary, config, device_name) -> None:
    """--nvtx-modules: the breakdown's rows, measured (imported here: the breakdown's figures
    bring matplotlib and pandas, seconds at startup that an import refused should not pay)."""
    from profiling.breakdown.ncu import has_module_ranges
    from profiling.breakdown.ncu_log import log_ncu_layers

    if has_module_ranges(report.kernels):
        log_ncu_layers(session, report, summary, config, device_name)


OUT_MARKER = ".profile-out"
"""The file that marks an --out folder as this command's (common.out_folder.claim)."""


def _capture_folder(args: argparse.Namespace, importing: bool):
    """A capture's --out (its ncu log goes there) claimed and locked while it runs: new, empty or
    an earlier capture's, outside a git checkout that does not ignore it. An import writes none."""
    if importing:
        return contextlib.nullcontext()
    what = "python -m profiling"
    return out_folder.locked(out_folder.claim(args.out, "--out", OUT_MARKER, what), "--out", what)


def _checked_summary(report, capability, counters, files: int = 0) -> NcuSummary:
    """The summary of a capture's report, or of an import of `files` files (each file's values
    were checked as it was read: profiling.ncu.capture_set.read_files)."""
    if not files:
        check_values(report)  # units, signs, finiteness: before anything is summed
    summary = summarize(report, capability, counters)
    check_rates(summary.kernels, report.source, in_set=files > 1)  # no kernel faster than any GPU
    require_counters(summary, report.source)
    return summary


def _imported(args: argparse.Namespace) -> tuple:
    """(report, device name, summary, the run's tags, its files) of `--import PATH ...`, read and
    checked before any run exists: a file refused is bad input (exit 2) and leaves no run."""
    check_import_file(args)
    try:
        report, device_name, capability, counters, extra, files = import_report(args)
        summary = _checked_summary(report, capability, counters, len(files))
        return report, device_name, summary, extra, files
    except UsageError:
        raise
    except BenchError as err:
        raise UsageError(one_line(err)) from None


def _run_tags(args: argparse.Namespace, header: RunHeader, env_label: str, importing: bool) -> dict:
    """The tags a profile run is created with: its config (key, label, measured intensity),
    machine, and where its counters came from."""
    return {
        **header.tags,
        **_env_label_tag(args, env_label, importing),
        schema.TAG_DEVICE_TYPE: "cuda",
        "ncu_source": "import" if importing else "capture",
    }


def _run_params(
    args: argparse.Namespace, header: RunHeader, opts: CaptureOptions, importing: bool
) -> dict:
    """The config's params, and the imported file's name or the options ncu ran with."""
    params = {**header.params, "profile_steps": opts.profile_steps}
    if importing:
        params["ncu_import_file"] = ", ".join(Path(p).name for p in import_paths(args))[:500]
        if args.import_opts.workload:
            params["workload"] = args.import_opts.workload
        if args.phase:
            params["ncu_phase"] = ",".join(args.phase)
    else:
        params.update(
            ncu_metric_set=opts.metric_set,
            ncu_replay_mode=opts.replay_mode,
            ncu_clock_control=opts.clock_control,
            ncu_cache_control=opts.cache_control,
            ncu_target_processes=opts.target_processes,
            ncu_launch_skip=opts.launch_skip,
            ncu_launch_count=opts.launch_count if opts.launch_count is not None else "all",
            ncu_timeout_s=opts.timeout_s if opts.timeout_s is not None else "none",
            ncu_extra_metrics=",".join(opts.extra_metrics) or "none",
        )
    return params


def _log_summary(
    session: RunSession,
    args: argparse.Namespace,
    config: TrainConfig,
    summary: NcuSummary,
    device_name: str,
    source: str,
    cautioned: list[str],
) -> None:
    """Warn what the summary lacks (but what was said before ncu ran), then log its tags, metrics,
    kernel tables and the run's description. The capture is held against the config's counted
    training FLOPs first (a missed phase makes it incomplete)."""
    importing = bool(import_paths(args))
    label = session.record.tags[schema.TAG_CONFIG_LABEL]  # the config's header, logged
    warnings, tags = list(summary.warnings), summary.mlflow_tags()
    incomplete = roofline_warning(summary, source)
    if incomplete:
        warnings.append(incomplete)
    warnings = [w for w in warnings if w not in cautioned]  # said before ncu ran
    gap = tensor_flops_gap(summary, config.precision)
    if gap:
        tags["ncu_tensor_undercount"], warning = gap
        warnings.append(warning)
    check, count_line = _check_count(summary, config, label, args, source, tags)
    warnings += [count_line] if count_line else []
    for warning in warnings:
        console.warn(warning)
    session.set_tags({schema.TAG_DEVICE_NAME: device_name, **tags})
    session.log_metrics({**summary.mlflow_metrics(), **check.metrics()})
    top = top_kernels(summary, TOP_KERNELS)
    session.log_text("ncu/top_kernels.csv", fmt.csv_frame(top).to_csv(index=False))
    session.log_text("ncu/top_kernels.txt", top_kernels_text(top))  # whole names in the UI
    session.log_text("ncu/kernels.csv", fmt.csv_frame(summary.kernels).to_csv(index=False))
    if summary.phases is not None:
        session.log_text("ncu/phases.csv", summary.phases.to_csv(index_label="phase"))
    elif not importing:
        console.note(
            "no NVTX phases in the ncu output (does train's profile mode mark forward/backward/optimizer?)"
        )
    how = f"imported from {source}" if importing else "captured"
    phases = ", ".join(sorted({p for p in summary.kernels["phase"].dropna()})) or "all kernels"
    title = f"Hierarchical roofline: {label} on {device_name}, {phases}\n({how})"
    levels = log_hierarchy(session, summary, device_name, config.env_label, args.table_opts, title)
    session.set_note(
        _summary_line(f"ncu profile of {label} ({how})", summary, device_name)
        + (f"\nRoofline: {incomplete}" if incomplete else "")
        + (f"\nRoofline: {count_line}" if count_line else "")
        + (f"\n{levels}" if levels else "")
    )
    if "time_s" not in summary.measured:
        console.note(
            "no gpu__time_duration.sum (nor sm__cycles_elapsed.avg with its .per_second) in the "
            "input: ncu_kernel_time_s not logged"
        )
    elif summary.sources.get("time_s") == TIME_FROM_CYCLES:
        console.note(
            f"kernel time from {TIME_FROM_CYCLES} of each launch (the input has no "
            "gpu__time_duration.sum)"
        )


def _check_count(
    summary: NcuSummary,
    config: TrainConfig,
    label: str,
    args: argparse.Namespace,
    source: str,
    tags: dict[str, str],
) -> tuple[CountCheck, str | None]:
    """The profile against the config's counted training FLOPs (profiling.ncu.completeness): the
    check, with its tags added to `tags`, and its warning line (None when it matches). A
    --workload is no torchvision model: not checked, and said so."""
    workload = args.import_opts.workload if importing_of(args) else None
    if workload:
        why = (
            f"--workload {workload} is not a torchvision model, so its training FLOPs cannot be "
            "counted to check the capture against"
        )
        console.note(f"{source}: count check skipped: {why}")
        counted, uncounted = None, why
    else:
        console.info(f"counting the training FLOPs of {label} (shapes only) ...")
        counted, uncounted = None, ""
        try:  # from shapes alone (train.phase_flops)
            counted = config_phase_flops(
                config.model,
                config.batch_size,
                config.image_size,
                config.num_classes,
                config.optimizer,
            )
        except Exception as exc:  # noqa: BLE001 - a model the meta device cannot run: say so, go on
            uncounted = f"the config's FLOPs could not be counted ({one_line(exc)})"
        if counted is not None and counted.uncounted:  # train/ledger.py: ops with no formula
            left_out = ", ".join(qualified(n) for n in counted.uncounted)
            console.warn(
                f"the config's counted FLOPs leave out {left_out} (no FLOP formula): "
                "the capture is held against an incomplete count"
            )
    check = check_against_count(summary, counted, args.profile_steps, uncounted)
    _mark_incomplete(tags, check)
    return check, check.warning(source)


def importing_of(args: argparse.Namespace) -> bool:
    return bool(import_paths(args))


def _mark_incomplete(tags: dict[str, str], check: CountCheck) -> None:
    """The count check's tags; a profile that misses a phase is an incomplete one."""
    tags.update(check.tags())
    if check.incomplete:
        lacking = [m for m in tags["ncu_roofline_missing"].split(",") if m != "none"]
        tags["ncu_roofline"] = "incomplete"
        tags["ncu_roofline_missing"] = ",".join(
            lacking + [f"{p} phase" for p in check.missing_phases]
        )


def _env_label_tag(args: argparse.Namespace, env_label: str, importing: bool) -> dict:
    """The env_label tag: a capture's machine is this one; an import's is the profiled machine,
    which only --env-label knows (this host's name would be wrong), so without it there is none."""
    if not importing or args.env_label:
        return {schema.TAG_ENV_LABEL: env_label}
    console.note(
        "no --env-label: the import is logged without env_label (this machine did not profile "
        "it); pass --env-label as the profiled machine's train runs have it"
    )
    return {}


def _summary_line(what: str, s: NcuSummary, device_name: str) -> str:
    """`<what> (<GPU>): <kernels>, <FLOP>, <DRAM bytes>, <intensity>, <kernel time>`."""
    t = s.totals
    n = len(s.kernels)
    parts = [f"{what} ({device_name}): {n} kernel{'' if n == 1 else 's'}"]
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
