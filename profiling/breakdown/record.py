"""Run the breakdown's steps: count, warm up, then record K steps under torch.profiler.

The step is the project's one `train.step.train_step`, on the train run's own preparation
(train.bench.prepare: model, optimizer, autocast, data source); this module only wraps it: a
`step: i` range around fetching the batch (`phase: data`) and the step, ended by a device
synchronisation, timed by perf_counter between two synchronised clock reads as the train run
times its steps. The Tracker's module ranges and phase marks are on from the first warmup step.

The profiler records CPU activity, and CUDA activity on a CUDA device, with shapes on and
Python stacks off (stacks name modules `Conv2d_0`, cover forward only and grow the trace 78 %:
issue 20).
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass
from typing import Callable

from profiling.breakdown import names
from profiling.breakdown.counts import RowCounts, count_rows
from profiling.breakdown.events import Ev, from_kineto
from profiling.breakdown.hooks import Tracker


@dataclass
class Recording:
    """What the recorded steps left: the events, each step's wall time, the counts, the trace."""

    events: list[Ev]
    step_wall_s: list[float]
    counts: RowCounts
    tracker: Tracker
    time_source: str
    """host (CPU, MPS) | device (CUDA kernels)"""
    trace_json: str
    """torch.profiler's Chrome trace of the recorded steps (unbounded; profiling.breakdown.trace)"""
    warmup_s: float
    count_s: float
    record_s: float

    @property
    def step_mean_s(self) -> float:
        return sum(self.step_wall_s) / len(self.step_wall_s)


def record(
    cfg,
    device,
    steps: int = 3,
    *,
    on_progress: Callable[[str], None] | None = None,
    wrap: Callable[[object], object] | None = None,
    barrier: Callable[[], None] | None = None,
    walls: list[float] | None = None,
) -> Recording:
    """Prepare `cfg` on `device`, count FLOPs and bytes per row, warm up (`cfg.warmup_iters`), and
    record `steps` steps under torch.profiler. Raises BenchError on failures of the model (out of
    memory says so). `on_progress(text)` is told what is happening (the CLI prints it).

    A rank of a data-parallel job passes `wrap(prep)`, which puts the engine around the prepared
    model after counting (train.distributed.engines.wrap: the counts are the work of one process,
    as a distributed train run's), and `barrier()`, which every rank passes before recording.
    `walls` receives each recorded step's seconds as it ends (what an interrupt leaves)."""
    from train.bench import prepare, runtime_errors

    say = on_progress or (lambda _text: None)
    with runtime_errors(cfg, device):
        prep = prepare(cfg, device)
        tracker = Tracker(prep.model, cfg.model).attach()
        say(f"counting FLOPs and bytes per module ({cfg.model} b{cfg.batch_size})")
        t0 = time.perf_counter()
        counts = count_rows(prep, tracker)
        count_s = time.perf_counter() - t0
        if wrap is not None:
            wrap(prep)  # DDP keeps the model; DeepSpeed replaces prep.parts
        prep.parts.mark = tracker.mark
        one_step = _stepper(prep, tracker, device)
        say(f"warming up: {cfg.warmup_iters} step(s)")
        t0 = time.perf_counter()
        for i in range(cfg.warmup_iters):
            one_step(-1 - i)
        warmup_s = time.perf_counter() - t0
        tracker.clear()  # the recorded steps' nodes are all made after this
        if barrier is not None:
            barrier()  # every rank records the same steps together
        say(f"recording {steps} step(s) under torch.profiler")
        t0 = time.perf_counter()
        walls = [] if walls is None else walls
        prof = _profiled(one_step, steps, device, walls)
        record_s = time.perf_counter() - t0
        tracker.detach()
    return Recording(
        events=from_kineto(prof.profiler.kineto_results),
        step_wall_s=walls,
        counts=counts,
        tracker=tracker,
        time_source="device" if device.type == "cuda" else "host",
        trace_json=_chrome_trace(prof),
        warmup_s=warmup_s,
        count_s=count_s,
        record_s=record_s,
    )


def _stepper(prep, tracker: Tracker, device) -> Callable[[int], float]:
    """`one_step(i)`: fetch a batch and run the one train_step inside a `step: i` range, ended by
    a device synchronisation; returns its seconds between two synchronised clock reads."""
    from train import device as dev
    from train.step import train_step

    def one_step(index: int) -> float:
        dev.synchronize(device)
        start = time.perf_counter()
        with tracker.span(names.step_range(index)):
            with tracker.mark("data"):
                inputs, targets = prep.source.next()
            train_step(prep.parts, inputs, targets)
            dev.synchronize(device)
        return time.perf_counter() - start

    return one_step


def _profiled(one_step: Callable[[int], float], steps: int, device, walls: list[float]):
    """`steps` steps under torch.profiler (CPU, and CUDA on a CUDA device; shapes on, stacks
    off), each one's seconds appended to `walls` as it ends; the profiler."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities, record_shapes=True, with_stack=False) as prof:
        for i in range(steps):
            walls.append(one_step(i))
    return prof


def _chrome_trace(prof) -> str:
    """torch.profiler's Chrome trace as text (it only writes to a path)."""
    fd, path = tempfile.mkstemp(suffix=".json", prefix="breakdown-trace-")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path, encoding="utf-8") as f:
            return f.read()
    finally:
        os.unlink(path)
