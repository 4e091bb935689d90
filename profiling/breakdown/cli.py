"""`python -m profiling --breakdown <train config flags>`: where one training step's time goes.

The edge of profiling/breakdown: flags, one MLflow run of kind `breakdown` with the train runs'
params, `config_key` and `config_label` (analysis joins them), its metrics
(`breakdown_step_s`, `breakdown_<part>_s`, `breakdown_<part>_fraction`, coverage), and the
artifacts `layers.csv`, `breakdown.json`, `layer_roofline.png`, `step_parts.png` and
`trace.json.gz`. docs/breakdown.md describes them and how to read them.
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from common import console, flags, schema
from common.cli import ArgumentParser, cli_entry
from common.envinfo import environment_tags
from common.errors import UsageError, one_line
from common.run_record import dataset_input
from common.tracking import RunSession
from common.ui import say_links
from profiling.breakdown import figures
from profiling.breakdown.attribute import attribute
from profiling.breakdown.recording import record
from profiling.breakdown.roof import device_ceilings
from profiling.breakdown.above import above_roof
from profiling.breakdown.table import ModuleTree, coverage, parts_metrics, rows, share_clock_name
from profiling.breakdown.text import (
    BreakdownResult,
    breakdown_json,
    largest_tags,
    description,
    layers_csv,
    summary_line,
    view_text,
)
from profiling.breakdown.trace import bound_trace
from train.bench import preflight
from train.config import RunHeader, add_config_args, config_from_args
from train.data import dataset_fields
from train.distributed import context, engines
from train.distributed.failures import Guard

DEFAULT_STEPS = 3


@dataclass
class BreakdownCommand:
    """What a breakdown keeps and where it logs (what it runs: TrainConfig, --iters recorded steps)."""

    trace_steps: int = 1
    """recorded steps kept in trace.json.gz (the table uses every recorded step)."""
    peaks_file: str = flags.peaks_file()
    experiment: str | None = flags.experiment()
    no_progress: bool = flags.no_progress()

    def __post_init__(self) -> None:
        if self.trace_steps < 1:
            raise ValueError(f"trace_steps must be a positive integer, got {self.trace_steps}")


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog="python -m profiling --breakdown",
        description="Where one training step's time goes: warmup, then --iters recorded steps under "
        "torch.profiler with one range per module; logs one MLflow `breakdown` run with a row per "
        "module and phase (time, FLOPs, bytes, intensity, bound), the step's parts and a trace. "
        "Data parallel: torchrun --nproc-per-node N -m profiling --breakdown --distributed ddp ...",
    )
    add_config_args(p)
    p.set_defaults(iters=DEFAULT_STEPS)
    flags.add_flags(p.add_argument_group("breakdown"), BreakdownCommand)
    return p


def _config(args: argparse.Namespace):
    iters = str(args.iters).strip().lower()
    if iters == "auto":
        raise UsageError("--iters auto: a breakdown records a fixed number of steps (default 3)")
    if not iters.isdigit() or int(iters) < 1:  # train's message offers auto, which this refuses
        raise UsageError(
            f"--iters {args.iters}: a breakdown records a whole number of steps, 1 or more "
            f"(default {DEFAULT_STEPS})"
        )
    cfg = config_from_args(args)
    if cfg.compile:
        raise UsageError(
            "--compile: the breakdown times modules through forward hooks, which a compiled "
            "model does not run per module; drop --compile"
        )
    world = context.job_env().world_size
    if world > 1 and not cfg.is_distributed:
        raise UsageError(
            "this is one of several torchrun processes but no engine was given: add --distributed "
            "ddp or --distributed deepspeed"
        )
    if cfg.is_distributed:
        cfg.world_size = world
    device = preflight(cfg)
    return cfg, device


def main(argv: list[str] | None = None) -> int:
    return cli_entry(_main)(argv)


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    command = flags.build(BreakdownCommand, args, as_flags=True)
    cfg, device = _config(args)
    if cfg.is_distributed:
        return _distributed(cfg, device, command)
    header = cfg.header(device)
    session = _session(header, cfg.env_label, device, command)
    with console.quiet(command.no_progress), tempfile.TemporaryDirectory() as tmp, session:
        _open(session, header, cfg, command)
        walls: list[float] = []
        try:
            rec = _record(cfg, device, walls=walls)
        except KeyboardInterrupt:  # Ctrl-C, SIGTERM, SIGHUP: the run ends KILLED with these
            keep_partial(session, walls, int(cfg.iters))
            raise
        result = analyse(rec, command, session)
        log_result(session, result, Path(tmp))
    _say(result, session)
    return 0


def keep_partial(session, walls: list[float], steps: int) -> None:
    """What an interrupted breakdown measured: the seconds of the steps recorded so far
    (`step_wall_s.csv`, metric `breakdown_recorded_steps`, tag `breakdown_partial`); the module
    rows need the whole recording. Main kept nothing (train keeps its steps)."""
    session.set_tags(
        {"breakdown_partial": f"interrupted after {len(walls)} of {steps} recorded step(s)"}
    )
    if walls:
        session.log_metrics({"breakdown_recorded_steps": float(len(walls))})
        session.log_text(
            "step_wall_s.csv",
            "step,wall_s\n" + "".join(f"{i},{w!r}\n" for i, w in enumerate(walls)),
        )


def _session(header: RunHeader, env_label: str, device, command: BreakdownCommand):
    return RunSession(
        "breakdown",
        experiment=command.experiment,
        run_name=header.run_name(device.type, kind="breakdown"),
        tags=environment_tags(str(device), env_label),
    )


def _open(session, header: RunHeader, cfg, command: BreakdownCommand) -> None:
    """What the run holds before it measures: the train runs' params and tags (the config's
    header), the data input."""
    session.log_params({**header.params, "trace_steps": command.trace_steps})
    session.set_tags(header.tags)
    session.log_metrics(header.metrics)
    fields = dataset_fields(cfg.data, cfg.image_size, cfg.num_classes, cfg.seed)
    session.log_input(dataset_input(**fields, context="breakdown"))
    session.flush()


def _say(result: BreakdownResult, session) -> None:
    console.result(result.summary)
    console.result(view_text(result.table, result.tree))
    where = f"kept offline in {session.spool_path}" if session.offline else f"run {session.run_id}"
    console.result(f"breakdown {where}: layers.csv, breakdown.json, trace.json.gz, figures")
    if not session.offline:
        say_links("breakdown", session.run_id, session.experiment_id)


def _record(cfg, device, **kw):
    if device.type == "mps":
        console.warn(
            "on MPS the profiler sees host time only: module times are launch costs, and the "
            "device's work shows as the synchronisation at the end of each step (host_overhead)"
        )
    return record(cfg, device, int(cfg.iters), on_progress=console.info, **kw)


def _distributed(cfg, device, command: BreakdownCommand) -> int:
    """One rank of a torchrun job: every rank records the same steps of the engine-wrapped step;
    rank 0 alone logs the run (its own rank's breakdown), and ends it FAILED naming the rank when
    any rank fails (train.distributed.failures)."""
    env = context.job_env()
    if env.rank != 0:
        os.environ.pop("MLFLOW_RUN_ID", None)  # only rank 0 touches the tracking store
    with console.quiet(env.rank != 0 or command.no_progress):
        ctx = context.start(cfg, device, env)
        try:
            with Guard(ctx) as guard:

                def rec():
                    return _record(
                        cfg,
                        ctx.device,
                        wrap=lambda prep: engines.wrap(prep, cfg, ctx),
                        barrier=ctx.barrier,
                    )

                if ctx.rank != 0:
                    guard.blamed(rec)
                    return 0
                header = cfg.header(ctx.device)
                session = _session(header, cfg.env_label, ctx.device, command)
                with tempfile.TemporaryDirectory() as tmp, guard.hold(session.end), session:
                    _open(session, header, cfg, command)
                    session.log_params({"nodes": ctx.nodes})
                    with guard.released():
                        recording = guard.blamed(rec)
                    result = analyse(
                        recording, command, session, rank=f"rank 0 of {ctx.world_size}"
                    )
                    log_result(session, result, Path(tmp))
        finally:
            ctx.close()
    _say(result, session)
    return 0


def analyse(rec, command: BreakdownCommand, session, rank: str = "") -> BreakdownResult:
    """Attribute, place on the roofline and describe a recording: everything the run logs (its
    config, device and environment as the run's header and tags name them)."""
    att = attribute(rec.events, rec.tracker.owner_of_seq, rec.time_source)
    problem = rec.counts.check()
    if problem:
        console.warn(f"the module rows do not add up to the step's counted work: {problem}")
    device_name = session.record.tags[schema.TAG_DEVICE_NAME]
    label = session.record.tags[schema.TAG_CONFIG_LABEL]  # the config's header, logged
    ceilings = device_ceilings(
        device_name,
        session.record.tags[schema.TAG_ENV_LABEL],
        session.record.params["precision"],
        online=not session.offline,
        peaks_file=command.peaks_file,
    )
    tree = ModuleTree(rec.tracker.root, list(rec.tracker.paths), rec.tracker.leaves)
    step_s = rec.step_mean_s
    table = rows(tree, att, rec.counts.flops, rec.counts.bytes, step_s, ceilings)
    about = f"breakdown of {label} on {device_name}" + (f" ({rank})" if rank else "")
    trace_gz, trace_facts = bound_trace(
        rec.trace_json, command.trace_steps, rec.tracker.owner_of_seq, about
    )
    parts_sum = sum(att.parts_s.values())
    metrics = {
        **parts_metrics(att, step_s),
        **coverage(table, step_s),
        "breakdown_parts_sum_s": parts_sum,
        "breakdown_parts_sum_fraction": parts_sum / step_s if step_s > 0 else math.nan,
        "breakdown_train_flops_per_step": rec.counts.train_flops,
        "breakdown_modeled_bytes_per_step": rec.counts.modeled_bytes,
        schema.METRIC_UNCOUNTED_TIME_SHARE: rec.counts.uncounted_time_share(att.self_s, step_s),
        "breakdown_recorded_steps": float(len(rec.step_wall_s)),
        "breakdown_trace_steps": float(trace_facts["trace_steps"]),
        "breakdown_trace_bytes": float(trace_facts["trace_bytes"]),
        "breakdown_trace_gz_bytes": float(trace_facts["trace_gz_bytes"]),
        "breakdown_count_s": rec.count_s,
        "breakdown_warmup_s": rec.warmup_s,
        "breakdown_record_s": rec.record_s,
    }
    clock = share_clock_name(att.share_clock, rec.time_source)
    where = device_name + (f" ({rank})" if rank else "")
    summary = summary_line(label, where, table, tree, metrics, clock)
    return BreakdownResult(
        label,
        session.record.tags[schema.TAG_CONFIG_KEY],
        device_name,
        rec,
        att,
        tree,
        table,
        ceilings,
        metrics,
        trace_gz,
        summary,
        about,
        problem,
        trace_facts,
        above_roof(table, ceilings, rec.time_source),
    )


def log_result(session, result: BreakdownResult, tmp: Path) -> None:
    """Metrics, description and artifacts of the run (figures: a failure is one warning)."""
    c = result.ceilings
    session.log_metrics(result.metrics)
    tags = {
        "breakdown_roof": c.source or f"none: {c.why}",
        **largest_tags(result.table, result.share_clock),
    }
    if result.above is not None:  # the run's page and the analysis say it as the description does
        tags["breakdown_above_roof"] = result.above.sentence[:4900]
    session.set_tags(tags)
    session.set_note(description(result))
    session.log_text(schema.BREAKDOWN_LAYERS_ARTIFACT, layers_csv(result.table))
    session.log_text("breakdown.json", breakdown_json(result))
    trace = tmp / "trace.json.gz"
    trace.write_bytes(result.trace_gz)
    session.log_file("trace.json.gz", trace)
    what = "device kernels" if result.rec.time_source == "device" else "host time"
    try:
        for name, image in (
            (
                "layer_roofline.png",
                figures.layer_roofline(
                    result.table,
                    c,
                    result.about,
                    what,
                    above=result.above,
                    clock=result.share_clock,
                ),
            ),
            (
                "step_parts.png",
                figures.parts_bar(result.metrics, result.about, result.share_clock),
            ),
        ):
            path = tmp / name
            path.write_bytes(image)
            session.log_file(name, path)
    except Exception as exc:  # noqa: BLE001 - a figure never fails the measured run
        console.warn(f"a breakdown figure was not drawn: {one_line(exc)[:300]}")
