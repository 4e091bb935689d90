"""The words of a train run: its summary line, its description and what the command prints.

Every step time and rate shown is the mean's (docs/schema.md, "Definitions"): ms/step is
`step_time_mean_s`, samples/s and FLOP/s are the logged rates made from it.
"""

from __future__ import annotations

from common import console, fmt, plausible, schema
from common.ui import say_links
from train.bench import BenchResult
from train.config import TrainConfig
from train.models import model_source

DATA_PARALLEL = "Data parallel: "
"""how the description's scaling line starts (run_note writes it, say_result prints it)"""


def summary_line(cfg: TrainConfig, device_name: str, metrics: dict, n_steps: int) -> str:
    """The one-line result of a train run, in readable units: what the command prints and the
    first line of the run's description."""
    m = metrics
    rel = m.get("step_time_ci95_rel")
    ci = f", {fmt.ci95(rel)}" if rel is not None else ""
    ranks = f" x {cfg.world_size} processes ({cfg.distributed})" if cfg.is_distributed else ""
    return (
        f"{cfg.model} b{cfg.batch_size} {cfg.precision} {cfg.image_size}px on {device_name}{ranks}: "
        f"{fmt.num(m['throughput_samples_per_s'])} samples/s, "
        f"{fmt.num(m['step_time_mean_s'] * 1e3)} ms/step (mean of {n_steps}{ci}), "
        f"{fmt.si(m['achieved_flops_per_s'], 'FLOP/s')} achieved{' per process' if ranks else ''}"
    )


def run_note(
    cfg: TrainConfig, tags: dict, result: BenchResult, extra: str = "", roofline: str = ""
) -> str:
    """The description of a train run (tag mlflow.note.content): the summary line, its bound and
    fraction of roof (`roofline`: train/roofline_figure.py's line), then the data, the steps
    measured and the work counted, in plain text. `tags`: the run's (its device name and config
    label, as logged)."""
    m = result.metrics
    label = tags[schema.TAG_CONFIG_LABEL]
    lines = [
        summary_line(cfg, tags[schema.TAG_DEVICE_NAME], m, len(result.step_times_s)),
        *([roofline] if roofline else []),
        "",
        f"Configuration: {label} ({cfg.optimizer}, lr {cfg.lr}, seed {cfg.seed}).",
        f"Data: {result.tags.get('data_description', cfg.data)}.",
        f"Measured {len(result.step_times_s)} steps after {cfg.warmup_iters} warmup "
        f"(stop: {result.tags.get('measure_stop', 'fixed')}); "
        f"{fmt.num(m['wall_s'])} s measuring.",
        f"Model: {cfg.model} ({model_source(cfg.model)})"
        f"{aux_text(result.tags.get(schema.TAG_AUX_LOSS, ''))}.",
        f"Work: {fmt.si(m['train_flops_per_step'], 'FLOP')} per training step "
        f"({coverage_text(result.tags, m)}), "
        f"{fmt.si(m['modeled_bytes_per_step'], 'B')} modeled memory traffic, "
        f"{fmt.si(m['params'])} parameters.",
    ]
    if cfg.is_distributed:
        lines.append(f"{DATA_PARALLEL}{scaling_text(cfg, result)}.")
    if extra:
        lines.append(extra)
    flags = [plausible.ci_flag(m.get("step_time_ci95_rel"))]
    flags.append(plausible.scaling_flag(m.get("scaling_efficiency")))
    at = 2 if roofline else 1  # right under the numbers they question
    lines[at:at] = [f"Check: {f}." for f in flags if f]
    return "\n".join(lines)


def aux_text(weights: str) -> str:
    """'; trained with its auxiliary heads' losses (aux_logits=0.4, ...)' for tag aux_loss_weights."""
    if not weights:
        return ""
    return (
        f"; its auxiliary heads are trained, each loss weighted as torchvision's recipe does "
        f"({weights.replace(',', ', ')})"
    )


def coverage_text(tags: dict, metrics: dict) -> str:
    """How complete the counted FLOPs are (train/ledger.py): 'counted; every op that ran has a
    FLOP formula or needs none', or the ops that had none and their share of the bytes."""
    if tags.get(schema.TAG_FLOPS_COVERAGE) != "incomplete":
        return "counted; every aten op that ran has a FLOP formula or does only elementwise work"
    share = metrics.get(schema.METRIC_UNCOUNTED_BYTES_SHARE, 0.0)
    ops = tags.get(schema.TAG_FLOPS_UNCOUNTED, "").replace(",", ", ")
    return (
        f"counted, INCOMPLETE: {ops} ran with no FLOP formula ({share:.1%} of the modeled bytes), "
        "so their FLOPs are left out and the FLOP/s and intensity are low by them; "
        "flops/counts_by_op.csv lists every op"
    )


def scaling_text(cfg: TrainConfig, result: BenchResult) -> str:
    """A distributed run's second line: batch per process and step, the step without gradient
    synchronisation and the communication it exposes, and the scaling efficiency."""
    m, tags = result.metrics, result.tags
    parts = [f"batch {cfg.batch_size} per process, {cfg.batch_size * cfg.world_size} per step"]
    if "compute_only_step_time_mean_s" in m:
        parts.append(
            f"without gradient sync {m['compute_only_step_time_mean_s'] * 1e3:.1f} ms/step, "
            f"exposed communication {m['exposed_comm_time_s'] * 1e3:.1f} ms "
            f"({m['exposed_comm_time_share']:.0%} of a step)"
        )
    else:
        parts.append(f"compute-only time {tags.get('compute_only', 'not measured')}")
    if "scaling_efficiency" in m:
        parts.append(
            f"scaling efficiency {fmt.pct(m['scaling_efficiency'])} against the mean samples/s "
            f"of {int(m.get('scaling_baseline_n_runs', 1))} {tags['scaling_baseline']}(s), newest "
            f"{tags['scaling_baseline_run_id']}"
        )
    else:
        parts.append(f"scaling efficiency: {tags.get('scaling_baseline', 'none')}")
    return "; ".join(parts)


def say_result(session) -> None:
    """Print what the run's description (run_note, as logged) says first: its summary line, with
    where the run is, and a distributed run's scaling line; then how to open the run in the UI."""
    where = f"kept offline in {session.spool_path}" if session.offline else f"run {session.run_id}"
    note = session.record.tags[schema.TAG_NOTE].splitlines()
    console.result(f"{note[0]}; {where}")
    for line in note:
        if line.startswith(DATA_PARALLEL):
            console.result(line.removeprefix(DATA_PARALLEL).removesuffix("."))
    tags, metrics = session.record.tags, session.record.metrics
    if tags.get(schema.TAG_FLOPS_COVERAGE) == "incomplete":
        console.warn(f"FLOPs {coverage_text(tags, metrics)}")
    if not session.offline:
        say_links("train", session.run_id, session.experiment_id)
