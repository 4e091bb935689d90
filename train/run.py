"""One `train` run: pre-flight, the run session, the measurement, and its record logged.

`run` opens a `common.tracking.RunSession` (a context manager) around `train.bench`'s measurement
and logs the plain data it returns (`BenchResult`); the words are train/result_text.py's, the figure
train/roofline_figure.py's, a distributed run's scaling baseline train/distributed/baseline.py's.
Callers: `python -m train` (train/__main__.py), a sweep's children (train/sweep/runner.py) and a
torchrun job's rank 0 (train/distributed/job.py).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from common.envinfo import environment_tags
from common.schema import TAG_MODEL_SOURCE
from common.run_record import dataset_input
from common.tracking import RunSession
from train.bench import BenchResult, preflight, run_benchmark, step_times_csv
from train.config import TrainConfig
from train.data import dataset_fields
from train.distributed.baseline import compare_scaling
from train.distributed.failures import NoGuard
from train.distributed.launch import run_job
from train.models import model_source
from train.roofline_figure import log_roofline
from train.result_text import run_note

Measure = Callable[..., BenchResult]
"""`measure(cfg, device, progress=...)`: what makes the BenchResult of a run"""


@dataclass
class RunOptions:
    """How a train run is recorded and shown (what it measures is its TrainConfig)."""

    experiment: str | None = None
    """MLflow experiment name (None: MLFLOW_EXPERIMENT_NAME or Default)"""
    progress: bool = True
    """show a progress bar"""
    system_metrics: bool = True
    """sample CPU/GPU/memory into the run while it measures"""


@dataclass
class SweepChild:
    """A run's place in a sweep (train/sweep/runner.py)."""

    parent: RunSession | None
    """the sweep's parent run (None: not a sweep's child)"""
    params: dict = field(default_factory=dict)
    tags: dict = field(default_factory=dict)
    repeat: int | None = None
    """the sweep's repeat: the run name ends with `-r<repeat>`"""
    note: str = ""
    """ends the run's description (which sweep it belongs to)"""
    run_id: str | None = None
    """a RUNNING run to measure in (the child a sweep claimed in the store,
    train/sweep/claims.py) instead of a new one"""


def run(
    cfg: TrainConfig,
    options: RunOptions | None = None,
    child: SweepChild | None = None,
    measure: Measure | None = None,
    guard=None,
) -> tuple[RunSession, BenchResult]:
    """Pre-flight, then one `train` run: returns (the closed RunSession, BenchResult).

    Raises BenchError for bad input found before the run (nothing logged: a sweep records such a
    configuration as a FAILED child itself) and re-raises failures inside the run after it was
    ended FAILED with the reason.

    `measure` makes the BenchResult: run_benchmark; for a distributed config, one torchrun job
    (train.distributed.launch.run_job: a sweep child), unless this process is that job's rank 0,
    which passes its own and the `guard` that ends the run when another rank fails
    (train.distributed.failures).
    """
    options = options or RunOptions()
    child = child or SweepChild(parent=None)
    device = preflight(cfg)
    header = cfg.header(device)
    if measure is None and cfg.is_distributed:
        measure = run_job
    guard = guard or NoGuard()
    session = RunSession(
        "train",
        experiment=options.experiment,
        run_name=header.run_name(device.type, child.repeat),
        tags=environment_tags(str(device), cfg.env_label),
        parent=child.parent,
        system_metrics=options.system_metrics,
        run_id=child.run_id,
    )
    with tempfile.TemporaryDirectory() as tmp, guard.hold(session.end), session:
        session.log_params({**header.params, **child.params})
        session.set_tags({**header.tags, TAG_MODEL_SOURCE: model_source(cfg.model), **child.tags})
        session.log_metrics(header.metrics)
        fields = dataset_fields(cfg.data, cfg.image_size, cfg.num_classes, cfg.seed)
        session.log_input(dataset_input(**fields, context="train"))
        session.flush()
        with guard.released():
            result = _measured(session, cfg, device, options.progress, measure)
        log_result(session, cfg, result, child.note, Path(tmp))
    return session, result


def _measured(
    session: RunSession, cfg: TrainConfig, device, progress: bool, measure
) -> BenchResult:
    """`measure`'s BenchResult (run_benchmark's when None, which starts the session's system
    metrics when warmup is over). A single-process measurement that stops mid-way (interrupted:
    KILLED, or failed) logs the step times it had before the run ends."""
    if measure is not None:
        return measure(cfg, device, progress=progress)
    step_times: list[float] = []
    try:
        return run_benchmark(
            cfg,
            device,
            progress=progress,
            step_times=step_times,
            on_measure=session.start_system_metrics,
        )
    except BaseException:
        if step_times:
            session.log_text("timing/step_times.csv", step_times_csv(step_times))
        raise


def log_result(
    session: RunSession, cfg: TrainConfig, result: BenchResult, note_extra: str, tmp: Path
) -> None:
    """Log what a run measured: a distributed run's scaling first (it adds metrics and tags), then
    params, tags, description, metrics, roofline.png, series and texts."""
    if cfg.is_distributed:
        compare_scaling(session, cfg, result)
    session.log_params(result.params)
    session.set_tags(result.tags)
    session.log_metrics(result.metrics)
    roofline_line = log_roofline(session, cfg.precision, result.metrics, tmp)
    session.set_note(run_note(cfg, session.record.tags, result, note_extra, roofline_line))
    for name, values in result.series.items():
        session.log_series(name, values)
    for path, text in result.texts.items():
        session.log_text(path, text)
