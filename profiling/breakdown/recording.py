"""Run the breakdown's steps: count, warm up, then record K steps under torch.profiler.

The step is the project's one `train.step.train_step`, on the train run's own preparation
(train.bench.prepare: model, optimizer, autocast, data source); this module only wraps it: a
`step: i` range around fetching the batch (`phase: data`) and the step, ended by a device
synchronisation, timed by perf_counter between two synchronised clock reads as the train run
times its steps. The Tracker's module ranges and phase marks are on from the first warmup step.

On a CUDA device, or in a data-parallel job, the profiler records CPU and CUDA activity with
shapes on and Python stacks off (stacks name modules `Conv2d_0`, cover forward only and grow the
trace 78 %). One process on the CPU records only what host attribution reads, user
scopes (the Tracker's step and phase ranges, the optimizer's) and backward nodes: no aten op,
whose recording cost lands in the step it measures (`lean_profile`; docs/breakdown.md,
Measures); there the Tracker keeps module ranges and markers as Python stamps
(profiling.breakdown.stamps), merged into the events and the trace after the steps.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Callable, Iterator

from profiling.breakdown import names, stamps
from profiling.breakdown.counts import RowCounts, count_rows
from profiling.breakdown.events import Ev, from_kineto
from profiling.breakdown.hooks import Tracker
from train import device as dev
from train.bench import prepare, runtime_errors
from train.step import train_step


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
    say = on_progress or (lambda _text: None)
    with runtime_errors(cfg, device):
        prep = prepare(cfg, device)
        lean = device.type == "cpu" and wrap is None
        tracker = tracker_for(prep.model, cfg.model, lean).attach()
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
        prof = _profiled(one_step, steps, device, walls, lean)
        record_s = time.perf_counter() - t0
        tracker.detach()
    events = tracker.events(from_kineto(kineto_results(prof)))
    return Recording(
        events=events,
        step_wall_s=walls,
        counts=counts,
        tracker=tracker,
        time_source="device" if device.type == "cuda" else "host",
        trace_json=_trace(prof, device, tracker),
        warmup_s=warmup_s,
        count_s=count_s,
        record_s=record_s,
    )


def tracker_for(model, root: str, lean: bool) -> Tracker:
    """The recording's Tracker: `lean` (one process on the CPU, the lean profiler) keeps module
    ranges and markers as Python stamps (profiling.breakdown.stamps) and reads the thread's CPU
    clock; else every range is a profiler range (op scope, which torch.profiler records)."""
    return Tracker(model, root, user_scope=lean, cpu_clock=lean, stamps=lean)


def _stepper(prep, tracker: Tracker, device) -> Callable[[int], float]:
    """`one_step(i)`: fetch a batch and run the one train_step inside a `step: i` range, ended by
    a device synchronisation; returns its seconds between two synchronised clock reads."""

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


def _profiled(
    one_step: Callable[[int], float],
    steps: int,
    device,
    walls: list[float],
    lean: bool = False,
):
    """`steps` steps under the profiler (`profiler_for`), each one's seconds appended to `walls` as
    it ends (what an interrupt leaves); the profiler. On the
    CPU, what kineto prints to the process's stderr while it starts and stops (`USDT: ...
    profiler_start`, `ERROR: ... gpuGetDeviceCount failed with code 35`: no GPU, as expected)
    is dropped; the steps themselves run with stderr as it is."""
    prof = profiler_for(device, lean)
    quiet = device.type == "cpu"
    with native_stderr_muted(quiet):
        prof.__enter__()
    try:
        for i in range(steps):
            walls.append(one_step(i))
    finally:
        with native_stderr_muted(quiet):
            prof.__exit__(None, None, None)
            kineto_results(prof)  # parsed here, where kineto prints about the devices
    return prof


@contextlib.contextmanager
def native_stderr_muted(on: bool = True) -> Iterator[None]:
    """File descriptor 2 pointed at /dev/null inside the block (native code's prints; Python's
    exceptions still propagate and print after it)."""
    if not on:
        yield
        return
    sys.stderr.flush()
    saved, null = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


def profiler_for(device, lean: bool):
    """The breakdown's profiler: `lean` (one process on the CPU) records user scopes and backward
    nodes alone (`lean_profile`); else torch.profiler with CPU activity, and CUDA's on a CUDA
    device, shapes on, stacks off. Read its events with `kineto_results`."""
    from torch.profiler import ProfilerActivity, profile

    prof = lean_profile() if lean else None
    if prof is not None:
        return prof
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    return profile(activities=activities, record_shapes=True, with_stack=False)


def lean_profile():
    """A CPU profiler that records user scopes (the Tracker's ranges, the optimizer's) and
    backward nodes (their sequence numbers), not every aten op: host attribution needs nothing
    else (an op's time is its range's), and each recorded op costs thread CPU time in the step
    (bench/breakdown_overhead.py). None on a torch whose profiler takes no scopes."""
    import torch
    from torch.autograd import profiler as ap

    enable = getattr(torch.autograd, "_enable_profiler", None)
    scope = getattr(torch._C._profiler, "RecordScope", None)
    if enable is None or scope is None or not hasattr(ap.profile, "_start_trace"):
        return None
    scopes = {scope.USER_SCOPE, scope.BACKWARD_FUNCTION}

    class LeanProfile(ap.profile):
        def _start_trace(self):
            self.entered = True
            try:
                config = self.config(create_trace_id=False)
            except TypeError:  # an older torch: the whole profiler
                return super()._start_trace()
            getattr(ap, "_run_on_profiler_start", lambda: None)()
            enable(config, self.kineto_activities, scopes)
            self.profiling_start_time_ns = time.perf_counter_ns()

    return LeanProfile(use_kineto=True, record_shapes=False)


def kineto_results(prof):
    """The kineto results of torch.profiler.profile or of torch.autograd.profiler.profile."""
    inner = getattr(prof, "profiler", None)
    return inner.kineto_results if inner is not None else prof.kineto_results


def _trace(prof, device, tracker: Tracker) -> str:
    """The recording's Chrome trace with the Tracker's stamps in it (on the CPU)."""
    return stamps.merge_trace(_chrome_trace(prof, quiet=device.type == "cpu"), tracker.stamped)


def _chrome_trace(prof, quiet: bool = False) -> str:
    """torch.profiler's Chrome trace as text (it only writes to a path)."""
    fd, path = tempfile.mkstemp(suffix=".json", prefix="breakdown-trace-")
    os.close(fd)
    try:
        with native_stderr_muted(quiet):
            prof.export_chrome_trace(path)
        with open(path, encoding="utf-8") as f:
            return f.read()
    finally:
        os.unlink(path)
